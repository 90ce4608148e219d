"""One correct op per general kind, each followed by a twin whose backward (or shape) is wrong in
exactly one input or output."""

from __future__ import annotations

import torch

import opzoo


class MatMul(torch.autograd.Function):
    """x @ w in the classic form, forward(ctx, ...), with loop dimensions that broadcast."""

    opzoo_contract = opzoo.Contract(signature="(n,k),(k,m)->(n,m)", reference=torch.matmul)

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return torch.matmul(x, w)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        gx = torch.matmul(grad, w.mT).sum_to_size(x.shape)
        gw = torch.matmul(x.mT, grad).sum_to_size(w.shape)
        return gx, gw


class WrongMatMulW(MatMul):
    """Right for x, twice too large for w."""

    @staticmethod
    def backward(ctx, grad):
        gx, gw = MatMul.backward(ctx, grad)
        return gx, 2 * gw


class RowSum(torch.autograd.Function):
    """The sum over the last dimension: a reduction, (n)->()."""

    opzoo_contract = opzoo.Contract(signature="(n)->()", reference=lambda x: x.sum(-1))

    @staticmethod
    def forward(x):
        return x.sum(-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.n = inputs[0].shape[-1]

    @staticmethod
    def backward(ctx, grad):
        return grad[..., None].expand(*grad.shape, ctx.n).clone()


class WrongRowSumShape(RowSum):
    """Keeps the reduced dimension: its output is (..., 1), not what (n)->() says."""

    @staticmethod
    def forward(x):
        return x.sum(-1, keepdim=True)

    @staticmethod
    def backward(ctx, grad):
        return grad.expand(*grad.shape[:-1], ctx.n).clone()


class SinCos(torch.autograd.Function):
    """Two outputs, sin x and cos x: ()->(),()."""

    opzoo_contract = opzoo.Contract(signature="()->(),()", reference=lambda x: (torch.sin(x), torch.cos(x)))

    @staticmethod
    def forward(x):
        return torch.sin(x), torch.cos(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g_sin, g_cos):
        (x,) = ctx.saved_tensors
        return g_sin * torch.cos(x) - g_cos * torch.sin(x)


class WrongSinCosCos(SinCos):
    """Right through sin, the wrong sign through cos."""

    @staticmethod
    def backward(ctx, g_sin, g_cos):
        (x,) = ctx.saved_tensors
        return g_sin * torch.cos(x) + g_cos * torch.sin(x)


class Roll(torch.autograd.Function):
    """Roll the last dimension by an integer number of places."""

    opzoo_contract = opzoo.Contract(
        signature="(n)->(n)",
        params={"shift": opzoo.Param(1, 0, 3, "places to roll")},
        reference=lambda x, shift: torch.roll(x, shift, -1),
    )

    @staticmethod
    def forward(x, shift):
        if not isinstance(shift, int):  # the contract promises an int
            raise TypeError(f"shift must arrive as an int, got {shift!r}")
        return torch.roll(x, shift, -1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.shift = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        return torch.roll(grad, -ctx.shift, -1), None


class WrongRoll(Roll):
    """Rolls the gradient the same way as the input, not back."""

    @staticmethod
    def backward(ctx, grad):
        return torch.roll(grad, ctx.shift, -1), None
