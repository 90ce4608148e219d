"""The ``reference`` property: forward and gradient against the reference the op declares, in float64
and in each lower dtype it declares, where the gradient is held to that dtype's error budget
(``_budget``)."""

from __future__ import annotations

from typing import Callable, Mapping, NamedTuple, Sequence

import torch

from opzoo.exceptions import one_line
from opzoo.testing.checks import _budget, _kinks, _steps
from opzoo.testing.checks._bound import Bound, PropertyFailed, Tensors, grad, grad_outputs, vjp
from opzoo.testing.checks._compare import TOLERANCES, close, where
from opzoo.testing.checks._reseed import reseeded
from opzoo.testing.strategies import KINK_MARGIN

#: A function of an op's inputs that a check holds the op to, made for the op in a dtype.
Oracle = Callable[[Bound], Callable[..., object]]


class Named(NamedTuple):
    """How a failure or a note names an oracle: against its forward, its gradient, itself."""

    forward: str
    gradient: str
    itself: str


REFERENCE = Named("the reference", "the reference's", "the reference")


def reference(op: Bound, *xs: torch.Tensor) -> None:
    """Forward and gradient match the declared reference: in float64, and in each lower dtype the
    op declares against the float64 reference (at the rounded inputs), where the gradient may be off
    by the dtype's error budget (a multiple of its epsilon: ``_budget``), the forward by the dtype's
    tolerance, each plus twice what the reference itself is off by in that dtype. A surrogate op, or
    a by-design backward: the forward only (its gradient is not the reference's)."""
    kinks = op.spec.contract.kinks_at(op.params)
    for name in op.spec.contract.dtypes:
        _in_dtype(op, reference_of, kinks, name, xs)


def in_lower_dtypes(op: Bound, xs: Tensors, oracle: Oracle, named: Named) -> None:
    """The forward and gradient in each dtype below float64 the op declares, against ``oracle`` (a
    function of the op's inputs made for the op in a dtype) run in float64 at the rounded inputs, as
    ``reference`` holds them to a declared reference (``named``: how a failure names the oracle)."""
    kinks = op.spec.contract.kinks_at(op.params)
    for name in op.spec.contract.dtypes:
        if name != "float64":
            _in_dtype(op, oracle, kinks, name, xs, named)


def _in_dtype(
    op: Bound,
    oracle: Oracle,
    kinks: Mapping[float, float],
    name: str,
    xs: Tensors,
    named: Named = REFERENCE,
) -> None:
    """The forward, and (unless the op is a surrogate op) the gradient, in dtype ``name``, against
    ``oracle(op)`` (``reference_of``: the declared reference); the gradient away from the declared
    ``kinks``."""
    dtype = getattr(torch, name)
    lows = tuple(x.to(dtype) for x in xs)
    lop = op if dtype == torch.float64 else op.cast(dtype)
    if lop is op or op.module is not None:
        ref = ref_low = oracle(op)
    else:  # float constants in the dtype: the oracle takes them so (in float64, at their rounded values)
        ref, ref_low = oracle(lop.cast(torch.float64)), oracle(lop)
    outs, grads = vjp(lop, lows)
    gs = grad_outputs(outs)
    # a surrogate's or a by-design backward: not the reference's gradient (gradient checks it)
    surrogate = op.spec.contract.surrogate is not None or op.spec.contract.by_design is not None
    x64, g64 = tuple(x.double() for x in lows), [g.double() for g in gs]
    want, want_grads = _ref_vjp(ref, x64, g64, forward_only=surrogate)
    par = par_grads = (None,) * max(len(outs), len(xs))
    if dtype != torch.float64:
        par, par_grads = _ref_vjp(ref_low, lows, gs, forward_only=surrogate, notes=op.notes)
        par_grads = par_grads or (None,) * len(xs)
    x0 = lows[0] if len(lows) == 1 else None
    held = _holder(dtype, not op.spec.contract.sig.elementwise, gs, op.notes, named.itself)
    for j, (got, expected) in enumerate(zip(outs, want)):
        what = f"forward in {name} differs from {named.forward}{where(j, len(outs), 'output')}"
        # The forward is the op's own formula: one whose O(1) terms cancel (log cosh x as
        # |x| + softplus(-2|x|) - log 2: 0.0039 in bfloat16 for 1.7e-4 at x = 0.018) is no error
        # of the backward's, which is what the budgets measure.
        held(got, expected, what, x0, par[j], budgeted=False)
    if surrogate:
        return  # the gradient is the declared surrogate's, which gradient checks
    compare = _gradients_held(kinks, name, xs, lows, held, named.gradient)
    grads, want_grads = _where_the_reference_is_finite(op, grads, want_grads)
    steps = _steps.lazily(op, lows, gs) if dtype != torch.float64 else None
    try:
        compare(grads, want_grads, par_grads, steps)
    except PropertyFailed:
        if not _compared_off_the_kinks(op, (ref, ref_low), lop, dtype, xs, lows, gs, compare):
            raise


#: Where the reference's float64 gradient is not finite and the op's is: the oracle's own overflow.
OVERFLOW = (
    "the reference's gradient is not finite at some points where the op's is (its own overflow, "
    "0 * inf): not held against the op there (gradient judges it)"
)


def _where_the_reference_is_finite(
    op: Bound, grads: Sequence[torch.Tensor], want: Sequence[torch.Tensor]
) -> tuple[Tensors, Tensors]:
    """The gradients with nan on both sides where the reference's is not finite and the op's is
    (noted); an op's gradient that is not finite where the reference's is stays a failure."""
    left_out = [g.isfinite() & ~w.to(g.device).isfinite() for g, w in zip(grads, want)]
    if not any(bool(m.any()) for m in left_out):
        return tuple(grads), tuple(want)
    if OVERFLOW not in op.notes:
        op.notes.append(OVERFLOW)
    return (
        tuple(torch.where(m, torch.nan, g) for g, m in zip(grads, left_out)),
        tuple(torch.where(m.to(w.device), torch.nan, w) for w, m in zip(want, left_out)),
    )


Held = Callable[..., None]
Steps = Callable[[], Tensors | None]
Compare = Callable[
    [Sequence[torch.Tensor], Sequence[torch.Tensor], Sequence[torch.Tensor | None], Steps | None], None
]


def _holder(
    dtype: torch.dtype, scaled: bool, gs: Tensors, notes: list[str], oracle: str = REFERENCE.itself
) -> Held:
    """How a result in ``dtype`` is held to the float64 reference's: ``held(got, expected, what, x,
    par, budgeted=True, steps=None)``. ``scaled``: the tolerance is relative to the largest element
    (see :func:`~opzoo.testing.checks._compare.close`); ``notes``: where a gradient is within its
    budget only by its formula's own rounding, the figures are told there."""

    def held(
        got: torch.Tensor,
        expected: torch.Tensor,
        what: str,
        x: torch.Tensor | None,
        p: torch.Tensor | None,
        budgeted: bool = True,
        steps: Callable[[], torch.Tensor | None] | None = None,
    ) -> None:
        """A gradient in a lower dtype to the dtype's error budget (``steps``: the op's formula step
        by step in the dtype, ``_budget.within``); float64 (whose oracle is the reference itself,
        computed another way) and the forward to the dtype's tolerance."""
        if dtype == torch.float64 or not budgeted:
            close(got, expected, TOLERANCES[dtype], what, x, par=p, scaled=scaled)
            return
        lost = _budget.within(got, expected, dtype, what, x, par=p, slack=_budget.slack(gs), steps=steps)
        if lost is not None:
            note = _steps.rounding_note(dtype, lost.k, lost.k_par, lost.k_steps, oracle)
            if note not in notes:
                notes.append(note)

    return held


def _one(steps: Steps | None, i: int, away: torch.Tensor | None = None) -> Callable[[], torch.Tensor | None]:
    """Input ``i``'s gradient of ``steps()``, where ``away`` says (None: nothing to give)."""

    def one() -> torch.Tensor | None:
        every = steps() if steps is not None else None
        if every is None:
            return None
        return every[i] if away is None else every[i][away.to(every[i].device)]

    return one


def _gradients_held(
    kinks: Mapping[float, float], name: str, xs: Tensors, lows: Tensors, held: Held, whose: str
) -> Compare:
    """How the gradients in dtype ``name`` are held to the reference's: ``compare(grads, want_grads,
    par_grads, steps)``, each input's on its own, away from the declared kinks (``steps``: the op's
    gradients computed step by step in that dtype, lazily: ``_steps.lazily``)."""
    dtype = getattr(torch, name)
    x0 = lows[0] if len(lows) == 1 else None

    def compare(
        grads: Sequence[torch.Tensor],
        want_grads: Sequence[torch.Tensor],
        par_grads: Sequence[torch.Tensor | None],
        steps: Steps | None = None,
    ) -> None:
        for i, (got, expected, x) in enumerate(zip(grads, want_grads, xs)):
            what = f"gradient in {name} differs from {whose}{where(i, len(xs), 'input')}"
            if not kinks:
                held(got, expected, what, x0, par_grads[i], steps=_one(steps, i))
                continue
            away = torch.ones_like(x, dtype=torch.bool)
            for k in kinks:
                # In a low precision the kink itself is rounded (a param like min_val, too): keep
                # the comparison a few of that dtype's steps away from it.
                step = torch.finfo(dtype).eps * max(1.0, abs(k))
                away &= (lows[i].double() - k).abs() >= max(KINK_MARGIN / 2, 4 * step)
            p = par_grads[i][away] if par_grads[i] is not None else None
            held(
                got[away],
                expected[away],
                what,
                x0[away] if x0 is not None else None,
                p,
                steps=_one(steps, i, away),
            )

    return compare


def _compared_off_the_kinks(
    op: Bound,
    refs: tuple[Callable[..., object], Callable[..., object]],
    lop: Bound,
    dtype: torch.dtype,
    xs: Tensors,
    lows: Tensors,
    gs: Tensors,
    compare: Compare,
) -> bool:
    """Where the op is not differentiable, it and the reference may each pick another valid
    generalised gradient (a tie split evenly, or given to one input): the gradients compared with
    only the other output elements weighted. False where the op is smooth (nothing to leave out).
    ``refs``: the reference for float64 inputs and for inputs in ``dtype``."""
    (ref, ref_low), x64, g64 = refs, tuple(x.double() for x in lows), [g.double() for g in gs]
    smooth = _kinks.smooth_rows(op, x64, op.notes, diagonal=_kinks.diagonal(op, xs))
    if smooth is None:
        return False

    def kept(weights: Sequence[torch.Tensor]) -> Tensors:
        return tuple(w * k.to(w.device) for w, k in zip(weights, smooth))

    grads = vjp(lop, lows, kept(gs))[1]
    want_grads = _ref_vjp(ref, x64, kept(g64))[1]
    par_grads = (
        _ref_vjp(ref_low, lows, kept(gs), notes=op.notes)[1] if dtype != torch.float64 else (None,) * len(xs)
    )
    reached = _kinks.reached(smooth, [lambda w: vjp(lop, lows, w)[1], lambda w: _ref_vjp(ref, x64, w)[1]], gs)
    grads, want_grads = _kinks.unjudged(grads, want_grads, reached)
    steps = _steps.lazily(op, lows, kept(gs)) if dtype != torch.float64 else None
    compare(*_where_the_reference_is_finite(op, grads, want_grads), par_grads, steps)
    return True


def reference_of(op: Bound) -> Callable[..., object]:
    """The declared reference as a function of the op's inputs: called as
    ``reference(*tensors, **params)``, every tensor input in the op's own layout; a random op's
    under the seed the op's own calls run under (a reference that draws alike compares)."""
    ref, params = op.spec.contract.reference, op.params
    if op.random:
        return op.calling(lambda *ts: _reseeded_call(ref, ts, params))
    return op.calling(lambda *ts: ref(*ts, **params))


def _reseeded_call(
    ref: Callable[..., object], ts: Sequence[torch.Tensor], params: Mapping[str, object]
) -> object:
    with reseeded(ts):
        return ref(*ts, **params)


def _ref_vjp(
    ref: Callable[..., object],
    xs: Tensors,
    gs: Sequence[torch.Tensor],
    *,
    forward_only: bool = False,
    notes: list[str] | None = None,
) -> tuple[Tensors, Tensors]:
    """The reference's outputs and its autograd gradient, in the dtype of ``xs`` (no gradient for
    ``forward_only``: a surrogate op's reference, like torch.heaviside, may have none). A reference
    with no kernel in that dtype (torch.special.log_ndtr in bfloat16) runs in float64 at the same
    inputs, its results rounded to the dtype (noted in ``notes``): the op's own failure to run in a
    dtype it declares is its own, the reference's is not."""
    dtype = xs[0].dtype if xs else torch.float64
    try:
        return _ref_vjp_in(ref, xs, gs, forward_only)
    except RuntimeError as exc:  # NotImplementedError is one
        if "not implemented for" not in str(exc) or dtype == torch.float64:
            raise
        gist = one_line(exc, with_type=False)
    outs, grads = _ref_vjp_in(ref, tuple(x.double() for x in xs), [g.double() for g in gs], forward_only)
    name = str(dtype).removeprefix("torch.")
    note = f"the reference has no {name} kernel ({gist}): run in float64 and rounded to {name}"
    if notes is not None and note not in notes:
        notes.append(note)
    return (
        tuple(o.to(dtype) if o.is_floating_point() else o for o in outs),
        tuple(g.to(x.dtype) for g, x in zip(grads, xs)),
    )


def _ref_vjp_in(
    ref: Callable[..., object], xs: Tensors, gs: Sequence[torch.Tensor], forward_only: bool
) -> tuple[Tensors, Tensors]:
    leaves = tuple(x.detach().clone().requires_grad_(not forward_only) for x in xs)
    outs = ref(*leaves)
    outs = outs if isinstance(outs, tuple) else (outs,)
    if forward_only:
        return tuple(o.detach() for o in outs), ()
    grads = grad(outs, leaves, gs)  # over its differentiable outputs (not a max's indices)
    return (
        tuple(o.detach() for o in outs),
        tuple(torch.zeros_like(x) if g is None else g for x, g in zip(leaves, grads)),
    )
