"""Checks beyond finite differences: the forward's own autograd as an oracle, inputs of large
magnitude, and each input of an n-ary op asked for alone.

gradcheck's tolerance (rtol 1e-3 against central differences) is coarse: a float64 backward that
computes in float32 (8.8e-8 relative error) passes it. Where ``forward`` is built of differentiable
torch operations, autograd differentiates it exactly, and the hand-written backward is held to that
at float64 precision.
"""

from __future__ import annotations

import itertools
import math
import re
from typing import Any, Sequence

import torch

from opzoo.core import _recording
from opzoo.exceptions import one_line
from opzoo.testing.checks import _kinks, _onesided
from opzoo.testing.checks._bound import (
    Bound,
    PropertyFailed,
    Tensors,
    agree,
    differentiable,
    grad_outputs,
    rejects,
    vjp,
    where,
)
from opzoo.testing.checks._onesided import Probe

#: The oracle's tolerance: float64 arithmetic in another order, relative to the gradient's scale.
ORACLE_RTOL = 1e-9
ORACLE_ATOL = 1e-11
#: The magnitudes the extremes check scales an input to.
SCALES = (1e2, 1e4)


# -- autograd of the forward --------------------------------------------------------------------


def autograd(op: Bound, *xs: torch.Tensor) -> None:
    """Where forward is built of differentiable torch operations, the hand-written backward equals
    autograd's derivative of forward itself, in float64, to about 1e-9 relative (far tighter than
    finite differences)."""
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
    # the outputs the op differentiates: autograd of the forward also reaches those the Function
    # marks non-differentiable, whose derivative the backward rightly leaves out
    live = [i for i, (o, d) in enumerate(zip(outs, differentiable(op, xs))) if o.requires_grad and d]

    def both(weights: Sequence[torch.Tensor]) -> tuple[Tensors, Tensors]:
        """The backward's and autograd's gradient of sum(out_j * weights_j)."""
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

    try:
        got, want = both(gs)
    except _Underivable as exc:
        op.notes.append(f"autograd cannot differentiate forward ({exc}): no autograd oracle")
        return
    # Relative to the gradient, and absolutely to 1e-11 of the grad_outputs' scale: a gradient that is
    # itself the rest of a cancellation (gelu_tanh's 1e-9 at x = -6, from 1 + tanh(u)) carries
    # float64 rounding of its O(1) terms, whichever way it is computed.
    g_scale = max((o.abs().max().item() for o in gs if o.numel()), default=1.0)
    bad = [_differ(g, w, g_scale) for g, w in zip(got, want)]
    if (
        any(b.any() for b in bad)
        and not (_kinks.diagonal(op, xs) and len(xs) == 1 and len(outs) == 1)  # judged per element below
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
        # Where the forward is not differentiable, the backward and autograd may each pick another
        # valid generalised gradient (a tie split evenly, or given to one input): not held against
        # each other there (gradient judges the backward). Only the other output elements count.
        fn = _kinks.outputs_of(op)
        smooth = _kinks.smooth_rows(fn, xs, op.notes, diagonal=_kinks.diagonal(op, xs))
        if smooth is not None:
            kept = tuple(g * s.to(g.device) for g, s in zip(gs, smooth))
            got, want = both(kept)
            reach = _kinks.reached(smooth, [lambda w: both(w)[0], lambda w: both(w)[1]], gs)
            got, want = _kinks.unjudged(got, want, reach)
            bad = [_differ(g, w, g_scale) for g, w in zip(got, want)]
    one = _kinks.diagonal(op, xs) and len(xs) == 1 and len(outs) == 1
    for i, (x, g, w, b) in enumerate(zip(xs, got, want, bad)):
        if one and b.any():
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
    nothing), and to 1e-11 of the grad_outputs' scale; nan matches nan, equal infinities match."""
    finite = w[w.isfinite()]
    scale = max(finite.abs().max().item() if finite.numel() else 0.0, 1e-280)
    allowed = ORACLE_RTOL * (w.abs() + scale) + ORACLE_ATOL * g_scale
    return ~((g - w).abs() <= allowed) & (g.isfinite() | w.isfinite()) & ~(g == w)


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


# -- inputs of large magnitude -----------------------------------------------------------------------


def extremes(op: Bound, *xs: torch.Tensor) -> None:
    """At inputs scaled up to about 1e4 (inside the domain), in float64 and float32: wherever the
    forward is finite nearby, the backward is finite (a gradient that overflows to inf or nan where
    the true one is about 0 is a bug that no small input shows)."""
    low, high = op.spec.contract.domain
    dtypes = [d for d in ("float64", "float32") if d in op.spec.contract.dtypes]
    diagonal = _kinks.diagonal(op, xs)
    for scale, name in itertools.product(SCALES, dtypes):
        dtype = getattr(torch, name)
        big = tuple((x * scale).clamp(low, high).to(dtype) for x in xs)
        if op.spec.contract.sig.elementwise:
            inside = torch.ones(torch.broadcast_shapes(*(b.shape for b in big)), dtype=torch.bool)
            for b in big:
                inside = inside & (b > low) & (b < high)  # the open domain's ends dropped
            if diagonal:
                big = tuple(b[inside] for b in big)
        if all(b.numel() == 0 for b in big):
            continue
        op_d = op.cast(dtype)
        refused = rejects(op_d, big)
        if refused is not None:
            # a limit of the forward (a matrix that float32 rounds to singular), not of the backward:
            # left out, as every property leaves out an input the forward rejects
            op.notes.append(
                f"in {name}, the forward rejects the input scaled by {scale:g} "
                f"({one_line(refused, with_type=True)}): not checked there"
            )
            continue
        outs, grads = vjp(op_d, big)
        finite = _finite_nearby(op_d, big, outs, diagonal)
        wrong = [finite & ~g.isfinite() if diagonal else finite.all() & ~g.isfinite() for g in grads]
        if any(bool(w.any()) for w in wrong):
            # Finite at x and at a relative step either side, yet no derivative: a jump (atan2 at
            # the origin), or not finite at a small step that a relative one misses (log y at y = 0,
            # which 0 times 1.001 does not leave). Such elements are not held to a finite gradient.
            excused = _no_derivative(op, big, diagonal)
            wrong = [w & ~excused if diagonal else w & ~excused.any() for w in wrong]
        for i, (b, g, w) in enumerate(zip(big, grads, wrong)):
            if w.any():
                e = int(w.reshape(-1).nonzero()[0])
                raise PropertyFailed(
                    f"in {name}, at x = {b.reshape(-1)[e].item():.6g} (an input scaled by {scale:g}) the "
                    f"forward is finite but the gradient{where(i, len(big), 'of input')} is "
                    f"{g.reshape(-1)[e].item()}",
                    worst={"index": (e,), "x": b.reshape(-1)[e].item(), "analytic": g.reshape(-1)[e].item()},
                )


def _finite_nearby(op: Bound, xs: Tensors, outs: Tensors, diagonal: bool) -> torch.Tensor:
    """Where every output is finite at x and a relative step either side (for an elementwise op of
    inputs of one shape, per element; otherwise one flag): there the true derivative is finite too."""
    if diagonal:
        with torch.no_grad():
            ok = torch.ones_like(outs[0], dtype=torch.bool)
            for factor in (1.0, 1 + 1e-3, 1 - 1e-3):
                for o in _kinks.outputs_of(op)(*(x * factor for x in xs)) if factor != 1.0 else outs:
                    ok = ok & o.isfinite()
        return ok
    ok = torch.ones((), dtype=torch.bool)
    for o in outs:
        ok = ok & o.isfinite().all()
    return ok


def _no_derivative(op: Bound, xs: Tensors, diagonal: bool) -> torch.Tensor:
    """Where the forward jumps or is not finite within a small step, found in float64 (per element
    for a diagonal op, else one flag per output element)."""
    kinds = (_onesided.JUMPS, _onesided.UNBOUNDED, _onesided.UNDEFINED)
    probe = Probe(_kinks.outputs_of(op), tuple(x.double() for x in xs), diagonal=diagonal)
    none = torch.isin(probe.kind, torch.tensor(kinds))
    if none.any():
        op.notes.append(
            "large inputs where the forward jumps or is not finite within a small step: no "
            "finite gradient is asked for there"
        )
    if not diagonal:
        return none
    return none.reshape(-1, probe.elements).any(0).reshape(xs[0].shape).to(xs[0].device)


# -- each input alone -------------------------------------------------------------------------------


def subsets(op: Bound, *xs: torch.Tensor) -> None:
    """For an op of several inputs, every subset of them requiring grad gets the gradients that all
    requiring grad get (a backward that reads ``needs_input_grad`` at the wrong index does not), to
    within a few units in the last place: another path may sum in another order, or meet another
    BLAS kernel (2.339999999999998 against 2.339999999999999 on one CPU, equal on another)."""
    outs0, grads0 = vjp(op, xs)
    gs = grad_outputs(outs0)
    n = len(xs)
    terms: Tensors | None = None
    for size in range(1, n):
        for chosen in itertools.combinations(range(n), size):
            leaves = tuple(x.detach().clone().requires_grad_(i in chosen) for i, x in enumerate(xs))
            outs = op.outputs(*leaves)
            asked: Sequence[torch.Tensor] = [leaves[i] for i in chosen]
            got = torch.autograd.grad(outs, asked, gs, allow_unused=True)
            for i, g in zip(chosen, got):
                want = grads0[i]
                g = torch.zeros_like(want) if g is None else g
                ok = agree(g, want)
                if not bool(ok.all()):
                    terms = terms or _terms(op, xs, gs)
                    ok = agree(g, want, terms[i])
                if bool(ok.all()):
                    continue
                diff = torch.where(ok, 0.0, (g - want).abs().nan_to_num(math.inf))
                e = int(diff.reshape(-1).argmax())
                raise PropertyFailed(
                    f"with only input(s) {list(chosen)} requiring grad, the gradient of input {i} "
                    f"differs from the one computed with all inputs requiring grad (at flat index {e}: "
                    f"{g.reshape(-1)[e].item()!r} vs {want.reshape(-1)[e].item()!r}): does backward read "
                    "ctx.needs_input_grad at the right index?"
                )


def _terms(op: Bound, xs: Sequence[torch.Tensor], gs: Tensors) -> Tensors:
    """Per input element, the size of the terms its gradient sums (sum_r v_r J_rj): a backward with
    the grad_outputs' signs flipped at random gives sums of the same terms with other signs, about
    their root-sum-square each; the largest of a few, per element."""
    gen = torch.Generator().manual_seed(1)
    sizes = [torch.zeros_like(x) for x in xs]
    for _ in range(4):
        flips = tuple(g * (2 * torch.randint(0, 2, g.shape, generator=gen) - 1).to(g) for g in gs)
        _, grads = vjp(op, xs, flips)
        sizes = [torch.maximum(s, g.abs().nan_to_num(0.0, 0.0, 0.0)) for s, g in zip(sizes, grads)]
    return tuple(sizes)
