"""The ``forward_mode`` property: forward-mode AD and vmap agree with the hand-written backward.

A Function that defines ``jvp`` has two derivatives written by hand, and nothing but a test ties
them together; one with a vmap rule runs its backward on batched grad_outputs (per-sample
gradients, ``jacrev``, ``is_grads_batched``), which gradcheck never does. One that defines neither
must say so with an error when asked, not return a wrong answer.

Its own module so that it can grow without touching ``properties``, which imports it; it imports
``properties`` (for ``PropertyFailed``) only when a check fails, so that there is no import circle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.autograd import forward_ad

if TYPE_CHECKING:
    from opzoo.testing.properties import Bound

# Forward and reverse mode compute the same derivative with other roundings: agreement to well
# within float64 precision, scaled by the size of the terms summed (|J| |v|, not |J v|).
RTOL = 1e-9
ATOL = 1e-12
#: Jacobian rows computed (one backward each) to compare J v with; more outputs are sampled.
MAX_ROWS = 256
#: Batch size for the vmap checks.
BATCH = 3


def forward_mode(op: Bound, x: torch.Tensor) -> None:
    """Declared jvp / vmap rule: torch.func.jvp and dual tensors give the backward's J v; vmap, also
    over the backward, gives a loop's results. Undeclared: asking must raise, not answer."""
    if op.spec.kind == "module":
        _jacfwd_is_jacrev(op, x)
        return
    target = op.spec.target
    if defines_jvp(target):
        _jvp_is_backwards(op, x, "")
        kinks = list(op.spec.contract.kinks_at(op.params))
        if kinks:
            points = torch.tensor(kinks, dtype=x.dtype, device=x.device)
            _jvp_is_backwards(op, points, " at the declared kinks")
    else:
        _jvp_raises(op, x)
    if defines_vmap(target):
        _vmap_is_a_loop(op, x)
    else:
        _vmap_raises(op, x)


def defines_jvp(target: Any) -> bool:
    """Whether a Function overrides ``jvp`` (forward-mode AD): itself, or on the twin its ``apply``
    runs (``_with_jvp``: opzoo's built-ins keep ``jvp`` there, out of Dynamo's sight)."""
    target = getattr(target, "_with_jvp", target)
    return getattr(target, "jvp", None) is not torch.autograd.Function.jvp


def defines_vmap(target: Any) -> bool:
    """Whether a Function has a vmap rule: its own ``vmap`` or ``generate_vmap_rule = True``."""
    own = getattr(target, "vmap", None) is not torch.autograd.Function.vmap
    return own or bool(getattr(target, "generate_vmap_rule", False))


# -- forward mode ---------------------------------------------------------------------------------


def _jvp_is_backwards(op: Bound, x: torch.Tensor, where: str) -> None:
    v = _ramp(x)
    y = op(x.detach())
    want, scale, rows = _jacobian_times(op, x, v)
    primal, got = torch.func.jvp(op, (x.detach(),), (v,))
    _close(primal, y, f"torch.func.jvp's output differs from op(x){where}", x)
    _compare(got, want, scale, f"torch.func.jvp differs from the backward's J v{where}", x, v, rows)
    with forward_ad.dual_level():
        out = op(forward_ad.make_dual(x.detach(), v))
        tangent = forward_ad.unpack_dual(out).tangent
    if tangent is None:
        _fail(f"a dual tensor's output came back without a tangent{where} (forward_ad.make_dual)")
    what = f"forward_ad dual tensors differ from the backward's J v{where}"
    _compare(tangent, want, scale, what, x, v, rows)


def _jacobian_times(
    op: Bound, x: torch.Tensor, v: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """J v row by row, each row from one plain backward (not a batched one: that is checked on its
    own); |J| |v|, the scale of each row's sum; and which rows were computed (MAX_ROWS at most)."""
    xr = x.detach().clone().requires_grad_()
    y = op(xr)
    jv = torch.zeros(y.numel(), dtype=x.dtype, device=x.device)
    scale = torch.zeros_like(jv)
    checked = torch.zeros(y.numel(), dtype=torch.bool, device=x.device)
    for i in _rows(y.numel()):
        e = torch.zeros(y.numel(), dtype=y.dtype, device=y.device)
        e[i] = 1
        (row,) = torch.autograd.grad(y, xr, e.reshape(y.shape), retain_graph=True, allow_unused=True)
        row = torch.zeros_like(xr) if row is None else row
        jv[i] = (row * v).sum()
        scale[i] = (row.abs() * v.abs()).sum()
        checked[i] = True
    return jv.reshape(y.shape), scale.reshape(y.shape), checked.reshape(y.shape)


def _rows(n: int) -> list[int]:
    if n <= MAX_ROWS:
        return list(range(n))
    return sorted({round(i * (n - 1) / (MAX_ROWS - 1)) for i in range(MAX_ROWS)})


def _jvp_raises(op: Bound, x: torch.Tensor) -> None:
    v = _ramp(x)
    asks: dict[str, Callable[[], Any]] = {
        "torch.func.jvp": lambda: torch.func.jvp(op, (x.detach(),), (v,)),
        "forward_ad dual tensors": lambda: _dual(op, x, v),
    }
    for what, ask in asks.items():
        try:
            ask()
        except Exception:
            continue
        _fail(f"forward mode returned a value although the op defines no jvp ({what})")


def _dual(op: Bound, x: torch.Tensor, v: torch.Tensor) -> None:
    with forward_ad.dual_level():
        op(forward_ad.make_dual(x.detach(), v))


def _jacfwd_is_jacrev(op: Bound, x: torch.Tensor) -> None:
    """A learnable Module's forward mode is autograd's own: it must agree with reverse mode, for
    the input and every learnable tensor."""
    inputs = (x.detach(), *op.extras)
    argnums = tuple(range(len(inputs)))
    fwd = torch.func.jacfwd(op, argnums=argnums)(*inputs)
    rev = torch.func.jacrev(op, argnums=argnums)(*inputs)
    names = ["x", *(f"learnable tensor {i}" for i in range(len(op.extras)))]
    for name, f, r in zip(names, fwd, rev):
        _close(f, r, f"jacfwd differs from jacrev with respect to {name}", x)


# -- vmap -----------------------------------------------------------------------------------------


def _batch(x: torch.Tensor) -> torch.Tensor:
    """BATCH inputs made of x's own values (so inside the domain and off the kinks), reordered."""
    flat = x.detach().reshape(-1)
    return torch.stack([flat, flat.flip(0), flat.roll(1)][:BATCH]).reshape(BATCH, *x.shape)


def _grads(y: torch.Tensor) -> torch.Tensor:
    """BATCH distinct grad_outputs: a sum or the first of them alone would not pass for all."""
    g = _ramp(y).reshape(-1)
    return torch.stack([g, -0.5 * g.flip(0), 1.7 * g.roll(1)][:BATCH]).reshape(BATCH, *y.shape)


def _vmap_is_a_loop(op: Bound, x: torch.Tensor) -> None:
    xs = _batch(x)
    loop = torch.stack([op(xi) for xi in xs])
    _close(torch.func.vmap(op)(xs), loop, "vmap(op) differs from a loop over the batch", x)

    xr = x.detach().clone().requires_grad_()
    y = op(xr)
    gs = _grads(y.detach())
    (batched,) = torch.autograd.grad(y, xr, gs, retain_graph=True, allow_unused=True, is_grads_batched=True)
    singles = torch.stack([_grad(y, xr, g) for g in gs])
    batched = torch.zeros_like(singles) if batched is None else batched
    _close(batched, singles, "backward with batched grad_outputs (is_grads_batched) differs from a loop", x)

    per_sample = torch.func.vmap(torch.func.grad(lambda t: op(t).sum()))(xs)
    loop_grads = []
    for xi in xs:
        xi = xi.clone().requires_grad_()
        yi = op(xi)
        loop_grads.append(_grad(yi, xi, torch.ones_like(yi)))
    _close(per_sample, torch.stack(loop_grads), "vmap(grad(op)) differs from a loop of gradients", x)


def _grad(y: torch.Tensor, x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    (gx,) = torch.autograd.grad(y, x, g, retain_graph=True, allow_unused=True)
    return torch.zeros_like(x) if gx is None else gx


def _vmap_raises(op: Bound, x: torch.Tensor) -> None:
    try:
        torch.func.vmap(op)(_batch(x))
    except Exception:
        return
    _fail(
        "vmap returned a value although the op defines no vmap rule "
        "(neither a vmap staticmethod nor generate_vmap_rule = True)"
    )


# -- helpers --------------------------------------------------------------------------------------


def _ramp(like: torch.Tensor) -> torch.Tensor:
    """A deterministic tangent with distinct, non-zero entries (a ones tangent hides a missing
    multiplication by it)."""
    n = like.numel()
    ramp = torch.linspace(-1.3, 1.9, max(n, 1), dtype=like.dtype, device=like.device)[:n] + 0.03
    return ramp.reshape(like.shape)


def _close(got: torch.Tensor, want: torch.Tensor, what: str, x: torch.Tensor) -> None:
    scale = max(1.0, want.abs().nan_to_num(posinf=0.0, neginf=0.0).max().item()) if want.numel() else 1.0
    _compare(got, want, torch.full_like(want, scale), what, x)


def _compare(
    got: torch.Tensor,
    want: torch.Tensor,
    scale: torch.Tensor,
    what: str,
    x: torch.Tensor,
    v: torch.Tensor | None = None,
    checked: torch.Tensor | None = None,
) -> None:
    """Fail unless |got - want| <= RTOL * scale + ATOL wherever ``checked`` (NaN matches NaN)."""
    if got.shape != want.shape:
        _fail(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
    # equal infinities (an empty logsumexp is -inf) match, as NaN matches NaN
    ok = ((got - want).abs() <= RTOL * scale + ATOL) | (got.isnan() & want.isnan()) | (got == want)
    if checked is not None:
        ok |= ~checked
    bad = ~ok
    if not bad.any():
        return
    i = int(bad.reshape(-1).nonzero()[0])
    g, w = got.reshape(-1)[i].item(), want.reshape(-1)[i].item()
    elementwise = x.numel() == got.numel()
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
    _fail(
        f"{what}: {int(bad.sum())} of {total} elements differ; first at flat index {i}: "
        f"got {g:.9g}, expected {w:.9g}{at}",
        worst=worst,
    )


def _fail(message: str, **details: Any) -> None:
    from opzoo.testing.properties import PropertyFailed

    raise PropertyFailed(message, **details)
