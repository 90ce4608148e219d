"""vmap against a loop (the ``forward_mode`` property's second half, :mod:`._forward`): a Function
with a vmap rule gives, batched, what a loop over the batch gives, for the op, for its per-sample
gradients (``vmap(grad(op))``) and for a backward with batched grad_outputs (``is_grads_batched``,
which gradcheck never asks); one without a rule refuses to answer.
"""

from __future__ import annotations

import torch

from opzoo.exceptions import one_line
from opzoo.testing.checks._agreement import RTOL, as_tuple, close_scaled, fail, tangent_ramp
from opzoo.testing.checks._bound import Bound, Tensors, grad
from opzoo.testing.checks._compare import where

#: Batch size for the vmap checks.
BATCH = 3


def _batch(x: torch.Tensor) -> torch.Tensor:
    """BATCH inputs made of x's own values (so inside the domain and off the kinks), reordered."""
    flat = x.detach().reshape(-1)
    return torch.stack([flat, flat.flip(0), flat.roll(1)][:BATCH]).reshape(BATCH, *x.shape)


def _grads(y: torch.Tensor, k: int = 0) -> torch.Tensor:
    """BATCH distinct grad_outputs: a sum or the first of them alone would not pass for all."""
    g = tangent_ramp(y, k).reshape(-1)
    return torch.stack([g, -0.5 * g.flip(0), 1.7 * g.roll(1)][:BATCH]).reshape(BATCH, *y.shape)


def vmap_is_a_loop(op: Bound, xs: Tensors) -> None:
    """vmap of the op, and of its gradient (per-sample gradients), equals a loop over the batch, and
    so does a backward with batched grad_outputs."""
    n = len(xs)
    one = xs[0] if n == 1 else None
    xss = tuple(_batch(x) for x in xs)
    loop = [op.outputs(*(xb[b] for xb in xss)) for b in range(BATCH)]
    # a random op: one draw for the batch, as the loop's reseeded calls draw alike
    randomness = "same" if op.random else "error"
    batched = as_tuple(torch.func.vmap(op, randomness=randomness)(*xss))
    m = len(loop[0])
    if len(batched) != m:
        fail(f"vmap(op) returned {len(batched)} output(s), a loop {m}")
    for j in range(m):
        what = f"vmap(op) differs from a loop over the batch{where(j, m, 'for output')}"
        close_scaled(batched[j], torch.stack([outs[j] for outs in loop]), what, one)
    batched_backward(op, xs)
    # a ramp in each output's shape and dtype, read off the loop's first outputs (those of x itself)
    weights = tuple(tangent_ramp(y, k) for k, y in enumerate(loop[0]))

    def total(*ts: torch.Tensor) -> torch.Tensor:
        return sum((o * w).sum() for o, w in zip(as_tuple(op(*ts)), weights))  # type: ignore[return-value]

    per_sample = torch.func.vmap(torch.func.grad(total, argnums=tuple(range(n))), randomness=randomness)(*xss)
    loop_grads = []
    for b in range(BATCH):
        ls = tuple(xb[b].clone().requires_grad_() for xb in xss)
        outs = op.outputs(*ls)
        loop_grads.append(_grad(outs, ls, weights))
    for i in range(n):
        what = f"vmap(grad(op)) differs from a loop of gradients{where(i, n, 'for input')}"
        close_scaled(per_sample[i], torch.stack([lg[i] for lg in loop_grads]), what, one)


def batched_backward(op: Bound, xs: Tensors, *, refusal_ok: bool = False) -> str | None:
    """Backward with a batch of grad_outputs per output (``is_grads_batched``) equals a loop, for
    every input. With ``refusal_ok``, a backward that cannot run batched at all is no failure: the
    reason is returned (None: it ran, and agreed). A wrong answer fails either way."""
    n = len(xs)
    one = xs[0] if n == 1 else None
    leaves = tuple(x.detach().clone().requires_grad_() for x in xs)
    ys = op.outputs(*leaves)
    gs = tuple(_grads(y.detach(), k) for k, y in enumerate(ys))
    try:
        got = grad(ys, leaves, gs, retain_graph=True, is_grads_batched=True)
    except Exception as exc:
        if not refusal_ok:
            raise
        return one_line(exc)
    singles = [_grad(ys, leaves, tuple(g[b] for g in gs)) for b in range(BATCH)]
    # Backward computes in its grad_outputs' dtype: an output in float32 (for float64 inputs) is
    # batched and looped with float32 roundings, which float64's tolerance would count against it.
    coarsest = max(torch.finfo(y.dtype).eps for y in ys if y.is_floating_point()) if ys else 0.0
    factor = max(1.0, 8 * coarsest / RTOL)
    for i in range(n):
        want = torch.stack([s[i] for s in singles])
        g = torch.zeros_like(want) if got[i] is None else got[i]
        what = "backward with batched grad_outputs (is_grads_batched) differs from a loop"
        what += where(i, n, "for input")
        close_scaled(g, want, what, one, factor=factor)
    return None


def _grad(ys: Tensors, xs: Tensors, gs: Tensors) -> Tensors:
    grads = grad(ys, xs, gs, retain_graph=True)
    return tuple(torch.zeros_like(x) if g is None else g for x, g in zip(xs, grads))


def vmap_raises(op: Bound, xs: Tensors) -> None:
    """A Function without a vmap rule: vmap must raise when asked, not answer."""
    try:
        torch.func.vmap(op)(*(_batch(x) for x in xs))
    except Exception:
        return
    fail(
        "vmap returned a value although the op defines no vmap rule "
        "(neither a vmap staticmethod nor generate_vmap_rule = True)"
    )
