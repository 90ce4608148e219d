"""Surrogate-gradient ops: a backward that is deliberately not the derivative of the forward.

Round, sign and a spike (Heaviside step) have a derivative that is zero almost everywhere, so their
true gradient would stop all learning; gradient reversal wants the opposite of its (identity)
derivative. Each op declares, as ``Contract(surrogate=...)``, a smooth function whose autograd
gradient its backward computes, and the property tests check the backward against that
(docs/surrogates.md).
"""

from __future__ import annotations

import math

import torch

from opzoo import Contract, Param
from opzoo.ops._base import Elementwise

ALL_DTYPES = ("float64", "float32", "bfloat16", "float16")


def _identity(x: torch.Tensor) -> torch.Tensor:
    return x


class STERound(Elementwise):
    """Straight-through round: round(x) forward, the identity's gradient backward."""

    opzoo_contract = Contract(
        reference=torch.round,
        surrogate=_identity,  # Bengio, Leonard & Courville 2013: pass the gradient straight through
        double_backward=True,
        dtypes=ALL_DTYPES,
        formula="round(x) (half to even)",
        derivative="1 (straight-through; surrogate: x)",
    )
    slope_of = None  # the straight-through slope needs nothing from the forward

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.round(x)

    @staticmethod
    def slope(_: None) -> float:
        return 1.0  # the surrogate's: d/dx x = 1 (round's own derivative is 0 almost everywhere)


def _clipped(x: torch.Tensor) -> torch.Tensor:
    # clamp's gradient is 1 on the closed [-1, 1] (hardtanh's is 0 at the ends): BinaryNet's 1_{|x|<=1}
    return torch.clamp(x, -1.0, 1.0)


def _binary_sign(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) + (x == 0)  # sign, with 0 mapped to +1


class STESign(Elementwise):
    """Binarisation with the hardtanh-clipped straight-through estimator (BinaryNet)."""

    # Hubara, Courbariaux et al. 2016, "Binarized Neural Networks": sign(x) = +1 if x >= 0 else -1,
    # and g_x = g * 1_{|x| <= 1}, the gradient of the clipped identity clamp(x, -1, 1).
    opzoo_contract = Contract(
        reference=_binary_sign,
        surrogate=_clipped,
        double_backward=True,
        dtypes=ALL_DTYPES,
        formula="1 if x >= 0 else -1",
        derivative="1 if |x| <= 1 else 0 (straight-through; surrogate: clamp(x, -1, 1))",
    )

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.where(x < 0, -1.0, 1.0).to(x.dtype)

    @staticmethod
    def saves(x: torch.Tensor) -> torch.Tensor:
        return x.abs() <= 1  # all the slope needs, in one byte per element

    @staticmethod
    def slope(inside: torch.Tensor) -> torch.Tensor:
        return inside  # the surrogate's: d/dx clamp(x, -1, 1) = 1 if |x| <= 1 else 0


ARCTAN, FAST_SIGMOID = 0, 1


def _arctan(x: torch.Tensor, slope: float) -> torch.Tensor:
    # snntorch.surrogate.ATan and spikingjelly's ATan (alpha = slope, default 2):
    # atan(pi/2 * slope * x) / pi, whose derivative is (slope/2) / (1 + (pi/2 * slope * x)^2)
    return torch.atan(math.pi / 2 * slope * x) / math.pi


def _fast_sigmoid(x: torch.Tensor, slope: float) -> torch.Tensor:
    # snntorch.surrogate.fast_sigmoid (Zenke & Ganguli 2018's SuperSpike; snntorch's slope default
    # 25): x / (1 + slope |x|), whose derivative is 1 / (1 + slope |x|)^2
    return x / (1 + slope * x.abs())


def _heaviside_surrogate(x: torch.Tensor, surrogate: int, slope: float) -> torch.Tensor:
    return _arctan(x, slope) if surrogate == ARCTAN else _fast_sigmoid(x, slope)


class Heaviside(Elementwise):
    """Heaviside step (a spiking neuron) with a smooth surrogate gradient: arctan or fast sigmoid."""

    opzoo_contract = Contract(
        reference=lambda x, surrogate, slope: torch.heaviside(x, x.new_ones(())),
        surrogate=_heaviside_surrogate,
        params={
            "surrogate": Param(ARCTAN, 0, 1, "0: arctan, 1: fast sigmoid"),
            "slope": Param(2.0, 0.1, 100.0, "sharpness (snntorch: 2 for arctan, 25 for fast sigmoid)"),
        },
        double_backward=True,
        dtypes=ALL_DTYPES,
        formula="1 if x >= 0 else 0",
        derivative=(
            "(slope/2) / (1 + (pi/2 slope x)^2) [arctan] or 1 / (1 + slope |x|)^2 [fast sigmoid] (surrogate)"
        ),
    )

    @staticmethod
    def forward(x: torch.Tensor, surrogate: int, slope: float) -> torch.Tensor:
        return (x >= 0).to(x.dtype)  # spikingjelly's convention: a spike at exactly 0

    @staticmethod
    def slope(x: torch.Tensor, surrogate: int, sharpness: float) -> torch.Tensor:
        # the surrogate's derivative (the step's own is 0 almost everywhere); k is the param "slope"
        if surrogate == ARCTAN:
            # d/dx atan(pi/2 k x)/pi = (k/2) / (1 + (pi/2 k x)^2) = 1 / (2/k + w^2), w = pi/2 sqrt(2k) x
            # (the second form: one pass fewer). The square overflows to inf at large |x|, and 1/inf =
            # 0 is the right limit.
            w = (math.pi / 2 * math.sqrt(2 * sharpness)) * x
            return (2 / sharpness + w * w).reciprocal()
        return (1 + sharpness * x.abs()) ** -2  # d/dx x/(1 + k|x|) = 1 / (1 + k|x|)^2


class GradReverse(Elementwise):
    """Gradient reversal: the identity forward, -lambd times the gradient backward."""

    # Ganin & Lempitsky 2015, "Unsupervised Domain Adaptation by Backpropagation": the feature
    # extractor is trained to confuse the domain classifier behind this layer.
    opzoo_contract = Contract(
        reference=lambda x, lambd: x,
        surrogate=lambda x, lambd: -lambd * x,
        params={"lambd": Param(1.0, 0.0, 10.0, "strength of the reversal")},
        double_backward=True,
        dtypes=ALL_DTYPES,
        formula="x",
        derivative="-lambd (reversed; surrogate: -lambd * x)",
    )
    slope_of = None  # a constant slope

    @staticmethod
    def forward(x: torch.Tensor, lambd: float) -> torch.Tensor:
        return x.clone()  # a new tensor: returning x itself would make autograd treat it as a view

    @staticmethod
    def slope(_: None, lambd: float) -> float:
        # the surrogate's: d/dx (-lambd x) = -lambd (the identity's own, 1, would disagree with the
        # backward: forward mode reverses too, so jacfwd equals jacrev)
        return -lambd
