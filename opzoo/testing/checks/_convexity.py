"""Whether a function is convex, concave or neither near a point, told from its values there: the
tests with which :class:`~opzoo.testing.checks._onesided.Probe` tells a kink where two pieces meet
(convex or concave) from one of several pieces (mixed) and from a smooth function's curvature.

Each takes ``at``, the function's outputs (flat, float64) at the point moved by each of a stack of
steps (one row each: all of a test's steps at once, so that an elementwise op takes them in one
call), and what the
probe measured: its outputs ``f0`` at the point, its directions ``dirs`` (one per row), the step
``h`` and the one-sided difference quotients ``up`` and ``down`` (one column per direction). Each
returns, per output element, evidence against convexity and against concavity: a direct
consequence of convexity (concavity) at the points probed, so that a convex element is never
taken for a mixed one.
"""

from __future__ import annotations

import itertools
from typing import Callable

import torch

#: One-sided differences that differ by more than this (relative to 1 + their size) are a kink.
TOL = 1e-3

At = Callable[[torch.Tensor], torch.Tensor]


def gap_evidence(
    at: At,
    f0: torch.Tensor,
    dirs: torch.Tensor,
    h: float,
    up: torch.Tensor,
    down: torch.Tensor,
    slack: torch.Tensor | float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Along each direction, the gap between the one-sided derivatives, (f(x + hd) + f(x - hd) -
    2 f(x)) / h, is >= 0 where f is convex and <= 0 where it is concave: a gap too large to be a
    smooth function's curvature is evidence against the other. ``slack`` (per row, a column): the
    rounding of an output in a dtype shorter than float64, added to the tolerance."""
    convex_no = torch.zeros(f0.numel(), dtype=torch.bool)
    concave_no = torch.zeros(f0.numel(), dtype=torch.bool)
    if dirs.shape[0]:
        gap = up - down
        tol = TOL * (1 + torch.maximum(up.abs(), down.abs())) + slack
        kinky = _not_curvature(at, f0, dirs, h, gap, gap.abs() > tol)
        convex_no |= ((gap < 0) & kinky).any(1)
        concave_no |= ((gap > 0) & kinky).any(1)
    return convex_no, concave_no


def _not_curvature(
    at: At, f0: torch.Tensor, dirs: torch.Tensor, h: float, gap: torch.Tensor, flagged: torch.Tensor
) -> torch.Tensor:
    """``flagged`` less the gaps that are a smooth function's curvature: h dᵀHd, which grows with
    the number of elements along a random direction (a sum of squares over 100,000 elements
    showed a gap of 0.28 at h = 1e-6, and was taken for a kink). Curvature's gap doubles with the
    step and halves with it; a kink's stays (at the kink) or moves otherwise (near it)."""
    js = flagged.any(0).nonzero().reshape(-1).tolist()
    steps = [s * step * dirs[j] for j in js for step in (h / 2, 2 * h) for s in (1.0, -1.0)]
    values = at(torch.stack(steps)).reshape(len(js), 2, 2, -1) if js else None
    for i, j in enumerate(js):
        scaled = []
        for k, step in enumerate((h / 2, 2 * h)):
            up = (values[i, k, 0] - f0) / step
            down = (f0 - values[i, k, 1]) / step
            scaled.append((up - down) * (h / step))  # = gap if the gap is curvature
        near = [(g - gap[:, j]).abs() <= 0.1 * gap[:, j].abs() for g in scaled]
        flagged[:, j] &= ~(near[0] & near[1])
    return flagged


def midpoint_evidence(
    at: At,
    dirs: torch.Tensor,
    first: int,
    h: float,
    up: torch.Tensor,
    down: torch.Tensor,
    base: torch.Tensor,
    slack: torch.Tensor | float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Convexity along pairs of directions (those from ``first`` on): f(x + h(a + b)/2) against the
    mean of f(x + ha) and f(x + hb), either sign each. Per row: evidence against convexity, against
    concavity; whether f was finite at every midpoint. ``slack``: as :func:`gap_evidence`'s."""
    k = dirs.shape[0]
    steps, sides = [], []
    for a, b in itertools.combinations(range(first, k), 2):
        for sa, sb in itertools.product((1.0, -1.0), repeat=2):
            steps.append(h * (sa * dirs[a] + sb * dirs[b]) / 2)
            sides.append((a, sa, b, sb))
    none = torch.zeros(base.shape[0], dtype=torch.bool)
    if not steps:
        return none, none, ~none
    mid = (at(torch.stack(steps)).T - base) / h

    def psi(j: int, s: float) -> torch.Tensor:
        return up[:, j] if s > 0 else -down[:, j]

    ends = torch.stack([(psi(a, sa) + psi(b, sb)) / 2 for a, sa, b, sb in sides], 1)
    scale = torch.stack([torch.maximum(psi(a, sa).abs(), psi(b, sb).abs()) for a, sa, b, sb in sides], 1)
    defect = mid - ends  # <= 0 if convex, >= 0 if concave
    tol = TOL * (1 + torch.maximum(scale, mid.abs())) + slack
    return (defect > tol).any(1), (defect < -tol).any(1), mid.isfinite().all(1)
