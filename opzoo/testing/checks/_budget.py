"""Error budgets: how far an op's result in a lower dtype is from the float64 oracle, in units of that
dtype's epsilon, and the threshold each dtype's result is held to.

For an element of a result ``got`` in dtype ``d`` (a gradient, or a forward output) and the oracle's
float64 value ``want`` at the same inputs (already rounded to ``d``) and grad_outputs::

    k = |got - want| / (eps_d * scale),   scale = max(|want|, FLOOR * G, tiny_d / eps_d)

where ``eps_d`` is ``torch.finfo(d).eps`` (the gap between 1 and the next number), ``G`` the largest
finite ``|want|`` of that result tensor (one output, or one input's gradient, of one example), and
``tiny_d`` the smallest normal number of ``d``. So ``k`` is the error relative to the element itself,
counted in steps of the dtype, except where the element is much smaller than the rest of its tensor
(then against ``FLOOR * G``: a gradient that is the rest of a cancellation, ``1 + tanh(u)`` at
``tanh(u) = -1``, carries the rounding of its larger terms, whatever the formula), or below the
dtype's normal range (then against its smallest normal number: float16 cannot hold a 1e-9 gradient).

An op's gradient passes the ``reference`` property in ``d`` when ``k <= BUDGETS[d] + 2 * k_par`` per
element, where ``k_par`` is the same measure of the reference computed in ``d`` itself: an op is not
asked to beat torch's own rounding (a bfloat16 softmax sums in bfloat16). Where that is exceeded, an
element may also be off by twice ``k_steps``, the same measure of the op's own float64 computation
with each of its steps rounded as in ``d`` (``_steps``): a correct formula that cancels in ``d`` is
as far off step by step, while an error the op makes in ``d`` alone (a wrong branch, a lower dtype
inside, an overflow to inf) is not in its float64 computation. Its forward is measured
too (the report shows it) but held to the dtype's tolerance: its formula is the op's own business,
not the backward's. The budgets are set from measurement (``benchmarks/error_budgets.py``, recorded
in docs/testing.md, "Error budgets").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from opzoo.testing.checks._bound import PropertyFailed
from opzoo.testing.checks._compare import non_finite_as

#: A float64 oracle's tolerance (the ``autograd`` property's): float64 arithmetic in another order,
#: relative to the gradient's scale, and absolute to the grad_outputs'.
ORACLE_RTOL = 1e-9
ORACLE_ATOL = 1e-11

#: The pass threshold per dtype, in units of its epsilon times the oracle's magnitude (see above).
BUDGETS: dict[torch.dtype, float] = {
    torch.float32: 8.0,
    torch.bfloat16: 8.0,
    torch.float16: 8.0,
}
#: An element much smaller than its tensor is judged against this fraction of the tensor's largest.
FLOOR = 1 / 4


def budget(dtype: torch.dtype) -> float:
    """The pass threshold of ``dtype`` (float64 has none: its oracle is the reference itself)."""
    return BUDGETS[dtype]


def scale_of(want: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Per element, the magnitude the error is measured against: ``max(|want|, FLOOR * G, tiny/eps)``."""
    w = want.double().abs()
    finite = w[w.isfinite()]
    big = finite.max().item() if finite.numel() else 0.0
    info = torch.finfo(dtype)
    floor = max(FLOOR * big, info.tiny / info.eps)
    return w.nan_to_num(nan=floor, posinf=floor).clamp(min=floor)


def slack(grad_outputs: Sequence[torch.Tensor]) -> float:
    """What a float64 oracle's gradient may itself be off by: ``ORACLE_ATOL`` (1e-11) of the
    grad_outputs' largest magnitude, as the ``autograd`` property allows it. An autograd formula
    that cancels gives 0 where the truth is 3.7e-21 (``logaddexp(x, -x)`` at x = 3.7e-21): no error
    of the op's."""
    scale = max(
        (g.double().abs().nan_to_num(0.0, 0.0, 0.0).max().item() for g in grad_outputs if g.numel()),
        default=0.0,
    )
    return ORACLE_ATOL * scale


def in_eps(got: torch.Tensor, want: torch.Tensor, dtype: torch.dtype, slack: float = 0.0) -> torch.Tensor:
    """Per element, ``k``: the error of ``got`` against the float64 ``want``, less ``slack`` (what the
    oracle itself may be off by: :func:`slack`), in units of ``dtype``'s epsilon times the scale
    (module docstring). 0 where both agree exactly (``nan`` and ``nan``, or equal infinities);
    ``inf`` where only one of them is finite or ``nan``."""
    got64, want64 = got.double(), want.double()
    eps = torch.finfo(dtype).eps
    k = ((got64 - want64).abs() - slack).clamp(min=0.0) / (eps * scale_of(want64, dtype))
    same = (got64 == want64) | (got64.isnan() & want64.isnan())
    return torch.where(same, 0.0, k.nan_to_num(nan=math.inf))


@dataclass(frozen=True)
class Rounding:
    """A gradient within its budget only with its formula's own rounding allowed (``k_steps``): at
    its worst element over ``budget + 2 k_par``, ``k``, ``k_par`` and ``k_steps``, for the note."""

    k: float
    k_par: float
    k_steps: float


def within(
    got: torch.Tensor,
    want: torch.Tensor,
    dtype: torch.dtype,
    what: str,
    x: torch.Tensor | None = None,
    *,
    par: torch.Tensor | None = None,
    slack: float = 0.0,
    steps: Callable[[], torch.Tensor | None] | None = None,
) -> Rounding | None:
    """Raise PropertyFailed naming the first element where ``got`` (in ``dtype``) is further from the
    float64 ``want`` than ``dtype``'s budget plus twice what ``par`` (the reference computed in
    ``dtype``) is off by, plus twice what ``steps()`` is off by: the op's own float64 computation with
    each step rounded as in ``dtype`` (``_steps.stepped``), called only where the rest is exceeded.
    Returns a :class:`Rounding` where that last allowance was needed, else None."""
    if got.shape != want.shape:
        raise PropertyFailed(f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}")
    k = in_eps(got, want, dtype, slack)
    if par is not None:  # not finite as the oracle run in the dtype is, to the bit: no worse than it
        k = torch.where(non_finite_as(got, par), 0.0, k)
    k_par = torch.zeros_like(k) if par is None else in_eps(par, want, dtype, slack).nan_to_num(posinf=0.0)
    allowed = budget(dtype) + 2 * k_par
    if bool((k <= allowed).all()):
        return None
    stepped = steps() if steps is not None else None
    if stepped is None or stepped.shape != got.shape:
        raise _over(got, want, dtype, what, x, k, allowed, ~(k <= allowed), "")
    # An overflow of the formula in the dtype (inf where want is finite) is no rounding: no allowance.
    k_steps = in_eps(stepped, want, dtype, slack).nan_to_num(posinf=0.0)
    bad = ~(k <= allowed + 2 * k_steps)
    if bool(bad.any()):
        flat = int(bad.reshape(-1).nonzero()[0])
        told = f" = {budget(dtype):g} + 2 k_par {k_par.reshape(-1)[flat].item():.3g} + 2 k_steps " + (
            f"{k_steps.reshape(-1)[flat].item():.3g}"
        )
        raise _over(got, want, dtype, what, x, k, allowed + 2 * k_steps, bad, told)
    # The figures where the op loses to the reference computed in the dtype: its worst element there.
    lost = torch.where(k <= allowed, -1.0, k).reshape(-1).argmax()
    return Rounding(*(t.reshape(-1)[lost].item() for t in (k, k_par, k_steps)))


def _over(
    got: torch.Tensor,
    want: torch.Tensor,
    dtype: torch.dtype,
    what: str,
    x: torch.Tensor | None,
    k: torch.Tensor,
    allowed: torch.Tensor,
    bad: torch.Tensor,
    told: str,
) -> PropertyFailed:
    """The failure naming the first element of ``bad``: how far off, what was allowed (``told``: how
    the allowance was made up)."""
    flat = int(bad.reshape(-1).nonzero()[0])
    index = [int(c) for c in torch.unravel_index(torch.tensor(flat), got.shape)] if got.dim() else []
    at_x = ""
    if x is not None and x.shape == got.shape:
        at_x = f" (x = {x.reshape(-1)[flat].item():.9g})"
    name = str(dtype).removeprefix("torch.")
    return PropertyFailed(
        f"{what}: {int(bad.sum())} of {bad.numel()} elements over the {name} budget of "
        f"{budget(dtype):g} eps; first at index {index}: got {got.reshape(-1)[flat].item():.9g}, expected "
        f"{want.reshape(-1)[flat].item():.9g}, {k.reshape(-1)[flat].item():.3g} eps off "
        f"(allowed {allowed.reshape(-1)[flat].item():.3g}{told}){at_x}",
        worst={
            "index": tuple(index),
            "x": x.reshape(-1)[flat].item() if x is not None and x.shape == got.shape else math.nan,
            "analytic": got.reshape(-1)[flat].item(),
            "reference": want.reshape(-1)[flat].item(),
        },
    )
