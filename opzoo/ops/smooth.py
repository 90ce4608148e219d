"""Smooth activations: SiLU, Mish, GELU (erf and tanh forms) and softsign. Each saves its input,
as the native ops do, and builds its slope from differentiable ops so double backward works."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from opzoo import Contract
from opzoo.ops._base import Elementwise, exp_, times_grad_
from opzoo.ops._opmath import opmath

_SQRT_2_OVER_PI = math.sqrt(2 / math.pi)
_INV_SQRT_2 = 1 / math.sqrt(2)
_INV_SQRT_2PI = 1 / math.sqrt(2 * math.pi)
_GELU_C = 0.044715
# GELU's backward damps the output's rounding near 0 by this much, per the output's dtype.
_GELU_T = {torch.float64: 1e-150, torch.float32: 1e-19, torch.bfloat16: 1e-19, torch.float16: 1e-3}


class SiLU(Elementwise):
    """SiLU (swish): x * sigmoid(x)."""

    opzoo_contract = Contract(
        reference=F.silu,
        double_backward=True,
        formula="x sigmoid(x)",
        derivative="s (1 + x (1 - s)), s = sigmoid(x)",
    )
    in_opmath = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return F.silu(x)

    @staticmethod
    def slope(x: torch.Tensor) -> torch.Tensor:
        s = torch.sigmoid(x)
        return s * (1 + x * (1 - s))  # d/dx x sigmoid(x) = s (1 + x (1 - s)), s = sigmoid(x)

    @staticmethod
    def fast_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        x = opmath(x)
        s = torch.sigmoid(x)
        t = torch.addcmul(x, x, s, value=-1)  # x (1 - s), in one pass
        return times_grad_(t.add_(1).mul_(s), grad)


class Mish(Elementwise):
    """Mish: x * tanh(softplus(x))."""

    opzoo_contract = Contract(
        reference=F.mish,
        double_backward=True,
        formula="x tanh(softplus(x))",
        derivative="t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x))",
    )
    in_opmath = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return F.mish(x)

    @staticmethod
    def slope(x: torch.Tensor) -> torch.Tensor:
        # d/dx x tanh(softplus(x)) = t + x sigmoid(x) (1 - t^2), t = tanh(softplus(x))
        t = torch.tanh(F.softplus(x))
        return t + x * torch.sigmoid(x) * (1 - t * t)


class GELU(Elementwise):
    """GELU: x * Phi(x), Phi the standard normal CDF (the exact, erf form)."""

    opzoo_contract = Contract(
        reference=F.gelu, double_backward=True, formula="x Phi(x)", derivative="Phi(x) + x phi(x)"
    )
    in_opmath = True
    fast_needs_output = True  # the output shares storage with the result: free

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)

    @staticmethod
    def slope(x: torch.Tensor) -> torch.Tensor:
        # d/dx x Phi(x) = Phi(x) + x phi(x)
        cdf = 0.5 * (1 + torch.erf(x * _INV_SQRT_2))
        pdf = torch.exp(-0.5 * x * x) * _INV_SQRT_2PI
        return cdf + x * pdf

    @staticmethod
    def fast_backward(grad: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        # erf takes 0.53 ms per 1M floats here; the output already holds x Phi(x). With s = +-t of
        # x's sign, Phi = (y + s/2) / (x + s) is a weighted mean of Phi(x) and Phi(0) = 1/2: it errs
        # by at most 0.4 t, never divides by less than t, and y's rounding (subnormal, or flushed,
        # for tiny x) is damped by t, chosen per dtype. The property tests found the cases (0, and
        # 1.2e-38 in bfloat16) that simpler guards got wrong.
        x = opmath(x)
        s = torch.full_like(x, _GELU_T[y.dtype]).copysign_(x)
        cdf = torch.add(opmath(y), s, alpha=0.5).div_(s.add_(x))
        pdf = exp_(x.square().mul_(-0.5))
        slope = torch.addcmul(cdf, x, pdf, value=_INV_SQRT_2PI)
        return times_grad_(slope, grad)


class GELUTanh(Elementwise):
    """GELU, tanh approximation: x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""

    opzoo_contract = Contract(
        reference=lambda x: F.gelu(x, approximate="tanh"),
        double_backward=True,
        formula="x/2 (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3)",
        derivative="(1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 * 0.044715 x^2), t = tanh(u)",
    )
    in_opmath = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x, approximate="tanh")

    @staticmethod
    def slope(x: torch.Tensor) -> torch.Tensor:
        # d/dx = (1 + t)/2 + x/2 (1 - t^2) u', t = tanh(u), u' = sqrt(2/pi) (1 + 3c x^2)
        x2 = x * x
        t = torch.tanh(_SQRT_2_OVER_PI * x * (1 + _GELU_C * x2))
        du = _SQRT_2_OVER_PI * (1 + 3 * _GELU_C * x2)
        return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du

    @staticmethod
    def fast_backward(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        x = opmath(x)
        x2 = x * x
        # The same with s = sigmoid(2u) = (1 + t)/2, as tanh is 10x slower than sigmoid here:
        # d/dx = s + 2 x s (1 - s) u', u' = sqrt(2/pi) (1 + 3c x^2)
        s = torch.sigmoid(x2.mul(_GELU_C).add_(1).mul_(x).mul_(2 * _SQRT_2_OVER_PI))
        du = x2.mul_(3 * _GELU_C * _SQRT_2_OVER_PI).add_(_SQRT_2_OVER_PI)
        w = torch.addcmul(s, s, s, value=-1)  # s (1 - s)
        return times_grad_(w.mul_(x).mul_(du).mul_(2).add_(s), grad)


class Softsign(Elementwise):
    """Softsign: x / (1 + |x|)."""

    opzoo_contract = Contract(
        reference=F.softsign,
        # once differentiable everywhere; the second derivative jumps at 0, so inputs keep off it
        kinks={0.0: 1.0},
        double_backward=True,
        formula="x / (1 + |x|)",
        derivative="1 / (1 + |x|)^2",
    )
    in_opmath = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return F.softsign(x)

    @staticmethod
    def slope(x: torch.Tensor) -> torch.Tensor:
        # d/dx x / (1 + |x|) = 1 / (1 + |x|)^2; in place where autograd allows (one allocation
        # fewer each), and not as a power -2, whose own derivative takes a slow pow(-3)
        return x.abs().add_(1).square().reciprocal_()
