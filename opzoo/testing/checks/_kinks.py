"""Kinks: where an op is not differentiable, a backward held to the valid generalised gradients, and
the ``kinks`` check of the kinks an op declares.

Finite differences that straddle a kink measure no derivative, so gradcheck fails a correct op there
(the tutorial's MyReLU at x = 0: "numerical 0.5, analytical 1.0"; a max of two equal values; a norm at
0). Where gradcheck (or gradgradcheck) reports a Jacobian mismatch, each output element is classified
from one-sided differences (``_onesided``): at a kink, the op's gradient must be a valid generalised
gradient (between the one-sided derivatives along each coordinate and each probed direction; 5 at a
ReLU's 0 is not, nor (1, 1) at a tie of max(x, y)), and is noted; at a jump, or where the function is
not finite, there is nothing to check; every other element is held to gradcheck as before (the
check runs again with the elements it cannot judge fixed at their values). The oracles (the forward's
autograd, the reference, the jvp) are not held to their own choice of subgradient at such elements
either: :func:`smooth_weights`. Declared kinks keep pinning their exact value: the ``kinks``
property, at the end of this module.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch
from torch.autograd.gradcheck import GradcheckError

from opzoo.testing.checks import _onesided
from opzoo.testing.checks._bound import Bound, PropertyFailed, Tensors, vjp
from opzoo.testing.checks._onesided import ATOL, RTOL, Probe, Violation, jacobian_rows

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
    fn = differentiable_outputs(outputs_of(fn), inputs, notes)
    leaves = tuple(x.detach() for x in inputs)
    with torch.no_grad():
        base = tuple(o.detach() for o in fn(*leaves))
    finite = tuple(o.isfinite() for o in base)
    if not any(bool(f.any()) for f in finite):
        # nan or infinite everywhere (the first derivative of a variance of one element): nothing
        # to check, and finite differences of it would only be slow
        notes.append(_note(_onesided.UNDEFINED, subject_of(order), False))
        return
    everywhere = all(bool(f.all()) for f in finite)
    error = _attempt(run, fn if everywhere else _held(fn, finite, base), fn, leaves, notes)
    if error is None:
        if not everywhere:
            notes.append(_note(_onesided.UNDEFINED, subject_of(order), False))
        return
    probe = Probe(fn, leaves, diagonal=diagonal)
    rows = (~probe.smooth).nonzero().reshape(-1)
    if not len(rows):
        if not _non_finite(error):
            raise error
        # Fast mode's projections carry a nan that no entry of the Jacobian has (0 * inf where a
        # zero weight meets an infinite derivative): the entries, one by one, decide.
        strict(fn, leaves, probe, order=order)
        return
    judge(probe, rows, _clean(fn, leaves, probe, rows, jacobian_rows(fn, leaves, rows, probe)), order=order)
    describe(probe, notes, order=order)
    if _attempt(run, _held(fn, probe.mask(probe.smooth), base), fn, leaves, notes) is not None:
        # gradcheck's projections mix in the held elements' derivatives (0 * nan is nan): judge the
        # smooth elements one by one instead, as slow-mode gradcheck would
        strict(fn, leaves, probe, order=order)


def differentiable_outputs(fn: Fn, inputs: Sequence[torch.Tensor], notes: list[str]) -> Fn:
    """``fn`` with only the outputs that require grad when its inputs do: those a Function marks
    ``ctx.mark_non_differentiable`` (roma's Procrustes returns four, two of them so) have no
    gradient to check, as torch's own gradcheck leaves them out. Noted."""
    leaves = tuple(x.detach().requires_grad_() for x in inputs)
    with torch.enable_grad():
        outs = fn(*leaves)
    live = [j for j, o in enumerate(outs) if o.requires_grad]
    if len(live) == len(outs) or not live:
        return fn
    dead = ", ".join(str(j) for j in range(len(outs)) if j not in live)
    note = f"output(s) {dead} are not differentiable (the op marks them so): their gradient is not checked"
    if note not in notes:
        notes.append(note)

    def call(*xs: torch.Tensor) -> Tensors:
        outs = fn(*xs)
        return tuple(outs[j] for j in live)

    return call


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
    or infinite elements."""
    leaves = tuple(x.detach().clone().requires_grad_() for x in xs)
    with torch.enable_grad():
        outs = [o for o in fn(*leaves) if o.requires_grad]
        if not outs:
            return False
        grads = torch.autograd.grad(outs, leaves, [torch.zeros_like(o) for o in outs], allow_unused=True)
    found = [g for g in grads if g is not None]
    return all(bool(((g == 0) | ~g.isfinite()).all()) for g in found) and any(
        bool((~g.isfinite()).any()) for g in found
    )


def _clean(fn: Fn, xs: Tensors, probe: Probe, rows: torch.Tensor, jac: torch.Tensor) -> torch.Tensor:
    """Jacobian rows whose entries are not finite only because the backward that computed them
    multiplied a zero grad_output by another element's infinite derivative (0 * inf, IEEE's nan, as
    torch's own ops do: a broadcast input's gradient sums over every output element) set to the
    central differences there: not held against the op. Such an entry sits in a column where the
    other rows' derivative is not finite; a diagonal op's rows share no column."""
    if probe.diagonal or probe.coordinates < probe.n or bool(jac.isfinite().all()):
        return jac
    others = torch.ones(probe.m, dtype=torch.bool)
    others[rows] = False
    weights = torch.rand(probe.m, generator=torch.Generator().manual_seed(0), dtype=torch.float64) + 1
    reached = ~_vjp_flat(fn, xs, weights * others, probe).isfinite()
    central = probe.central(rows)
    return torch.where(~jac.isfinite() & reached[None] & central.isfinite(), central, jac)


def _vjp_flat(fn: Fn, xs: Tensors, weights: torch.Tensor, probe: Probe) -> torch.Tensor:
    """The backward of ``fn`` at ``xs`` for flat weights over its output elements, flat."""
    leaves = tuple(x.detach().clone().requires_grad_() for x in xs)
    with torch.enable_grad():
        outs = fn(*leaves)
        ws = probe.mask(weights)
        pairs = [(o, w.to(o)) for o, w in zip(outs, ws) if o.requires_grad]
        if not pairs:
            return torch.zeros(probe.n, dtype=torch.float64)
        grads = torch.autograd.grad([o for o, _ in pairs], leaves, [w for _, w in pairs], allow_unused=True)
    return _onesided.flat([torch.zeros_like(x) if g is None else g for x, g in zip(leaves, grads)])


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
        message = _violation_message(probe, bad, order, subject or subject_of(order))
        raise PropertyFailed(message, worst=_violation_worst(probe, bad))


def strict(fn: Fn, xs: Tensors, probe: Probe, *, order: int = 1) -> None:
    """Each smooth element's Jacobian row, from one backward each, against central differences
    along each coordinate, with gradcheck's tolerances; PropertyFailed at the worst that differs."""
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
    i, c = divmod(int(excess.reshape(-1).argmax()), excess.shape[1])
    r = int(rows[i])
    out, col = full.row(r), full.column(c)
    a, n = float(analytic[i, c]), float(numeric[i, c])
    message = (
        f"Jacobian mismatch for output {out.tensor} with respect to input {col.tensor}, at index "
        f"{list(col.index)} (output element {list(out.index)}): numerical {n:.9g}, analytical {a:.9g}"
    )
    raise PropertyFailed(message, worst=_worst(full, r, c, numerical=n, analytic=a))


def first_derivative(fn: Fn, grads: Sequence[torch.Tensor]) -> Callable[..., Tensors]:
    """The function gradgradcheck checks: inputs -> the gradient of ``sum(fn(inputs)_j * grads_j)``
    with respect to each input (zeros where none), itself differentiable (the graph is kept)."""
    fn = outputs_of(fn)

    def first(*xs: torch.Tensor) -> Tensors:
        with torch.enable_grad():
            leaves = tuple(x if x.requires_grad else x.detach().requires_grad_() for x in xs)
            pairs = [(o, g) for o, g in zip(fn(*leaves), grads) if o.requires_grad]
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


# -- words --------------------------------------------------------------------------------------


def subject_of(order: int) -> str:
    """What a check of ``order`` differentiates: the op, or (double backward) its first derivative."""
    return "the op" if order == 1 else "the first derivative"


def _what(subject: str, j: int | None = None, n: int = 1) -> str:
    """``subject``, and which of its outputs where it has several."""
    if j is None or n == 1:
        return subject
    return f"{subject} (output {j})" if subject != "the op" else f"the op's output {j}"


def describe(
    probe: Probe, notes: list[str], *, order: int = 1, oracle: bool = False, subject: str | None = None
) -> None:
    """A note per kind of element that is not smooth (without the example's values, so that the
    same kind met in many examples is one note; a unary elementwise op's kinks by where they are)."""
    kinds = probe.kind
    subject = subject or subject_of(order)
    n_out = len(probe.out_shapes)
    one = probe.diagonal and len(probe.xs) == 1 and n_out == 1
    for kind in (_onesided.CONVEX, _onesided.CONCAVE):
        rows = (kinds == kind).nonzero().reshape(-1)
        if one and order == 1 and not oracle and subject == "the op":
            for r in rows[:3].tolist():
                x = round(probe.value(r), 3) + 0.0
                sides = [round(float(v[r, 0]), 6) + 0.0 for v in (probe.down, probe.up)]
                notes.append(
                    f"undeclared kink near x = {x:g} (one-sided derivatives {sides[0]:.4g} and "
                    f"{sides[1]:.4g}): its gradient lies between them; declare kinks= to pin its value"
                )
            continue
        for j in sorted({probe.row(r).tensor for r in rows.tolist()}):
            notes.append(_note(kind, _what(subject, j, n_out), oracle))
    for kind in (_onesided.MIXED, _onesided.JUMPS, _onesided.UNBOUNDED, _onesided.UNDEFINED):
        rows = (kinds == kind).nonzero().reshape(-1)
        if one and kind == _onesided.JUMPS and order == 2 and subject == "the first derivative":
            for r in rows[:3].tolist():
                x = round(probe.value(r), 3) + 0.0
                notes.append(
                    f"undeclared kink near x = {x:g}: its second derivative is not checked there (the "
                    "first derivative jumps); declare kinks= to skip it"
                )
            continue
        for j in sorted({probe.row(r).tensor for r in rows.tolist()}):
            notes.append(_note(kind, _what(subject, j, n_out), oracle))


def _note(kind: int, what: str, oracle: bool) -> str:
    if oracle:
        return (
            f"{what} is not differentiable at some points ({_onesided.KINDS[kind]}): the backward is "
            "not held to the oracle's choice of generalised gradient there (gradient judges it)"
        )
    return {
        _onesided.CONVEX: f"{what} has kinks or ties (one-sided derivatives differ): its gradient there "
        "lies between them along each coordinate and direction probed, as a valid generalised gradient",
        _onesided.CONCAVE: f"{what} has kinks or ties (one-sided derivatives differ): its gradient there "
        "lies between them along each coordinate and direction probed, as a valid generalised gradient",
        _onesided.MIXED: f"{what} has kinks where more than two pieces meet (a tie of three, say): its "
        "gradient there is only required to be finite",
        _onesided.JUMPS: f"{what} jumps at some points: no derivative there, nothing to check",
        _onesided.UNBOUNDED: f"{what} is not finite near some points: nothing to check there",
        _onesided.UNDEFINED: f"{what} is not finite (nan or inf) at some points: nothing to check there",
    }[kind]


def _worst(probe: Probe, r: int, c: int, **values: float) -> dict[str, Any]:
    out, col = probe.row(r), probe.column(c)
    worst: dict[str, Any] = {"input": col.tensor, "output": out.tensor, "index": col.index}
    worst["x"] = probe.value(c)
    worst |= values
    if len(probe.xs) == 1 and len(probe.out_shapes) == 1:
        del worst["input"], worst["output"]
    return worst


def _violation_worst(probe: Probe, v: Violation) -> dict[str, Any]:
    return _worst(probe, v.row, v.column, left=v.left, right=v.right, analytic=v.got)


def _violation_message(probe: Probe, v: Violation, order: int, subject: str) -> str:
    out, col = probe.row(v.row), probe.column(v.column)
    n_in, n_out = len(probe.xs), len(probe.out_shapes)
    one = probe.diagonal and n_in == 1 and n_out == 1
    gradient = "gradient" if order == 1 else "second derivative"
    sides = f"the one-sided derivatives {v.left:.9g} and {v.right:.9g}"
    if one and v.direction is None:
        kink = "an undeclared kink" if order == 1 else "an undeclared kink of the first derivative"
        return (
            f"at x = {probe.value(v.column):.9g}, {kink}, the {gradient} is {v.got:.9g}: not between "
            f"{sides}, so no valid subgradient"
        )
    element = f" (element {list(out.index)})" if out.index else ""
    here = f"{_what(subject, out.tensor, n_out)}{element}"
    of = f" with respect to input {col.tensor}" if n_in > 1 else ""
    if v.direction is None and v.left != v.left:  # nan: a mixed kink's non-finite gradient
        return (
            f"{here} has a kink of several pieces here, and its {gradient}{of} at index "
            f"{list(col.index)} is not finite: no valid subgradient"
        )
    if v.direction is None and abs(v.right - v.left) <= _onesided.TOL * (1 + max(abs(v.left), abs(v.right))):
        # not differentiable here, but along this input it is: a plain mismatch, as gradcheck says it
        return (
            f"Jacobian mismatch for output {out.tensor} with respect to input {col.tensor}, at index "
            f"{list(col.index)}{element.replace('element', 'output element')}: numerical "
            f"{(v.left + v.right) / 2:.9g}, analytical {v.got:.9g} ({here} has a kink or tie here, but "
            "not along this input)"
        )
    if v.direction is None:
        return (
            f"{here} is not differentiable here (a tie or a kink: its one-sided derivatives differ), and "
            f"its {gradient}{of} at index {list(col.index)} is {v.got:.9g}: not between {sides}, so no "
            "valid subgradient"
        )
    along = (
        "the all-ones direction (every input element moved together)"
        if v.direction == probe.coordinates
        else f"random direction {v.direction - probe.coordinates}"
    )
    return (
        f"{here} is not differentiable here (a tie or a kink), and its {gradient} is no valid "
        f"generalised gradient: along {along} it gives the directional derivative {v.got:.9g}, not "
        f"between {sides} along that direction, so no valid subgradient (at a tie, the gradients of "
        "the tied inputs must add up to the slope along their common direction)"
    )


# -- the declared kinks -------------------------------------------------------------------------


def kinks(op: Bound, x: torch.Tensor) -> None:
    """At each declared kink, the gradient equals the declared subgradient (elementwise ops)."""
    declared = op.spec.contract.kinks_at(op.params)
    points = torch.tensor(list(declared), dtype=torch.float64, device=x.device)
    want = torch.tensor(list(declared.values()), dtype=torch.float64, device=x.device)
    _, (got,) = vjp(op, (points,), (torch.ones_like(points),))
    ok = torch.isclose(got, want, rtol=1e-9, atol=1e-12)
    if bool(ok.all()):
        return
    # A threshold kept in a lower precision (a float32 0.1 is 0.100000001490116...) puts the op's kink
    # a rounding away from the declared point, which float64 resolves: the declared gradient is then
    # the op's at the declared point rounded to that precision. (Not where the op's gradient changes
    # within a float64 step of the declared point: there the declared point is the op's kink, and one
    # side of every kink has the declared value, which would make the check say nothing.)
    nearby = [(name, points.to(getattr(torch, name)).double()) for name in op.spec.contract.dtypes]
    for name, there in nearby:
        if bool(ok.all()):
            break
        if torch.equal(there, points):
            continue
        _, (got_there,) = vjp(op, (there,), (torch.ones_like(there),))
        # ... only where the declared point is not the op's kink itself: the op's gradient a float64
        # step towards the rounded point is still its gradient at the declared point
        step = torch.nextafter(points, there)
        _, (got_step,) = vjp(op, (step,), (torch.ones_like(step),))
        fits = ~ok & torch.isclose(got_there, want, rtol=1e-9, atol=1e-12) & (got_step == got)
        for i in fits.nonzero().reshape(-1).tolist():
            op.notes.append(
                f"the kink declared at {points[i].item():g} is where the op's gradient takes the declared "
                f"value in {name} ({there[i].item():.17g}): checked there"
            )
        ok |= fits
    if bool(ok.all()):
        return
    i = int((~ok).nonzero()[0])
    raise PropertyFailed(
        f"at the kink x = {points[i].item():g} the gradient is {got[i].item():g}, "
        f"but the op declares {want[i].item():g}",
        worst={
            "index": (i,),
            "x": points[i].item(),
            "declared": want[i].item(),
            "analytic": got[i].item(),
        },
    )
