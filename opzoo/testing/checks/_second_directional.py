"""``double_backward`` on a large input: the first derivative's derivative along one random direction,
as gradgradcheck's fast mode checks it, but at a cost linear in the input's size (gradgradcheck would
build the whole Jacobian to word a failure). One double vjp, vᵀJ_F u, against central differences of
the first derivative F along u, with the tolerance and the non-smooth-element handling of
``gradient``'s directional check (``_gradient.directional``).

Telling a kink from an error there takes a :class:`~opzoo.testing.checks._onesided.Probe` of the first
derivative: some 400 calls of it on an op that is not elementwise, minutes where one call takes a
second. In fast mode its cost is estimated first (:func:`probe_calls` times the CPU seconds one call
took) and, above :data:`BUDGET_S` (``OPZOO_PROBE_BUDGET`` overrides it), that input's check is left
out with a note (:func:`over_budget`): never a pass that says nothing, never a red.

And on a small input in fast mode, one direction of opzoo's own beside torch's (:func:`own_direction`).
"""

from __future__ import annotations

import contextlib
import hashlib
import math
import os
import time
from typing import Callable, Sequence

import torch
from torch.autograd.gradcheck import GradcheckError

from opzoo.testing.checks import _kinks
from opzoo.testing.checks._backward_rows import jacobian_rows
from opzoo.testing.checks._bound import Bound, PropertyFailed, Tensors, grad, grad_outputs
from opzoo.testing.checks._kink_words import describe
from opzoo.testing.checks._onesided import KINDS, MAX_COORDINATES, RANDOM, RANDOM_DIAGONAL, Probe

#: What the kink probe of one large input may cost in fast mode, in CPU seconds of first-derivative
#: calls (estimated before it runs). The zoo's, the fixtures' and the real-world record's probes are
#: estimated at a few seconds at most (docs/records/testing.md); roma's Procrustes on its (47, 47, 47)
#: edge at over an hour (about 450 calls of 10 s).
BUDGET_S = 120.0
ENV_BUDGET = "OPZOO_PROBE_BUDGET"


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
    evidence: noted, not checked. In fast mode, a probe estimated over the budget: noted, not run."""
    size = sum(x.numel() for x in xs)
    gen = torch.Generator().manual_seed(len(leaves))  # one direction, the same for every example
    base = tuple(x.detach() for x in leaves)
    us = tuple(torch.randn(x.shape, generator=gen, dtype=x.dtype).to(x.device) for x in base)
    began = time.process_time()  # CPU seconds: what a call costs, whatever else the machine runs
    at = first(*base)
    seconds = time.process_time() - began
    vs = grad_outputs(at)
    keep = None
    analytic, numeric = _along(first, base, us, vs, keep, eps)
    if fits(analytic, numeric, size):
        return
    diagonal = _kinks.diagonal(op, xs)
    # the rows the probe sees at the point (each element, or the one weighted sum): any finite?
    rows = list(at) if diagonal else [sum((f * v).sum() for f, v in zip(at, vs))]
    finite = any(bool(torch.as_tensor(r).isfinite().any()) for r in rows)
    if op.fast and over_budget(op.notes, probe_calls(base, diagonal, finite), seconds, size):
        return
    if diagonal:
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


def probe_calls(xs: Sequence[torch.Tensor], diagonal: bool, finite: bool = True) -> int:
    """The most evaluations of the first derivative that telling its kinks at ``xs`` makes (a Probe
    stacks them into a few calls where it can, which saves the calls' overhead, not their
    arithmetic, and checks each call at the point itself, a few evaluations more): a
    :class:`Probe` (its point, then along each direction both ways, again at a smaller step where
    something jumps, at half and twice the step where a gap may be curvature, and, if a row is
    ``finite`` at the point, the midpoints of each pair of its directions after the coordinates),
    then for an elementwise op its Jacobian rows and the directional check again.
    tests/test_double_backward_budget.py counts them."""
    n = sum(x.numel() for x in xs)
    if diagonal:
        coordinates, first = len(xs), 0  # a Probe's pairs then start at the coordinates
        randoms = 0 if len(xs) == 1 else 1 + RANDOM_DIAGONAL
    else:
        coordinates = n if n <= MAX_COORDINATES else 0
        randoms, first = 1 + RANDOM, coordinates
    dirs = coordinates + randoms
    pairs = (dirs - first) * (dirs - first - 1) // 2 if finite else 0
    return 1 + 2 * dirs + 2 * dirs + 4 * dirs + 4 * pairs + (4 if diagonal else 0)


def budget() -> float:
    """:data:`BUDGET_S`, or the seconds ``OPZOO_PROBE_BUDGET`` gives (``inf``: no cap)."""
    seconds = BUDGET_S
    with contextlib.suppress(ValueError):
        seconds = float(os.environ.get(ENV_BUDGET, BUDGET_S))
    return seconds if seconds >= 0 else BUDGET_S


def over_budget(notes: list[str], calls: int, seconds: float, size: int) -> bool:
    """Whether ``calls`` of ``seconds`` each cost more than :func:`budget`; if so, a note that says
    so and how to run it in full (without the seconds measured: the same note at every run)."""
    limit = budget()
    if calls * seconds <= limit:
        return False
    notes.append(
        f"a large input ({size:,} elements) where the first derivative's directional derivative differs "
        f"from its finite differences, and telling a kink there from an error takes up to {calls} calls "
        f"of it, more than the budget of {limit:g} CPU s at what one call costs here: its second derivative "
        f"is not checked there ({ENV_BUDGET}=inf checks it in full)"
    )
    return True


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


def own_direction(fn: Callable[..., Tensors], leaves: Tensors, eps: float, atol: float, rtol: float) -> None:
    """gradcheck's fast mode along a direction of opzoo's own: GradcheckError (a "Jacobian mismatch")
    if vᵀJu of ``fn`` (the first derivative) from one vjp per output differs from central differences
    along u, for any input and output, by more than gradcheck's tolerances.

    torch's fast mode draws its u and v from a fresh generator with its default seed at every call:
    every input of one size is probed along the same directions, whatever the seed. A second
    derivative wrong along a direction those nearly miss is then missed at every input of that size
    (entmax15_loss at (3, 4): v's first two entries are 0.083 and 0.077, and the Hessian block the
    loss's backward leaves out, c (e0 - e1)(e0 - e1)ᵀ, projects to 8e-4, inside the tolerance). Here
    u and v are normal, drawn from a generator seeded by the input's values: another direction at
    every input, the same one when the input is replayed."""
    gen = torch.Generator().manual_seed(_seed(leaves))
    xs = tuple(x.detach() for x in leaves)
    us = [_unit(x, gen) for x in xs]
    ls = tuple(x.clone().requires_grad_() for x in xs)
    outs = fn(*ls)
    vs = [_unit(o.detach(), gen) for o in outs]
    rows = []  # per output: vᵀJ, the row of each input (None: the output does not depend on it)
    for o, v in zip(outs, vs):
        rows.append(grad([o], ls, [v], retain_graph=True) if o.requires_grad else (None,) * len(ls))
    for i, u in enumerate(us):
        up, down = fn(*_moved(xs, i, eps * u)), fn(*_moved(xs, i, -eps * u))
        for j, (a, b, v) in enumerate(zip(up, down, vs)):
            numeric = float(((a.detach() - b.detach()) * v).sum()) / (2 * eps)
            row = rows[j][i]
            analytic = 0.0 if row is None else float((row * u).sum())
            if not abs(analytic - numeric) <= atol + rtol * abs(numeric):
                raise GradcheckError(
                    f"Jacobian mismatch for output {j} with respect to input {i}, along a direction of "
                    f"opzoo's own (vᵀJu): numerical {numeric:.9g}, analytical {analytic:.9g}"
                )


def _moved(xs: Tensors, i: int, step: torch.Tensor) -> Tensors:
    return tuple(x + step if k == i else x for k, x in enumerate(xs))


def _unit(x: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A normal random tensor like ``x``, of norm 1 (all zeros if ``x`` is empty)."""
    r = torch.randn(x.shape, generator=gen, dtype=torch.float64)
    return (r / r.norm().clamp_min(1e-300)).to(dtype=x.dtype, device=x.device)


def _seed(xs: Sequence[torch.Tensor]) -> int:
    """A seed from the tensors' values (their bytes), the same for the same input."""
    h = hashlib.blake2b(digest_size=8)
    for x in xs:
        h.update(x.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return int.from_bytes(h.digest(), "little") >> 1
