"""Activations with an exponential piece: ELU, SELU and softplus."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from opzoo import Contract, Param
from opzoo.ops._base import Elementwise, exp_, times_grad_
from opzoo.ops._opmath import opmath

# SELU's constants (Klambauer et al., 2017), as torch uses them.
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_SCALE = 1.0507009873554804934193349852946


def _elu_slope(x: torch.Tensor, alpha: float, scale: float) -> torch.Tensor:
    # d/dx = scale for x > 0, else scale * alpha * exp(x). The output would give this as y + scale *
    # alpha, but that cancels catastrophically in bfloat16 (the property tests: 13% off at x = -4,
    # alpha = 9), so the input is saved, as torch's own elu does.
    return torch.where(x > 0, scale, (scale * alpha) * torch.exp(x))


def _elu_fast_backward(grad: torch.Tensor, x: torch.Tensor, alpha: float, scale: float) -> torch.Tensor:
    # Float passes only: e = exp(min(x, 0)) is exp(x) for x <= 0 and 1 for x > 0, so
    # slope = scale * (alpha * e + (1 - alpha) * [x > 0]), the indicator being e masked to x > 0.
    xo = opmath(x)
    e = exp_(xo.clamp(max=0))
    if alpha == 1 and scale == 1:
        return times_grad_(e, grad)
    slope = e.mul(scale * alpha)
    if alpha != 1:
        slope.add_(torch.ops.aten.threshold_backward(e, xo, 0), alpha=scale * (1 - alpha))
    return times_grad_(slope, grad)


class ELU(Elementwise):
    """ELU: x for x > 0, alpha * (exp(x) - 1) otherwise."""

    opzoo_contract = Contract(
        reference=lambda x, alpha: F.elu(x, alpha),
        kinks=lambda alpha: {0.0: alpha},  # the left derivative, as torch
        params={"alpha": Param(1.0, 0.01, 10.0, "value approached as x -> -inf is -alpha")},
        double_backward=True,
        formula="x if x > 0 else alpha * (exp(x) - 1)",
        derivative="1 if x > 0 else alpha * exp(x)",
    )
    in_opmath = True

    @staticmethod
    def forward(x: torch.Tensor, alpha: float) -> torch.Tensor:
        return F.elu(x, alpha)

    @staticmethod
    def slope(x: torch.Tensor, alpha: float) -> torch.Tensor:
        return _elu_slope(x, alpha, 1.0)  # d/dx elu(x) = 1 if x > 0 else alpha * exp(x)

    @staticmethod
    def fast_backward(grad: torch.Tensor, x: torch.Tensor, alpha: float) -> torch.Tensor:
        return _elu_fast_backward(grad, x, alpha, 1.0)


class SELU(Elementwise):
    """SELU: scale * ELU(x, alpha) with the self-normalising constants."""

    opzoo_contract = Contract(
        reference=F.selu,
        kinks={0.0: SELU_SCALE * SELU_ALPHA},
        double_backward=True,
        formula="scale * (x if x > 0 else alpha * (exp(x) - 1))",
        derivative="scale if x > 0 else scale * alpha * exp(x)",
    )
    in_opmath = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return F.selu(x)

    @staticmethod
    def slope(x: torch.Tensor) -> torch.Tensor:
        # d/dx selu(x) = scale if x > 0 else scale * alpha * exp(x)
        return _elu_slope(x, SELU_ALPHA, SELU_SCALE)

    @staticmethod
    def fast_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return _elu_fast_backward(grad, x, SELU_ALPHA, SELU_SCALE)


def _last_smooth_x(beta: float, threshold: float) -> float:
    """The largest float x with beta * x <= threshold: where the slope is still sigmoid(beta x), the
    kink's declared value (threshold / beta rounds above it for 4% of the params: beta x > threshold
    there, and the slope is already 1)."""
    x = threshold / beta
    while x * beta > threshold:
        x = math.nextafter(x, -math.inf)
    return x


class Softplus(Elementwise):
    """Softplus: log(1 + exp(beta * x)) / beta, linear where beta * x > threshold."""

    opzoo_contract = Contract(
        reference=lambda x, beta, threshold: F.softplus(x, beta, threshold),
        # past the threshold the op switches to x: a (tiny) jump in value and slope
        kinks=lambda beta, threshold: {_last_smooth_x(beta, threshold): 1 / (1 + math.exp(-threshold))},
        params={
            "beta": Param(1.0, 0.1, 10.0, "sharpness"),
            "threshold": Param(20.0, 1.0, 50.0, "beta * x above which it is linear"),
        },
        double_backward=True,
        formula="log(1 + exp(beta x)) / beta",
        derivative="sigmoid(beta x) (1 past the threshold)",
    )
    in_opmath = True

    @staticmethod
    def forward(x: torch.Tensor, beta: float, threshold: float) -> torch.Tensor:
        return F.softplus(x, beta, threshold)

    @staticmethod
    def slope(x: torch.Tensor, beta: float, threshold: float) -> torch.Tensor:
        # d/dx softplus(x) = sigmoid(beta x), and 1 where the op is linear
        bx = x * beta if beta != 1 else x
        return torch.where(bx > threshold, 1.0, torch.sigmoid(bx))

    @staticmethod
    def fast_backward(grad: torch.Tensor, x: torch.Tensor, beta: float, threshold: float) -> torch.Tensor:
        bx = opmath(x) * beta if beta != 1 else opmath(x)
        s = torch.sigmoid(bx)
        # past the threshold add 1 - s (exact for s >= 1/2), so the slope is exactly 1 there
        s.add_(torch.ops.aten.threshold_backward(1 - s, bx, threshold))
        return times_grad_(s, grad)
