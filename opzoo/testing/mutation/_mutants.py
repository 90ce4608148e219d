"""The mutants: generic ways to get a backward wrong, one :class:`Mutant` record each.

``opzoo mutate`` (:mod:`opzoo.testing.mutation._mutate`) wraps a registered op in each mutant in turn, its
source untouched (:mod:`opzoo.testing.mutation._mutant_ops`), and runs the op's properties on it: a property
that fails *kills* the mutant, and a mutant that survives every property is either one no check can
see on this op (a reason says why) or a blind spot of the checks. The forward stays bit for bit the
op's; only the derivative changes, in one of these ways.

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

Every hook is a function of a :class:`Site` (what the mutant knows of one call of the op) and
tuples with ``None`` where an input gets no gradient. Hooks use tensor methods only: this table
imports no torch, so that ``opzoo mutate --help`` lists it in a fraction of a second. To add a
mutant, add one record to :data:`MUTANTS`, with a test that some op's properties kill it
(tests/test_mutate.py fails until there is one); the help and docs/testing.md's table follow.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

if TYPE_CHECKING:
    from opzoo.core._registry import OpSpec

Grads = tuple[Any, ...]  # one tensor or None per differentiable input (learnable tensors last)


@dataclass
class Site:
    """What a mutant knows of one call of the op, kept from its forward for its backward and jvp.

    xs:         the differentiable inputs as the op saw them (detached), learnable tensors last.
    signature:  how many of ``xs`` are the signature's inputs (the rest are learnable tensors).
    cores:      each signature input's number of core dimensions.
    contiguous: whether each of ``xs`` was contiguous.
    kinks:      the op's kinks at this call's params (declared, or found), each with how far off
                the mutated gradient there is (``at_kinks``).
    requires:   which of ``xs`` require grad (known in backward).
    calls:      how many times backward has run on this call's graph (counting the current one).
    """

    xs: tuple[Any, ...]
    signature: int
    cores: tuple[int, ...]
    contiguous: tuple[bool, ...]
    kinks: dict[float, float] = field(default_factory=dict)
    requires: tuple[bool, ...] = ()
    calls: int = 0


def _always(spec: OpSpec) -> str | None:
    return None


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
    """

    name: str
    summary: str
    applies: Callable[[OpSpec], str | None] = _always
    grads: Callable[[Site, Grads], Grads] | None = None
    grad_outputs: Callable[[Site, Grads], Grads] | None = None
    extra: Callable[[Site, Grads], Grads] | None = None
    tangents: Callable[[Site, Grads], Grads] | None = None
    out_tangents: Callable[[Site, Grads, Grads], Grads] | None = None
    caught_by: tuple[str, ...] | Callable[[OpSpec], tuple[str, ...]] = ("gradient",)
    idle: str | Callable[[OpSpec], str] = "it changed no gradient on any input the checks tried"
    control: bool = False
    reads_kinks: bool = False

    def unseen(self, spec: OpSpec) -> str:
        """Why this mutant, having changed no gradient the checks asked for, survived on ``spec``."""
        return self.idle(spec) if callable(self.idle) else self.idle

    def catchers(self, spec: OpSpec) -> tuple[str, ...]:
        """The properties able to see this mutant on ``spec``."""
        return self.caught_by(spec) if callable(self.caught_by) else self.caught_by


# -- building blocks ------------------------------------------------------------------------------


def _each(fn: Callable[[Any], Any]) -> Callable[[Site, Grads], Grads]:
    """A hook applying ``fn`` to every gradient (or tangent) that is there."""

    def hook(site: Site, gs: Grads) -> Grads:
        return tuple(None if g is None else fn(g) for g in gs)

    return hook


def _each_with(fn: Callable[[Site, int, Any], Any]) -> Callable[[Site, Grads], Grads]:
    """A hook applying ``fn(site, i, g)`` to every gradient (or tangent) ``i`` that is there."""

    def hook(site: Site, gs: Grads) -> Grads:
        return tuple(None if g is None else fn(site, i, g) for i, g in enumerate(gs))

    return hook


def _same(site: Site, gs: Grads) -> Grads:
    return gs


def _float64(t: Any) -> bool:
    return str(t.dtype) == "torch.float64"


def _big_dim(t: Any) -> int | None:
    """The last dimension of ``t`` with more than one element, or None."""
    return next((d for d in reversed(range(t.dim())) if t.shape[d] > 1), None)


def _roll(shift: int) -> Callable[[Any], Any]:
    def roll(g: Any) -> Any:
        d = _big_dim(g)
        return g if d is None else g.roll(shift, d)

    return roll


def _zero_slice(g: Any) -> Any:
    d = next((d for d in range(g.dim()) if g.shape[d] > 1), None)
    if d is None:
        return g
    keep = g.new_ones(g.shape)
    keep.select(d, (g.numel() * 7 + 3) % g.shape[d]).fill_(0)  # "random", but the same every call
    return g * keep


def _double_half(g: Any) -> Any:
    factor = g.new_ones(g.numel())
    factor[1::2] = 2
    return g * factor.reshape(g.shape)


def _noise(g: Any) -> Any:
    import torch

    # A generator of its own, seeded afresh: the checks seed torch's, and noise that repeated
    # whenever they did would not be the nondeterminism this mutant is about.
    gen = torch.Generator(device=g.device).manual_seed(random.SystemRandom().randrange(2**62))
    return g * (1 + 1e-6 * torch.randn(g.shape, generator=gen, dtype=g.dtype, device=g.device))


def _in_place(g: Any) -> Any:
    # grad_output as scratch space, written and written back (the values the op sees are right):
    # only where its memory allows and nobody differentiates through it, as such code does.
    if g.requires_grad or not g.is_contiguous() or not g.dim() or min(g.stride()) == 0 or _transformed(g):
        return g
    g.mul_(2.0)
    out = g / 2
    g.div_(2.0)
    return out


def _as_if_contiguous(g: Any) -> Any:
    # Reading a grad_output's memory as if it were laid out contiguously: only where that memory is
    # large enough (an expanded grad_output, stride 0, is not), so that nothing reads past it.
    if g.is_contiguous() or _transformed(g):
        return g
    needed = (g.storage_offset() + g.numel()) * g.element_size()
    if g.untyped_storage().nbytes() < needed:
        return g
    strides, step = [], 1
    for size in reversed(g.shape):
        strides.append(step)
        step *= max(size, 1)
    return g.as_strided(g.shape, tuple(reversed(strides)))


def _transformed(g: Any = None) -> bool:
    """Whether a torch.func transform (vmap, grad, jvp) is running, or ``g`` is batched by the
    legacy vmap of ``autograd.grad(is_grads_batched=True)`` or traced: tensors are wrapped then,
    and in-place writes, raw memory reads or a detach are not what the mutant means (nor possible)."""
    import torch

    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    if active and active():
        return True
    if g is None:
        return False
    if type(g) not in (torch.Tensor, torch.nn.Parameter):
        return True  # a fake or functional tensor of a trace (opcheck's aot_dispatch)
    keys = str(torch._C._dispatch_keys(g))
    return any(k in keys for k in ("Batched", "Functionalize", "Python"))


def _broadcast(site: Site) -> list[float]:
    """How many times each of ``site.xs`` was used by broadcasting: the loop shape all signature
    inputs broadcast to over its own (a learnable tensor: the first input's elements over its own)."""
    loops = [tuple(x.shape[: x.dim() - c]) for x, c in zip(site.xs, site.cores)]
    rank = max([0, *(len(s) for s in loops)])  # not default=0: Dynamo traces this, and warns at it
    full = [1] * rank
    for s in loops:
        for k, size in enumerate(s):
            at = rank - len(s) + k
            full[at] = size if full[at] == 1 else full[at]
    total = math.prod(full)
    out = []
    for i, x in enumerate(site.xs):
        if i < site.signature:
            own = math.prod(loops[i])
            out.append(total / own if own and total else 1.0)
        else:
            first = site.xs[0].numel() if site.xs else 0
            out.append(first / x.numel() if x.numel() and first > x.numel() else 1.0)
    return out


def _mean_not_sum(site: Site, gs: Grads) -> Grads:
    factors = _broadcast(site)
    return tuple(None if g is None else (g / f if f != 1 else g) for g, f in zip(gs, factors))


def _swap(site: Site, gs: Grads) -> Grads:
    pair = _same_core_pair(site.cores, site.xs)
    if pair is None:
        return gs
    i, j = pair
    a, b = gs[i], gs[j]
    if a is None or b is None or a.shape != b.shape:
        return gs
    out = list(gs)
    out[i], out[j] = b, a
    return tuple(out)


def _same_core_pair(cores: Sequence[int], xs: Sequence[Any]) -> tuple[int, int] | None:
    """The first two signature inputs of the same shape at this call."""
    n = len(cores)
    for i in range(n):
        for j in range(i + 1, n):
            if xs[i].shape == xs[j].shape:
                return i, j
    return None


def _drop_last(site: Site, gs: Grads) -> Grads:
    *first, last = gs
    return (*first, None if last is None else last.new_zeros(last.shape))


def _at_kinks(site: Site, i: int, x: Any) -> Any:
    """Where ``x`` sits on one of the site's kinks (within 1e-6: where the checks' one-sided look at
    an undeclared kink sees it too), the extra amount the mutant puts there; zero elsewhere."""
    off = x.new_zeros(x.shape)
    for kink, delta in site.kinks.items():
        off = off + (x - kink).abs().le(1e-6).to(x.dtype) * delta
    return off


def _kink_extra(site: Site, gs: Grads) -> Grads:
    # elementwise ops only (the only ones with kinks to declare): one input, one output
    (g,) = gs
    return (g * _at_kinks(site, 0, site.xs[0]),)


def _kink_tangent(site: Site, outs: Grads, ts: Grads) -> Grads:
    (t_out,), (t_in,) = outs, ts
    if t_out is None or t_in is None:
        return outs
    return (t_out + t_in * _at_kinks(site, 0, site.xs[0]),)


def _second_output(site: Site, gs: Grads) -> Grads:
    first, second, *rest = gs
    return (first, None if second is None else -second, *rest)


def _nan_where_large(site: Site, i: int, g: Any) -> Any:
    return g.masked_fill(site.xs[i].abs() > 1e3, math.nan)


# -- when a mutant applies ------------------------------------------------------------------------


def _differentiable(spec: OpSpec) -> int:
    """How many of the signature's inputs are differentiated."""
    constants = spec.arguments.constants if spec.arguments is not None else {}
    return len(spec.contract.sig.inputs) - len(constants)


def _learnable(spec: OpSpec) -> int:
    from opzoo.testing.mutation._mutant_facts import learnable_tensors

    return learnable_tensors(spec)


def _two_tensors(spec: OpSpec) -> str | None:
    if _differentiable(spec) + _learnable(spec) >= 2:
        return None
    return "one input and no learnable tensor: there is no other gradient"


def _same_shaped_inputs(spec: OpSpec) -> str | None:
    cores = [core for i, core in enumerate(spec.contract.sig.inputs) if _is_differentiable(spec, i)]
    if any(cores[i] == cores[j] for i in range(len(cores)) for j in range(i + 1, len(cores))):
        return None
    if len(cores) < 2:
        return "one input: there is no other gradient to swap it with"
    return "no two inputs have the same core dimensions: their gradients' shapes differ"


def _is_differentiable(spec: OpSpec, i: int) -> bool:
    return spec.arguments is None or i not in spec.arguments.constants


def _broadcasts(spec: OpSpec) -> str | None:
    if _learnable(spec):
        return None
    if _differentiable(spec) < 2:
        return "one input and no learnable tensor: nothing is broadcast"
    if spec.contract.loop_dims == 0:
        return "the op takes no loop dimensions (loop_dims=0): nothing is broadcast"
    return None


def _zero_d(spec: OpSpec) -> str | None:
    if any(not core for i, core in enumerate(spec.contract.sig.inputs) if _is_differentiable(spec, i)):
        return None
    return "every input has core dimensions: none is ever 0-d"


def _two_dims(spec: OpSpec) -> str | None:
    if spec.contract.loop_dims != 0 or any(len(core) >= 2 for core in spec.contract.sig.inputs):
        return None
    return "no input has two dimensions or more (loop_dims=0): a size-1 dimension is never one of several"


def _has_kinks(spec: OpSpec) -> str | None:
    if spec.contract.kinks_at():
        return None
    if not spec.contract.sig.elementwise:
        return "not elementwise: no kink is declared or found (kinks are elementwise ops' only)"
    if spec.contract.surrogate is not None:
        return "a surrogate op: its surrogate, not a kink, says what the gradient is where the forward jumps"
    from opzoo.testing.mutation._mutant_facts import found_kinks

    if found_kinks(spec):
        return None
    return "no kink declared, and none found (the one-sided derivatives agree across the domain)"


def _defines_jvp(spec: OpSpec) -> str | None:
    from opzoo.testing.mutation._mutant_facts import hand_written_jvp

    return hand_written_jvp(spec)


def _two_outputs(spec: OpSpec) -> str | None:
    return None if len(spec.contract.sig.outputs) > 1 else "one output: there is no second grad_output"


def _no_negatives(spec: OpSpec) -> str:
    low, high = spec.contract.domain
    if low >= 0:
        return f"the contract's domain ({low:g}, {high:g}) excludes negative inputs"
    return "the op's gradient was zero wherever an input the checks tried was negative"


def _subsets(spec: OpSpec) -> str | None:
    if _differentiable(spec) >= 2:
        return None
    return "one input: it always requires grad when anything does"


def _lower_dtypes(spec: OpSpec) -> str | None:
    if any(d != "float64" for d in spec.contract.dtypes):
        return None
    return "the op declares float64 only"


def _no_large_inputs(spec: OpSpec) -> str:
    low, high = spec.contract.domain
    if max(abs(low), abs(high)) <= 1e3:
        return f"the contract's domain ({low:g}, {high:g}) lies within |x| <= 1000"
    return "no input the checks tried was larger than 1000 in magnitude where the op's gradient is not zero"


# -- which properties can see a mutant --------------------------------------------------------------


def _tight(spec: OpSpec) -> tuple[str, ...]:
    """The checks that compare a gradient at float64 precision: autograd's derivative of the forward
    (about 1e-9), the reference (1e-7), and for a surrogate op the surrogate (1e-7)."""
    return (
        ("autograd", "reference", "gradient")
        if spec.contract.surrogate is not None
        else ("autograd", "reference")
    )


def _in_lower_dtypes(spec: OpSpec) -> tuple[str, ...]:
    """The checks that look at the gradient in float32 or bfloat16: the reference, or a surrogate
    op's surrogate."""
    return ("reference", "gradient") if spec.contract.surrogate is not None else ("reference",)


def _at_large_inputs(spec: OpSpec) -> tuple[str, ...]:
    return ("extremes", "gradient") if spec.contract.surrogate is not None else ("extremes",)


# -- the table ------------------------------------------------------------------------------------

#: name -> mutant, in the order they are reported. ``identity`` is the control: it must survive.
MUTANTS: dict[str, Mutant] = {
    m.name: m
    for m in (
        Mutant(
            "identity",
            "changes nothing: the control, which no property may kill (the wrapping alone is unseen)",
            grads=_same,
            grad_outputs=_same,
            tangents=_same,
            out_tangents=lambda site, outs, ts: outs,
            control=True,
            caught_by=(),
        ),
        Mutant(
            "sign",
            "every gradient with the wrong sign",
            grads=_each(lambda g: -g),
            tangents=_each(lambda t: -t),
            idle="the op's gradient was zero wherever the checks asked, so its sign changed nothing",
        ),
        Mutant(
            "factor_1e-3",
            "every gradient 1 + 1e-3 times too large",
            grads=_each(lambda g: g * (1 + 1e-3)),
            tangents=_each(lambda t: t * (1 + 1e-3)),
            caught_by=_tight,
        ),
        Mutant(
            "double_half",
            "every other element's gradient twice too large (by flat index)",
            grads=_each(_double_half),
            tangents=_each(_double_half),
        ),
        Mutant(
            "ones_grad_output",
            "grad_output dropped: the backward of ones instead of the grad_outputs given",
            grad_outputs=_each(lambda g: g.new_ones(g.shape)),
            idle="every grad_output the checks passed was all ones already",
        ),
        Mutant(
            "swap_inputs",
            "the gradients of two inputs of the same shape swapped",
            applies=_same_shaped_inputs,
            grads=_swap,
            tangents=_swap,
            idle="no two inputs the checks drew had the same shape",
        ),
        Mutant(
            "roll",
            "every gradient rolled by one along its last dimension of more than one element",
            grads=_each(_roll(1)),
            tangents=_each(_roll(-1)),
        ),
        Mutant(
            "mean_not_sum",
            "a mean instead of a sum over the dimensions an input (or learnable tensor) was broadcast over",
            applies=_broadcasts,
            grads=_mean_not_sum,
            tangents=_mean_not_sum,
            idle="no input the checks drew was broadcast",
        ),
        Mutant(
            "zero_slice",
            "one slice of every gradient zeroed (along its first dimension of more than one element)",
            grads=_each(_zero_slice),
            tangents=_each(_zero_slice),
        ),
        Mutant(
            "noise",
            "1e-6 relative noise on every gradient, different at every call (nondeterminism)",
            grads=_each(_noise),
            caught_by=("gradient", "hygiene", "layout", "autograd", "library"),
        ),
        Mutant(
            "grad_output_in_place",
            "grad_output used as scratch space: written in place (and written back)",
            grad_outputs=_each(_in_place),
            caught_by=("hygiene",),
        ),
        Mutant(
            "detached",
            "the backward's result detached: the second derivative silently zero",
            grads=_each(lambda g: g if _transformed(g) else g.detach()),
            caught_by=("double_backward",),
        ),
        Mutant(
            "float32",
            "a float64 gradient computed in float32 (rounded to it: about 6e-8 relative)",
            grads=_each(lambda g: g.float().to(g.dtype) if _float64(g) else g),
            tangents=_each(lambda t: t.float().to(t.dtype) if _float64(t) else t),
            caught_by=("autograd",),
        ),
        Mutant(
            "wrong_on_0d",
            "the gradient twice too large on a 0-d input only",
            applies=_zero_d,
            grads=_each(lambda g: g * 2 if g.dim() == 0 else g),
            tangents=_each(lambda t: t * 2 if t.dim() == 0 else t),
            idle="no 0-d input the checks tried had a non-zero gradient",
        ),
        Mutant(
            "wrong_on_size1",
            "the gradient 1.5 times too large when the input has a dimension of size 1 among others",
            applies=_two_dims,
            grads=_each(lambda g: g * 1.5 if g.dim() >= 2 and 1 in g.shape and g.numel() > 1 else g),
            tangents=_each(lambda t: t * 1.5 if t.dim() >= 2 and 1 in t.shape and t.numel() > 1 else t),
            idle="no input the checks tried had a size-1 dimension among others",
        ),
        Mutant(
            "wrong_above_4096",
            "the gradient 1.5 times too large on inputs of more than 4,096 elements (a fast path)",
            grads=_each(lambda g: g * 1.5 if g.numel() > 4096 else g),
            tangents=_each(lambda t: t * 1.5 if t.numel() > 4096 else t),
            idle="no input the checks tried had more than 4,096 elements",
        ),
        Mutant(
            "at_kinks",
            "a wrong value at each kink, declared or found: off by grad_output (by more than the "
            "one-sided derivatives' gap, at a kink found)",
            applies=_has_kinks,
            extra=_kink_extra,
            out_tangents=_kink_tangent,
            caught_by=("kinks", "gradient"),
            idle="no input the checks tried sat on a kink",
            reads_kinks=True,
        ),
        Mutant(
            "jvp_factor",
            "the jvp 1.5 times too large (the backward right)",
            applies=_defines_jvp,
            out_tangents=lambda site, outs, ts: tuple(None if t is None else t * 1.5 for t in outs),
            caught_by=("forward_mode",),
        ),
        Mutant(
            "drop_last_input",
            "the last input's (or learnable tensor's) gradient zero: a forgotten term",
            applies=_two_tensors,
            grads=_drop_last,
            tangents=_drop_last,
        ),
        Mutant(
            "second_output",
            "the grad_output of the second output with the wrong sign",
            applies=_two_outputs,
            grad_outputs=_second_output,
            out_tangents=lambda site, outs, ts: _second_output(site, outs),
        ),
        Mutant(
            "noncontiguous_grad_output",
            "a non-contiguous grad_output read as if it were contiguous",
            grad_outputs=_each(_as_if_contiguous),
            caught_by=("layout",),
        ),
        Mutant(
            "noncontiguous_input",
            "the gradient 1.5 times too large for a non-contiguous input",
            grads=_each_with(lambda site, i, g: g if site.contiguous[i] else g * 1.5),
            tangents=_each_with(lambda site, i, t: t if site.contiguous[i] else t * 1.5),
            caught_by=("layout",),
        ),
        Mutant(
            "needs_input_grad",
            "the gradient 1.5 times too large unless every input requires grad",
            applies=_subsets,
            grads=lambda site, gs: (
                gs if all(site.requires[: site.signature]) else _each(lambda g: g * 1.5)(site, gs)
            ),
            caught_by=("subsets",),
        ),
        Mutant(
            "wrong_in_low_precision",
            "the gradient 5% too large in float32, bfloat16 and float16",
            applies=_lower_dtypes,
            grads=_each(lambda g: g if _float64(g) else g * 1.05),
            tangents=_each(lambda t: t if _float64(t) else t * 1.05),
            caught_by=_in_lower_dtypes,
        ),
        Mutant(
            "nan_when_large",
            "the gradient nan wherever abs(x) > 1000 (an overflow)",
            grads=_each_with(_nan_where_large),
            tangents=_each_with(_nan_where_large),
            caught_by=_at_large_inputs,
            idle=_no_large_inputs,
        ),
        Mutant(
            "not_repeatable",
            "backward run again on the same graph gives 1.5 times the gradient (state kept between calls)",
            grads=lambda site, gs: gs if site.calls <= 1 else _each(lambda g: g * 1.5)(site, gs),
            caught_by=("hygiene", "gradient"),
        ),
        Mutant(
            "wrong_on_negatives",
            "the gradient 1.5 times too large wherever x < 0",
            grads=_each_with(lambda site, i, g: g * (1 + 0.5 * site.xs[i].lt(0).to(g.dtype))),
            tangents=_each_with(lambda site, i, t: t * (1 + 0.5 * site.xs[i].lt(0).to(t.dtype))),
            idle=_no_negatives,
        ),
    )
}


def parse_mutants(items: Sequence[str] | None) -> list[str]:
    """Mutant names from comma-separated items (all but the control if None); ValueError on an
    unknown name, or on items that name none."""
    names = [m.strip() for item in items or () for m in item.split(",") if m.strip()]
    if items is not None and not names:
        raise ValueError(f"no mutant named; choose from {', '.join(MUTANTS)}")
    for name in names:
        if name not in MUTANTS:
            raise ValueError(f"unknown mutant {name!r}; choose from {', '.join(MUTANTS)}")
    return list(dict.fromkeys(names)) or [m.name for m in MUTANTS.values() if not m.control]


def summaries() -> str:
    """The mutants, one ``name: summary`` per line, for help texts."""
    return "\n".join(f"  {m.name}: {m.summary}" for m in MUTANTS.values())


__all__ = ["MUTANTS", "Grads", "Mutant", "Site", "parse_mutants", "summaries"]
