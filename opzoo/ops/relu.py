"""MyReLU, the seed tutorial's ReLU with a hand-written backward."""

from __future__ import annotations

import torch

from opzoo import Contract
from opzoo.ops._base import Elementwise

# The largest float below 0, per dtype: x > -tiny_subnormal holds exactly where x >= 0 (-0.0 too).
_BELOW_ZERO = {
    dtype: -torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps
    for dtype in (torch.float64, torch.float32, torch.bfloat16, torch.float16)
}


class MyReLU(Elementwise):
    """ReLU with a hand-written backward; the gradient passes at exactly 0, as in the seed."""

    opzoo_contract = Contract(
        reference=torch.relu,
        kinks={0.0: 1.0},  # the seed zeroes the gradient only where input < 0
        double_backward=True,
        dtypes=("float64", "float32", "bfloat16", "float16"),
        formula="max(x, 0)",
        derivative="1 if x >= 0 else 0",
    )
    # The output cannot tell x = 0 (gradient passes) from x < 0 (it does not); the input can.
    # A 1-byte bool mask would save 3 bytes per element, but every bool kernel on the CPU is
    # 3-4x slower than a float one (benchmarks/RESULTS.md): saving x keeps myrelu as fast as relu.
    slope_of = "input"

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return x.clamp(min=0)

    @staticmethod
    def slope(x: torch.Tensor) -> torch.Tensor:
        return x >= 0  # d/dx max(x, 0) = 1 where x >= 0 (the seed's convention at 0), else 0

    @staticmethod
    def fast_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        # threshold_backward passes grad where x > threshold, in one fused pass; with the largest
        # negative subnormal as threshold that is exactly x >= 0 (unless denormals are flushed to zero).
        return torch.ops.aten.threshold_backward(grad, x, _BELOW_ZERO[x.dtype])
