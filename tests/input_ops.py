"""Upstream Functions whose inputs live in a set (tests/test_inputs.py, tests/test_shapes.py): each
correct for the inputs upstream documents, and a wrong twin with its backward off."""

from __future__ import annotations

import torch


class QuadFormDiagonal(torch.autograd.Function):
    """gpytorch's ``diag(B' A B)``, "where A is a symmetric matrix": the rhs gradient ``2AB``."""

    @staticmethod
    def forward(ctx, matrix, rhs):
        ctx.save_for_backward(matrix, rhs)
        return (rhs * (matrix @ rhs)).sum(-2)

    @staticmethod
    def backward(ctx, grad):
        matrix, rhs = ctx.saved_tensors
        g = grad.unsqueeze(-2)
        # d/dA = B diag(g) B';  d/dB = 2 A B diag(g), for a symmetric A
        return (rhs * g) @ rhs.mT, 2 * (matrix @ rhs) * g


class WrongQuadFormDiagonal(QuadFormDiagonal):
    """The matrix gradient twice what it is."""

    @staticmethod
    def backward(ctx, grad):
        matrix, rhs = ctx.saved_tensors
        g = grad.unsqueeze(-2)
        return 2 * (rhs * g) @ rhs.mT, 2 * (matrix @ rhs) * g


class Inverse(torch.autograd.Function):
    """``torch.linalg.inv``, which raises on a singular matrix."""

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return torch.linalg.inv(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        inv = torch.linalg.inv(a)
        # d(A^-1) = -A^-1 dA A^-1
        return -inv.mT @ grad @ inv.mT


class WrongInverse(Inverse):
    """The minus sign forgotten."""

    @staticmethod
    def backward(ctx, grad):
        return -Inverse.backward(ctx, grad)


class Cholesky(torch.autograd.Function):
    """``torch.linalg.cholesky`` with torch's backward formula (a symmetric gradient: the forward
    reads one triangle, so entry-by-entry differences never agree with it)."""

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return torch.linalg.cholesky(a)

    @staticmethod
    def backward(ctx, grad):
        (a,) = ctx.saved_tensors
        low = torch.linalg.cholesky(a)
        # A = L L': dA = sym(L^-T Phi(L' dL) L^-1), Phi the lower triangle with half its diagonal
        phi = (low.mT @ grad.tril()).tril()
        phi = phi - 0.5 * torch.diag_embed(phi.diagonal(dim1=-2, dim2=-1))
        left = torch.linalg.solve_triangular(low.mT, phi, upper=True)
        out = torch.linalg.solve_triangular(low, left, upper=False, left=False)
        return (out + out.mT) / 2


class WrongCholesky(Cholesky):
    """Torch's gradient scaled by 1.5."""

    @staticmethod
    def backward(ctx, grad):
        return 1.5 * Cholesky.backward(ctx, grad)


class ReverseSort(torch.autograd.Function):
    """transformers' reformer ``ReverseSort``: gathers by ``undo_sorted_bucket_idx`` and sends the
    gradient back by ``sorted_bucket_idx``, its inverse."""

    @staticmethod
    def forward(ctx, out_vectors, logits, sorted_bucket_idx, undo_sorted_bucket_idx):
        with torch.no_grad():
            ctx.sorted_bucket_idx = sorted_bucket_idx
            expanded = undo_sorted_bucket_idx.unsqueeze(-1).expand(out_vectors.shape)
            out_vectors = torch.gather(out_vectors, 2, expanded)
            logits = torch.gather(logits, 2, undo_sorted_bucket_idx)
        return out_vectors, logits

    @staticmethod
    def backward(ctx, grad_out_vectors, grad_logits):
        idx = ctx.sorted_bucket_idx
        grad_out_vectors = torch.gather(grad_out_vectors, 2, idx.unsqueeze(-1).expand(grad_out_vectors.shape))
        grad_logits = torch.gather(grad_logits, 2, idx)
        return grad_out_vectors, grad_logits, None, None


class WrongReverseSort(ReverseSort):
    """Sends the gradient back by the forward's own permutation, not its inverse."""

    @staticmethod
    def forward(ctx, out_vectors, logits, sorted_bucket_idx, undo_sorted_bucket_idx):
        outs = ReverseSort.forward(ctx, out_vectors, logits, sorted_bucket_idx, undo_sorted_bucket_idx)
        ctx.sorted_bucket_idx = undo_sorted_bucket_idx
        return outs


class QuadFormWrites(QuadFormDiagonal):
    """Writes into its matrix (adds to its diagonal) before reading it."""

    @staticmethod
    def forward(ctx, matrix, rhs):
        matrix.diagonal(dim1=-2, dim2=-1).add_(1.0)
        return QuadFormDiagonal.forward(ctx, matrix, rhs)


class Rotate(torch.autograd.Function):
    """``R @ v``; keeps the largest entry of every ``R`` it is given in ``SEEN`` (for a test)."""

    SEEN: list[float] = []

    @staticmethod
    def forward(ctx, rotation, v):
        Rotate.SEEN.append(float(rotation.abs().max()) if rotation.numel() else 0.0)
        ctx.save_for_backward(rotation, v)
        return (rotation @ v.unsqueeze(-1)).squeeze(-1)

    @staticmethod
    def backward(ctx, grad):
        rotation, v = ctx.saved_tensors
        return grad.unsqueeze(-1) * v.unsqueeze(-2), (rotation.mT @ grad.unsqueeze(-1)).squeeze(-1)


class SolveOrthogonal(torch.autograd.Function):
    """``R^-1 M``, with a backward that saves the inverses: ``R^-T = R`` for an orthogonal ``R`` (a
    Procrustes-style frame change), so ``dM = R g`` and ``dR = -R g Y'``."""

    @staticmethod
    def forward(ctx, frame, m):
        y = torch.linalg.inv(frame) @ m
        ctx.save_for_backward(frame, y)
        return y

    @staticmethod
    def backward(ctx, grad):
        frame, y = ctx.saved_tensors
        grad_m = frame @ grad
        return -grad_m @ y.mT, grad_m


class WrongSolveOrthogonal(SolveOrthogonal):
    """``R'`` for ``R^-T`` in the gradient of ``M``: the inverse, not its transpose."""

    @staticmethod
    def backward(ctx, grad):
        frame, y = ctx.saved_tensors
        return -(frame @ grad) @ y.mT, frame.mT @ grad


class RotatedCross(torch.autograd.Function):
    """``(R a) x (R b)``, the normal of a rotated plane, with the backward of ``R (a x b)``: the two
    agree for a rotation only (a reflection negates the cross product)."""

    @staticmethod
    def forward(ctx, rotation, a, b):
        ctx.save_for_backward(rotation, a, b)
        ra, rb = torch.broadcast_tensors(rotation @ a.unsqueeze(-1), rotation @ b.unsqueeze(-1))
        return torch.linalg.cross(ra, rb, dim=-2).squeeze(-1)

    @staticmethod
    def backward(ctx, grad):
        rotation, a, b = ctx.saved_tensors
        grad_cross = (rotation.mT @ grad.unsqueeze(-1)).squeeze(-1)
        a_, b_, grad_cross = torch.broadcast_tensors(a, b, grad_cross)
        cross = torch.linalg.cross(a_, b_, dim=-1)
        grad_rotation = grad.unsqueeze(-1) * cross.unsqueeze(-2)
        return (
            grad_rotation.sum_to_size(rotation.shape),
            torch.linalg.cross(b_, grad_cross, dim=-1).sum_to_size(a.shape),
            torch.linalg.cross(grad_cross, a_, dim=-1).sum_to_size(b.shape),
        )


class WrongRotatedCross(RotatedCross):
    """The gradient of ``a`` with its sign flipped (``a x b = -b x a`` misread)."""

    @staticmethod
    def backward(ctx, grad):
        grad_rotation, grad_a, grad_b = RotatedCross.backward(ctx, grad)
        return grad_rotation, -grad_a, grad_b


class AlongAxis(torch.autograd.Function):
    """The component of ``v`` along the axis ``u``, ``(u.v) u / (u.u)``, with the backward of
    ``(u.v) u``: right for a unit axis, as callers promise."""

    @staticmethod
    def forward(ctx, axis, v):
        ctx.save_for_backward(axis, v)
        dot = (axis * v).sum(-1, keepdim=True)
        return dot * axis / (axis * axis).sum(-1, keepdim=True)

    @staticmethod
    def backward(ctx, grad):
        axis, v = ctx.saved_tensors
        dot = (axis * v).sum(-1, keepdim=True)
        along = (axis * grad).sum(-1, keepdim=True)
        return dot * grad + along * v, along * axis


class WrongAlongAxis(AlongAxis):
    """The axis's gradient without its ``(u.g) v`` term, which moves along the sphere too."""

    @staticmethod
    def backward(ctx, grad):
        axis, v = ctx.saved_tensors
        dot = (axis * v).sum(-1, keepdim=True)
        return dot * grad, (axis * grad).sum(-1, keepdim=True) * axis


class ScaledLog(torch.autograd.Function):
    """``x * log(s)`` for a positive ``s``, which it checks as upstream code does (pyro's ewma and
    threshold Functions take a positive second input): gradients ``log(s)`` and ``x / s``."""

    @staticmethod
    def forward(ctx, x, s):
        if bool((s <= 0).any()):
            raise ValueError("s must be positive")
        ctx.save_for_backward(x, s)
        return x * torch.log(s)

    @staticmethod
    def backward(ctx, grad):
        x, s = ctx.saved_tensors
        return grad * torch.log(s), grad * x / s


class WrongScaledLog(ScaledLog):
    """The gradient for ``s`` is ``x / s^2``."""

    @staticmethod
    def backward(ctx, grad):
        x, s = ctx.saved_tensors
        return grad * torch.log(s), grad * x / s**2
