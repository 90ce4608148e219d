"""What the ``forward_mode`` property (:mod:`._forward`) holds two computations of one derivative to
(forward and reverse mode, a batch and a loop): agreement within float64 rounding at the scale of
the terms summed, a failure naming the first element that differs (with its input and tangent where
they mean something); and the deterministic tangents it asks along.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from opzoo.testing.checks._bound import PropertyFailed, Tensors

# Forward and reverse mode compute the same derivative with other roundings: agreement to well
# within float64 precision, scaled by the size of the terms summed (|J| |v|, not |J v|).
RTOL = 1e-9
ATOL = 1e-12


def tangent_ramp(like: torch.Tensor, k: int = 0) -> torch.Tensor:
    """A deterministic tangent with distinct, non-zero entries (a ones tangent hides a missing
    multiplication by it); ``k`` makes each input's (or output's) its own, not a multiple of
    another's (a jvp that swaps two inputs' terms would pass equal ones)."""
    n = like.numel()
    lo, hi = -1.3 + 0.41 * k, 1.9 - 0.23 * k
    ramp = torch.linspace(lo, hi, max(n, 1), dtype=like.dtype, device=like.device)[:n] + 0.03
    if k % 2:
        ramp = ramp.flip(0)
    return ramp.reshape(like.shape)


def as_tuple(out: Any) -> Tensors:
    """An op's result as a tuple: its one output, or its outputs."""
    return out if isinstance(out, tuple) else (out,)


def close_scaled(
    got: torch.Tensor,
    want: torch.Tensor,
    what: str,
    x: torch.Tensor | None,
    smooth: Callable[[], torch.Tensor | None] | None = None,
    *,
    factor: float = 1.0,
) -> None:
    """:func:`compare` at the scale of ``want``'s largest element; ``factor`` widens the
    tolerance for a computation in a coarser dtype than float64."""
    scale = max(1.0, want.abs().nan_to_num(posinf=0.0, neginf=0.0).max().item()) if want.numel() else 1.0
    compare(got, want, torch.full_like(want, scale * factor), what, x, smooth=smooth)


def compare(
    got: torch.Tensor,
    want: torch.Tensor,
    scale: torch.Tensor,
    what: str,
    x: torch.Tensor | None,
    v: torch.Tensor | None = None,
    checked: torch.Tensor | None = None,
    smooth: Callable[[], torch.Tensor | None] | None = None,
) -> None:
    """Fail unless |got - want| <= RTOL * scale + ATOL wherever ``checked`` (NaN matches NaN), and,
    where ``smooth`` says where the op is differentiable (output elements; asked only on a
    mismatch), there alone."""
    if got.shape != want.shape:
        fail(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    # equal infinities (an empty logsumexp is -inf) match, as NaN matches NaN
    ok = ((got - want).abs() <= RTOL * scale + ATOL) | (got.isnan() & want.isnan()) | (got == want)
    if checked is not None:
        ok |= ~checked
    bad = ~ok
    if bad.any() and smooth is not None:
        rows = smooth()
        if rows is not None:
            rows = rows.to(bad.device)
            bad &= rows.reshape(*rows.shape, *(1,) * (bad.dim() - rows.dim()))
    if not bad.any():
        return
    i = int(bad.reshape(-1).nonzero()[0])
    g, w = got.reshape(-1)[i].item(), want.reshape(-1)[i].item()
    # values at the index where it means something: one input, as many elements as the output
    elementwise = x is not None and x.numel() == got.numel()
    worst = None
    at = ""
    if elementwise:
        index = tuple(int(c) for c in torch.unravel_index(torch.tensor(i), x.shape)) if x.dim() else ()
        worst = {"index": index, "x": x.reshape(-1)[i].item()}
        at = f" (x = {worst['x']:.9g}"
        if v is not None:
            worst["tangent"] = v.reshape(-1)[i].item()
            at += f", tangent = {worst['tangent']:.9g}"
        at += ")"
        worst |= {"got": g, "expected": w}
    total = bad.numel() if checked is None else int(checked.sum())
    fail(
        f"{what}: {int(bad.sum())} of {total} elements differ; first at flat index {i}: "
        f"got {g:.9g}, expected {w:.9g}{at}",
        worst=worst,
    )


def fail(message: str, **details: Any) -> None:
    """Raise :class:`~opzoo.testing.checks._bound.PropertyFailed` with ``message`` and ``details``."""
    raise PropertyFailed(message, **details)
