"""Checks beyond finite differences: the forward's own autograd as an oracle, inputs of large
magnitude, and each input of an n-ary op asked for alone.

gradcheck's tolerance (rtol 1e-3 against central differences) is coarse: a float64 backward that
computes in float32 (8.8e-8 relative error) passes it. Where ``forward`` is built of differentiable
torch operations, autograd differentiates it exactly, and the hand-written backward is held to that
at float64 precision.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import torch

from opzoo.testing import _kinks
from opzoo.testing._bound import Bound, PropertyFailed, Tensors, grad_outputs, vjp, where

#: The oracle's tolerance: float64 arithmetic in another order, relative to the gradient's scale.
ORACLE_RTOL = 1e-9
ORACLE_ATOL = 1e-11
#: The magnitudes the extremes check scales an input to.
SCALES = (1e2, 1e4)


# -- autograd of the forward --------------------------------------------------------------------


def autograd(op: Bound, *xs: torch.Tensor) -> None:
    """Where forward is built of differentiable torch operations, the hand-written backward equals
    autograd's derivative of forward itself, in float64, to about 1e-9 relative (far tighter than
    finite differences)."""
    if all(x.numel() == 0 for x in xs):
        return
    leaves = tuple(x.detach().clone().requires_grad_() for x in xs)
    with torch.enable_grad():
        forward, plan = op.spec.target.forward, op.spec.arguments
        out = op.calling(lambda *ts: forward(*plan(ts, op.params)))(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    if not any(isinstance(o, torch.Tensor) and o.requires_grad for o in outs):
        op.notes.append("forward is not built of differentiable torch operations: no autograd oracle")
        return
    gs = grad_outputs(outs)
    live = [(o, g) for o, g in zip(outs, gs) if o.requires_grad]
    want = torch.autograd.grad([o for o, _ in live], leaves, [g for _, g in live], allow_unused=True)
    _, got = vjp(op, xs, gs)
    for i, (x, g, w) in enumerate(zip(xs, got, want)):
        w = torch.zeros_like(x) if w is None else w
        # Relative to the gradient, and absolutely to 1e-11 of the grad_outputs' scale: a gradient
        # that is itself the rest of a cancellation (gelu_tanh's 1e-9 at x = -6, from 1 + tanh(u))
        # carries float64 rounding of its O(1) terms, whichever way it is computed.
        g_scale = max((o.abs().max().item() for o in gs if o.numel()), default=1.0)
        scale = max(w.abs().max().item() if w.numel() else 0.0, 1e-280)
        allowed = ORACLE_RTOL * (w.abs() + scale) + ORACLE_ATOL * g_scale
        bad = ~((g - w).abs() <= allowed) & (g.isfinite() | w.isfinite())
        if op.spec.contract.sig.elementwise and bad.any():
            bad &= ~_kinks.one_sided(lambda t: op(t), x.detach())[0]  # a kink: gradient's business
            worse = _forward_is_worse(op, x.detach(), g / gs[0], w / gs[0]) & bad
            if worse.any():
                op.notes.append(
                    "the forward's own autograd derivative is less precise than the backward, which "
                    "agrees with finite differences there: not held against the backward"
                )
                bad &= ~worse
        if not bad.any():
            continue
        e = int(bad.reshape(-1).nonzero()[0])
        gv, wv = g.reshape(-1)[e].item(), w.reshape(-1)[e].item()
        index = [int(c) for c in torch.unravel_index(torch.tensor(e), x.shape)] if x.dim() else []
        relative = abs(gv - wv) / max(abs(wv), 1e-300)
        # A small relative error is a precision problem; a large one is a wrong formula.
        hint = "a wrong formula?"
        if relative < 1e-3:
            hint = "is part of the backward computed in a lower precision?"
        raise PropertyFailed(
            f"backward differs from autograd of forward{where(i, len(xs), 'input')}: "
            f"{int(bad.sum())} of {bad.numel()} elements; first at index {index}: backward {gv!r}, "
            f"autograd {wv!r} (relative {relative:.2g}; float64 should agree to about 1e-9: {hint})",
            worst={"index": tuple(index), "x": x.reshape(-1)[e].item(), "analytic": gv, "autograd": wv},
        )


def _forward_is_worse(
    op: Bound, x: torch.Tensor, backward: torch.Tensor, oracle: torch.Tensor
) -> torch.Tensor:
    """A third opinion, per element of an elementwise op: a Richardson-extrapolated central
    difference (error O(h^4)). True where the backward is clearly closer to it than the forward's
    autograd derivative is."""
    # well inside the kink margin (1e-3) the inputs keep from declared kinks; rounding ~ eps / h
    h = 1e-4 * x.abs().clamp(min=1.0)

    def central(step: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return (op(x + step) - op(x - step)) / (2 * step)

    fd = (4 * central(h / 2) - central(h)) / 3
    return (backward - fd).abs() * 10 < (oracle - fd).abs()


# -- inputs of large magnitude -----------------------------------------------------------------------


def extremes(op: Bound, *xs: torch.Tensor) -> None:
    """At inputs scaled up to about 1e4 (inside the domain), in float64 and float32: wherever the
    forward is finite nearby, the backward is finite (a gradient that overflows to inf or nan where
    the true one is about 0 is a bug that no small input shows)."""
    low, high = op.spec.contract.domain
    dtypes = [d for d in ("float64", "float32") if d in op.spec.contract.dtypes]
    for scale, name in itertools.product(SCALES, dtypes):
        dtype = getattr(torch, name)
        big = tuple((x * scale).clamp(low, high).to(dtype) for x in xs)
        if op.spec.contract.sig.elementwise:
            big = tuple(b[(b > low) & (b < high)] for b in big)  # the open domain's ends dropped
        if all(b.numel() == 0 for b in big):
            continue
        op_d = op.cast(dtype)
        outs, grads = vjp(op_d, big)
        finite = _finite_nearby(op_d, big, outs)
        for i, (b, g) in enumerate(zip(big, grads)):
            mask = finite if op.spec.contract.sig.elementwise else finite.all()
            wrong = mask & ~g.isfinite()
            if wrong.any():
                e = int(wrong.reshape(-1).nonzero()[0])
                raise PropertyFailed(
                    f"in {name}, at x = {b.reshape(-1)[e].item():.6g} (an input scaled by {scale:g}) the "
                    f"forward is finite but the gradient{where(i, len(big), 'of input')} is "
                    f"{g.reshape(-1)[e].item()}",
                    worst={"index": (e,), "x": b.reshape(-1)[e].item(), "analytic": g.reshape(-1)[e].item()},
                )


def _finite_nearby(op: Bound, xs: Tensors, outs: Tensors) -> torch.Tensor:
    """Where every output is finite at x and a relative step either side (for an elementwise op,
    per element; otherwise one flag): there the true derivative is finite too."""
    ok = torch.ones((), dtype=torch.bool)
    if op.spec.contract.sig.elementwise:
        (x,) = xs
        with torch.no_grad():
            ok = outs[0].isfinite() & op(x * (1 + 1e-3)).isfinite() & op(x * (1 - 1e-3)).isfinite()
        return ok
    for o in outs:
        ok = ok & o.isfinite().all()
    return ok


# -- each input alone -------------------------------------------------------------------------------


def subsets(op: Bound, *xs: torch.Tensor) -> None:
    """For an op of several inputs, every subset of them requiring grad gets the gradients that all
    requiring grad get (a backward that reads ``needs_input_grad`` at the wrong index does not)."""
    outs0, grads0 = vjp(op, xs)
    gs = grad_outputs(outs0)
    n = len(xs)
    for size in range(1, n):
        for chosen in itertools.combinations(range(n), size):
            leaves = tuple(x.detach().clone().requires_grad_(i in chosen) for i, x in enumerate(xs))
            outs = op.outputs(*leaves)
            asked: Sequence[torch.Tensor] = [leaves[i] for i in chosen]
            got = torch.autograd.grad(outs, asked, gs, allow_unused=True)
            for i, g in zip(chosen, got):
                want = grads0[i]
                g = torch.zeros_like(want) if g is None else g
                if not torch.equal(g, want):
                    diff = (g - want).abs()
                    e = int(diff.reshape(-1).argmax()) if diff.numel() else 0
                    raise PropertyFailed(
                        f"with only input(s) {list(chosen)} requiring grad, the gradient of input {i} "
                        f"differs from the one computed with all inputs requiring grad (at flat index {e}: "
                        f"{g.reshape(-1)[e].item() if g.numel() else None} vs "
                        f"{want.reshape(-1)[e].item() if want.numel() else None}): does backward read "
                        "ctx.needs_input_grad at the right index?"
                    )
