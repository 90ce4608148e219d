"""Polynomials: LegendreP3, the custom Function of PyTorch's newer autograd tutorial."""

from __future__ import annotations

from typing import Any

import torch

from opzoo import Contract
from opzoo.ops._base import Op, forward_mode
from opzoo.ops._opmath import opmath


class LegendreP3(Op):
    """The Legendre polynomial of degree 3, the newer PyTorch tutorial's custom Function."""

    opzoo_contract = Contract(
        reference=lambda x: 0.5 * (5 * x**3 - 3 * x),
        double_backward=True,
        dtypes=("float64", "float32", "bfloat16", "float16"),
        formula="(5 x^3 - 3 x) / 2",
        derivative="1.5 (5 x^2 - 1)",
    )

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return 0.5 * (5 * x**3 - 3 * x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(inputs[0])
        if forward_mode():
            ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor | None:
        if not ctx.needs_input_grad[0]:
            return None
        (x,) = ctx.saved_tensors
        # d/dx (5 x^3 - 3 x) / 2 = 1.5 (5 x^2 - 1), in float32 for half types: 5 x^2 - 1 cancels
        # near the roots +-1/sqrt(5), where float16 keeps no correct digit
        return grad * (1.5 * (5 * opmath(x) ** 2 - 1)).to(grad.dtype)

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        # d/dx (5 x^3 - 3 x) / 2 = 1.5 (5 x^2 - 1)
        return tangent * (1.5 * (5 * opmath(x) ** 2 - 1)).to(tangent.dtype)
