"""The wrong twins of the ops scan infers in ops.py: each backward is wrong at some inputs only (one
wrong everywhere by one factor would read as a backward that is not a derivative by design)."""

import torch


class SoftPlus(torch.autograd.Function):
    """sigmoid(x) below 1, a constant 0.5 above: wrong for x > 1."""

    @staticmethod
    def forward(x):
        return torch.nn.functional.softplus(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.where(x > 1, 0.5, torch.sigmoid(x))


class Softmax(torch.autograd.Function):
    """The first element of each row loses the sum's term."""

    @staticmethod
    def forward(ctx, x, dim=-1):
        y = torch.softmax(x, dim)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        gx = y * (g - (g * y).sum(ctx.dim, keepdim=True))
        first = y.select(ctx.dim, 0) * g.select(ctx.dim, 0)
        return gx.index_copy(ctx.dim, torch.tensor([0]), first.unsqueeze(ctx.dim)), None


class Log(torch.autograd.Function):
    """1 / x below 2, 1 / (x + 1) above: wrong for x > 2."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.log(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g / torch.where(x > 2, x + 1, x)


class Dropout(torch.autograd.Function):
    """Random forward (declared random=True by scan); the backward drops the mask: wrong wherever an
    element was dropped."""

    @staticmethod
    def forward(ctx, x):
        mask = (torch.rand_like(x) > 0.5).to(x.dtype) * 2
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, g):
        return g * 2
