"""The bent identity, (sqrt(x^2 + 1) - 1) / 2 + x, with a hand-written backward."""

from __future__ import annotations

import torch

import opzoo


def _reference(x: torch.Tensor) -> torch.Tensor:
    return (torch.sqrt(x * x + 1) - 1) / 2 + x


class BentIdentity(torch.autograd.Function):
    """Bent identity: smooth, unbounded, never flat."""

    opzoo_contract = opzoo.Contract(
        reference=_reference,
        double_backward=True,
        formula="(sqrt(x^2 + 1) - 1) / 2 + x",
        derivative="x / (2 sqrt(x^2 + 1)) + 1",
    )

    @staticmethod
    def forward(x):
        return _reference(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        # d/dx bentid(x) = x / (2 sqrt(x^2 + 1)) + 1; built from torch ops, so it differentiates again
        return grad * (x * torch.rsqrt(x * x + 1) / 2 + 1)

    generate_vmap_rule = True
