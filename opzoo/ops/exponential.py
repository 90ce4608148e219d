"""Activations with an exponential piece: ELU, SELU and softplus."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from opzoo import Contract, Param
from opzoo.ops._base import Op, composite, exp_, forward_mode, times_grad_
from opzoo.ops._opmath import opmath

# SELU's constants (Klambauer et al., 2017), as torch uses them.
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _elu_slope(x: torch.Tensor, alpha: float, scale: float) -> torch.Tensor:
    # d/dx = scale for x > 0, else scale * alpha * exp(x), from differentiable ops (in opmath)
    return torch.where(x > 0, scale, (scale * alpha) * torch.exp(opmath(x)))


def _elu_backward(grad: torch.Tensor, x: torch.Tensor, alpha: float, scale: float) -> torch.Tensor:
    # d/dx = scale for x > 0, else scale * alpha * exp(x). The output would give this as y + scale *
    # alpha, but that cancels catastrophically in bfloat16 (the property tests: 13% off at x = -4,
    # alpha = 9), so the input is saved, as torch's own elu does.
    if composite():
        return grad * _elu_slope(x, alpha, scale).to(grad.dtype)
    # Float passes only: e = exp(min(x, 0)) is exp(x) for x <= 0 and 1 for x > 0, so
    # slope = scale * (alpha * e + (1 - alpha) * [x > 0]), the indicator being e masked to x > 0.
    xo = opmath(x)
    e = exp_(xo.clamp(max=0))
    if alpha == 1 and scale == 1:
        return times_grad_(e, grad).to(grad.dtype)
    slope = e.mul(scale * alpha)
    if alpha != 1:
        slope.add_(torch.ops.aten.threshold_backward(e, xo, 0), alpha=scale * (1 - alpha))
    return times_grad_(slope, grad).to(grad.dtype)


class ELU(Op):
    """ELU: x for x > 0, alpha * (exp(x) - 1) otherwise."""

    opzoo_contract = Contract(
        reference=lambda x, alpha: F.elu(x, alpha),
        kinks=lambda alpha: {0.0: alpha},  # the left derivative, as torch
        params={"alpha": Param(1.0, 0.01, 10.0, "value approached as x -> -inf is -alpha")},
        double_backward=True,
        formula="x if x > 0 else alpha * (exp(x) - 1)",
        derivative="1 if x > 0 else alpha * exp(x)",
    )

    @staticmethod
    def forward(x: torch.Tensor, alpha: float) -> torch.Tensor:
        return F.elu(x, alpha)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.alpha = inputs[1]
        ctx.save_for_backward(inputs[0])
        if forward_mode():
            ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None
        (x,) = ctx.saved_tensors
        return _elu_backward(grad, x, ctx.alpha, 1.0), None

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor, _: None) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        # d/dx elu(x) = 1 if x > 0 else alpha * exp(x)
        return tangent * _elu_slope(x, ctx.alpha, 1.0).to(tangent.dtype)


class SELU(Op):
    """SELU: scale * ELU(x, alpha) with the self-normalising constants."""

    opzoo_contract = Contract(
        reference=F.selu,
        kinks={0.0: SELU_SCALE * SELU_ALPHA},
        double_backward=True,
        formula="scale * (x if x > 0 else alpha * (exp(x) - 1))",
        derivative="scale if x > 0 else scale * alpha * exp(x)",
    )

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return F.selu(x)

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
        return _elu_backward(grad, x, SELU_ALPHA, SELU_SCALE)

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        # d/dx selu(x) = scale if x > 0 else scale * alpha * exp(x)
        return tangent * _elu_slope(x, SELU_ALPHA, SELU_SCALE).to(tangent.dtype)


def _softplus_slope(bx: torch.Tensor, threshold: float) -> torch.Tensor:
    # d/dx softplus(x) = sigmoid(beta x), and 1 where the op is linear; from differentiable ops
    return torch.where(bx > threshold, 1.0, torch.sigmoid(bx))


def _softplus_kink(beta: float, threshold: float) -> dict[float, float]:
    # At x = threshold / beta, as rounded, beta * x may round past the threshold (then the slope
    # is 1), or not (sigmoid(threshold)): the op's own comparison, in float64, decides.
    x = threshold / beta
    return {x: 1.0 if x * beta > threshold else 1 / (1 + math.exp(-threshold))}


class Softplus(Op):
    """Softplus: log(1 + exp(beta * x)) / beta, linear where beta * x > threshold."""

    opzoo_contract = Contract(
        reference=lambda x, beta, threshold: F.softplus(x, beta, threshold),
        # past the threshold the op switches to x: a (tiny) jump in value and slope
        kinks=lambda beta, threshold: _softplus_kink(beta, threshold),
        params={
            "beta": Param(1.0, 0.1, 10.0, "sharpness"),
            "threshold": Param(20.0, 1.0, 50.0, "beta * x above which it is linear"),
        },
        double_backward=True,
        formula="log(1 + exp(beta x)) / beta",
        derivative="sigmoid(beta x) (1 past the threshold)",
    )

    @staticmethod
    def forward(x: torch.Tensor, beta: float, threshold: float) -> torch.Tensor:
        return F.softplus(x, beta, threshold)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        ctx.beta, ctx.threshold = inputs[1:]
        ctx.save_for_backward(inputs[0])
        if forward_mode():
            ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None, None
        (x,) = ctx.saved_tensors
        bx = opmath(x) * ctx.beta if ctx.beta != 1 else opmath(x)
        # d/dx softplus(x) = sigmoid(beta x), and 1 where the op is linear
        if composite():
            return grad * _softplus_slope(bx, ctx.threshold).to(grad.dtype), None, None
        s = torch.sigmoid(bx)
        # past the threshold add 1 - s (exact for s >= 1/2), so the slope is exactly 1 there
        s.add_(torch.ops.aten.threshold_backward(1 - s, bx, ctx.threshold))
        return times_grad_(s, grad).to(grad.dtype), None, None

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor, _beta: None, _threshold: None) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        bx = opmath(x) * ctx.beta if ctx.beta != 1 else opmath(x)
        # d/dx softplus(x) = sigmoid(beta x), and 1 where the op is linear
        return tangent * _softplus_slope(bx, ctx.threshold).to(tangent.dtype)
