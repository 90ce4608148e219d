"""Piecewise-linear activations. Their slope needs only which piece each input fell in, which the
output already tells (saved outputs share storage with what the next layer keeps: no extra memory)."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from opzoo import Contract, Param
from opzoo.ops._base import Elementwise, times_grad_


class LeakyReLU(Elementwise):
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
    slope_of = "output"  # y > 0 exactly where x > 0, for every slope >= 0

    @staticmethod
    def forward(x: torch.Tensor, negative_slope: float) -> torch.Tensor:
        return F.leaky_relu(x, negative_slope)

    @staticmethod
    def slope(y: torch.Tensor, negative_slope: float) -> torch.Tensor:
        # d/dx leaky_relu(x) = 1 if x > 0 else negative_slope: torch's own fused backward kernel on
        # ones, in y's dtype (where(y > 0, 1.0, negative_slope) is float32's) and without the bool
        # kernels that run 3-4x slower on this CPU. y detached: the slope is constant on each piece,
        # so nothing flows to y in double backward (the kernel's derivative would be zeros, and work).
        return torch.ops.aten.leaky_relu_backward(torch.ones_like(y), y.detach(), negative_slope, True)

    @staticmethod
    def fast_backward(grad: torch.Tensor, y: torch.Tensor, negative_slope: float) -> torch.Tensor:
        # The same mask in one fused pass (a bool mask and where() take 12x longer at 1M elements).
        return torch.ops.aten.leaky_relu_backward(grad, y, negative_slope, True)


@functools.lru_cache(maxsize=256)
def _rounded(bound: float, dtype: torch.dtype) -> float:
    """``bound`` rounded to ``dtype``, as clamp rounds it; once per value: it takes 2 us."""
    return torch.tensor(bound, dtype=dtype).item()


class Hardtanh(Elementwise):
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
    slope_of = "output"  # strictly inside the bounds exactly where x is

    @staticmethod
    def forward(x: torch.Tensor, min_val: float, max_val: float) -> torch.Tensor:
        return x.clamp(min_val, max_val)

    @staticmethod
    def slope(y: torch.Tensor, min_val: float, max_val: float) -> torch.Tensor:
        # d/dx hardtanh(x) = 1 if min_val < x < max_val else 0. The comparisons round the bounds to
        # y's dtype, as the clamp did: y = min_val rounded is not above min_val.
        return (y > min_val) & (y < max_val)

    @staticmethod
    def fast_backward(grad: torch.Tensor, y: torch.Tensor, min_val: float, max_val: float) -> torch.Tensor:
        # grad where lo < y < hi, else 0: one fused masking pass. The kernel compares in float32,
        # but y was clamped to the bounds rounded to y's dtype: compare with those (in float16, x = -2
        # and min_val = -1.9477 gave y = -1.9473 > min_val, a gradient where there is none).
        return torch.ops.aten.hardtanh_backward(
            grad, y, _rounded(min_val, y.dtype), _rounded(max_val, y.dtype)
        )


class Hardsigmoid(Elementwise):
    """Hard sigmoid: clamp(x / 6 + 1/2, 0, 1)."""

    opzoo_contract = Contract(
        reference=F.hardsigmoid,
        kinks={-3.0: 0.0, 3.0: 0.0},
        double_backward=True,
        dtypes=("float64", "float32", "bfloat16", "float16"),
        formula="clamp(x / 6 + 1/2, 0, 1)",
        derivative="1/6 if -3 < x < 3 else 0",
    )
    slope_of = "output"  # strictly between 0 and 1 exactly where -3 < x < 3

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return F.hardsigmoid(x)

    @staticmethod
    def slope(y: torch.Tensor) -> torch.Tensor:
        # d/dx hardsigmoid(x) = 1/6 if -3 < x < 3 else 0, from torch's fused mask (see LeakyReLU.slope)
        return torch.ops.aten.hardtanh_backward(torch.full_like(y, 1 / 6), y.detach(), 0.0, 1.0)

    @staticmethod
    def fast_backward(grad: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.ops.aten.hardtanh_backward(grad, y, 0.0, 1.0).mul_(1 / 6)


class Hardswish(Elementwise):
    """Hard swish: x * hardsigmoid(x)."""

    opzoo_contract = Contract(
        reference=F.hardswish,
        kinks={-3.0: 0.0, 3.0: 1.0},  # the outer pieces' slopes (torch uses the middle one's)
        double_backward=True,
        dtypes=("float64", "float32", "bfloat16", "float16"),
        formula="x * clamp(x + 3, 0, 6) / 6",
        derivative="hardsigmoid(x) + x/6 if -3 < x < 3, else hardsigmoid(x)",
    )
    slope_of = "input"  # the middle piece's slope needs x itself

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return F.hardswish(x)

    @staticmethod
    def slope(x: torch.Tensor) -> torch.Tensor:
        # d/dx x hardsigmoid(x) = hardsigmoid(x) + x hardsigmoid'(x) = hardsigmoid(x) + x/6 on (-3, 3)
        return F.hardsigmoid(x) + torch.where((x > -3) & (x < 3), x / 6, 0.0)

    @staticmethod
    def fast_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        inner = torch.ops.aten.hardtanh_backward(x, x, -3.0, 3.0)  # x on (-3, 3), else 0
        return times_grad_(F.hardsigmoid(x).add_(inner, alpha=1 / 6), grad)
