"""Upstream-style Functions that take only some shapes (tests/test_shapes.py): each correct for the
shapes it documents, and a wrong twin with its backward off."""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable


class SameShapeProduct(torch.autograd.Function):
    """``x * y`` for two tensors of one shape: its backward returns gradients of the output's shape,
    as torchdiffeq's ``_StitchGradient`` does (broadcast, they are of the wrong shape)."""

    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x, y)
        return x * y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * y, grad * x


class WrongSameShapeProduct(SameShapeProduct):
    """Both gradients the other's."""

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return grad * x, grad * y


class RowSquare(torch.autograd.Function):
    """``x ** 2``, computed row by row along the first dimension (``x.unsqueeze(1)``): a 0-d tensor
    has none, and the forward raises."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x.unsqueeze(1) ** 2).squeeze(1)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad


class WrongRowSquare(RowSquare):
    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 3 * x * grad


class RBFCovariance(torch.autograd.Function):
    """gpytorch's ``RBFCovariance`` (sq_dist fixed): ``exp(-|x1 - x2|^2 / 2 l^2)``, differentiated in
    the lengthscale only; it raises if x1 or x2 requires grad."""

    @staticmethod
    def forward(ctx, x1, x2, lengthscale):
        if any(ctx.needs_input_grad[:2]):
            raise RuntimeError("RBFCovariance cannot compute gradients with respect to x1 and x2")
        x1_, x2_ = x1.div(lengthscale), x2.div(lengthscale)
        unitless_sq_dist = (x1_.unsqueeze(-2) - x2_.unsqueeze(-3)).pow(2).sum(-1)
        covar_mat = unitless_sq_dist.div(-2.0).exp()
        # d/dl exp(-s/2) = exp(-s/2) * s / l, s = |x1 - x2|^2 / l^2
        ctx.save_for_backward(unitless_sq_dist.mul(covar_mat).div(lengthscale))
        return covar_mat

    @staticmethod
    @once_differentiable  # its saved derivative is a constant of the backward
    def backward(ctx, grad_output):
        (d_output_d_input,) = ctx.saved_tensors
        return None, None, grad_output * d_output_d_input


class WrongRBFCovariance(RBFCovariance):
    @staticmethod
    def backward(ctx, grad_output):
        (d_output_d_input,) = ctx.saved_tensors
        return None, None, 2 * grad_output * d_output_d_input


class StitchGradient(torch.autograd.Function):
    """torchdiffeq's ``_StitchGradient``: returns ``out``, and gives ``x1`` its gradient (a
    straight-through stitch: the surrogate is ``x1``). Of one shape each, as torchdiffeq calls it."""

    @staticmethod
    def forward(ctx, x1, out):
        return out

    @staticmethod
    def backward(ctx, grad_out):
        return grad_out, None


class WrongStitchGradient(StitchGradient):
    @staticmethod
    def backward(ctx, grad_out):
        return -grad_out, None


class MaskedScale(torch.autograd.Function):
    """``2 x`` where ``valid``, 0 elsewhere; ``valid=None`` (kornia's default): every element."""

    @staticmethod
    def forward(ctx, x, valid):
        ctx.valid = valid
        return 2 * x if valid is None else torch.where(valid, 2 * x, torch.zeros_like(x))

    @staticmethod
    def backward(ctx, grad):
        valid = ctx.valid
        return (2 * grad if valid is None else torch.where(valid, 2 * grad, torch.zeros_like(grad))), None


class IgnoresTheMask(MaskedScale):
    """Its backward ignores a given mask."""

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad, None


class WrongWithoutAMask(MaskedScale):
    """Its backward is off where no mask is given."""

    @staticmethod
    def backward(ctx, grad):
        valid = ctx.valid
        return (3 * grad if valid is None else torch.where(valid, 2 * grad, torch.zeros_like(grad))), None


class WeightedNLL(torch.autograd.Function):
    """nll_loss of log-probabilities, an optional per-class ``weight`` (None: every class 1), as
    torch's own takes it; ``reduction`` 'mean' (by the weights picked) or 'sum'."""

    @staticmethod
    def forward(ctx, logp, target, weight=None, reduction="mean"):
        w = weight[target] if weight is not None else torch.ones_like(target, dtype=logp.dtype)
        picked = logp.gather(1, target.unsqueeze(1)).squeeze(1)
        denom = w.sum() if reduction == "mean" else torch.ones((), dtype=logp.dtype)
        ctx.save_for_backward(target, w, denom)
        ctx.shape = logp.shape
        return -(w * picked).sum() / denom

    @staticmethod
    def backward(ctx, grad):
        target, w, denom = ctx.saved_tensors
        g = torch.zeros(ctx.shape, dtype=grad.dtype, device=grad.device)
        return g.scatter(1, target.unsqueeze(1), (-w * grad / denom).unsqueeze(1)), None, None, None


class WeightIgnored(WeightedNLL):
    """WeightedNLL whose backward forgets the weight: right only where none is given."""

    @staticmethod
    def backward(ctx, grad):
        target, w, denom = ctx.saved_tensors
        g = torch.zeros(ctx.shape, dtype=grad.dtype, device=grad.device)
        return (
            g.scatter(1, target.unsqueeze(1), (-grad / denom).expand(w.shape).unsqueeze(1)),
            None,
            None,
            None,
        )
