"""Where an op's inputs may lie: the box its domain gives, kept off its kinks by a margin; the
smallest size of each core dimension; the range of an integer input. Shared by the drawn inputs
(``strategies``) and the fixed and edge ones (``_edges``)."""

from __future__ import annotations

from typing import Iterable, Mapping

import torch

from opzoo.core._inputs import interval
from opzoo.core._params import Index
from opzoo.core._spec import OpSpec

#: Values are kept at least this far from every declared kink and open domain end.
KINK_MARGIN = 1e-3
#: Where the domain is unbounded, inputs are drawn from this box (activations are interesting here).
BOX = 6.0
#: Drawn inputs have up to this many dimensions (a bug in rank handling shows by 5).
MAX_RANK = 5


def domain_box(domain: tuple[float, float], margin: float) -> tuple[float, float]:
    """The interval inputs are drawn from: the domain less ``margin`` at open ends, else [-BOX, BOX]."""
    return interval(float(domain[0]), float(domain[1]), margin, BOX)


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


def min_sizes(spec: OpSpec) -> dict[str, int]:
    """The smallest size of each named core dimension: as declared, and at least one more than an
    :class:`~opzoo.Index`'s low end where its high end is that dimension (``[0, c)`` needs c >= 1)."""
    out = dict(spec.contract.min_sizes)
    for kind in spec.contract.inputs.values():
        if isinstance(kind, Index) and isinstance(kind.high, str):
            low = kind.low if isinstance(kind.low, int) else 0
            out[kind.high] = max(out.get(kind.high, 0), low + 1)
    return out


def index_ends(kind: Index, dims: Mapping[str, int]) -> tuple[int, int]:
    """An :class:`~opzoo.Index`'s range [low, high) at the sizes ``dims`` of its named dimensions."""
    low = dims[kind.low] if isinstance(kind.low, str) else kind.low
    high = dims[kind.high] if isinstance(kind.high, str) else kind.high
    return int(low), int(high)
