"""Hypothesis strategies for op inputs and parameters, following an op's contract.

Public: an op author can reuse them in their own tests, and a plugin can return one from the
``opzoo_input_strategy`` hook.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from opzoo.core._params import Index, Mask
from opzoo.core._registry import OpSpec, Registry

#: Values are kept at least this far from every declared kink and open domain end.
KINK_MARGIN = 1e-3
#: Where the domain is unbounded, inputs are drawn from this box (activations are interesting here).
BOX = 6.0
#: The large edge input has this many elements: fast paths that switch on size are exercised too.
EDGE_SIZE = 100_000
#: Drawn inputs have up to this many dimensions (a bug in rank handling shows by 5).
MAX_RANK = 5
#: Elements per drawn input of an op that is not elementwise, at most (the checks of such an op
#: cost more per element).
BUDGET = 96
#: The scales a drawn float input of an op that is not elementwise is multiplied by.
SCALES = (1.0, 0.2, 0.02)


def shapes(
    max_dims: int = MAX_RANK, max_side: int = 5, budget: int = 256
) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes from 0-d to ``max_dims``-d, sides 0..max_side, where a side of 1 is as likely as all
    the others together (size-1 dimensions in every position: a backward that squeezes one it
    should not, or broadcasts wrongly, is wrong only there), at most ``budget`` elements."""
    return _shape(st.integers(0, max_dims), _side(0, max_side), budget)


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


def domain_box(domain: tuple[float, float], margin: float) -> tuple[float, float]:
    """The interval inputs are drawn from: the domain less ``margin`` at open ends, else [-BOX, BOX]."""
    low, high = domain
    lo = low + max(margin, abs(low) * 1e-6) if math.isfinite(low) else -BOX
    hi = high - max(margin, abs(high) * 1e-6) if math.isfinite(high) else BOX
    if math.isfinite(low) and not math.isfinite(high):
        hi = max(lo + BOX, hi)
    if math.isfinite(high) and not math.isfinite(low):
        lo = min(hi - BOX, lo)
    return lo, hi


def push_from_kinks(
    values: torch.Tensor, kinks: Iterable[float], margin: float, bounds: tuple[float, float]
) -> torch.Tensor:
    """Move values that lie within ``margin`` of a kink out to the margin's edge (no filtering,
    so hypothesis shrinks freely); the side is chosen to stay inside ``bounds``."""
    out = values.clone()
    lo, hi = bounds
    for k in kinks:
        near = (out - k).abs() < margin
        if near.any():
            up, down = k + margin, k - margin
            if up > hi:
                out[near] = down
            elif down < lo:
                out[near] = up
            else:
                sel = out[near]
                out[near] = torch.where(sel >= k, torch.full_like(sel, up), torch.full_like(sel, down))
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


def min_sizes(spec: OpSpec) -> dict[str, int]:
    """The smallest size of each named core dimension: as declared, and at least one more than an
    :class:`~opzoo.Index`'s low end where its high end is that dimension (``[0, c)`` needs c >= 1)."""
    out = dict(spec.contract.min_sizes)
    for kind in spec.contract.inputs.values():
        if isinstance(kind, Index) and isinstance(kind.high, str):
            low = kind.low if isinstance(kind.low, int) else 0
            out[kind.high] = max(out.get(kind.high, 0), low + 1)
    return out


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
    core_rank = max((len(core) for core in sig.inputs), default=0)
    max_loop = MAX_RANK - core_rank
    if contract.loop_dims is not None:
        max_loop = min(max_loop, contract.loop_dims)
    plan = _ShapePlan(
        sizes={d: _side(mins.get(d, 0), max(max_side, mins.get(d, 0))) for d in names},
        loop=st.integers(0, max(0, max_loop)),
        side=_side(0, max_side),
        budget=budget,
        broadcast=len(sig.inputs) > 1,
        same_rank=contract.axis is not None,
    )
    by_shape: dict[tuple[Any, ...], st.SearchStrategy[torch.Tensor]] = {}
    kinds = spec.arguments.constants if spec.arguments is not None else {}

    def tensor_of(i: int, shape: tuple[int, ...], dims: dict[str, int]) -> st.SearchStrategy[torch.Tensor]:
        # One strategy per shape, as _tensor keeps one array strategy per shape: not one per draw.
        kind = kinds.get(i)
        key = (i, shape, tuple(sorted(dims.items())) if kind is not None else ())
        if key not in by_shape:
            if kind is None:
                by_shape[key] = tensors(dtype=dtype, shape=shape, device=device)
            else:
                by_shape[key] = _constant(kind, shape, dims, device)
        return by_shape[key]

    return _signature_tensors(plan, sig.inputs, tensor_of)


@dataclass(frozen=True)
class _ShapePlan:
    """How to draw the shapes of a signature's inputs."""

    sizes: dict[str, st.SearchStrategy[int]]  # each named core dimension's size
    loop: st.SearchStrategy[int]  # how many loop dimensions
    side: st.SearchStrategy[int]  # each loop dimension's size
    budget: int  # elements per input, at most
    broadcast: bool  # several inputs: loop dimensions broadcast
    same_rank: bool  # but every input has them all (an op with a Dim parameter)


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
                own = own[len(own) - draw(st.integers(0, len(own))) :]
            own = [1 if draw(st.booleans()) else s for s in own]
        shape = tuple(own) + tuple(int(d) if d.isdigit() else dims[d] for d in core)
        t = draw(tensor_of(i, shape, dims))
        if t.is_floating_point() and t.numel() > 1:
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
        low, high = _ends(kind, dims)
        elements, np_dtype = st.integers(low, max(low, high - 1)), np.int64
    dtype = getattr(torch, kind.dtype)
    if math.prod(shape) == 0:
        return st.just(torch.empty(shape, dtype=dtype, device=device))
    return hnp.arrays(np_dtype, shape, elements=elements).map(
        lambda a: (
            torch.from_numpy(np.ascontiguousarray(a).copy()).reshape(shape).to(device=device, dtype=dtype)
        )
    )


def _ends(kind: Index, dims: Mapping[str, int]) -> tuple[int, int]:
    low = dims[kind.low] if isinstance(kind.low, str) else kind.low
    high = dims[kind.high] if isinstance(kind.high, str) else kind.high
    return int(low), int(high)


def inputs(
    spec: OpSpec,
    params_value: Mapping[str, Any],
    *,
    dtype: torch.dtype = torch.float64,
    device: str | torch.device = "cpu",
    registry: Registry | None = None,
) -> st.SearchStrategy[tuple[torch.Tensor, ...]]:
    """Inputs for ``spec`` at ``params_value``, one tensor per signature input: a plugin's strategy
    if one offers it (asked through ``registry``), else tensors that fit the signature (inside the
    domain and off the declared kinks, for an elementwise op)."""
    custom = plugin_strategy(spec, dtype, registry)
    if custom is not None:
        return custom.map(lambda drawn: _as_inputs(drawn, dtype, device))
    if not spec.contract.sig.elementwise:
        return signature_inputs(spec, dtype=dtype, device=device)
    one = tensors(
        dtype=dtype,
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


def plugin_strategy(
    spec: OpSpec, dtype: torch.dtype, registry: Registry | None
) -> st.SearchStrategy[Any] | None:
    """The strategy a plugin's ``opzoo_input_strategy`` offers for ``spec``, or None."""
    if registry is None:
        return None
    return registry.input_strategy(spec, dtype, accept=lambda s: isinstance(s, st.SearchStrategy))


def cases(
    spec: OpSpec, *, device: str = "cpu", registry: Registry | None = None
) -> st.SearchStrategy[tuple[dict[str, Any], tuple[torch.Tensor, ...]]]:
    """(params, inputs) pairs for ``spec``, one input per signature input (float64, or an integer or
    bool tensor where declared): params first, since kinks may depend on them; the Dim parameter
    last, anywhere from -rank to rank - 1 of the inputs drawn."""

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


# -- inputs every check sees, whatever hypothesis draws --------------------------------------------


def fixed_inputs(spec: OpSpec, device: str) -> list[tuple[torch.Tensor, ...]]:
    """Small deterministic inputs: for an elementwise op spread over the domain and pushed off the
    kinks; otherwise shaped by the signature, each dimension name a different small size (at least
    its declared minimum), with a loop dimension where the op takes one."""
    sig = spec.contract.sig
    if not sig.elementwise:
        names = sorted({d for core in sig.inputs for d in core if not d.isdigit()})
        mins = min_sizes(spec)
        loops = [((), 2), ((2,), 3)] if _max_loop(spec) else [((), 2), ((), 3)]
        out = []
        for loop, base in loops:
            dims = {d: max(base + k, mins.get(d, 0)) for k, d in enumerate(names)}
            xs = []
            for i, core in enumerate(sig.inputs):
                shape = loop + tuple(int(d) if d.isdigit() else dims[d] for d in core)
                n = max(1, math.prod(shape))
                values = torch.linspace(-2.0 + 0.3 * i, 2.5 - 0.2 * i, n, dtype=torch.float64)
                xs.append(values[: math.prod(shape)].reshape(shape).to(device))
            out.append(_with_constants(spec, xs, dims, device))
        return out
    lo, hi = domain_box(spec.contract.domain, KINK_MARGIN)
    kinks = spec.contract.kinks_at()
    out = []
    for shape in ((7,), (2, 3)):
        n = math.prod(shape)
        x = torch.linspace(lo, hi, n + 2, dtype=torch.float64)[1:-1]
        x = push_from_kinks(x, kinks, KINK_MARGIN, (lo, hi)).reshape(shape).to(device)
        out.append((x,))
    return out


def edge_inputs(spec: OpSpec, device: str) -> list[tuple[torch.Tensor, ...]]:
    """Inputs every check sees whatever hypothesis draws, each deterministic so that a failure's
    repro can rebuild it by its index: one element at several values (0-d, and of every core
    dimension 1), empty ones, a size-1 dimension between others (``(3, 1, 4)``: a ``squeeze()``
    without a dim shows there), five dimensions, and a large input (at least ``_bound.LARGE``
    elements, where a size-switched fast path would hide). Values are spread over the box, each input
    its own, never all at the centre (the origin of an n-ary op, where atan2 or pow has no
    derivative) nor on a grid that lines up with kinks."""
    sig = spec.contract.sig
    if sig.elementwise:
        plans: list[tuple[list[tuple[int, ...]], dict[str, int], float]] = [
            ([shape], {}, 1.0)
            for shape in ((), (), (), (1,), (0,), (3, 1, 4), (1, 2, 1, 3, 1), (EDGE_SIZE + 3,))
        ]
    else:
        plans = _general_edges(spec)
    lo, hi = domain_box(spec.contract.domain, KINK_MARGIN)
    kinks = spec.contract.kinks_at()
    out = []
    for phase, (shapes, dims, scale) in enumerate(plans):
        xs = []
        for i, shape in enumerate(shapes):
            x = _spread(math.prod(shape), i, phase, lo * scale, hi * scale)
            xs.append(push_from_kinks(x, kinks, KINK_MARGIN, (lo, hi)).reshape(shape).to(device))
        # constants (masks, class targets) get values of their kind whether or not a named dimension
        # bounds them: a mask of an op with scalar cores, "(),()->()", is still a mask
        out.append(_with_constants(spec, xs, dims, device))
    return out


def _general_edges(spec: OpSpec) -> list[tuple[list[tuple[int, ...]], dict[str, int], float]]:
    """The edge shapes of an op that is not elementwise, with the size of each named dimension and
    the part of the box their values spread over."""
    sig = spec.contract.sig
    names = list(dict.fromkeys(d for core in sig.inputs for d in core if not d.isdigit()))
    mins = min_sizes(spec)
    rank = max(len(core) for core in sig.inputs)
    max_loop = _max_loop(spec)

    def shapes(
        size: int, loop: tuple[int, ...], scale: float = 1.0
    ) -> tuple[list[tuple[int, ...]], dict[str, int], float]:
        dims = {d: max(size, mins.get(d, 0)) for d in names}
        cores = [loop + tuple(int(d) if d.isdigit() else dims[d] for d in core) for core in sig.inputs]
        return cores, dims, scale

    plans = [shapes(1, ()) for _ in range(3)]  # one element each, at three values
    if any(mins.get(d, 0) == 0 for d in names):
        plans.append(shapes(0, ()))
    if max_loop:
        plans.append(shapes(1, (0,)))
    if max_loop >= 2:
        plans.append(shapes(3, (2, 1)))
        # again over a tenth of the box, where a softmax-like op is far from one-hot
        plans.append(shapes(3, (2, 1), 0.1))
    if max_loop and rank < MAX_RANK:
        plans.append(shapes(2, (1, 2, 1, 2)[: min(max_loop, MAX_RANK - rank)]))
    if rank == 0:
        plans.append(shapes(1, (EDGE_SIZE,) if max_loop else ()))
    else:
        side = math.ceil(EDGE_SIZE ** (1 / rank)) if rank > 1 else 101
        loop = (math.ceil(EDGE_SIZE / side),) if rank == 1 and max_loop else ()
        plans.append(shapes(side, loop))
    return plans


def _max_loop(spec: OpSpec) -> int:
    """How many loop dimensions an input may have."""
    rank = max((len(core) for core in spec.contract.sig.inputs), default=0)
    most = MAX_RANK - rank
    loop_dims = spec.contract.loop_dims
    return max(0, most if loop_dims is None else min(most, loop_dims))


def _spread(n: int, i: int, phase: int, lo: float, hi: float) -> torch.Tensor:
    """``n`` deterministic values in (lo, hi), a golden-ratio sequence shifted by the input ``i`` and
    the ``phase`` (distinct, spread over the whole interval, none at its centre), in an order shuffled
    by a generator seeded from ``i`` and ``phase``. The shuffle matters: laid out as a matrix, the
    sequence in order is, but for its wrap-arounds, ``a + b*row + c*col``, of rank about two, so every
    square matrix it filled (a (47, 47) core of the large edge input) was singular to rounding, a point
    where polar factors and inverses have no derivative; shuffled, it is conditioned as a random
    matrix is. One value (0-d, a single element) is not moved."""
    k = torch.arange(n, dtype=torch.float64)
    frac = (k * 0.6180339887498949 + 0.137 + 0.291 * i + 0.381966 * phase) % 1.0
    order = torch.randperm(n, generator=torch.Generator().manual_seed(1 + 31 * i + 1009 * phase))
    return lo + (hi - lo) * (0.04 + 0.92 * frac[order])


def _with_constants(
    spec: OpSpec, xs: list[torch.Tensor], dims: Mapping[str, int], device: str | torch.device
) -> tuple[torch.Tensor, ...]:
    """``xs`` with each input that is not differentiated given deterministic values of its kind."""
    kinds = spec.arguments.constants if spec.arguments is not None else {}
    out = list(xs)
    for i, kind in kinds.items():
        shape = tuple(xs[i].shape)
        k = torch.arange(math.prod(shape), dtype=torch.int64)
        if isinstance(kind, Mask):
            values = (k % 3) != 1
        else:
            low, high = _ends(kind, dims)
            values = (k * 7 + 3) % max(1, high - low) + low
        out[i] = values.reshape(shape).to(device=device, dtype=getattr(torch, kind.dtype))
    return tuple(out)
