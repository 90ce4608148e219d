"""Hypothesis strategies for op inputs and parameters, following an op's contract.

Public: an op author can reuse them in their own tests, and a plugin can return one from the
``opzoo_input_strategy`` hook.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping

import numpy as np
import torch
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from opzoo._registry import OpSpec, Registry

#: Values are kept at least this far from every declared kink and open domain end.
KINK_MARGIN = 1e-3
#: Where the domain is unbounded, inputs are drawn from this box (activations are interesting here).
BOX = 6.0
#: The large edge input has this many elements: fast paths that switch on size are exercised too.
EDGE_SIZE = 100_000


def shapes(max_dims: int = 4, max_side: int = 5) -> st.SearchStrategy[tuple[int, ...]]:
    """Shapes from 0-d to ``max_dims``-d, sides 0..max_side (so empty and size-1 dims occur)."""
    return hnp.array_shapes(min_dims=0, max_dims=max_dims, min_side=0, max_side=max_side)


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


def params(spec: OpSpec) -> st.SearchStrategy[dict[str, float | int]]:
    """Parameter dicts drawn from each declared range (unbounded sides capped at +-10); integer
    parameters as ints."""
    fields = {}
    for name, p in spec.contract.params.items():
        lo = p.low if math.isfinite(p.low) else -10.0
        hi = p.high if math.isfinite(p.high) else 10.0
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
    max_loop_dims: int = 2,
    max_side: int = 4,
) -> st.SearchStrategy[tuple[torch.Tensor, ...]]:
    """One tensor per signature input, with shapes from hypothesis's
    ``mutually_broadcastable_shapes``: core dimensions that agree across inputs, and loop dimensions
    that broadcast (sizes 0, 1 and more occur on both)."""
    shapes_st = hnp.mutually_broadcastable_shapes(
        signature=spec.contract.sig.input_signature(),
        min_dims=0,
        max_dims=max_loop_dims,
        min_side=0,
        max_side=max_side,
    )

    by_shape: dict[tuple[int, ...], st.SearchStrategy[torch.Tensor]] = {}

    def tensor_of(shape: tuple[int, ...]) -> st.SearchStrategy[torch.Tensor]:
        # One strategy per shape, as _tensor keeps one array strategy per shape: not one per draw.
        if shape not in by_shape:
            by_shape[shape] = tensors(dtype=dtype, shape=shape, device=device)
        return by_shape[shape]

    return _signature_tensors(shapes_st, tensor_of)


@st.composite
def _signature_tensors(
    draw: Any, shapes_st: st.SearchStrategy[Any], tensor_of: Any
) -> tuple[torch.Tensor, ...]:
    shapes = draw(shapes_st).input_shapes
    return tuple(draw(tensor_of(tuple(shape))) for shape in shapes)


def inputs(
    spec: OpSpec,
    params_value: Mapping[str, float],
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
    """A plugin strategy draws a tensor (one-input ops) or a tuple of them."""
    items = drawn if isinstance(drawn, (tuple, list)) else (drawn,)
    return tuple(t.to(device=device, dtype=dtype) for t in items)


def plugin_strategy(
    spec: OpSpec, dtype: torch.dtype, registry: Registry | None
) -> st.SearchStrategy[Any] | None:
    """The strategy a plugin's ``opzoo_input_strategy`` offers for ``spec``, or None."""
    if registry is None:
        return None
    return registry.input_strategy(spec, dtype, accept=lambda s: isinstance(s, st.SearchStrategy))


def cases(
    spec: OpSpec, *, device: str = "cpu", registry: Registry | None = None
) -> st.SearchStrategy[tuple[dict[str, float | int], tuple[torch.Tensor, ...]]]:
    """(params, float64 inputs) pairs for ``spec``: params first, since kinks may depend on them."""

    memo: dict[tuple[float, ...], st.SearchStrategy[tuple[torch.Tensor, ...]]] = {}

    def inputs_at(p: dict[str, float | int]) -> st.SearchStrategy[tuple[torch.Tensor, ...]]:
        # The inputs depend on the params only through the kinks (elementwise ops): one strategy per
        # set of kinks, not one per draw (building and validating them was a third of a check).
        key = tuple(spec.contract.kinks_at(p)) if spec.contract.sig.elementwise else ()
        if key not in memo:
            memo[key] = inputs(spec, p, device=device, registry=registry)
        return memo[key]

    return _cases(params(spec), inputs_at)


@st.composite
def _cases(
    draw: Any,
    params_st: st.SearchStrategy[dict[str, float | int]],
    inputs_at: Any,
) -> tuple[dict[str, float | int], tuple[torch.Tensor, ...]]:
    p = draw(params_st)
    return p, draw(inputs_at(p))


# -- inputs every check sees, whatever hypothesis draws --------------------------------------------


def fixed_inputs(spec: OpSpec, device: str) -> list[tuple[torch.Tensor, ...]]:
    """Small deterministic inputs: for an elementwise op spread over the domain and pushed off the
    kinks; otherwise shaped by the signature, each dimension name a different small size."""
    sig = spec.contract.sig
    if not sig.elementwise:
        names = sorted({d for core in sig.inputs for d in core if not d.isdigit()})
        out = []
        for loop, base in (((), 2), ((2,), 3)):
            sizes = {d: base + k for k, d in enumerate(names)}
            xs = []
            for i, core in enumerate(sig.inputs):
                shape = loop + tuple(int(d) if d.isdigit() else sizes[d] for d in core)
                n = max(1, math.prod(shape))
                values = torch.linspace(-2.0 + 0.3 * i, 2.5 - 0.2 * i, n, dtype=torch.float64)
                xs.append(values[: math.prod(shape)].reshape(shape).to(device))
            out.append(tuple(xs))
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
    """Inputs every check sees whatever hypothesis draws: a 0-d tensor, one element, an empty
    tensor, and a large one (at least ``_bound.LARGE`` elements, where a size-switched fast path
    would hide), each deterministic so that a failure's repro can rebuild it by its index."""
    sig = spec.contract.sig
    lo, hi = domain_box(spec.contract.domain, KINK_MARGIN)
    kinks = spec.contract.kinks_at()
    if sig.elementwise:
        shapes_list: list[list[tuple[int, ...]]] = [[()], [(1,)], [(0,)], [(EDGE_SIZE + 3,)]]
    else:
        rank = max(len(core) for core in sig.inputs)
        side = math.ceil(EDGE_SIZE ** (1 / rank)) if rank > 1 else 101
        loop = (math.ceil(EDGE_SIZE / side),) if rank == 1 else ()
        names = {d for core in sig.inputs for d in core if not d.isdigit()}
        shapes_list = []
        for size, lead in ((1, ()), (0, ()), (1, (0,)), (side, loop)):
            dims = dict.fromkeys(names, size)
            shapes_list.append(
                [lead + tuple(int(d) if d.isdigit() else dims[d] for d in core) for core in sig.inputs]
            )
    out = []
    for shapes in shapes_list:
        xs = []
        for i, shape in enumerate(shapes):
            n = math.prod(shape)
            # distinct values per input, spread over the box, not on a grid that lines up with kinks
            x = torch.linspace(lo, hi, max(n, 1) + 2, dtype=torch.float64)[1 : n + 1] * (1 - 0.013 * i)
            x = x.clamp(lo, hi) if sig.elementwise else x
            xs.append(push_from_kinks(x, kinks, KINK_MARGIN, (lo, hi)).reshape(shape).to(device))
        out.append(tuple(xs))
    return out
