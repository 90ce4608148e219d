"""Polynomials: LegendreP3, the custom Function of PyTorch's newer autograd tutorial."""

from __future__ import annotations

import torch

from opzoo import Contract
from opzoo.ops._base import Elementwise


class LegendreP3(Elementwise):
    """The Legendre polynomial of degree 3, the newer PyTorch tutorial's custom Function."""

    opzoo_contract = Contract(
        reference=lambda x: 0.5 * (5 * x**3 - 3 * x),
        double_backward=True,
        dtypes=("float64", "float32", "bfloat16", "float16"),
        formula="(5 x^3 - 3 x) / 2",
        derivative="1.5 (5 x^2 - 1)",
    )
    # in float32 for half types: 5 x^2 - 1 cancels near the roots +-1/sqrt(5), where float16 keeps
    # no correct digit
    in_opmath = True

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return 0.5 * (5 * x**3 - 3 * x)

    @staticmethod
    def slope(x: torch.Tensor) -> torch.Tensor:
        return 1.5 * (5 * x**2 - 1)  # d/dx (5 x^3 - 3 x) / 2 = 1.5 (5 x^2 - 1)
