"""Piecewise-linear activations. Their backward needs only which piece each input fell in, which the
output already tells (saved outputs share storage with what the next layer keeps: no extra memory)."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from opzoo import Contract, Param
from opzoo.ops._base import Op, composite, forward_mode, times_grad_


class LeakyReLU(Op):
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
        if forward_mode():
            ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None
        (y,) = ctx.saved_tensors
        # d/dx leaky_relu(x) = 1 if x > 0 else negative_slope
        if composite():
            return torch.where(y > 0, grad, grad * ctx.negative_slope), None
        # The same mask in one fused pass (a bool mask and where() take 12x longer at 1M elements).
        return torch.ops.aten.leaky_relu_backward(grad, y, ctx.negative_slope, True), None

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor, _: None) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        # d/dx leaky_relu(x) = 1 if x > 0 else negative_slope
        return torch.where(y > 0, tangent, tangent * ctx.negative_slope)


class Hardtanh(Op):
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
        if forward_mode():
            ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None
        (y,) = ctx.saved_tensors
        lo, hi = ctx.bounds
        # d/dx hardtanh(x) = 1 if min_val < x < max_val else 0
        if composite():
            return torch.where((y > lo) & (y < hi), grad, 0.0), None, None
        # grad where lo < y < hi, else 0: one fused masking pass. The kernel compares in float32,
        # but y was clamped to the bounds rounded to y's dtype: compare with those (in float16, x = -2
        # and min_val = -1.9477 gave y = -1.9473 > min_val, a gradient where there is none).
        lo, hi = (torch.tensor(b, dtype=y.dtype).item() for b in (lo, hi))
        return torch.ops.aten.hardtanh_backward(grad, y, lo, hi), None, None

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor, _lo: None, _hi: None) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        # d/dx hardtanh(x) = 1 if min_val < x < max_val else 0, with the bounds rounded to y's dtype
        # as y was (see backward)
        lo, hi = (torch.tensor(b, dtype=y.dtype).item() for b in ctx.bounds)
        return torch.where((y > lo) & (y < hi), tangent, 0.0)


class Hardsigmoid(Op):
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
        if forward_mode():
            ctx.save_for_forward(output)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor | None:
        if not ctx.needs_input_grad[0]:
            return None
        (y,) = ctx.saved_tensors
        # d/dx hardsigmoid(x) = 1/6 if -3 < x < 3 else 0
        if composite():
            return torch.where((y > 0) & (y < 1), grad / 6, 0.0)
        return torch.ops.aten.hardtanh_backward(grad, y, 0.0, 1.0).mul_(1 / 6)

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        # d/dx hardsigmoid(x) = 1/6 if -3 < x < 3 else 0
        return torch.where((y > 0) & (y < 1), tangent / 6, 0.0)


class Hardswish(Op):
    """Hard swish: x * hardsigmoid(x)."""

    opzoo_contract = Contract(
        reference=F.hardswish,
        kinks={-3.0: 0.0, 3.0: 1.0},  # the outer pieces' slopes (torch uses the middle one's)
        double_backward=True,
        dtypes=("float64", "float32", "bfloat16", "float16"),
        formula="x * clamp(x + 3, 0, 6) / 6",
        derivative="hardsigmoid(x) + x/6 if -3 < x < 3, else hardsigmoid(x)",
    )

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return F.hardswish(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.save_for_backward(inputs[0])  # the middle piece's slope needs x itself
        if forward_mode():
            ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor | None:
        if not ctx.needs_input_grad[0]:
            return None
        (x,) = ctx.saved_tensors
        # d/dx x hardsigmoid(x) = hardsigmoid(x) + x hardsigmoid'(x) = hardsigmoid(x) + x/6 on (-3, 3)
        if composite():
            return grad * (F.hardsigmoid(x) + torch.where((x > -3) & (x < 3), x / 6, 0.0))
        inner = torch.ops.aten.hardtanh_backward(x, x, -3.0, 3.0)  # x on (-3, 3), else 0
        return times_grad_(F.hardsigmoid(x).add_(inner, alpha=1 / 6), grad)

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        # d/dx x hardsigmoid(x) = hardsigmoid(x) + x hardsigmoid'(x) = hardsigmoid(x) + x/6 on (-3, 3)
        return tangent * (F.hardsigmoid(x) + torch.where((x > -3) & (x < 3), x / 6, 0.0))
