"""log cosh and the inverse square root unit, each with a hand-written backward."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

import opzoo

_LOG_2 = math.log(2.0)


class LogCosh(torch.autograd.Function):
    """log(cosh(x)) without overflow: |x| + softplus(-2|x|) - log 2."""

    opzoo_contract = opzoo.Contract(
        # an independent formula for the oracle, also free of overflow
        reference=lambda x: torch.logaddexp(x, -x) - _LOG_2,
        double_backward=True,
        formula="log cosh x = |x| + softplus(-2|x|) - log 2",
        derivative="tanh x",
    )

    @staticmethod
    def forward(x):
        a = x.abs()
        return a + F.softplus(-2 * a) - _LOG_2

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        # d/dx log cosh x = tanh x
        return grad * torch.tanh(x)

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
