"""Learnable activations: ``nn.Module`` ops whose parameters are trained with the network.

This is seed 002's other path: a Module holds parameters and state, and autograd derives its
backward from the forward, so there is no backward here to get wrong, and double backward is free.
"""

from __future__ import annotations

import torch

from opzoo import Contract, Param


class LearnableLeakyReLU(torch.nn.Module):
    """Leaky ReLU whose negative slope is learned (PReLU with one shared slope)."""

    opzoo_contract = Contract(
        reference=lambda x, init_slope: torch.where(x >= 0, x, init_slope * x),
        kinks={0.0: 1.0},
        params={"init_slope": Param(0.25, 0.0, 1.0, "the slope's initial value")},
        double_backward=True,
        formula="x if x >= 0 else a x, a learned",
        derivative="1 if x >= 0 else a; d/da = min(x, 0)",
    )

    def __init__(self, init_slope: float = 0.25) -> None:
        super().__init__()
        self.slope = torch.nn.Parameter(torch.tensor(float(init_slope)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.where(x >= 0, x, self.slope * x)

    def extra_repr(self) -> str:
        return f"slope={self.slope.item():.4g}"


class LearnableSwish(torch.nn.Module):
    """Swish with a learned sharpness: x * sigmoid(beta * x)."""

    opzoo_contract = Contract(
        reference=lambda x, init_beta: x * torch.sigmoid(init_beta * x),
        params={"init_beta": Param(1.0, 0.0, 10.0, "beta's initial value")},
        double_backward=True,
        formula="x sigmoid(beta x), beta learned",
        derivative="s + beta x s (1 - s), s = sigmoid(beta x); d/dbeta = x^2 s (1 - s)",
    )

    def __init__(self, init_beta: float = 1.0) -> None:
        super().__init__()
        self.beta = torch.nn.Parameter(torch.tensor(float(init_beta)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.beta * x)

    def extra_repr(self) -> str:
        return f"beta={self.beta.item():.4g}"
