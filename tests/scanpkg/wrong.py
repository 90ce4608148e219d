"""The wrong twins of the ops scan infers in ops.py: each the same forward (a subclass), with a
backward wrong at some inputs only (one wrong everywhere by one factor would read as a backward that
is not a derivative by design)."""

import torch

from scanpkg import ops


class SoftPlus(ops.SoftPlus):
    """sigmoid(x) below 1, a constant 0.5 above: wrong for x > 1."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.where(x > 1, 0.5, torch.sigmoid(x))


class Softmax(ops.Softmax):
    """The first element of each row loses the sum's term."""

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        gx = y * (g - (g * y).sum(ctx.dim, keepdim=True))
        first = y.select(ctx.dim, 0) * g.select(ctx.dim, 0)
        return gx.index_copy(ctx.dim, torch.tensor([0]), first.unsqueeze(ctx.dim)), None


class Log(ops.Log):
    """1 / x below 2, 1 / (x + 1) above: wrong for x > 2."""

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g / torch.where(x > 2, x + 1, x)


class Dropout(ops.Dropout):
    """Random forward (declared random=True by scan); the backward drops the mask: wrong wherever an
    element was dropped."""

    @staticmethod
    def backward(ctx, g):
        return g * 2
