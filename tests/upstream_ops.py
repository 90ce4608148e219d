"""Functions written as published packages write them, knowing nothing of opzoo: classic
``forward(ctx, ...)`` code with a ``dim``, optional arguments, flags, integer targets. tests/
test_declare.py declares them with ``opzoo.declare`` (the classes are never modified) and checks them."""

from __future__ import annotations

import torch


class Sparsemax(torch.autograd.Function):
    """Sparsemax along ``dim`` (Martins & Astudillo, 2016), as entmax writes it: a classmethod-free
    classic form with a ``dim``, an optional ``k`` it ignores, and a flag."""

    @staticmethod
    def forward(ctx, X, dim=-1, k=None, ensure_sum_one=True):
        ctx.dim = dim
        z = X - X.max(dim=dim, keepdim=True).values
        srt = z.sort(dim=dim, descending=True).values
        n = X.shape[dim]
        shape = [1] * X.dim()
        shape[dim] = n
        rho = torch.arange(1, n + 1, dtype=X.dtype, device=X.device).view(shape)
        cumsum = srt.cumsum(dim) - 1
        support = (rho * srt > cumsum).sum(dim=dim, keepdim=True)
        tau = cumsum.gather(dim, support - 1) / support.to(X.dtype)
        Y = torch.clamp(z - tau, min=0)
        if ensure_sum_one:
            Y = Y / Y.sum(dim=dim, keepdim=True)
        ctx.save_for_backward(Y)
        return Y

    @staticmethod
    def backward(ctx, dY):
        (Y,) = ctx.saved_tensors
        dim = ctx.dim
        support = Y > 0
        dX = dY.clone()
        dX[~support] = 0
        v = dX.sum(dim=dim, keepdim=True) / support.to(dY.dtype).sum(dim=dim, keepdim=True)
        dX = torch.where(support, dX - v, dX)
        return dX, None, None, None


class SparsemaxSqueezed(Sparsemax):
    """The same with a copied bug: the support size is squeezed without a dim, which is right unless
    another dimension has size 1 (then the gradient broadcasts over it, and is summed back)."""

    @staticmethod
    def backward(ctx, dY):
        (Y,) = ctx.saved_tensors
        dim = ctx.dim
        support = Y > 0
        dX = dY.clone()
        dX[~support] = 0
        size = support.to(dY.dtype).sum(dim=dim, keepdim=True).squeeze()
        v = dX.sum(dim=dim) / size
        dX = torch.where(support, dX - v.unsqueeze(dim), dX)
        return dX, None, None, None


class NLLLoss(torch.autograd.Function):
    """Negative log-likelihood of integer targets, per row: ``(n, c), (n) -> (n)``, a trailing
    argument with a default that nobody needs to declare."""

    @staticmethod
    def forward(ctx, logp, target, eps=0.0):
        ctx.save_for_backward(target)
        ctx.shape = logp.shape
        return -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1) + eps

    @staticmethod
    def backward(ctx, grad):
        (target,) = ctx.saved_tensors
        out = torch.zeros(ctx.shape, dtype=grad.dtype, device=grad.device)
        out.scatter_(-1, target.unsqueeze(-1), -grad.unsqueeze(-1))
        return out, None, None


class PairMean(torch.autograd.Function):
    """The mean of each pair of neighbours along the last dimension, an odd one left alone at the end:
    an output whose size the signature cannot name, ``(l) -> (m)`` with m = ceil(l / 2)."""

    @staticmethod
    def forward(ctx, x):
        ctx.length = x.shape[-1]
        if x.shape[-1] % 2:
            x = torch.cat([x, x[..., -1:]], dim=-1)
        return x.unflatten(-1, (-1, 2)).mean(-1)

    @staticmethod
    def backward(ctx, grad):
        g = (grad / 2).repeat_interleave(2, dim=-1)
        if ctx.length % 2:
            g = g[..., :-1].clone()
            g[..., -1] *= 2
        return g


class Scale(torch.autograd.Function):
    """``x * alpha``, with alpha a tensor (saved for backward) and a ``mode`` string choice."""

    @staticmethod
    def forward(ctx, x, alpha, mode="plain"):
        ctx.save_for_backward(alpha)
        ctx.mode = mode
        return x * alpha if mode == "plain" else x * alpha * 2

    @staticmethod
    def backward(ctx, grad):
        (alpha,) = ctx.saved_tensors
        factor = 1 if ctx.mode == "plain" else 2
        return grad * alpha * factor, None, None


class Gram(torch.autograd.Function):
    """``A Aᵀ`` of a batch of matrices: exactly three dimensions, ``(b, n, k) -> (b, n, n)``."""

    @staticmethod
    def forward(ctx, a):
        if a.dim() != 3:
            raise ValueError(f"expected a 3-D batch of matrices, got {a.dim()}-D")
        ctx.save_for_backward(a)
        return a @ a.transpose(1, 2)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        return (grad + grad.transpose(1, 2)) @ a


# -- each of these was a false alarm once: the op right, opzoo's oracle not -------------------------


class SigmoidSpike(torch.autograd.Function):
    """A spike whose backward is the derivative of sigmoid(alpha x), computed in the input's dtype as
    spikingjelly's surrogates are: in bfloat16 ``1 - sigmoid`` cancels to 0 where the float64
    surrogate's gradient is not 0 (x = 1.5625, alpha 4), exactly as the surrogate itself run in
    bfloat16 does."""

    @staticmethod
    def forward(x, alpha):
        return (x >= 0).to(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.alpha = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(ctx.alpha * x)
        return grad * (1 - s) * s * ctx.alpha, None

    @staticmethod
    def primitive_function(x, alpha):
        return torch.sigmoid(alpha * x)


class PiecewiseLeakySpike(torch.autograd.Function):
    """A spike with spikingjelly's piecewise leaky surrogate: slope 1/(2w) for |x| < w, c outside.
    At |x| = w its primitive has two one-sided derivatives and the backward takes c, one of them;
    in bfloat16 the threshold w itself is rounded (w = 0.955078125 compares as 0.953125), as the
    primitive run in bfloat16 rounds it."""

    @staticmethod
    def forward(x, w, c):
        return (x >= 0).to(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.w, ctx.c = inputs[1], inputs[2]

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        inside = x.abs() < ctx.w
        return grad * torch.where(inside, 1 / (2 * ctx.w), ctx.c), None, None

    @staticmethod
    def primitive_function(x, w, c):
        below, above = (x < -w).to(x), (x > w).to(x)
        inside = 1 - below - above
        return below * (c * x + c * w) + above * (c * x - c * w + 1) + inside * (x / (2 * w) + 0.5)


class SparsemaxBisect(torch.autograd.Function):
    """Sparsemax along the last dimension with its threshold found by bisection, as entmax's
    SparsemaxBisectFunction finds it, and the exact (implicit) backward. The bisection's bounds
    follow max(x): autograd of this forward moves the threshold with max(x) alone, which is not the
    derivative of the function it computes to 1e-15 (central differences agree with the backward)."""

    @staticmethod
    def forward(ctx, X, n_iter=60):
        top = X.max(dim=-1, keepdim=True).values
        lo, width = top - 1, torch.ones_like(top)
        for _ in range(n_iter):
            width = width / 2
            mid = lo + width
            above = torch.clamp(X - mid, min=0).sum(dim=-1, keepdim=True) >= 1
            lo = torch.where(above, mid, lo)
        Y = torch.clamp(X - (lo + width / 2), min=0)
        Y = Y / Y.sum(dim=-1, keepdim=True)
        ctx.save_for_backward(Y)
        return Y

    @staticmethod
    def backward(ctx, dY):
        (Y,) = ctx.saved_tensors
        support = (Y > 0).to(dY)
        dX = dY * support
        v = dX.sum(dim=-1, keepdim=True) / support.sum(dim=-1, keepdim=True)
        return support * (dX - v), None


class MaskedScale(torch.autograd.Function):
    """``x * scale`` where a bool mask is True, 0 elsewhere, as losses with a ``valid`` mask are
    written: classic form, the mask not differentiated (None for it)."""

    @staticmethod
    def forward(ctx, x, valid, scale=2.0):
        ctx.save_for_backward(valid)
        ctx.scale = scale
        return torch.where(valid, x * scale, torch.zeros_like(x))

    @staticmethod
    def backward(ctx, grad):
        (valid,) = ctx.saved_tensors
        return torch.where(valid, grad * ctx.scale, torch.zeros_like(grad)), None, None


class ScaledWithSign(torch.autograd.Function):
    """``(2 x, sign(x))``, the second output marked non-differentiable (``ctx.mark_non_differentiable``)
    as roma's Procrustes marks two of its four: autograd refuses a gradient through it, and there is
    none to check."""

    @staticmethod
    def forward(ctx, x):
        sign = torch.sign(x)
        ctx.mark_non_differentiable(sign)
        return 2 * x, sign

    @staticmethod
    def backward(ctx, grad, grad_sign):
        return 2 * grad


class DoubledWithCube(ScaledWithSign):
    """``(2 x, x³)``, the second output marked non-differentiable although it varies smoothly with
    ``x``, as roma's Procrustes marks U and V: by the Function's word it has no gradient, so a
    finite difference of it is no evidence against the backward (which is ScaledWithSign's)."""

    @staticmethod
    def forward(ctx, x):
        cube = x**3
        ctx.mark_non_differentiable(cube)
        return 2 * x, cube


class SineSpike(torch.autograd.Function):
    """A spike with a periodic surrogate, sin(2x) / 2 (one term of spikingjelly's squarewave Fourier
    series), its backward computed in the input's dtype: at float32's largest value 2x overflows and
    cos(inf) is nan, as in the surrogate itself run in float32."""

    @staticmethod
    def forward(x):
        return (x >= 0).to(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.cos(2 * x)

    @staticmethod
    def primitive_function(x):
        return torch.sin(2 * x) / 2


class Top1(torch.autograd.Function):
    """The largest value along the last dimension and where it is, as ``torch.max(x, -1)`` returns
    them: the index an int64 output, by design (a false alarm of hygiene and library once)."""

    @staticmethod
    def forward(ctx, x):
        values, index = x.max(dim=-1)
        ctx.save_for_backward(index)
        ctx.n = x.shape[-1]
        ctx.mark_non_differentiable(index)
        return values, index

    @staticmethod
    def backward(ctx, grad_values, grad_index):
        (index,) = ctx.saved_tensors
        grad = grad_values.new_zeros(*grad_values.shape, ctx.n)
        return grad.scatter(-1, index.unsqueeze(-1), grad_values.unsqueeze(-1))


class Top1WrongIndex(Top1):
    """Top1 that returns the index of the smallest value beside the largest (its backward still
    right): only the integer output is wrong, and only a reference sees it."""

    @staticmethod
    def forward(ctx, x):
        values, index = Top1.forward(ctx, x)
        return values, x.argmin(dim=-1)
