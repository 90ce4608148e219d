"""``double_backward`` on a large input: the first derivative's derivative along one random direction,
as gradgradcheck's fast mode checks it, but at a cost linear in the input's size (gradgradcheck would
build the whole Jacobian to word a failure). One double vjp, vᵀJ_F u, against central differences of
the first derivative F along u, with the tolerance and the non-smooth-element handling of
``gradient``'s directional check (``_gradient.directional``)."""

from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

from opzoo.testing.checks import _kinks
from opzoo.testing.checks._backward_rows import jacobian_rows
from opzoo.testing.checks._bound import Bound, PropertyFailed, Tensors, grad, grad_outputs
from opzoo.testing.checks._kink_words import describe
from opzoo.testing.checks._onesided import KINDS, Probe


def fits(analytic: float, numeric: float, size: int) -> bool:
    """A directional derivative's tolerance on a large input (the one ``gradient`` uses too)."""
    return abs(analytic - numeric) <= 1e-5 * max(1.0, size**0.5) + 1e-3 * abs(numeric)


def directional_second(
    op: Bound, xs: Sequence[torch.Tensor], leaves: Tensors, first: Callable[..., Tensors], eps: float
) -> None:
    """``first``: the leaves -> the first derivative (``_kinks.first_derivative``). Where analytic and
    numerical values differ at elements where the first derivative is not smooth, those are judged
    on their own (an elementwise op: all elements at once) and left out, or (another op) the input is
    not checked, with a note. A nan or infinite second derivative where the differences are finite is
    a failure; differences that are not finite (the first derivative overflows nearby) are no
    evidence: noted, not checked."""
    size = sum(x.numel() for x in xs)
    gen = torch.Generator().manual_seed(len(leaves))  # one direction, the same for every example
    base = tuple(x.detach() for x in leaves)
    us = tuple(torch.randn(x.shape, generator=gen, dtype=x.dtype).to(x.device) for x in base)
    vs = grad_outputs(first(*base))
    keep = None
    analytic, numeric = _along(first, base, us, vs, keep, eps)
    if fits(analytic, numeric, size):
        return
    if _kinks.diagonal(op, xs):
        probe = Probe(first, base, diagonal=True)
        rows = (~probe.smooth).nonzero().reshape(-1)
        if len(rows):
            _kinks.judge(probe, rows, jacobian_rows(first, base, rows, probe), order=2)
            describe(probe, op.notes, order=2)
            masks = probe.mask(probe.smooth)
            keep = masks[0]
            for m in masks[1:]:
                keep = keep & m.reshape(keep.shape)
            analytic, numeric = _along(first, base, us, vs, keep, eps)
    else:
        probe = Probe(_weighted(first, vs), base)
        if not bool(probe.smooth.all()):
            op.notes.append(
                f"a large input where the first derivative is not differentiable "
                f"({KINDS[int(probe.kind[~probe.smooth][0])]}): its directional derivative is not "
                "checked there (the small inputs are checked element by element)"
            )
            return
    if fits(analytic, numeric, size):
        return
    if not math.isfinite(numeric):
        op.notes.append(
            "a large input where the first derivative's differences along a random direction are not "
            "finite: its second derivative is not checked there"
        )
        return
    raise PropertyFailed(
        f"second derivative mismatch on a large input ({size:,} elements): numerical {numeric:.9g}, "
        f"analytical {analytic:.9g} (vᵀJu of the first derivative along a random u, as "
        "gradgradcheck's fast mode checks it)"
    )


def _along(
    first: Callable[..., Tensors],
    xs: Tensors,
    us: Tensors,
    vs: Tensors,
    keep: torch.Tensor | None,
    eps: float,
) -> tuple[float, float]:
    """vᵀJ_F u from one double vjp, and from central differences of F along u; only the elements
    ``keep`` holds (an elementwise op: element e of each sum depends on the inputs' elements e
    alone, so leaving a sum's terms out leaves those elements out, their nan included)."""

    def kept(t: torch.Tensor) -> torch.Tensor:
        return t if keep is None else torch.where(keep.reshape(t.shape), t, 0)

    leaves = tuple(x.clone().requires_grad_() for x in xs)
    seconds = grad(first(*leaves), leaves, vs)
    analytic = sum(float(kept(s * u).sum()) for s, u in zip(seconds, us) if s is not None)
    up = first(*(x + eps * u for x, u in zip(xs, us)))
    down = first(*(x - eps * u for x, u in zip(xs, us)))
    diffs = (kept((a.detach() - b.detach()) * v) for a, b, v in zip(up, down, vs))
    numeric = sum(float(d.sum()) for d in diffs) / (2 * eps)
    return analytic, numeric


def _weighted(first: Callable[..., Tensors], vs: Tensors) -> Callable[..., Tensors]:
    """x -> (sum of F_i * v_i,): the one function a large input's directional check sees."""

    def fn(*xs: torch.Tensor) -> Tensors:
        return (sum((f * v).sum() for f, v in zip(first(*xs), vs)).detach(),)  # type: ignore[union-attr]

    return fn
