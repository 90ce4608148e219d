"""How a check words what it found where a function is not differentiable: the notes it leaves (one
per kind of element that is not smooth, without the example's values, so that the same kind met
in many examples is one note), and the failure where a gradient is no valid generalised gradient
there (its message, and the worst element for the report)."""

from __future__ import annotations

from typing import Any

from opzoo.testing.checks import _onesided
from opzoo.testing.checks._convexity import TOL
from opzoo.testing.checks._onesided import Probe, Violation


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
            notes.append(note_of(kind, _what(subject, j, n_out), oracle))
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
            notes.append(note_of(kind, _what(subject, j, n_out), oracle))


def note_of(kind: int, what: str, oracle: bool) -> str:
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


def worst_at(probe: Probe, r: int, c: int, **values: float) -> dict[str, Any]:
    out, col = probe.row(r), probe.column(c)
    worst: dict[str, Any] = {"input": col.tensor, "output": out.tensor, "index": col.index}
    worst["x"] = probe.value(c)
    worst |= values
    if len(probe.xs) == 1 and len(probe.out_shapes) == 1:
        del worst["input"], worst["output"]
    return worst


def violation_worst(probe: Probe, v: Violation) -> dict[str, Any]:
    return worst_at(probe, v.row, v.column, left=v.left, right=v.right, analytic=v.got)


def violation_message(probe: Probe, v: Violation, order: int, subject: str) -> str:
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
    if v.direction is None and abs(v.right - v.left) <= TOL * (1 + max(abs(v.left), abs(v.right))):
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
