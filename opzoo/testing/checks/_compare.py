"""How the checks compare results: the tolerances per dtype against the float64 result, ``close``
(within a tolerance, or a failure naming the first element that is not), ``agree`` (the same
arithmetic done another way: within a few units in the last place of the scale summed),
``same_bits`` (what must not change at all), and how a message names an input or output
(``where``) and an element (``index_of``)."""

from __future__ import annotations

import math

import torch

from opzoo.testing.checks._bound import PropertyFailed

#: Tolerances against the float64 result, per dtype (values already rounded to the dtype).
TOLERANCES = {
    torch.float64: dict(rtol=1e-7, atol=1e-9),
    torch.float32: dict(rtol=1e-4, atol=1e-5),
    torch.float16: dict(rtol=1e-2, atol=1e-3),
    torch.bfloat16: dict(rtol=3e-2, atol=1e-2),
}
EXACT = dict(rtol=1e-9, atol=1e-12)  # same arithmetic, other memory layout


def where(i: int, n: int, what: str) -> str:
    """``" (input 1)"`` for an op with several inputs (or outputs); nothing for one."""
    return f" ({what} {i})" if n > 1 else ""


def close(
    got: torch.Tensor,
    want: torch.Tensor,
    tol: dict[str, float],
    what: str,
    x: torch.Tensor | None = None,
    *,
    par: torch.Tensor | None = None,
    scaled: bool = False,
) -> None:
    """Raise PropertyFailed naming the first element (by its index) where ``got`` and ``want`` differ.

    par:    the same quantity from the reference computed in the op's own low precision: an element
            may be off by up to twice as much as that is (an op is not asked to beat torch's own
            rounding in bfloat16), on top of the dtype's tolerance.
    scaled: ``atol`` is relative to the largest magnitude in ``want`` (a matrix product summed in
            another order moves a cancelling element by rounding of its summands, not of itself).
    """
    if got.shape != want.shape:
        raise PropertyFailed(f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}")
    got64, want64 = got.double(), want.double()
    atol, rtol = tol["atol"], tol["rtol"]
    if scaled and want64.numel():
        finite = want64[want64.isfinite()]
        atol *= max(1.0, finite.abs().max().item()) if finite.numel() else 1.0
    allowed = atol + rtol * want64.abs()
    if par is not None:
        allowed = allowed + 2 * (par.double() - want64).abs().nan_to_num(nan=0.0, posinf=0.0)
    diff = (got64 - want64).abs()
    same = (got64 == want64) | (got64.isnan() & want64.isnan())
    if got.is_floating_point() and want.is_floating_point() and got.dtype != want.dtype:
        # correctly rounded to got's dtype, a value past its range is an infinity there (x ** -2 at
        # x = 5e-39 in float32: 4e76, inf)
        rounded = want.to(got.dtype).double()
        same |= rounded.isinf() & (got64 == rounded)
    if par is not None:  # not finite as the reference run in got's dtype is, to the bit: no worse
        same |= non_finite_as(got, par)
    bad = ~same & ~(diff <= allowed)
    if bad.any():
        flat = int(bad.reshape(-1).nonzero()[0])
        index = index_of(flat, got.shape)
        at_x = ""
        if x is not None and x.shape == got.shape:
            at_x = f" (x = {x.reshape(-1)[flat].item():.9g})"
        raise PropertyFailed(
            f"{what}: {int(bad.sum())} of {bad.numel()} elements differ; first at index {list(index)}: "
            f"got {got.reshape(-1)[flat].item():.9g}, expected {want.reshape(-1)[flat].item():.9g}{at_x}",
        )


#: Two results of the same arithmetic done differently (another summation order, another BLAS kernel,
#: another CPU) agree within this many units in the last place of the scale of what was summed.
ULPS = 16


def agree(got: torch.Tensor, want: torch.Tensor, scale: torch.Tensor | float | None = None) -> torch.Tensor:
    """Per element, whether ``got`` and ``want`` agree to within :data:`ULPS` units in the last place
    (of their dtype) of the larger of them and of ``scale``: the magnitude of the terms summed into
    each element, per element or one number (default: the largest finite magnitude in ``want``, as
    a sum that cancels carries the rounding of its terms, not of its result). ``nan`` matches ``nan``
    and equal infinities match; a ``nan`` or an infinity widens no other element's tolerance."""
    if got.shape != want.shape:
        return torch.zeros(torch.broadcast_shapes(got.shape, want.shape), dtype=torch.bool)
    if not want.is_floating_point():
        return got == want
    eps = torch.finfo(want.dtype).eps
    if scale is None:
        finite = want[want.isfinite()]
        scale = finite.abs().max().item() if finite.numel() else 0.0
    if isinstance(scale, torch.Tensor):
        scale = scale.to(want.dtype).abs().nan_to_num(0.0, 0.0, 0.0)
    own = torch.maximum(got.abs(), want.abs()).nan_to_num(0.0, 0.0, 0.0)
    spacing = torch.nextafter(own, torch.full_like(own, math.inf)) - own  # one ulp of each, subnormals too
    allowed = ULPS * (spacing + eps * scale)
    same = (got == want) | (got.isnan() & want.isnan())
    return same | ((got - want).abs() <= allowed)


def non_finite_as(got: torch.Tensor, par: torch.Tensor) -> torch.Tensor:
    """Where ``got`` is not finite and equals ``par``, the oracle run in got's dtype, there (the same
    infinity, or nan both): no worse than it (a product whose partial products overflow in float32
    as torch's own kernel's do)."""
    p = par.to(got.dtype)
    return ~got.isfinite() & ((got == p) | (got.isnan() & p.isnan()))


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether ``a`` and ``b`` hold the same values (``nan`` where the other has ``nan``): for what
    must not change at all (an input a forward must not write), not for two results computed apart."""
    return a.shape == b.shape and a.dtype == b.dtype and bool(((a == b) | (a.isnan() & b.isnan())).all())


def index_of(flat: int, shape: torch.Size | tuple[int, ...]) -> tuple[int, ...]:
    """The index of element ``flat`` (of the flattened tensor) in a tensor of ``shape``."""
    if not len(shape):
        return ()
    return tuple(int(v) for v in torch.unravel_index(torch.tensor(flat), tuple(shape)))
