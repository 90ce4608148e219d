"""MyReLU, the seed tutorial's ReLU with a hand-written backward."""

from __future__ import annotations

from typing import Any

import torch

from opzoo import Contract


class MyReLU(torch.autograd.Function):
    """ReLU with a hand-written backward; the gradient passes at exactly 0, as in the seed."""

    opzoo_contract = Contract(
        reference=torch.relu,
        kinks={0.0: 1.0},  # the seed zeroes the gradient only where input < 0
        double_backward=True,
        dtypes=("float64", "float32", "bfloat16", "float16"),
        formula="max(x, 0)",
        derivative="1 if x >= 0 else 0",
    )

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x.clamp(min=0)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        (x,) = inputs
        # A bool mask (1 byte/element) keeps the sign that the output loses at 0.
        ctx.save_for_backward(x >= 0)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor | None:
        if not ctx.needs_input_grad[0]:
            return None
        (passes,) = ctx.saved_tensors
        # d/dx max(x, 0) = 1 where x >= 0 (the seed's convention at 0), else 0
        return grad * passes

    generate_vmap_rule = True
