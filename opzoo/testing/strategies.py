"""Hypothesis strategies for op inputs and parameters, following an op's contract.

Public: an op author can reuse them in their own tests, and a plugin can return one from the
``opzoo_input_strategy`` hook. The inputs every check sees besides the drawn ones (``fixed_inputs``,
``edge_inputs``) and where inputs may lie (``domain_box``, ``KINK_MARGIN``, ...) live in
``opzoo.testing._edges`` and ``opzoo.testing._domain``, and are importable from here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, cast

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from opzoo.core._inputs import Drawn, InputSet
from opzoo.core._params import Index, Mask
from opzoo.core._spec import OpSpec
from opzoo.testing._domain import (
    BOX,
    KINK_MARGIN,
    MAX_RANK,
    domain_box,
    index_ends,
    min_sizes,
    push_from_kinks,
)
from opzoo.testing._edges import EDGE_SIZE, edge_inputs, fixed_inputs, in_sets
from opzoo.testing.running._hooks import Asked, hooks_of

__all__ = [
    "BOX",
    "BUDGET",
    "EDGE_SIZE",
    "KINK_MARGIN",
    "MAX_RANK",
    "SCALES",
    "cases",
    "domain_box",
    "edge_inputs",
    "fixed_inputs",
    "inputs",
    "min_sizes",
    "params",
    "plugin_strategy",
    "push_from_kinks",
    "shapes",
    "signature_inputs",
    "tensors",
]

#: Elements per drawn input of an op that is not elementwise, at most (the checks of such an op
#: cost more per element).
BUDGET = 96
#: The scales a drawn float input of an op that is not elementwise is multiplied by.
SCALES = (1.0, 0.2, 0.02)


def shapes(
    max_dims: int = MAX_RANK, max_side: int = 5, budget: int = 256, min_dims: int = 0
) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes from ``min_dims``-d to ``max_dims``-d, sides 0..max_side, where a side of 1 is as
    likely as all the others together (size-1 dimensions in every position: a backward that
    squeezes one it should not, or broadcasts wrongly, is wrong only there), at most ``budget``
    elements."""
    return _shape(st.integers(min_dims, max_dims), _side(0, max_side), budget)


def _side(low: int, high: int) -> st.SearchStrategy[int]:
    """A side from [low, high]: 1 (or low) half the time; hypothesis shrinks towards it."""
    one = max(1, low) if high >= 1 else low
    return st.one_of(st.just(one), st.integers(low, max(low, high)))


@st.composite
def _shape(
    draw: Any, rank: st.SearchStrategy[int], side: st.SearchStrategy[int], budget: int
) -> tuple[int, ...]:
    sides = [draw(side) for _ in range(draw(rank))]
    return tuple(_within(sides, budget))


def _within(sides: list[int], budget: int, keep: int = 0) -> list[int]:
    """``sides`` with the leftmost ones (all but the last ``keep``) set to 1 until their product is
    at most ``budget``: deterministic, so that hypothesis still shrinks freely."""
    out = list(sides)
    for k in range(len(out) - keep):
        if math.prod(out) <= budget:
            break
        out[k] = min(out[k], 1)
    return out


def tensors(
    *,
    dtype: torch.dtype = torch.float64,
    shape: tuple[int, ...] | st.SearchStrategy[tuple[int, ...]] | None = None,
    domain: tuple[float, float] = (-math.inf, math.inf),
    kinks: Iterable[float] = (),
    margin: float = KINK_MARGIN,
    elements: tuple[str, float, float] | None = None,
    device: str | torch.device = "cpu",
) -> st.SearchStrategy[torch.Tensor]:
    """Contiguous float tensors inside ``domain``, at least ``margin`` away from each kink.

    ``elements=("log-uniform", lo, hi)`` draws values in [lo, hi] spread evenly over the decades
    instead, and ``("signed-log-uniform", lo, hi)`` the same magnitudes with either sign.
    Empty tensors are made with ``torch.empty`` (contiguous strides; numpy's are zero).
    """
    kinks = tuple(float(k) for k in kinks)
    shape_st = shapes() if shape is None else (st.just(shape) if isinstance(shape, tuple) else shape)
    if elements is not None:
        kind, lo, hi = elements
        if kind not in ("log-uniform", "signed-log-uniform") or not 0 < lo < hi:
            raise ValueError(
                f"elements must be ('log-uniform' or 'signed-log-uniform', lo, hi) with 0 < lo < hi, "
                f"got {elements!r}"
            )
        floats = st.floats(math.log(lo), math.log(hi), allow_nan=False).map(math.exp)
        bounds = (lo, hi)
        if kind == "signed-log-uniform":
            floats = st.tuples(st.booleans(), floats).map(lambda t: -t[1] if t[0] else t[1])
            bounds = (-hi, hi)
    else:
        bounds = domain_box(domain, margin)
        floats = st.floats(bounds[0], bounds[1], allow_nan=False, allow_infinity=False)

    return _tensor(shape_st, floats, kinks, margin, bounds, device, dtype, {})


@st.composite
def _tensor(
    draw: Any,
    shape_st: st.SearchStrategy[tuple[int, ...]],
    floats: st.SearchStrategy[float],
    kinks: tuple[float, ...],
    margin: float,
    bounds: tuple[float, float],
    device: str | torch.device,
    dtype: torch.dtype,
    arrays: dict[tuple[int, ...], st.SearchStrategy[Any]],
) -> torch.Tensor:
    # At module level, not in tensors(): @st.composite reads the function's source when it is
    # applied, which cost more than the whole draw when it was applied once per example. ``arrays``
    # keeps one array strategy per shape: hypothesis validates each new strategy on first draw.
    shp = draw(shape_st)
    if math.prod(shp) == 0:
        return torch.empty(shp, dtype=torch.float64).to(device=device, dtype=dtype)
    if shp not in arrays:
        arrays[shp] = hnp.arrays(np.float64, shp, elements=floats)
    arr = draw(arrays[shp])
    t = torch.from_numpy(np.ascontiguousarray(arr).copy()).reshape(shp)
    t = push_from_kinks(t, kinks, margin, bounds)
    return t.to(device=device, dtype=dtype).contiguous()


def params(spec: OpSpec) -> st.SearchStrategy[dict[str, Any]]:
    """Parameter dicts drawn from each declaration: a number from its range (unbounded sides capped
    at +-10; an integer one as an int), a choice from its values, an optional one None or a number.
    The Dim parameter is not here: where it may point depends on the inputs (see :func:`cases`)."""
    fields = {}
    for name, p in spec.contract.params.items():
        if p.axis:
            continue
        if p.kind == "choice":
            fields[name] = st.sampled_from(p.values())
            continue
        lo = p.low if math.isfinite(p.low) else -10.0
        hi = p.high if math.isfinite(p.high) else 10.0
        if p.default is not None:
            lo, hi = min(lo, p.default), max(hi, p.default)
        if p.integer:
            drawn = st.integers(math.ceil(lo), math.floor(hi))
        else:
            drawn = st.floats(lo, hi, allow_nan=False)
        fields[name] = st.one_of(st.just(p.default), drawn)
    return st.fixed_dictionaries(fields)


def signature_inputs(
    spec: OpSpec,
    *,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    max_side: int = 4,
    budget: int = BUDGET,
) -> st.SearchStrategy[tuple[torch.Tensor, ...]]:
    """One tensor per signature input: core dimensions that agree across inputs (at least their
    declared minimum sizes), and up to :data:`MAX_RANK` dimensions in all, the loop dimensions
    broadcasting (an input may have fewer, or a 1 where another has more; not for an op with a Dim
    parameter, whose inputs share one rank). Sides of 1 are as likely as all others together.
    Integer and bool inputs (:class:`~opzoo.Index`, :class:`~opzoo.Mask`) are drawn in their
    declared ranges, floats in [-BOX, BOX]."""
    sig, contract = spec.contract.sig, spec.contract
    names = list(dict.fromkeys(d for core in sig.inputs for d in core if not d.isdigit()))
    mins = min_sizes(spec)
    sets = spec.arguments.sets if spec.arguments is not None else {}
    core_rank = max((len(core) for core in sig.inputs), default=0)
    max_loop = MAX_RANK - core_rank
    if contract.loop_dims is not None:
        max_loop = min(max_loop, contract.loop_dims)
    fewest = min((len(core) for core in sig.inputs), default=0)
    plan = _ShapePlan(
        sizes={d: _side(mins.get(d, 0), max(max_side, mins.get(d, 0))) for d in names},
        loop=st.integers(max(0, contract.min_rank - fewest), max(0, max_loop)),
        side=_side(0, max_side),
        budget=budget,
        broadcast=len(sig.inputs) > 1 and contract.broadcast,
        same_rank=contract.axis is not None,
        min_rank=contract.min_rank,
        unscaled=frozenset(i for i, kind in sets.items() if not _mapped(kind)),
    )
    by_shape: dict[tuple[Any, ...], st.SearchStrategy[torch.Tensor]] = {}
    kinds = spec.arguments.constants if spec.arguments is not None else {}

    def tensor_of(i: int, shape: tuple[int, ...], dims: dict[str, int]) -> st.SearchStrategy[torch.Tensor]:
        # One strategy per shape, as _tensor keeps one array strategy per shape: not one per draw.
        kind = kinds.get(i)
        key = (i, shape, tuple(sorted(dims.items())) if kind is not None else ())
        if key not in by_shape:
            if i in sets:
                by_shape[key] = _free(sets[i], shape, device)
            elif kind is None:
                by_shape[key] = tensors(dtype=dtype, shape=shape, device=device)
            else:
                by_shape[key] = _constant(kind, shape, dims, device)
        return by_shape[key]

    def finish(xs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        # The free values of each input in a set, scaled, mapped into it; floats in the check's dtype.
        out = in_sets(spec, list(xs), BOX)
        floats = {i for i, x in enumerate(out) if i in sets and x is not None and x.is_floating_point()}
        return tuple(x.to(dtype) if i in floats else x for i, x in enumerate(out))

    return _signature_tensors(plan, sig.inputs, tensor_of).map(finish)


def _mapped(kind: InputSet | None) -> bool:
    """Whether an input is drawn by a map of free values (not by a user's strategy)."""
    return kind is not None and not (isinstance(kind, Drawn) and kind.map is None)


def _free(
    kind: InputSet, shape: tuple[int, ...], device: str | torch.device
) -> st.SearchStrategy[torch.Tensor]:
    """The free float64 values an input in a set is mapped from (or None, shrunk to, for an optional
    one: ``Floats(grad=False, optional=True)``); or the user's strategy's tensors."""
    if _mapped(kind):
        free = tensors(shape=shape, device=device)
        return st.one_of(st.none(), free) if getattr(kind, "optional", False) else free
    strategy = cast(Callable[[tuple[int, ...]], st.SearchStrategy[Any]], cast(Drawn, kind).strategy)
    return strategy(shape).map(lambda t: torch.as_tensor(t).to(device))


@dataclass(frozen=True)
class _ShapePlan:
    """How to draw the shapes of a signature's inputs."""

    sizes: dict[str, st.SearchStrategy[int]]  # each named core dimension's size
    loop: st.SearchStrategy[int]  # how many loop dimensions
    side: st.SearchStrategy[int]  # each loop dimension's size
    budget: int  # elements per input, at most
    broadcast: bool  # several inputs: loop dimensions broadcast
    same_rank: bool  # but every input has them all (an op with a Dim parameter)
    unscaled: frozenset[int] = frozenset()  # inputs drawn by a user's strategy: taken as drawn
    min_rank: int = 0  # every input has at least this many dimensions in all


@st.composite
def _signature_tensors(
    draw: Any, plan: _ShapePlan, cores: tuple[tuple[str, ...], ...], tensor_of: Any
) -> tuple[torch.Tensor, ...]:
    dims = {d: draw(size) for d, size in plan.sizes.items()}
    loop = [draw(plan.side) for _ in range(draw(plan.loop))]
    sizes = [math.prod(int(d) if d.isdigit() else dims[d] for d in core) for core in cores]
    core_elems = max(sizes, default=1)
    loop = _within(loop, max(1, plan.budget // max(1, core_elems)))
    out = []
    for i, core in enumerate(cores):
        own = loop
        if plan.broadcast:
            if not plan.same_rank:
                keep = min(len(own), max(0, plan.min_rank - len(core)))
                own = own[len(own) - draw(st.integers(keep, len(own))) :]
            own = [1 if draw(st.booleans()) else s for s in own]
        shape = tuple(own) + tuple(int(d) if d.isdigit() else dims[d] for d in core)
        t = draw(tensor_of(i, shape, dims))
        if t is not None and t.is_floating_point() and t.numel() > 1 and i not in plan.unscaled:
            # At several scales: a softmax-like op is one-hot across [-6, 6] (hiding what its
            # backward does with a larger support), and interesting across [-0.1, 0.1].
            t = t * draw(st.sampled_from(SCALES))
        out.append(t)
    return tuple(out)


def _constant(
    kind: Index | Mask, shape: tuple[int, ...], dims: Mapping[str, int], device: str | torch.device
) -> st.SearchStrategy[torch.Tensor]:
    """Values for a tensor input that is not differentiated: an Index in its range, a Mask."""
    if isinstance(kind, Mask):
        elements: st.SearchStrategy[Any] = st.booleans()
        np_dtype: Any = np.bool_
    else:
        low, high = index_ends(kind, dims)
        elements, np_dtype = st.integers(low, max(low, high - 1)), np.int64
    dtype = getattr(torch, kind.dtype)
    if math.prod(shape) == 0:
        values: st.SearchStrategy[Any] = st.just(torch.empty(shape, dtype=dtype, device=device))
    else:
        values = hnp.arrays(np_dtype, shape, elements=elements).map(
            lambda a: (
                torch.from_numpy(np.ascontiguousarray(a).copy()).reshape(shape).to(device=device, dtype=dtype)
            )
        )
    return st.one_of(st.none(), values) if kind.optional else values  # shrinks to None


def inputs(
    spec: OpSpec,
    params_value: Mapping[str, Any],
    *,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    registry: Asked = None,
) -> st.SearchStrategy[tuple[torch.Tensor, ...]]:
    """Inputs for ``spec`` at ``params_value``, one tensor per signature input: a plugin's strategy
    if one offers it (asked through ``registry``: a Registry, or a run's ``RunHooks``, which keeps
    what the hooks answered and which failed), else tensors that fit the signature (inside the
    domain and off the declared kinks, for an elementwise op)."""
    custom = plugin_strategy(spec, dtype, registry)
    if custom is not None:
        return custom.map(lambda drawn: _as_inputs(drawn, dtype, device))
    if not spec.contract.sig.elementwise:
        return signature_inputs(spec, dtype=dtype, device=device)
    one = tensors(
        dtype=dtype,
        shape=shapes(min_dims=spec.contract.min_rank),
        domain=spec.contract.domain,
        kinks=spec.contract.kinks_at(params_value),
        device=device,
    )
    return one.map(lambda t: (t,))


def _as_inputs(drawn: Any, dtype: torch.dtype, device: str | torch.device) -> tuple[torch.Tensor, ...]:
    """A plugin strategy draws a tensor (one-input ops) or a tuple of them; float ones are cast to
    ``dtype``, integer and bool ones (targets, masks) kept."""
    items = drawn if isinstance(drawn, (tuple, list)) else (drawn,)
    return tuple(t.to(device=device, dtype=dtype) if t.is_floating_point() else t.to(device) for t in items)


def plugin_strategy(spec: OpSpec, dtype: torch.dtype, registry: Asked) -> st.SearchStrategy[Any] | None:
    """The strategy a plugin's ``opzoo_input_strategy`` offers for ``spec``, or None. A hook that
    fails is recorded in ``registry`` if it is a run's ``RunHooks``; asked through a Registry, the
    failure is passed over."""
    if registry is None:
        return None
    return hooks_of(registry).input_strategy(spec, dtype, accept=lambda s: isinstance(s, st.SearchStrategy))


def cases(
    spec: OpSpec, *, device: str = "cpu", registry: Asked = None
) -> st.SearchStrategy[tuple[dict[str, Any], tuple[torch.Tensor, ...]]]:
    """(params, inputs) pairs for ``spec``, one input per signature input (float64, or an integer or
    bool tensor where declared): params first, since kinks may depend on them; the Dim parameter
    last, anywhere from -rank to rank - 1 of the inputs drawn. ``registry``: as for :func:`inputs`."""
    if registry is not None:
        registry = hooks_of(registry)  # one run: each plugin asked once, not once per set of kinks
    memo: dict[tuple[float, ...], st.SearchStrategy[tuple[torch.Tensor, ...]]] = {}

    def inputs_at(p: dict[str, Any]) -> st.SearchStrategy[tuple[torch.Tensor, ...]]:
        # The inputs depend on the params only through the kinks (elementwise ops): one strategy per
        # set of kinks, not one per draw (building and validating them was a third of a check).
        key = tuple(spec.contract.kinks_at(p)) if spec.contract.sig.elementwise else ()
        if key not in memo:
            memo[key] = inputs(spec, p, device=device, registry=registry)
        return memo[key]

    cored = next((i for i, core in enumerate(spec.contract.sig.inputs) if core), None)
    return _cases(params(spec), inputs_at, spec.contract.axis, cored)


@st.composite
def _cases(
    draw: Any,
    params_st: st.SearchStrategy[dict[str, Any]],
    inputs_at: Any,
    axis: str | None,
    cored: int | None,
) -> tuple[dict[str, Any], tuple[torch.Tensor, ...]]:
    p = draw(params_st)
    xs = draw(inputs_at(p))
    if axis is not None and cored is not None:
        rank = xs[cored].dim()
        p = {**p, axis: draw(st.integers(-rank, rank - 1))}
    return p, xs
