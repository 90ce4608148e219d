"""Ops over the last dimension: softmax, logsumexp and layer norm (no affine), each with a
hand-written backward. Their signatures, ``(n)->(n)`` and ``(n)->()``, say so; leading dimensions
are loop dimensions.

Like myrelu, each has a composite backward (differentiable, for double backward and torch.compile)
and a fast path through torch's fused backward kernel when nothing records the backward.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import torch

from opzoo import Contract, Param
from opzoo.ops._base import Op, composite, forward_mode, save


class Softmax(Op):
    """Softmax over the last dimension."""

    opzoo_contract = Contract(
        signature="(n)->(n)",
        reference=lambda x: torch.softmax(x, -1),
        double_backward=True,
        formula="exp(x_i) / sum_j exp(x_j)",
        derivative="dx = y (g - sum(g y))",
    )

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, -1)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        save(ctx, output)  # the output alone determines the Jacobian

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor | None:
        if not ctx.needs_input_grad[0]:
            return None
        (y,) = ctx.saved_tensors
        # d softmax(x)_i / dx_j = y_i (delta_ij - y_j), so J^T g = y (g - sum(g y))
        if composite():
            return y * (grad - (grad * y).sum(-1, keepdim=True))
        return torch.ops.aten._softmax_backward_data(grad, y, -1, y.dtype)

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        # J v = y (v - sum(v y)): the Jacobian y_i (delta_ij - y_j) is symmetric
        return y * (tangent - (tangent * y).sum(-1, keepdim=True))


class LogSumExp(Op):
    """log(sum(exp(x))) over the last dimension, computed stably."""

    opzoo_contract = Contract(
        signature="(n)->()",
        reference=lambda x: torch.logsumexp(x, -1),
        double_backward=True,
        formula="log sum_j exp(x_j)",
        derivative="dx = g softmax(x)",
    )

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        return torch.logsumexp(x, -1)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        save(ctx, inputs[0], output)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor | None:
        if not ctx.needs_input_grad[0]:
            return None
        x, y = ctx.saved_tensors
        # d/dx_i log sum_j exp(x_j) = exp(x_i - lse) = softmax(x)_i
        return grad[..., None] * torch.exp(x - y[..., None])

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor) -> torch.Tensor:
        x, y = ctx.saved_tensors
        # J v = sum_i softmax(x)_i v_i
        return (torch.exp(x - y[..., None]) * tangent).sum(-1)


# The last forward's mean and rstd on this thread, with a weak reference to its output: the
# setup_context that follows that forward (and no other: it checks the output is the same tensor)
# saves them, so that backward need not recompute them (one pass over x: 1.65x -> 1.2x of torch's
# layer_norm). Where the check fails (torch.func transforms wrap the output anew), backward
# recomputes them, as it did before.
_FORWARD_STATS = threading.local()


class LayerNorm(Op):
    """Layer normalisation over the last dimension, without the affine part."""

    opzoo_contract = Contract(
        signature="(n)->(n)",
        params={"eps": Param(1e-5, 1e-6, 1.0, "added to the variance")},
        reference=lambda x, eps: torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps),
        double_backward=True,
        formula="(x - mean(x)) / sqrt(var(x) + eps)",
        derivative="dx = rstd (g - mean(g) - y mean(g y))",
    )

    @staticmethod
    def forward(x: torch.Tensor, eps: float) -> torch.Tensor:
        if torch.compiler.is_compiling():  # Dynamo refuses side effects in a Function's forward
            return torch.nn.functional.layer_norm(x, x.shape[-1:], eps=eps)
        y, mean, rstd = torch.native_layer_norm(x, x.shape[-1:], None, None, eps)
        _FORWARD_STATS.last = (weakref.ref(y), mean, rstd)
        return y

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        x, eps = inputs
        ctx.eps = eps
        stats = None
        if not torch.compiler.is_compiling():
            stats, _FORWARD_STATS.last = getattr(_FORWARD_STATS, "last", None), None
        if stats is not None and stats[0]() is output:
            ctx.save_for_backward(x, stats[1], stats[2])  # mean and rstd: one value per row each
        else:
            ctx.save_for_backward(x)
        if forward_mode():
            ctx.save_for_forward(x, output)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, None]:
        if not ctx.needs_input_grad[0]:
            return None, None
        x, *stats = ctx.saved_tensors
        if x.numel() == 0:  # no row, or empty rows: nothing to normalise
            return torch.zeros_like(x), None
        n = x.shape[-1]
        if composite():  # mean and rstd recomputed from x, so that they are differentiable
            mean = x.mean(-1, keepdim=True)
            rstd = torch.rsqrt(x.var(-1, correction=0, keepdim=True) + ctx.eps)
            y = (x - mean) * rstd
            # y = (x - mean) rstd: J^T g = rstd (g - mean(g) - y mean(g y))
            return rstd * (grad - grad.mean(-1, keepdim=True) - y * (grad * y).mean(-1, keepdim=True)), None
        if stats:
            mean, rstd = stats
        else:
            _, mean, rstd = torch.native_layer_norm(x, [n], None, None, ctx.eps)
        gx, _, _ = torch.ops.aten.native_layer_norm_backward(
            grad, x, [n], mean, rstd, None, None, [True, False, False]
        )
        return gx, None

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor, _eps: None) -> torch.Tensor:
        x, y = ctx.saved_tensors
        if x.numel() == 0:  # no row, or empty rows: nothing to normalise
            return torch.zeros_like(tangent)
        rstd = torch.rsqrt(x.var(-1, correction=0, keepdim=True) + ctx.eps)
        # the Jacobian rstd (I - 1/n - y y^T / n) is symmetric: J v = rstd (v - mean(v) - y mean(v y))
        return rstd * (tangent - tangent.mean(-1, keepdim=True) - y * (tangent * y).mean(-1, keepdim=True))
