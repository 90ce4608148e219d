"""The seed network's other two operations as ops: the linear layer ``x.mm(w)`` and the loss
``(y_pred - y).pow(2).sum()``, each with a hand-written backward.

Both follow NumPy's broadcasting of loop dimensions, so their backward sums each gradient back to
its input's shape. On the seed's 2-d tensors they do exactly the arithmetic autograd does for the
torch expressions, so ``opzoo train --linear linear --loss sse`` reproduces the seed float for float.
"""

from __future__ import annotations

from typing import Any

import torch

from opzoo import Contract
from opzoo.ops._base import Op, save


def _sum_to(grad: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``grad`` summed over the loop dimensions its input was broadcast along."""
    return grad if grad.shape == shape else grad.sum_to_size(shape)


class Linear(Op):
    """Matrix product x @ w: the seed's linear layer x.mm(w), batched over leading dimensions."""

    opzoo_contract = Contract(
        signature="(n,k),(k,m)->(n,m)",
        reference=torch.matmul,
        double_backward=True,
        formula="x @ w",
        derivative="dx = g @ w^T, dw = x^T @ g",
    )

    @staticmethod
    def forward(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, w)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        save(ctx, *inputs)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        x, w = ctx.saved_tensors
        nx, nw = ctx.needs_input_grad
        # d(x @ w)/dx . g = g @ w^T;  d(x @ w)/dw . g = x^T @ g
        if x.dim() == 2 and w.dim() == 2 and grad.dim() == 2:
            # the seed's case: no loop dimensions to sum over, and mm without matmul's dispatch
            return (grad.mm(w.t()) if nx else None), (x.t().mm(grad) if nw else None)
        gx = _sum_to(torch.matmul(grad, w.mT), x.shape) if nx else None
        gw = _sum_to(torch.matmul(x.mT, grad), w.shape) if nw else None
        return gx, gw

    @staticmethod
    def jvp(ctx: Any, dx: torch.Tensor | None, dw: torch.Tensor | None) -> torch.Tensor:
        x, w = ctx.saved_tensors
        # d(x @ w) = dx @ w + x @ dw (an input without a tangent contributes nothing)
        if dx is None:
            return torch.matmul(x, dw)
        if dw is None:
            return torch.matmul(dx, w)
        return torch.matmul(dx, w) + torch.matmul(x, dw)


class SSE(Op):
    """Sum of squared errors over the last two dimensions: the seed's (y_pred - y).pow(2).sum()."""

    opzoo_contract = Contract(
        signature="(n,m),(n,m)->()",
        reference=lambda y_pred, y: (y_pred - y).pow(2).sum(dim=(-2, -1)),
        double_backward=True,
        formula="sum((y_pred - y)^2)",
        derivative="d/dy_pred = 2 (y_pred - y), d/dy = -2 (y_pred - y)",
    )

    @staticmethod
    def forward(y_pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        squared = (y_pred - y).pow(2)
        # A full .sum() on 2-d inputs, as the seed writes it: the same reduction order, bit for bit.
        return squared.sum() if squared.dim() == 2 else squared.sum(dim=(-2, -1))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        y_pred, y = inputs
        save(ctx, y_pred, y)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        y_pred, y = ctx.saved_tensors
        # d/dy_pred sum((y_pred - y)^2) = 2 (y_pred - y); d/dy is its negative
        g = grad[..., None, None] * (2 * (y_pred - y))
        gp = _sum_to(g, y_pred.shape) if ctx.needs_input_grad[0] else None
        gy = _sum_to(-g, y.shape) if ctx.needs_input_grad[1] else None
        return gp, gy

    @staticmethod
    def jvp(ctx: Any, dp: torch.Tensor | None, dy: torch.Tensor | None) -> torch.Tensor:
        y_pred, y = ctx.saved_tensors
        # d sum((y_pred - y)^2) = sum(2 (y_pred - y) (dy_pred - dy))
        d = dp if dy is None else -dy if dp is None else dp - dy
        return (2 * (y_pred - y) * d).sum(dim=(-2, -1))
