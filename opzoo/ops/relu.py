"""MyReLU, the seed tutorial's ReLU with a hand-written backward."""

from __future__ import annotations

from typing import Any

import torch

from opzoo import Contract
from opzoo.ops._base import Op, composite, forward_mode

# The largest float below 0, per dtype: x > -tiny_subnormal holds exactly where x >= 0 (-0.0 too).
_BELOW_ZERO = {
    dtype: -torch.finfo(dtype).smallest_normal * torch.finfo(dtype).eps
    for dtype in (torch.float64, torch.float32, torch.bfloat16, torch.float16)
}


class MyReLU(Op):
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
        # The output cannot tell x = 0 (gradient passes) from x < 0 (it does not); the input can.
        # A 1-byte bool mask would save 3 bytes per element, but every bool kernel on the CPU is
        # 3-4x slower than a float one (benchmarks/RESULTS.md): this keeps myrelu as fast as relu.
        ctx.save_for_backward(inputs[0])
        if forward_mode():
            ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor | None:
        if not ctx.needs_input_grad[0]:
            return None
        (x,) = ctx.saved_tensors
        # d/dx max(x, 0) = 1 where x >= 0 (the seed's convention at 0), else 0. threshold_backward
        # passes grad where x > threshold, in one fused pass; with the largest negative subnormal as
        # threshold that is exactly x >= 0 (unless denormals are flushed to zero).
        if composite():  # double backward or torch.compile: stay differentiable
            return grad * (x >= 0)
        return torch.ops.aten.threshold_backward(grad, x, _BELOW_ZERO[x.dtype])

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        # d/dx max(x, 0) = 1 where x >= 0 (the seed's convention at 0), else 0
        return tangent * (x >= 0)
