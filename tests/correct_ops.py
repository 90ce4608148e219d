"""Correct ops written the ordinary way, tutorial style, with no contract: each must pass every
property (a false alarm on a correct op breaks the promise as badly as a missed bug)."""

from __future__ import annotations

import torch
from seed_program import MyReLU as SeedMyReLU


class Cube(torch.autograd.Function):
    """x^3 built from differentiable ops, declaring nothing: its second derivative is checked, not
    forbidden."""

    @staticmethod
    def forward(x):
        return x**3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x * x


class Square(torch.autograd.Function):
    """x * x in the classic form, forward(ctx, x)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x


class OnceDifferentiable(torch.autograd.Function):
    """tanh whose backward is marked once_differentiable: asking for a second derivative is an
    error, which is honest (a skip), not a failure."""

    @staticmethod
    def forward(x):
        return torch.tanh(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)


#: name -> class; "seed_myrelu" is the seed tutorial's MyReLU, verbatim (tests/seed_program.py)
CORRECT = {"cube": Cube, "square": Square, "once": OnceDifferentiable, "seed_myrelu": SeedMyReLU}
