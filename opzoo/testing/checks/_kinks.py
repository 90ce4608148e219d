"""Kinks nobody declared: where an op is not differentiable, a backward held to the valid generalised
gradients instead of to finite differences, and the oracles not held to their own choice there.

Finite differences that straddle a kink measure no derivative, so gradcheck fails a correct op there
(the tutorial's MyReLU at x = 0: "numerical 0.5, analytical 1.0"; a max of two equal values; a norm at
0). Where gradcheck (or gradgradcheck) reports a Jacobian mismatch, each output element is classified
from one-sided differences (``_onesided``): at a kink, the op's gradient must be a valid generalised
gradient (between the one-sided derivatives along each coordinate and each probed direction; 5 at a
ReLU's 0 is not, nor (1, 1) at a tie of max(x, y)), and is noted; at a jump, or where the function is
not finite, there is nothing to check; every other element is held to gradcheck as before (the
check runs again with the elements it cannot judge fixed at their values). The oracles (the forward's
autograd, the reference, the jvp) are not held to their own choice of subgradient at such elements
either: :func:`smooth_rows`. How all this is worded: ``_kink_words``. Declared kinks keep pinning
their exact value: the ``kinks`` property (``_declared_kinks``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch.autograd.gradcheck import GradcheckError

from opzoo.testing.checks import _onesided
from opzoo.testing.checks._backward_rows import flat_vjp, jacobian_rows
from opzoo.testing.checks._bound import Bound, PropertyFailed, Tensors
from opzoo.testing.checks._kink_words import (
    describe,
    note_of,
    subject_of,
    violation_message,
    violation_worst,
    worst_at,
)
from opzoo.testing.checks._onesided import ATOL, RTOL, Probe

Fn = Callable[..., Any]


def outputs_of(fn: Fn) -> Callable[..., Tensors]:
    """``fn`` with its result always a tuple."""

    def call(*xs: torch.Tensor) -> Tensors:
        out = fn(*xs)
        return out if isinstance(out, tuple) else (out,)

    return call


def diagonal(op: Bound, xs: Sequence[torch.Tensor]) -> bool:
    """Whether ``op`` at ``xs`` is elementwise with every tensor of one shape (no broadcasting, no
    learnable tensors): output element e depends on the inputs' elements e alone."""
    shapes = {tuple(x.shape) for x in xs}
    return op.spec.contract.sig.elementwise and op.module is None and len(shapes) == 1


# -- gradcheck where the function has kinks -----------------------------------------------------


def gradcheck_rows(
    fn: Fn,
    inputs: Sequence[torch.Tensor],
    run: Callable[[Fn], None],
    notes: list[str],
    *,
    diagonal: bool,
    order: int = 1,
) -> None:
    """``run(f)`` is gradcheck of ``f`` at ``inputs``; run it on ``fn`` (outputs that are not finite
    at ``inputs`` held at their values: nothing to check there). On a Jacobian mismatch, find the
    output elements that are not smooth, hold the backward to the valid generalised gradients there
    (PropertyFailed if it is not one), and run gradcheck again with those elements held at their
    values. A mismatch that is not at such an element re-raises gradcheck's error."""
    fn, base = differentiable_outputs(outputs_of(fn), inputs, notes)
    leaves = tuple(x.detach() for x in inputs)
    finite = tuple(o.isfinite() for o in base)
    if not any(bool(f.any()) for f in finite):
        # nan or infinite everywhere (the first derivative of a variance of one element): nothing
        # to check, and finite differences of it would only be slow
        notes.append(note_of(_onesided.UNDEFINED, subject_of(order), False))
        return
    everywhere = all(bool(f.all()) for f in finite)
    error = _attempt(run, fn if everywhere else _held(fn, finite, base), fn, leaves, notes)
    if error is None:
        if not everywhere:
            notes.append(note_of(_onesided.UNDEFINED, subject_of(order), False))
        return
    probe = Probe(fn, leaves, diagonal=diagonal)
    rows = (~probe.smooth).nonzero().reshape(-1)
    if not len(rows):
        if not _non_finite(error):
            if not bool(probe.unstable().any()):
                raise error
            _note_unbounded(notes, order)
        # Fast mode's projections carry a nan that no entry of the Jacobian has (0 * inf where a
        # zero weight meets an infinite derivative), or the mismatch may sit where the derivative
        # is not bounded (a cube root at 1e-322): the entries, one by one, decide.
        strict(fn, leaves, probe, notes, order=order)
        return
    judge(probe, rows, _clean(fn, leaves, probe, rows, jacobian_rows(fn, leaves, rows, probe)), order=order)
    describe(probe, notes, order=order)
    if _attempt(run, _held(fn, probe.mask(probe.smooth), base), fn, leaves, notes) is not None:
        # gradcheck's projections mix in the held elements' derivatives (0 * nan is nan): judge the
        # smooth elements one by one instead, as slow-mode gradcheck would
        strict(fn, leaves, probe, notes, order=order)


def differentiable_outputs(fn: Fn, inputs: Sequence[torch.Tensor], notes: list[str]) -> tuple[Fn, Tensors]:
    """``fn`` with only the outputs that require grad when its inputs do: those a Function marks
    ``ctx.mark_non_differentiable`` (roma's Procrustes returns four, two of them so) have no
    gradient to check, as torch's own gradcheck leaves them out. Noted. With it, its outputs at
    ``inputs``, detached: the call that tells which outputs live gives them (one call of the first
    derivative fewer per gradcheck of it; a Function's forward runs without grad either way)."""
    leaves = tuple(x.detach().requires_grad_() for x in inputs)
    with torch.enable_grad():
        outs = fn(*leaves)
    live = [j for j, o in enumerate(outs) if o.requires_grad]
    base = tuple(o.detach() for o in outs)
    if len(live) == len(outs) or not live:
        return fn, base
    dead = ", ".join(str(j) for j in range(len(outs)) if j not in live)
    note = f"output(s) {dead} are not differentiable (the op marks them so): their gradient is not checked"
    if note not in notes:
        notes.append(note)

    def call(*xs: torch.Tensor) -> Tensors:
        outs = fn(*xs)
        return tuple(outs[j] for j in live)

    return call, tuple(base[j] for j in live)


def _attempt(
    run: Callable[[Fn], None], f: Fn, fn: Fn, xs: Tensors, notes: list[str]
) -> GradcheckError | None:
    """gradcheck of ``f``: None if it passes, its error if it reports a Jacobian mismatch (raised
    otherwise). Two torch quirks are set right: gradcheck that crashes wording a mismatch in an
    empty block (a mismatch), and a "backward not multiplied by grad_output" that is only nan, 0 *
    inf where a zero grad_output meets an infinite derivative (nothing to hold against the op)."""
    try:
        run(f)
    except GradcheckError as exc:
        if "Jacobian mismatch" in str(exc):
            return exc
        if "not multiplied by grad_output" in str(exc) and _zero_or_non_finite(fn, xs):
            notes.append(
                "the backward gives nan for a zero grad_output where a derivative is infinite (0 * inf): "
                "not held against it"
            )
            return None
        raise
    except RuntimeError as exc:
        if "numel() == 0" not in str(exc):
            raise
        return GradcheckError(f"Jacobian mismatch (gradcheck failed to word it: {exc}), analytical: nan")
    return None


def _non_finite(error: GradcheckError) -> bool:
    text = str(error)
    return "nan" in text or "inf" in text


def _zero_or_non_finite(fn: Fn, xs: Tensors) -> bool:
    """Whether the backward of ``fn`` at ``xs`` for zero grad_outputs gives zeros, but for some nan
    or infinite elements, each in a column where the derivative is not bounded (0 * inf): a nan
    that is not (``sqrt(0 * x)``'s inside the backward) is the op's own."""
    leaves = tuple(x.detach().clone().requires_grad_() for x in xs)
    with torch.enable_grad():
        outs = [o for o in fn(*leaves) if o.requires_grad]
        if not outs:
            return False
        grads = torch.autograd.grad(outs, leaves, [torch.zeros_like(o) for o in outs], allow_unused=True)
    found = [g for g in grads if g is not None]
    if not all(bool(((g == 0) | ~g.isfinite()).all()) for g in found) or not any(
        bool((~g.isfinite()).any()) for g in found
    ):
        return False
    bad = ~_onesided.flat([torch.zeros_like(x) if g is None else g for x, g in zip(leaves, grads)]).isfinite()
    probe = Probe(fn, leaves, diagonal=False, most=len(bad))
    return bool(probe.unstable().any(0)[bad].all())


def _clean(fn: Fn, xs: Tensors, probe: Probe, rows: torch.Tensor, jac: torch.Tensor) -> torch.Tensor:
    """Jacobian rows whose entries are not finite only because the backward that computed them
    multiplied a zero grad_output by another element's infinite derivative (0 * inf, IEEE's nan, as
    torch's own ops do: a broadcast input's gradient sums over every output element) set to the
    central differences there: not held against the op. Such an entry sits in a column where the
    other rows' derivative is not finite, and where finite differences show a derivative that is
    not bounded (a nan of the backward's own, 0 * inf inside it, is in neither); a diagonal op's
    rows share no column."""
    if probe.diagonal or probe.coordinates < probe.n or bool(jac.isfinite().all()):
        return jac
    others = torch.ones(probe.m, dtype=torch.bool)
    others[rows] = False
    weights = torch.rand(probe.m, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 1
    reached = ~_vjp_flat(fn, xs, weights * others, probe).isfinite() & probe.unstable().any(0)
    central = probe.central(rows)
    return torch.where(~jac.isfinite() & reached[None] & central.isfinite(), central, jac)


def _vjp_flat(fn: Fn, xs: Tensors, weights: torch.Tensor, probe: Probe) -> torch.Tensor:
    """The backward of ``fn`` at ``xs`` for flat weights over its output elements, flat."""
    leaves = tuple(x.detach().clone().requires_grad_() for x in xs)
    with torch.enable_grad():
        outs = fn(*leaves)
        ws = [w.to(o) for o, w in zip(outs, probe.mask(weights))]
        return flat_vjp(outs, leaves, ws, probe.n)


def _held(fn: Fn, keep: Sequence[torch.Tensor], base: Tensors) -> Fn:
    """``fn`` with its outputs held at ``base`` where ``keep`` is False (their derivative then is 0,
    numerically and analytically)."""

    def call(*xs: torch.Tensor) -> Tensors:
        return tuple(torch.where(k.to(o.device), o, b) for o, k, b in zip(fn(*xs), keep, base))

    return call


def judge(
    probe: Probe, rows: torch.Tensor, jac: torch.Tensor, *, order: int = 1, subject: str | None = None
) -> None:
    """PropertyFailed unless the Jacobian rows ``jac`` of ``rows`` are valid generalised gradients
    of the probed function (see :meth:`Probe.violations`)."""
    bad = probe.violations(rows, jac)
    if bad is not None:
        message = violation_message(probe, bad, order, subject or subject_of(order))
        raise PropertyFailed(message, worst=violation_worst(probe, bad))


#: What strict notes where the derivative is not bounded within the step.
UNBOUNDED_NOTE = (
    "the derivative of {subject} is not bounded near some points (central differences grow as the step "
    "shrinks, as a cube root's at 0): not checked there"
)


def _note_unbounded(notes: list[str], order: int) -> None:
    note = UNBOUNDED_NOTE.format(subject=subject_of(order))
    if note not in notes:
        notes.append(note)


def strict(fn: Fn, xs: Tensors, probe: Probe, notes: list[str], *, order: int = 1) -> None:
    """Each smooth element's Jacobian row, from one backward each, against central differences
    along each coordinate, with gradcheck's tolerances; PropertyFailed at the worst that differs,
    a nan or infinite entry first (the one whose numerical value is largest). An entry where the
    derivative is not bounded (:meth:`Probe.unstable`) has nothing to be held to: noted."""
    whole = probe.coordinates == probe.n and not probe.diagonal
    full = probe if whole else Probe(fn, xs, diagonal=False, most=sum(x.numel() for x in xs))
    rows = full.smooth.nonzero().reshape(-1)
    if not len(rows):
        return
    analytic = _clean(fn, xs, full, rows, jacobian_rows(fn, xs, rows, full))
    numeric = full.central(rows)
    excess = (analytic - numeric).abs() - (ATOL + RTOL * numeric.abs())
    excess = excess.nan_to_num(nan=float("inf"))
    if not (excess > 0).any():
        return
    unbounded = full.unstable()[rows] & (excess > 0)
    if unbounded.any():
        _note_unbounded(notes, order)
        excess = torch.where(unbounded, -1.0, excess)
        if not (excess > 0).any():
            return
    non_finite = (excess > 0) & ~analytic.isfinite()
    pick = excess
    if non_finite.any():
        pick = torch.where(non_finite, numeric.abs().nan_to_num(0.0, 0.0, 0.0), -1.0)
    i, c = divmod(int(pick.reshape(-1).argmax()), excess.shape[1])
    r = int(rows[i])
    out, col = full.row(r), full.column(c)
    a, n = float(analytic[i, c]), float(numeric[i, c])
    message = (
        f"Jacobian mismatch for output {out.tensor} with respect to input {col.tensor}, at index "
        f"{list(col.index)} (output element {list(out.index)}): numerical {n:.9g}, analytical {a:.9g}"
    )
    raise PropertyFailed(message, worst=worst_at(full, r, c, numerical=n, analytic=a))


def first_derivative(fn: Fn, grads: Sequence[torch.Tensor]) -> Callable[..., Tensors]:
    """The function gradgradcheck checks: inputs -> the gradient of ``sum(fn(inputs)_j * grads_j)``
    with respect to each input (zeros where none), itself differentiable (the graph is kept).
    Inputs stacked along a new leading dimension (a Probe's steps through an elementwise op) give
    the gradient at each point of the stack: ``grads`` are repeated along it."""
    fn = outputs_of(fn)

    def first(*xs: torch.Tensor) -> Tensors:
        with torch.enable_grad():
            leaves = tuple(x if x.requires_grad else x.detach().requires_grad_() for x in xs)
            pairs = [
                (o, g if g.shape == o.shape else g.expand(o.shape))
                for o, g in zip(fn(*leaves), grads)
                if o.requires_grad
            ]
            got = torch.autograd.grad(
                [o for o, _ in pairs], leaves, [g for _, g in pairs], create_graph=True, allow_unused=True
            )
        return tuple(torch.zeros_like(x) if g is None else g for x, g in zip(leaves, got))

    return first


# -- the oracles: not held to their own choice at a kink --------------------------------------------


def smooth_rows(fn: Fn, xs: Sequence[torch.Tensor], notes: list[str], *, diagonal: bool) -> Tensors | None:
    """One boolean tensor per output of ``fn``: where it is smooth at ``xs``; None if it is smooth
    everywhere. An oracle compares only those elements' part of a gradient (grad_outputs zeroed at
    the others): where a function is not differentiable, two correct backwards may choose different
    generalised gradients (a tie split evenly by one, given to one input by the other). Noted."""
    probe = Probe(outputs_of(fn), tuple(x.detach().double() for x in xs), diagonal=diagonal)
    if bool(probe.smooth.all()):
        return None
    describe(probe, notes, oracle=True)
    return probe.mask(probe.smooth)


def reached(
    smooth: Tensors, gradients: Sequence[Callable[[Tensors], Sequence[torch.Tensor]]], like: Tensors
) -> list[torch.Tensor]:
    """Per input, the elements that the output elements left out (not ``smooth``) reach, by any of
    ``gradients`` (each: weights per output -> gradient per input): non-zero or not finite for
    random positive weights on those elements alone. There a backward may give nan (0 * nan) while
    the other does not, when the left-out elements' own derivatives are not finite."""
    gen = torch.Generator().manual_seed(0)
    weights = tuple(
        ((~s).double() * (1 + torch.rand(s.shape, generator=gen, dtype=torch.float64))).to(g)
        for g, s in zip(like, smooth)
    )
    out: list[torch.Tensor] | None = None
    for gradient in gradients:
        grads = [g.ne(0) | ~g.isfinite() for g in gradient(weights)]
        out = grads if out is None else [a | b for a, b in zip(out, grads)]
    return out or []


def unjudged(
    got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], reached: Sequence[torch.Tensor]
) -> tuple[Tensors, Tensors]:
    """``got`` and ``want`` with nan on both sides where the left-out elements reach and either is
    not finite: nothing to compare there (see :func:`reached`)."""
    got2, want2 = [], []
    for g, w, r in zip(got, want, reached):
        skip = r.to(g.device) & ~(g.isfinite() & w.isfinite())
        got2.append(torch.where(skip, torch.nan, g))
        want2.append(torch.where(skip, torch.nan, w))
    return tuple(got2), tuple(want2)
