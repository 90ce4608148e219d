"""A random forward (``Contract(random=True)``: ``rand_like``, dropout): what the checks say about one.

Every call of a declared one runs under one seed (:func:`~opzoo.testing.checks._reseed.reseeded`), so
that it is a function of its inputs for every property. One not declared fails where two runs are
compared (``layout``, ``compile``): :func:`hint` then says what it looks like.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from opzoo.testing.checks._bound import Bound, PropertyFailed

#: Why ``layout`` does not compare a random forward's values across input layouts.
LAYOUT = (
    "a random forward: inputs in another memory layout are not compared (rand_like draws in the "
    "input's memory order, so a transposed input gets other numbers under the same seed); "
    "non-contiguous grad_outputs are"
)

HINT = (
    " (the forward gave other values for the same input at a second run: a random forward? "
    "declare random=True, and each call runs under one seed)"
)


def hinted(check: Callable[[], None], op: Bound, xs: Sequence[torch.Tensor]) -> None:
    """Run ``check``; a failure of an op not declared random whose forward gives other values for
    the same input twice gets :data:`HINT` appended."""
    try:
        check()
    except PropertyFailed as exc:
        if op.random or not _differs(op, xs):
            raise
        raise PropertyFailed(f"{exc}{HINT}", **exc.details) from None


def _differs(op: Bound, xs: Sequence[torch.Tensor]) -> bool:
    """Whether two runs of the forward on ``xs`` give other values (nan matching nan)."""
    try:
        with torch.no_grad():
            first, second = op.outputs(*xs), op.outputs(*xs)
    except Exception:  # the op's own code: anything; no hint then
        return False
    return any(
        a.shape != b.shape or not bool(((a == b) | (a.isnan() & b.isnan())).all())
        for a, b in zip(first, second)
    )
