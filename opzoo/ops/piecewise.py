"""Piecewise-linear activations. Their backward needs only which piece each input fell in, which the
output already tells (saved outputs share storage with what the next layer keeps: no extra memory)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from opzoo import Contract, Param


class LeakyReLU(torch.autograd.Function):
    """Leaky ReLU: x for x > 0, negative_slope * x otherwise."""

    opzoo_contract = Contract(
        reference=lambda x, negative_slope: F.leaky_relu(x, negative_slope),
        kinks=lambda negative_slope: {0.0: negative_slope},  # torch's convention: the slope at 0
        params={"negative_slope": Param(0.01, 0.0, 1.0, "slope for x <= 0")},
        double_backward=True,
        dtypes=("float64", "float32", "bfloat16", "float16"),
        formula="x if x > 0 else negative_slope * x",
        derivative="1 if x > 0 else negative_slope",
    )

    @staticmethod
    def forward(x: torch.Tensor, negative_slope: float) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.negative_slope = inputs[1]
        ctx.save_for_backward(output)  # y > 0 exactly where x > 0, for every slope >= 0

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None
        (y,) = ctx.saved_tensors
        # d/dx leaky_relu(x) = 1 if x > 0 else negative_slope
        return torch.where(y > 0, grad, grad * ctx.negative_slope), None

    generate_vmap_rule = True


class Hardtanh(torch.autograd.Function):
    """Hardtanh: x clamped to [min_val, max_val]."""

    opzoo_contract = Contract(
        reference=lambda x, min_val, max_val: F.hardtanh(x, min_val, max_val),
        kinks=lambda min_val, max_val: {min_val: 0.0, max_val: 0.0},
        params={
            "min_val": Param(-1.0, -10.0, -0.01, "lower end"),
            "max_val": Param(1.0, 0.01, 10.0, "upper end"),
        },
        double_backward=True,
        dtypes=("float64", "float32", "bfloat16", "float16"),
        formula="min(max(x, min_val), max_val)",
        derivative="1 if min_val < x < max_val else 0",
    )

    @staticmethod
    def forward(x: torch.Tensor, min_val: float, max_val: float) -> torch.Tensor:
        return x.clamp(min_val, max_val)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.bounds = inputs[1:]
        ctx.save_for_backward(output)  # strictly inside the bounds exactly where x is

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None
        (y,) = ctx.saved_tensors
        lo, hi = ctx.bounds
        # d/dx hardtanh(x) = 1 if min_val < x < max_val else 0
        return torch.where((y > lo) & (y < hi), grad, 0.0), None, None

    generate_vmap_rule = True


class Hardsigmoid(torch.autograd.Function):
    """Hard sigmoid: clamp(x / 6 + 1/2, 0, 1)."""

    opzoo_contract = Contract(
        reference=F.hardsigmoid,
        kinks={-3.0: 0.0, 3.0: 0.0},
        double_backward=True,
        dtypes=("float64", "float32", "bfloat16", "float16"),
        formula="clamp(x / 6 + 1/2, 0, 1)",
        derivative="1/6 if -3 < x < 3 else 0",
    )

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return F.hardsigmoid(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(output)  # strictly between 0 and 1 exactly where -3 < x < 3

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor | None:
        if not ctx.needs_input_grad[0]:
            return None
        (y,) = ctx.saved_tensors
        # d/dx hardsigmoid(x) = 1/6 if -3 < x < 3 else 0
        return torch.where((y > 0) & (y < 1), grad / 6, 0.0)

    generate_vmap_rule = True


class Hardswish(torch.autograd.Function):
    """Hard swish: x * hardsigmoid(x)."""

    opzoo_contract = Contract(
        reference=F.hardswish,
        kinks={-3.0: -0.5, 3.0: 1.5},  # torch's convention: the middle piece's slope at both ends
        double_backward=True,
        dtypes=("float64", "float32", "bfloat16", "float16"),
        formula="x * clamp(x + 3, 0, 6) / 6",
        derivative="0 if x < -3, 1 if x > 3, else x / 3 + 1/2",
    )

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return F.hardswish(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(inputs[0])  # the middle piece's slope needs x itself

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor | None:
        if not ctx.needs_input_grad[0]:
            return None
        (x,) = ctx.saved_tensors
        # d/dx hardswish(x) = 0 if x < -3, x / 3 + 1/2 if x <= 3, else 1
        slope = torch.where(x < -3, 0.0, torch.where(x <= 3, x / 3 + 0.5, 1.0))
        return grad * slope

    generate_vmap_rule = True
