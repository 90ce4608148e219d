"""Correct ops written the ordinary way, tutorial style, with no contract: each must pass every
property (a false alarm on a correct op breaks the promise as badly as a missed bug). DECLARED holds
correct ops written as upstream packages write them, with the contract declared from outside."""

from __future__ import annotations

import torch
from seed_program import MyReLU as SeedMyReLU

import opzoo


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


class TanhClassmethod(torch.autograd.Function):
    """tanh with classmethod forward and backward, as entmax writes its Functions; it saves its
    output, so its second derivative runs through the Function itself. Not in CORRECT: torch
    2.13's Dynamo passes cls twice to a classmethod forward, so `compile` fails it, rightly (the
    graph does break), though nothing in the op is wrong (tests/test_recording.py)."""

    @classmethod
    def forward(cls, ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @classmethod
    def backward(cls, ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)  # d/dx tanh(x) = 1 - tanh(x)^2


class CrossEntropy(torch.autograd.Function):
    """Cross-entropy of each row of logits X (n, c) against an integer target (n,), in the classic
    form with a trailing argument nobody declares, and a backward that returns a gradient for each
    argument (None for the target and the trailing one), as upstream losses do."""

    @staticmethod
    def forward(ctx, X, target, eps=0.0):
        # X, not log softmax(X), is saved: recomputed in backward, its second derivative is right
        ctx.save_for_backward(X, target)
        ctx.eps = eps
        return eps - torch.log_softmax(X, dim=1).gather(1, target.unsqueeze(1)).squeeze(1)

    @staticmethod
    def backward(ctx, grad):
        X, target = ctx.saved_tensors
        onehot = torch.zeros_like(X).scatter(1, target.unsqueeze(1), 1.0)
        # d/dX_ij (-log softmax(X)_i,t_i) = softmax(X)_ij - [j = t_i]
        return grad.unsqueeze(1) * (torch.softmax(X, dim=1) - onehot), None, None


#: name -> class; "seed_myrelu" is the seed tutorial's MyReLU, verbatim (tests/seed_program.py)
CORRECT = {
    "cube": Cube,
    "square": Square,
    "once": OnceDifferentiable,
    "seed_myrelu": SeedMyReLU,
}

#: name -> a class from elsewhere with its contract declared (opzoo.declare), the class untouched.
DECLARED = {
    "cross_entropy": opzoo.declare(
        CrossEntropy,
        signature="(n,c),(n)->(n)",
        inputs={"target": opzoo.Index(high="c")},
        loop_dims=0,
        min_sizes={"c": 1},
    ),
}
