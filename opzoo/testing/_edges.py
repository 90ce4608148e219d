"""The inputs every check sees, whatever hypothesis draws: small fixed ones, and the edge inputs
(one element, empty, a size-1 dimension between others, five dimensions, a large one), each
deterministic, so that a failure's reproduce line rebuilds it by its index."""

from __future__ import annotations

import math
from typing import Mapping, cast

import torch

from opzoo.core._inputs import Drawn, Permutation
from opzoo.core._params import Mask
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

#: The large edge input has this many elements: fast paths that switch on size are exercised too.
EDGE_SIZE = 100_000


def fixed_inputs(spec: OpSpec, device: str) -> list[tuple[torch.Tensor, ...]]:
    """Small deterministic inputs: for an elementwise op spread over the domain and pushed off the
    kinks; otherwise shaped by the signature, each dimension name a different small size (at least
    its declared minimum), with a loop dimension where the op takes one."""
    sig = spec.contract.sig
    if drawn_only(spec):
        return []
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
        if _optional(spec):  # the first with None there, then as given
            out.insert(0, _none_where_optional(spec, out[0]))  # type: ignore[arg-type]
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
    elements, where a size-switched fast path would hide) and, for an n-ary op that broadcasts, inputs
    whose loops broadcast against each other. Values are spread over the box, each input
    its own, never all at the centre (the origin of an n-ary op, where atan2 or pow has no
    derivative) nor on a grid that lines up with kinks."""
    sig = spec.contract.sig
    if drawn_only(spec):
        return []
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
        made = _with_constants(spec, xs, dims, device)
        out.append(_none_where_optional(spec, made) if phase % 2 == 0 else made)
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
        size: int, loop: tuple[int, ...], scale: float = 1.0, sizes: dict[str, int] | None = None
    ) -> tuple[list[tuple[int, ...]], dict[str, int], float]:
        dims = {d: max((sizes or {}).get(d, size), mins.get(d, 0)) for d in names}
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
    elif rank == 1:
        plans.append(shapes(101, (math.ceil(EDGE_SIZE / 101),) if max_loop else ()))
    else:
        # One input large (the first with the most named dimensions, of the highest rank among
        # them), the dimensions it does not share small: the large input's elements, not the
        # product of every dimension (a pairwise kernel over (n,d),(m,d) made n = m = d = 317
        # builds 317^3 = 32 M elements per call).
        side = math.ceil(EDGE_SIZE ** (1 / rank))
        named = [[d for d in core if not d.isdigit()] for core in sig.inputs]
        large = max(range(len(named)), key=lambda i: (len(named[i]), len(sig.inputs[i])))
        plans.append(shapes(2, (), sizes={d: side for d in named[large]}))
    if len(sig.inputs) > 1 and spec.contract.broadcast and max_loop >= 2:
        # loops that broadcast against each other, (2, 1) with (3,): a backward that does not sum a
        # broadcast input's gradient back (or averages it) shows here whatever hypothesis draws
        cores, dims, _ = shapes(2, ())
        plans.append(([((2, 1) if i % 2 == 0 else (3,)) + c for i, c in enumerate(cores)], dims, 1.0))
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


def drawn_only(spec: OpSpec) -> bool:
    """Whether an input is drawn by a user's strategy alone (:class:`~opzoo.Drawn` without a map):
    then there are no fixed or edge inputs, which need a deterministic map."""
    sets = spec.arguments.sets if spec.arguments is not None else {}
    return any(isinstance(kind, Drawn) and kind.map is None for kind in sets.values())


def in_sets(spec: OpSpec, xs: list[torch.Tensor], box: float) -> list[torch.Tensor]:
    """``xs`` (free float64 values) with each input that lives in a set mapped into it (as drawn
    inputs are), then each inverse permutation made the inverse of the one it names."""
    if spec.arguments is None:
        return list(xs)
    sets, out = spec.arguments.sets, list(xs)
    for i, kind in sets.items():
        if xs[i] is not None and not (isinstance(kind, Drawn) and kind.map is None):  # a strategy's: as it is
            out[i] = kind.draw(xs[i].to(torch.float64), box)
    for i, j in spec.arguments.inverses.items():
        out[i] = cast(Permutation, sets[i]).inverse(out[j])
    return out


def _with_constants(
    spec: OpSpec, xs: list[torch.Tensor], dims: Mapping[str, int], device: str | torch.device
) -> tuple[torch.Tensor, ...]:
    """``xs`` with each input that lives in a set mapped into it, and each input that is not
    differentiated otherwise given deterministic values of its kind."""
    kinds = spec.arguments.constants if spec.arguments is not None else {}
    sets = spec.arguments.sets if spec.arguments is not None else {}
    out = in_sets(spec, list(xs), BOX)
    for i, kind in kinds.items():
        if i in sets:
            continue
        shape = tuple(xs[i].shape)
        k = torch.arange(math.prod(shape), dtype=torch.int64)
        if isinstance(kind, Mask):
            values = (k % 3) != 1
        else:
            low, high = index_ends(kind, dims)
            values = (k * 7 + 3) % max(1, high - low) + low
        out[i] = values.reshape(shape).to(device=device, dtype=getattr(torch, kind.dtype))
    # an op that takes no tensor of fewer dimensions gets leading ones (the same values, in order)
    rank = spec.contract.min_rank
    return tuple(x.reshape((1,) * (rank - x.dim()) + tuple(x.shape)) if x.dim() < rank else x for x in out)


def _optional(spec: OpSpec) -> bool:
    kinds = spec.arguments.constants if spec.arguments is not None else {}
    return any(getattr(kind, "optional", False) for kind in kinds.values())


def _none_where_optional(spec: OpSpec, xs: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor | None, ...]:
    """``xs`` with None for each optional input (a Mask, an Index, constant Floats): the forward
    takes that too."""
    kinds = spec.arguments.constants if spec.arguments is not None else {}
    return tuple(None if getattr(kinds.get(i), "optional", False) else x for i, x in enumerate(xs))


def split(
    spec: OpSpec, inputs: tuple[torch.Tensor, ...]
) -> tuple[tuple[torch.Tensor, ...], dict[int, torch.Tensor]]:
    """The op's inputs as a check takes them: the differentiable ones, and the others (targets,
    masks) by their index, for :func:`~opzoo.testing.bind`'s ``constants``."""
    kinds = spec.arguments.constants if spec.arguments is not None else {}
    if not kinds:
        return inputs, {}
    xs = tuple(x for i, x in enumerate(inputs) if i not in kinds)
    return xs, {i: inputs[i] for i in kinds if i < len(inputs)}
