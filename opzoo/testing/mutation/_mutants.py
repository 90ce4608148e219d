"""The mutants: generic ways to get a backward wrong, one :class:`Mutant` record each.

``opzoo mutate`` (:mod:`opzoo.testing.mutation._mutate`) wraps a registered op in each mutant in turn, its
source untouched (:mod:`opzoo.testing.mutation._mutant_ops`), and runs the op's properties on it: a property
that fails *kills* the mutant, and a mutant that survives every property is either one no check can
see on this op (a reason says why) or a blind spot of the checks. The forward stays bit for bit the
op's (but for ``wrong_dtype_short``, whose ``outputs`` hook returns them in another dtype); only the
derivative changes, in one of these ways.

A mutant changes an op's derivative at up to three places, each a hook of its record:

- ``grad_outputs``: the grad_outputs, before the op's own backward sees them (dropped, misread);
- ``extra``: a term added to each input's gradient, from the grad_outputs (a wrong value at a kink);
- ``grads``: the gradients the op's backward returns, one per differentiable input, learnable
  tensors last (a sign, a factor, a roll...);

and, so that forward mode stays consistent with the mutated backward wherever that means something
(a wrong slope is wrong in ``backward`` and ``jvp`` alike, and then only the checks of the
derivative itself can see it, not ``forward_mode``, which compares the two), ``tangents`` (the
transpose of ``grads``, on the input tangents before the op's ``jvp``) and ``out_tangents`` (on its
result). A mutant whose hooks leave ``jvp`` alone changes the backward only; ``jvp_factor`` changes
the ``jvp`` only.

Every hook is a function of a :class:`~opzoo.testing.mutation._mutant_hooks.Site` (what the mutant
knows of one call of the op) and tuples with ``None`` where an input gets no gradient, made of the
building blocks of :mod:`opzoo.testing.mutation._mutant_hooks`; when a mutant applies and which
properties can see it are functions of the op in :mod:`opzoo.testing.mutation._mutant_applies`.
Neither imports torch, nor does this table, so that ``opzoo mutate --help`` lists it in a fraction
of a second. To add a mutant, add one record to :data:`MUTANTS`, with a test that some op's
properties kill it (tests/test_mutate.py fails until there is one); the help and docs/testing.md's
table follow.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Sequence

from opzoo.testing.mutation._mutant_applies import (
    at_large_inputs,
    broadcasts,
    has_kinks,
    in_lower_dtypes,
    lower_dtypes,
    no_large_inputs,
    no_negatives,
    own_jvp,
    same_shaped_inputs,
    short_dtypes,
    subsets,
    tight,
    two_dims,
    two_outputs,
    two_tensors,
    zero_d,
)
from opzoo.testing.mutation._mutant_hooks import (
    Grads,
    Site,
    as_if_contiguous,
    double_half,
    drop_last,
    each,
    each_with,
    float32_if_short,
    in_place,
    is_float64,
    kink_extra,
    kink_tangent,
    mean_not_sum,
    nan_where_large,
    noise,
    rolled,
    same,
    second_output,
    swap,
    transformed,
    zero_slice,
)
from opzoo.testing.properties import choose

if TYPE_CHECKING:
    from opzoo.core._registry import OpSpec

Hook = Callable[[Site, Grads], Grads]


def _always(spec: OpSpec) -> str | None:
    return None


def derivative(
    applies: Callable[[OpSpec], str | None] = _always, *, linear: bool = False
) -> Callable[..., Any]:
    """``applies``, and n/a on a by-design backward (``Contract(gradient="by design: ...")``): a
    mutant that changes only the derivative makes another backward that is no derivative either,
    which nothing declared tells from the op's own. ``linear``: n/a only where the backward is
    declared not linear in grad_output (what sees the mutant assumes that linearity)."""

    def applies_here(spec: OpSpec) -> str | None:
        reason, linear_in_grad = spec.contract.by_design, spec.contract.linear_in_grad
        if reason is not None and not linear:
            return f"by design ({reason}): a backward declared no derivative has no slope to get wrong"
        if reason is not None and not linear_in_grad:
            return "by design, not linear in grad_output: what sees this mutant assumes the linearity"
        return applies(spec)

    return applies_here


@dataclass(frozen=True)
class Mutant:
    """One class of backward mutants: what it does, when it applies, its wrapper (the hooks), and
    what should see it.

    name:      its name (``opzoo mutate --mutant``).
    summary:   what it does, in a few words (help and docs).
    applies:   why it does not apply to an op (one input, no jvp, a domain without negatives...),
               or None.
    caught_by: the properties able to see it, given the op (a tolerance decides: a factor 1+1e-3 is
               inside finite differences' 1e-3 and seen by the float64 oracles only). A survivor
               none of them ran on is explained by why they did not run; one they all passed is a
               blind spot of the checks.
    idle:      why a mutant that changed no gradient on any input the checks tried survived (or a
               function of the op that says why).
    control:   a mutant that changes nothing, run to show that the wrapping alone kills nothing.
    reads_kinks: its hooks read the op's kinks (``Site.kinks``), worked out at each call.
    graph_only: its hooks change no value, only the gradient's own derivative: a call changed
               something where a gradient it returned carries a graph (a second derivative asked).
    outputs:   the one hook on the forward: each output as ``apply`` returns it (a wrong dtype);
               autograd carries the grad_outputs back to the op's own dtype for its backward.
    """

    name: str
    summary: str
    applies: Callable[[OpSpec], str | None] = _always
    grads: Hook | None = None
    grad_outputs: Hook | None = None
    extra: Hook | None = None
    tangents: Hook | None = None
    out_tangents: Callable[[Site, Grads, Grads], Grads] | None = None
    caught_by: tuple[str, ...] | Callable[[OpSpec], tuple[str, ...]] = ("gradient",)
    idle: str | Callable[[OpSpec], str] = "it changed no gradient on any input the checks tried"
    control: bool = False
    reads_kinks: bool = False
    graph_only: bool = False
    outputs: Callable[[Any], Any] | None = None

    def unseen(self, spec: OpSpec) -> str:
        """Why this mutant, having changed no gradient the checks asked for, survived on ``spec``."""
        return self.idle(spec) if callable(self.idle) else self.idle

    def catchers(self, spec: OpSpec) -> tuple[str, ...]:
        """The properties able to see this mutant on ``spec``."""
        return self.caught_by(spec) if callable(self.caught_by) else self.caught_by


def slope(hook: Hook) -> dict[str, Hook]:
    """The same hook on the backward's gradients and on the jvp's input tangents: a wrong slope,
    wrong in backward and jvp alike (see the module's docstring)."""
    return {"grads": hook, "tangents": hook}


# -- the table ------------------------------------------------------------------------------------

#: name -> mutant, in the order they are reported. ``identity`` is the control: it must survive.
MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in (
        Mutant(
            "identity",
            "changes nothing: the control, which no property may kill (the wrapping alone is unseen)",
            grads=same,
            grad_outputs=same,
            tangents=same,
            out_tangents=lambda site, outs, ts: outs,
            control=True,
            caught_by=(),
        ),
        Mutant(
            "sign",
            "every gradient with the wrong sign",
            applies=derivative(),
            **slope(each(lambda g: -g)),
            idle="the op's gradient was zero wherever the checks asked, so its sign changed nothing",
        ),
        Mutant(
            "factor_1e-3",
            "every gradient 1 + 1e-3 times too large",
            applies=derivative(),
            **slope(each(lambda g: g * (1 + 1e-3))),
            caught_by=tight,
        ),
        Mutant(
            "double_half",
            "every other element's gradient twice too large (by flat index)",
            applies=derivative(),
            **slope(each(double_half)),
        ),
        Mutant(
            "ones_grad_output",
            "grad_output dropped: the backward of ones instead of the grad_outputs given",
            applies=derivative(linear=True),
            grad_outputs=each(lambda g: g.new_ones(g.shape)),
            idle="every grad_output the checks passed was all ones already",
        ),
        Mutant(
            "swap_inputs",
            "the gradients of two inputs of the same shape swapped",
            applies=derivative(same_shaped_inputs),
            **slope(swap),
            idle="no two inputs the checks drew had the same shape",
        ),
        Mutant(
            "roll",
            "every gradient rolled by one along its last dimension of more than one element",
            applies=derivative(),
            grads=each(rolled(1)),
            tangents=each(rolled(-1)),
        ),
        Mutant(
            "mean_not_sum",
            "a mean instead of a sum over the dimensions an input (or learnable tensor) was broadcast over",
            applies=derivative(broadcasts),
            **slope(mean_not_sum),
            idle="no input the checks drew was broadcast",
        ),
        Mutant(
            "zero_slice",
            "one slice of every gradient zeroed (along its first dimension of more than one element)",
            applies=derivative(),
            **slope(each(zero_slice)),
        ),
        Mutant(
            "noise",
            "1e-6 relative noise on every gradient, different at every call (nondeterminism)",
            grads=each(noise),
            caught_by=("gradient", "hygiene", "layout", "autograd", "library"),
        ),
        Mutant(
            "grad_output_in_place",
            "grad_output used as scratch space: written in place (and written back)",
            grad_outputs=each(in_place),
            caught_by=("hygiene",),
        ),
        Mutant(
            "detached",
            "the backward's result detached: the second derivative silently zero",
            applies=derivative(linear=True),
            grads=each(lambda g: g if transformed(g) else g.detach()),
            caught_by=("double_backward",),
        ),
        Mutant(
            "nan_second_derivative",
            "every gradient times sqrt(0 * abs(g)) + 1: the same values, a nan second derivative (0 * inf)",
            applies=derivative(linear=True),
            grads=each(lambda g: g * ((0 * g).abs().sqrt() + 1)),
            caught_by=("double_backward",),
            idle="its values are the op's own, and no second derivative was taken through a gradient "
            "(the double backward is skipped: once_differentiable, or it raises)",
            graph_only=True,
        ),
        Mutant(
            "float32",
            "a float64 gradient computed in float32 (rounded to it: about 6e-8 relative)",
            applies=derivative(),
            **slope(each(lambda g: g.float().to(g.dtype) if is_float64(g) else g)),
            caught_by=("autograd",),
        ),
        Mutant(
            "wrong_on_0d",
            "the gradient twice too large on a 0-d input only",
            applies=derivative(zero_d),
            **slope(each(lambda g: g * 2 if g.dim() == 0 else g)),
            idle="no 0-d input the checks tried had a non-zero gradient",
        ),
        Mutant(
            "wrong_on_size1",
            "the gradient 1.5 times too large when the input has a dimension of size 1 among others",
            applies=derivative(two_dims),
            **slope(each(lambda g: g * 1.5 if g.dim() >= 2 and 1 in g.shape and g.numel() > 1 else g)),
            idle="no input the checks tried had a size-1 dimension among others",
        ),
        Mutant(
            "wrong_above_4096",
            "the gradient 1.5 times too large on inputs of more than 4,096 elements (a fast path)",
            applies=derivative(),
            **slope(each(lambda g: g * 1.5 if g.numel() > 4096 else g)),
            idle="no input the checks tried had more than 4,096 elements",
        ),
        Mutant(
            "at_kinks",
            "a wrong value at each kink, declared or found: off by grad_output (by more than the "
            "one-sided derivatives' gap, at a kink found)",
            applies=derivative(has_kinks),
            extra=kink_extra,
            out_tangents=kink_tangent,
            caught_by=("kinks", "gradient"),
            idle="no input the checks tried sat on a kink",
            reads_kinks=True,
        ),
        Mutant(
            "jvp_factor",
            "the jvp 1.5 times too large (the backward right)",
            applies=derivative(own_jvp),
            out_tangents=lambda site, outs, ts: tuple(None if t is None else t * 1.5 for t in outs),
            caught_by=("forward_mode",),
        ),
        Mutant(
            "drop_last_input",
            "the last input's (or learnable tensor's) gradient zero: a forgotten term",
            applies=derivative(two_tensors),
            **slope(drop_last),
        ),
        Mutant(
            "second_output",
            "the grad_output of the second output with the wrong sign",
            applies=derivative(two_outputs),
            grad_outputs=second_output,
            out_tangents=lambda site, outs, ts: second_output(site, outs),
        ),
        Mutant(
            "noncontiguous_grad_output",
            "a non-contiguous grad_output read as if it were contiguous",
            grad_outputs=each(as_if_contiguous),
            caught_by=("layout",),
        ),
        Mutant(
            "noncontiguous_input",
            "the gradient 1.5 times too large for a non-contiguous input",
            **slope(each_with(lambda site, i, g: g if site.contiguous[i] else g * 1.5)),
            caught_by=("layout",),
        ),
        Mutant(
            "needs_input_grad",
            "the gradient 1.5 times too large unless every input requires grad",
            applies=subsets,
            grads=lambda site, gs: (
                gs if all(site.requires[: site.signature]) else each(lambda g: g * 1.5)(site, gs)
            ),
            caught_by=("subsets",),
        ),
        Mutant(
            "wrong_in_low_precision",
            "the gradient 5% too large in float32, bfloat16 and float16",
            applies=derivative(lower_dtypes),
            **slope(each(lambda g: g if is_float64(g) else g * 1.05)),
            caught_by=in_lower_dtypes,
        ),
        Mutant(
            "wrong_dtype_short",
            "the forward's outputs float32 for bfloat16 and float16 inputs (float64 and float32 keep theirs)",
            applies=short_dtypes,
            outputs=float32_if_short,
            caught_by=("hygiene",),
            idle="no input the checks tried was bfloat16 or float16",
        ),
        Mutant(
            "nan_when_large",
            "the gradient nan wherever abs(x) > 1000 (an overflow)",
            **slope(each_with(nan_where_large)),
            caught_by=at_large_inputs,
            idle=no_large_inputs,
        ),
        Mutant(
            "not_repeatable",
            "backward run again on the same graph gives 1.5 times the gradient (state kept between calls)",
            grads=lambda site, gs: gs if site.calls <= 1 else each(lambda g: g * 1.5)(site, gs),
            caught_by=("hygiene", "gradient"),
        ),
        Mutant(
            "wrong_on_negatives",
            "the gradient 1.5 times too large wherever x < 0",
            applies=derivative(),
            **slope(each_with(lambda site, i, g: g * (1 + 0.5 * site.xs[i].lt(0).to(g.dtype)))),
            idle=no_negatives,
        ),
    )
}


def parse_mutants(items: Sequence[str] | None) -> list[str]:
    """Mutant names from comma-separated items (all but the control if None); ValueError on an
    unknown name, or on items that name none."""
    return choose(items, MUTANTS, "mutant", [m.name for m in MUTANTS.values() if not m.control])


def summaries() -> str:
    """The mutants, one ``name: summary`` per line, for help texts."""
    return "\n".join(f"  {m.name}: {m.summary}" for m in MUTANTS.values())


__all__ = ["MUTANTS", "Mutant", "parse_mutants", "slope", "summaries"]
