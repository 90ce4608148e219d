"""x log x and the inverse square root unit, each with a hand-written backward."""

from __future__ import annotations

import math

import torch

import opzoo


class XLogX(torch.autograd.Function):
    """x log x on (0, inf), the entropy integrand."""

    opzoo_contract = opzoo.Contract(
        reference=lambda x: torch.special.xlogy(x, x),
        domain=(0.0, math.inf),
        double_backward=True,
        formula="x log x",
        derivative="log x + 1",
    )

    @staticmethod
    def forward(x):
        return x * torch.log(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        # d/dx x log x = log x + 1
        return grad * (torch.log(x) + 1)

    generate_vmap_rule = True


class ISRU(torch.autograd.Function):
    """Inverse square root unit, x / sqrt(1 + alpha x^2)."""

    opzoo_contract = opzoo.Contract(
        reference=lambda x, alpha: x * torch.rsqrt(1 + alpha * x * x),
        params={"alpha": opzoo.Param(1.0, 0.0, 10.0, "how soon it saturates")},
        double_backward=True,
        formula="x / sqrt(1 + alpha x^2)",
        derivative="(1 + alpha x^2)^(-3/2)",
    )

    @staticmethod
    def forward(x, alpha):
        return x * torch.rsqrt(1 + alpha * x * x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        x, alpha = inputs
        ctx.save_for_backward(x)
        ctx.alpha = alpha

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        # d/dx isru(x) = (1 + alpha x^2)^(-3/2)
        return grad * torch.rsqrt(1 + ctx.alpha * x * x) ** 3, None

    generate_vmap_rule = True
