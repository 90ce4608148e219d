"""A surrogate op's second derivative against its declared surrogate's (the ``double_backward``
property of an op that declares ``Contract(surrogate=...)``): with respect to the inputs and to
grad_output, with contiguous and non-contiguous grad_outputs, in float64; where the surrogate's
own derivative is not differentiable, held to its one-sided derivatives instead.
"""

from __future__ import annotations

from typing import Any

import torch

from opzoo.exceptions import one_line
from opzoo.testing.checks import _kinks
from opzoo.testing.checks._backward_rows import jacobian_rows
from opzoo.testing.checks._bound import (
    Bound,
    PropertyFailed,
    PropertySkipped,
    Tensors,
    grad_outputs,
    noncontiguous,
    once_differentiable,
    ramp,
)
from opzoo.testing.checks._compare import TOLERANCES, where
from opzoo.testing.checks._kink_words import describe
from opzoo.testing.checks._onesided import Probe
from opzoo.testing.checks._surrogate import mismatch, surrogate_failure, surrogate_outputs


def surrogate_double_backward(op: Bound, *xs: torch.Tensor) -> None:
    """Second derivatives that come back are the declared surrogate's: with respect to the inputs
    and to grad_output, with contiguous and non-contiguous grad_outputs, in float64. A backward that
    raises (or is once_differentiable) is a skip unless double_backward=True is declared; a
    surrogate with no second derivative of its own is a skip."""
    if all(x.numel() == 0 for x in xs):
        return
    declared = op.spec.contract.double_backward
    outs0 = op.outputs(*xs)
    for layout in ("contiguous", "non-contiguous"):
        gs = grad_outputs(outs0)
        if layout == "non-contiguous":
            gs = tuple(noncontiguous(g) for g in gs)
            if all(g.is_contiguous() for g in gs):
                continue
        try:
            got = _second(lambda *leaves: op.outputs(*leaves), xs, gs)
        except RuntimeError as exc:
            if declared:
                raise PropertyFailed(f"double_backward=True is declared, but: {one_line(exc)}") from None
            raise PropertySkipped(f"no second derivative ({one_line(exc, with_type=False)})") from None
        try:
            want = _second(lambda *leaves: surrogate_outputs(op, leaves, len(gs)), xs, gs)
        except RuntimeError as exc:
            raise PropertySkipped(
                f"the declared surrogate has no second derivative ({one_line(exc, with_type=False)})"
            ) from None
        if any(mismatch(g, w, TOLERANCES[torch.float64]) is not None for g, w in zip(got, want)):
            # Where the surrogate's derivative is not differentiable (the peak of a triangular
            # surrogate gradient, the ends of a rectangular one), its autograd second derivative is
            # one choice, or none: the op's is judged against the one-sided derivatives there, and
            # the rest compared as before.
            keep = _first_derivative_kinks(op, xs, gs)
            if keep is not None:
                got = _second(lambda *leaves: op.outputs(*leaves), xs, gs, keep)
                want = _second(lambda *leaves: surrogate_outputs(op, leaves, len(gs)), xs, gs, keep)
        names = [f"input{where(i, len(xs), '')}" for i in range(len(xs))]
        names += [f"grad_output{where(j, len(gs), '')}" for j in range(len(gs))]
        for k, (g, w, name) in enumerate(zip(got, want, names)):
            bad = mismatch(g, w, TOLERANCES[torch.float64])
            if bad is None:
                continue
            x = xs[min(k, len(xs) - 1)]  # shown where its shape matches the element's
            hint = (
                ""
                if declared
                else " (a backward that is not differentiable should be decorated with "
                "torch.autograd.function.once_differentiable, so that asking is an error)"
            )
            raise surrogate_failure(
                f"second derivative with respect to the {name} differs from the declared surrogate's, "
                f"with {layout} grad_output",
                bad,
                g,
                w,
                x,
                hint,
                of="second derivative",
            )


def _first_derivative_kinks(op: Bound, xs: Tensors, gs: Tensors) -> Tensors | None:
    """Where the surrogate's first derivative (with grad_outputs ``gs``) is smooth at ``xs``, one
    boolean tensor per input (None: everywhere); where it is not, the op's second derivative is held
    to its one-sided derivatives (PropertyFailed if it is no valid generalised gradient), noted."""
    x64 = tuple(x.detach().double() for x in xs)
    g64 = tuple(g.detach().double() for g in gs)
    surrogate = _kinks.first_derivative(lambda *ts: surrogate_outputs(op, ts, len(gs)), g64)
    probe = Probe(surrogate, x64, diagonal=_kinks.diagonal(op, xs))
    if bool(probe.smooth.all()):
        return None
    rows = (~probe.smooth).nonzero().reshape(-1)
    own = _kinks.first_derivative(lambda *ts: op.outputs(*ts), g64)
    try:
        _kinks.judge(
            probe, rows, jacobian_rows(own, x64, rows, probe), order=2, subject="the surrogate's derivative"
        )
    except PropertyFailed as exc:
        raise PropertyFailed(
            f"second derivative differs from the declared surrogate's where that is not differentiable: "
            f"{exc}",
            **exc.details,
        ) from None
    describe(probe, op.notes, order=2, subject="the surrogate's derivative")
    return probe.mask(probe.smooth)


def _second(fn: Any, xs: Tensors, gs: Tensors, keep: Tensors | None = None) -> Tensors:
    """d/d(x, g) of ``sum(first_i * v_i)``, where ``first = vjp(fn, x, g)``: one tensor per input
    and per grad_output (zeros where nothing depends on it), in float64. ``keep``: v is zero where
    it is False (elements of the first derivatives left out)."""
    leaves = tuple(x.detach().double().requires_grad_() for x in xs)
    g_leaves = tuple(g.detach().double().requires_grad_() for g in gs)
    outs = fn(*leaves)
    pairs = [(o, g) for o, g in zip(outs, g_leaves) if o.requires_grad]
    wrt = (*leaves, *g_leaves)
    if not pairs:
        return tuple(torch.zeros_like(t) for t in wrt)
    firsts = torch.autograd.grad(
        [o for o, _ in pairs], leaves, [g for _, g in pairs], create_graph=True, allow_unused=True
    )
    if once_differentiable(firsts):
        raise RuntimeError("the backward is marked once_differentiable")
    chosen = [
        (f, ramp(f.detach(), k + 1) * (1 if keep is None else keep[k].to(f)))
        for k, f in enumerate(firsts)
        if f is not None and f.requires_grad
    ]
    if not chosen:
        return tuple(torch.zeros_like(t) for t in wrt)
    seconds = torch.autograd.grad([f for f, _ in chosen], wrt, [v for _, v in chosen], allow_unused=True)
    return tuple(torch.zeros_like(t) if s is None else s.detach() for t, s in zip(wrt, seconds))
