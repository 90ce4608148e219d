"""The ``autograd`` property: the forward's own autograd as an oracle of the backward.

gradcheck's tolerance (rtol 1e-3 against central differences) is coarse: a float64 backward that
computes in float32 (8.8e-8 relative error) passes it. Where ``forward`` is built of differentiable
torch operations, autograd differentiates it exactly, and the hand-written backward is held to that
at float64 precision. Where it cannot (a forward that raises with grad enabled, that autograd
cannot differentiate, or whose own derivative is further from the function than the backward is),
a note says so and there is no oracle. The other checks that run the forward as an oracle use
:func:`_forward_outputs` too (the report's plots, the error samples).
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Sequence

import torch

from opzoo.core import _recording
from opzoo.exceptions import one_line
from opzoo.testing.checks import _kinks
from opzoo.testing.checks._bound import (
    Bound,
    PropertyFailed,
    Tensors,
    differentiable,
    grad_outputs,
    vjp,
)
from opzoo.testing.checks._budget import ORACLE_ATOL, ORACLE_RTOL
from opzoo.testing.checks._compare import where
from opzoo.testing.checks._reference import Named, in_lower_dtypes

#: Where autograd of the forward is not finite and the backward is (exp(-1/x) at x = 8.5e-162: exp's
#: 0 times the reciprocal's overflowing slope): the oracle's own overflow.
OVERFLOW = (
    "the forward's autograd derivative is not finite at some points where the backward is (its own "
    "overflow, 0 * inf): not held against the backward there (gradient judges it)"
)


# -- autograd of the forward --------------------------------------------------------------------


def autograd(op: Bound, *xs: torch.Tensor) -> None:
    """Where forward is built of differentiable torch operations, the hand-written backward equals
    autograd's derivative of forward itself, in float64, to about 1e-9 relative (far tighter than
    finite differences); and, for an op with no reference, in each lower dtype it declares within
    the dtype's error budget of that derivative in float64 (``_reference.in_lower_dtypes``)."""
    if all(x.numel() == 0 for x in xs):
        return
    leaves = tuple(x.detach().clone().requires_grad_() for x in xs)
    outs = _forward_outputs(op, leaves)
    if outs is None:
        return
    if not any(isinstance(o, torch.Tensor) and o.requires_grad for o in outs):
        op.notes.append("forward is not built of differentiable torch operations: no autograd oracle")
        return
    gs = grad_outputs(outs)
    both = _both(op, xs, leaves, outs)
    try:
        got, want = both(gs)
    except _Underivable as exc:
        op.notes.append(f"autograd cannot differentiate forward ({exc}): no autograd oracle")
        return
    # Relative to the gradient, and absolutely to 1e-11 of the grad_outputs' scale: a gradient that is
    # itself the rest of a cancellation (gelu_tanh's 1e-9 at x = -6, from 1 + tanh(u)) carries
    # float64 rounding of its O(1) terms, whichever way it is computed.
    g_scale = max((o.abs().max().item() for o in gs if o.numel()), default=1.0)
    overflows = any(bool((g.isfinite() & ~w.isfinite()).any()) for g, w in zip(got, want))
    if overflows and OVERFLOW not in op.notes:
        op.notes.append(OVERFLOW)
    bad = [_differ(g, w, g_scale) for g, w in zip(got, want)]
    unary = _kinks.diagonal(op, xs) and len(xs) == 1 and len(outs) == 1  # judged per element, below
    if (
        any(b.any() for b in bad)
        and not unary
        and _along_differences_forward_is_worse(op, xs, got, want, bad, gs)
    ):
        note = (
            "the forward's own autograd derivative disagrees with finite differences where it differs "
            "from the backward, which agrees with them (a forward that iterates, say): no autograd oracle"
        )
        if note not in op.notes:
            op.notes.append(note)
        return
    if any(b.any() for b in bad):
        got, want, bad = _off_the_kinks(op, xs, gs, both, g_scale) or (got, want, bad)
    _fail_where_they_differ(op, xs, gs, got, want, bad, unary)
    if op.spec.contract.reference is None and not op.random:  # a declared one is reference's to hold
        # the backward in each lower dtype against the forward's own autograd in float64, as a
        # declared reference (a backward right in float64 and off in float32 passed everything)
        try:
            in_lower_dtypes(op, xs, _own_forward, OWN)
        except _Underivable as exc:
            op.notes.append(f"{exc}: no autograd oracle in the lower dtypes")


#: How a failure names the forward's own autograd as the lower dtypes' oracle.
OWN = Named("the forward in float64", "the forward's own autograd", "the forward's own autograd")


def _own_forward(op: Bound) -> Callable[..., tuple[Any, ...]]:
    """The op's own forward, run outside ``apply`` for autograd to differentiate, as a reference."""

    def forward(*ts: torch.Tensor) -> tuple[Any, ...]:
        outs = _forward_outputs(op, ts)
        if outs is None:  # raises with grad enabled in this dtype only (noted)
            raise _Underivable("the forward raises with grad enabled in a lower dtype")
        return outs

    return forward


def _both(
    op: Bound, xs: Sequence[torch.Tensor], leaves: Tensors, outs: tuple[Any, ...]
) -> Callable[[Sequence[torch.Tensor]], tuple[Tensors, Tensors]]:
    """weights -> the backward's and autograd's gradient of sum(out_j * weights_j), over the outputs
    the op differentiates: autograd of the forward also reaches those the Function marks
    non-differentiable, whose derivative the backward rightly leaves out."""
    live = [i for i, (o, d) in enumerate(zip(outs, differentiable(op, xs))) if o.requires_grad and d]

    def both(weights: Sequence[torch.Tensor]) -> tuple[Tensors, Tensors]:
        try:
            want = torch.autograd.grad(
                [outs[j] for j in live],
                leaves,
                [weights[j] for j in live],
                retain_graph=True,
                allow_unused=True,
            )
        except RuntimeError as exc:  # forward works in place on what autograd saved (entmax's bisection)
            raise _Underivable(_gist(exc)) from exc
        want = tuple(torch.zeros_like(x) if w is None else w for x, w in zip(xs, want))
        return vjp(op, xs, weights)[1], want

    return both


def _off_the_kinks(
    op: Bound,
    xs: Sequence[torch.Tensor],
    gs: Tensors,
    both: Callable[[Sequence[torch.Tensor]], tuple[Tensors, Tensors]],
    g_scale: float,
) -> tuple[Tensors, Tensors, list[torch.Tensor]] | None:
    """Where the forward is not differentiable, the backward and autograd may each pick another
    valid generalised gradient (a tie split evenly, or given to one input): not held against each
    other there (gradient judges the backward). The gradients again with only the other output
    elements weighted, and where they differ; None where the forward is smooth."""
    fn = _kinks.outputs_of(op)
    smooth = _kinks.smooth_rows(fn, xs, op.notes, diagonal=_kinks.diagonal(op, xs))
    if smooth is None:
        return None
    kept = tuple(g * s.to(g.device) for g, s in zip(gs, smooth))
    got, want = both(kept)
    reach = _kinks.reached(smooth, [lambda w: both(w)[0], lambda w: both(w)[1]], gs)
    got, want = _kinks.unjudged(got, want, reach)
    return got, want, [_differ(g, w, g_scale) for g, w in zip(got, want)]


def _fail_where_they_differ(
    op: Bound,
    xs: Sequence[torch.Tensor],
    gs: Tensors,
    got: Sequence[torch.Tensor],
    want: Sequence[torch.Tensor],
    bad: Sequence[torch.Tensor],
    unary: bool,
) -> None:
    """PropertyFailed at the first input whose gradient differs from autograd's (``bad``); a unary
    elementwise op's elements where the forward's derivative is the less precise one are left out."""
    for i, (x, g, w, b) in enumerate(zip(xs, got, want, bad)):
        if unary and b.any():
            worse = _forward_is_worse(op, x.detach(), g / gs[0], w / gs[0]) & b
            if worse.any():
                op.notes.append(
                    "the forward's own autograd derivative is less precise than the backward, which "
                    "agrees with finite differences there: not held against the backward"
                )
                b = b & ~worse
        if not b.any():
            continue
        e = int(b.reshape(-1).nonzero()[0])
        gv, wv = g.reshape(-1)[e].item(), w.reshape(-1)[e].item()
        index = [int(c) for c in torch.unravel_index(torch.tensor(e), x.shape)] if x.dim() else []
        relative = abs(gv - wv) / max(abs(wv), 1e-300)
        # A small relative error is a precision problem; a large one is a wrong formula.
        hint = "a wrong formula?"
        if relative < 1e-3:
            hint = "is part of the backward computed in a lower precision?"
        raise PropertyFailed(
            f"backward differs from autograd of forward{where(i, len(xs), 'input')}: "
            f"{int(b.sum())} of {b.numel()} elements; first at index {index}: backward {gv!r}, "
            f"autograd {wv!r} (relative {relative:.2g}; float64 should agree to about 1e-9: {hint})",
            worst={"index": tuple(index), "x": x.reshape(-1)[e].item(), "analytic": gv, "autograd": wv},
        )


class _Underivable(Exception):
    """autograd.grad refused the forward's graph (the gist of why)."""


def _differ(g: torch.Tensor, w: torch.Tensor, g_scale: float) -> torch.Tensor:
    """Where the backward's ``g`` and autograd's ``w`` differ by more than float64 arithmetic in
    another order: relative to the gradient's largest finite element (a nan elsewhere widens
    nothing), and to 1e-11 of the grad_outputs' scale; nan matches nan, equal infinities match. A
    backward that is not finite where autograd is differs; the reverse is the oracle's overflow
    (:data:`OVERFLOW`), left out."""
    finite = w[w.isfinite()]
    scale = max(finite.abs().max().item() if finite.numel() else 0.0, 1e-280)
    allowed = ORACLE_RTOL * (w.abs() + scale) + ORACLE_ATOL * g_scale
    return ~((g - w).abs() <= allowed) & w.isfinite() & ~(g == w)


def _forward_outputs(op: Bound, leaves: Tensors) -> tuple[Any, ...] | None:
    """The outputs of the op's own ``forward``, run outside ``apply`` with grad enabled on
    ``leaves``: called as is in the setup_context form, with a recording context in the classic
    form, ``forward(ctx, ...)``. Forward gets clones of the leaves, so that one that writes into its
    input (a tabnet sparsemax's ``input -= max``) is differentiated through the write. Where
    forward raises with grad enabled only (``.numpy()`` of a tensor that requires grad), there are
    no outputs to differentiate: a note, and None."""
    target, plan = op.spec.target, op.spec.arguments
    assert plan is not None
    if _recording.classic(target):

        def forward(*ts: torch.Tensor) -> Any:
            return _recording.run(target.forward, plan(ts, op.params))[0]

    else:

        def forward(*ts: torch.Tensor) -> Any:
            return target.forward(*plan(ts, op.params))

    call = op.calling(forward)
    try:
        with torch.enable_grad():
            out = call(*(t.clone() for t in leaves))
    except Exception as exc:
        with torch.no_grad():
            call(*(t.detach().clone() for t in leaves))  # raises too: the forward's own failure
        op.notes.append(f"forward raises with grad enabled ({_gist(exc)}): no autograd oracle")
        return None
    return out if isinstance(out, tuple) else (out,)


def _gist(exc: BaseException) -> str:
    """torch's error in one line, without the shapes and counts that make it differ per example (a
    note is shown once per distinct text) and without its debugging hint."""
    text = re.sub(r"\b\d+\b", "#", one_line(exc).split(" Hint:")[0])
    while True:
        shorter = re.sub(r"\[[^\[\]]*\]", "[...]", text)
        if shorter == text:
            return text
        text = shorter


def _forward_is_worse(
    op: Bound, x: torch.Tensor, backward: torch.Tensor, oracle: torch.Tensor
) -> torch.Tensor:
    """A third opinion, per element of an elementwise op: a Richardson-extrapolated central
    difference (error O(h^4)). True where the backward is clearly closer to it than the forward's
    autograd derivative is."""
    # well inside the kink margin (1e-3) the inputs keep from declared kinks; rounding ~ eps / h
    h = 1e-4 * x.abs().clamp(min=1.0)

    def central(step: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return (op(x + step) - op(x - step)) / (2 * step)

    fd = (4 * central(h / 2) - central(h)) / 3
    return (backward - fd).abs() * 10 < (oracle - fd).abs()


def _along_differences_forward_is_worse(
    op: Bound,
    xs: Sequence[torch.Tensor],
    got: Sequence[torch.Tensor],
    want: Sequence[torch.Tensor],
    bad: Sequence[torch.Tensor],
    weights: Sequence[torch.Tensor],
) -> bool:
    """A third opinion for an op that is not unary elementwise: along u, the difference of the two
    gradients where they differ, a Richardson-extrapolated central difference of sum(out_j * w_j).
    True where the backward's directional derivative is clearly closer to it than the forward's
    autograd's (a forward that bisects for a threshold whose bounds follow max(x): autograd
    differentiates the algorithm, not the function it computes to 1e-15)."""
    us = [torch.where(b & g.isfinite() & w.isfinite(), g - w, 0.0) for g, w, b in zip(got, want, bad)]
    size = max((float(u.abs().max()) for u in us if u.numel()), default=0.0)
    if size == 0.0:
        return False
    reach = max((float(x.abs().max()) for x in xs if x.numel()), default=0.0)
    t = 1e-4 * max(1.0, reach) / size  # the largest step 1e-4 of the inputs' scale

    def s(step: float) -> float:
        with torch.no_grad():
            outs = op.outputs(*(x + step * u.to(x) for x, u in zip(xs, us)))
        return sum(float((o.double() * w.double()).sum()) for o, w in zip(outs, weights))

    def central(step: float) -> float:
        return (s(step) - s(-step)) / (2 * step)

    fd = (4 * central(t / 2) - central(t)) / 3
    if not math.isfinite(fd):
        return False
    along_got = sum(float((g * u).sum()) for g, u in zip(got, us))
    along_want = sum(float((w * u).sum()) for w, u in zip(want, us))
    return abs(along_got - fd) * 10 < abs(along_want - fd)
