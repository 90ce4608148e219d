"""The ``forward_mode`` property: forward-mode AD and vmap agree with the hand-written backward.

A Function that defines ``jvp`` has two derivatives written by hand, and nothing but a test ties
them together; one with a vmap rule runs its backward on batched grad_outputs (per-sample
gradients, ``jacrev``, ``is_grads_batched``), which gradcheck never does. One that defines neither
must say so with an error when asked, not return a wrong answer.

Every check runs per input and per output, and a failure names both (for an op with several), like
the other properties' failures. Its own module so that it can grow without touching ``properties``,
which imports it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import torch
from torch.autograd import forward_ad

from opzoo.core import _recording
from opzoo.exceptions import one_line
from opzoo.testing.checks import _kinks
from opzoo.testing.checks._bound import PropertyFailed, Tensors, grad, where

if TYPE_CHECKING:
    from opzoo.testing.checks._bound import Bound

# Forward and reverse mode compute the same derivative with other roundings: agreement to well
# within float64 precision, scaled by the size of the terms summed (|J| |v|, not |J v|).
RTOL = 1e-9
ATOL = 1e-12
#: Jacobian rows computed (one backward each) to compare J v with; more outputs are sampled.
MAX_ROWS = 256
#: Batch size for the vmap checks.
BATCH = 3


def forward_mode(op: Bound, *xs: torch.Tensor) -> None:
    """Declared jvp / vmap rule: torch.func.jvp and dual tensors give the backward's J v, per input
    and output; vmap, also over the backward, gives a loop's results. Undeclared: asking must raise,
    not answer."""
    if op.spec.kind == "module":
        _jacfwd_is_jacrev(op, xs)
        return
    target = op.spec.target
    if _recording.classic(target):
        _classic(op, xs)
        return
    if defines_jvp(target):
        _jvp_is_backwards(op, xs, "")
        kinks = list(op.spec.contract.kinks_at(op.params))
        if kinks and len(xs) == 1:  # kinks are declared for elementwise ops only
            points = torch.tensor(kinks, dtype=xs[0].dtype, device=xs[0].device)
            # at a declared kink the jvp owes the backward's declared value: nothing excused there
            _jvp_is_backwards(op, (points,), " at the declared kinks", excuse=False)
    else:
        _jvp_raises(op, xs)
    if defines_vmap(target):
        _vmap_is_a_loop(op, xs)
    else:
        _vmap_raises(op, xs)


def defines_jvp(target: Any) -> bool:
    """Whether a Function overrides ``jvp`` (forward-mode AD): itself, or on the twin its ``apply``
    runs (``_with_jvp``: opzoo's built-ins keep ``jvp`` there, out of Dynamo's sight)."""
    target = getattr(target, "_with_jvp", target)
    return getattr(target, "jvp", None) is not torch.autograd.Function.jvp


def defines_vmap(target: Any) -> bool:
    """Whether a Function has a vmap rule: its own ``vmap`` or ``generate_vmap_rule = True``."""
    own = getattr(target, "vmap", None) is not torch.autograd.Function.vmap
    return own or bool(getattr(target, "generate_vmap_rule", False))


def _classic(op: Bound, xs: Tensors) -> None:
    """A classic ``forward(ctx, ...)`` Function: torch.func refuses it whatever it defines (functorch
    needs ``setup_context``), so what can be asked is: forward_ad dual tensors (``J v`` where a jvp
    is defined, an error where none is) and backward on batched grad_outputs (``is_grads_batched``,
    which ``torch.autograd.functional.jacobian(vectorize=True)`` uses). A note says what was not."""
    target = op.spec.target
    if defines_jvp(target):
        _jvp_is_backwards(op, xs, "", func=False)
        kinks = list(op.spec.contract.kinks_at(op.params))
        if kinks and len(xs) == 1:  # kinks are declared for elementwise ops only
            points = torch.tensor(kinks, dtype=xs[0].dtype, device=xs[0].device)
            _jvp_is_backwards(op, (points,), " at the declared kinks", func=False, excuse=False)
    else:
        _jvp_raises(op, xs, func=False)
    refused = _batched_backward(op, xs, refusal_ok=True)
    unused = ", its vmap rule never used" if defines_vmap(target) else ""
    op.notes.append(
        "classic forward(ctx, ...): torch.func.jvp and vmap refuse it (functorch needs setup_context)"
        f"{unused}: forward_ad dual tensors and backward on batched grad_outputs asked instead"
    )
    if refused is not None:
        op.notes.append(f"backward refused batched grad_outputs (is_grads_batched): {refused}")


# -- forward mode ---------------------------------------------------------------------------------


def _jvp_is_backwards(op: Bound, xs: Tensors, note: str, *, func: bool = True, excuse: bool = True) -> None:
    """Each input's tangent alone (the others zero for torch.func.jvp, absent for dual tensors, so
    that a jvp meets both), then all tangents at once (a jvp must add their terms). Without
    ``func`` (a classic Function, which torch.func refuses), dual tensors only, all at once too."""
    xs = tuple(x.detach() for x in xs)
    n = len(xs)
    vs = tuple(_ramp(x, i) for i, x in enumerate(xs))
    ys = op.outputs(*xs)
    m = len(ys)
    want, scale, rows = _jacobian_times(op, xs, vs)
    one = xs[0] if n == 1 else None
    smooth = _smooth(op, xs) if excuse else (lambda j: None)
    for i in (*range(n), None) if n > 1 else (0,):
        tangents = tuple(v if i in (None, k) else torch.zeros_like(v) for k, v in enumerate(vs))
        wrt = " with respect to every input at once" if i is None else where(i, n, "with respect to input")
        if func:
            primals, got = _func_jvp(op, xs, tangents)
            for j in range(m):
                at = f"{note}{where(j, m, 'for output')}{wrt}"
                _close(primals[j], ys[j], f"torch.func.jvp's output differs from op(x){at}", one)
                w = sum(want[j]) if i is None else want[j][i]
                sc = sum(scale[j]) if i is None else scale[j][i]
                what = f"torch.func.jvp differs from the backward's J v{at}"
                _compare(got[j], w, sc, what, one, vs[0] if n == 1 else None, rows[j], lambda j=j: smooth(j))
            if i is None:
                continue
        with forward_ad.dual_level():
            duals = tuple(
                forward_ad.make_dual(x, v) if i in (None, k) else x for k, (x, v) in enumerate(zip(xs, vs))
            )
            outs = _as_tuple(op(*duals))
            tangents_out = [forward_ad.unpack_dual(o).tangent for o in outs]
        for j, t in enumerate(tangents_out):
            at = f"{note}{where(j, m, 'for output')}{wrt}"
            w = sum(want[j]) if i is None else want[j][i]
            sc = sum(scale[j]) if i is None else scale[j][i]
            if t is None:  # a jvp may return None for an output that this tangent does not move
                if (w != 0)[rows[j]].any():
                    _fail(f"a dual tensor's output came back without a tangent{at} (forward_ad.make_dual)")
                continue
            what = f"forward_ad dual tensors differ from the backward's J v{at}"
            _compare(
                t,
                w,
                sc,
                what,
                one,
                vs[0] if n == 1 else None,
                rows[j],
                lambda j=j: smooth(j),
            )


def _smooth(op: Bound, xs: Tensors, extras: Tensors = ()) -> Callable[[int], torch.Tensor | None]:
    """Output j -> where the op is smooth at ``xs`` (None: everywhere), found on first asking: where
    it is not differentiable, a jvp and a backward (or jacfwd and jacrev) may each pick another valid
    generalised gradient (a tie split evenly by one, given to one input by the other), and are not
    held to each other there (gradient judges the backward)."""
    found: list[Tensors | None] = []

    def smooth(j: int) -> torch.Tensor | None:
        if not found:
            fn = _kinks.outputs_of(op)
            inputs = (*xs, *extras)
            diagonal = not extras and _kinks.diagonal(op, xs)
            found.append(_kinks.smooth_rows(fn, inputs, op.notes, diagonal=diagonal))
        rows = found[0]
        return None if rows is None else rows[j]

    return smooth


def _func_jvp(op: Bound, xs: Tensors, vs: Tensors) -> tuple[Tensors, Tensors]:
    primals, tangents = torch.func.jvp(op, xs, vs)
    return _as_tuple(primals), _as_tuple(tangents)


def _jacobian_times(
    op: Bound, xs: Tensors, vs: Tensors
) -> tuple[list[list[torch.Tensor]], list[list[torch.Tensor]], list[torch.Tensor]]:
    """``want[j][i]``, output j's J_ji v_i row by row, each row from one plain backward (not a
    batched one: that is checked on its own); ``scale[j][i]``, |J_ji| |v_i|, the scale of each row's
    sum; and which rows of each output were computed (MAX_ROWS at most)."""
    leaves = tuple(x.detach().clone().requires_grad_() for x in xs)
    ys = op.outputs(*leaves)
    if op.spec.contract.sig.elementwise and len(xs) == len(ys) == 1 and ys[0].requires_grad:
        # A diagonal Jacobian is its own transpose: J v is one backward of v (not one per row,
        # which was most of the property's time), and |J| |v| is its absolute value. A backward
        # that is not diagonal is wrong, and the gradient property says so.
        (g,) = torch.autograd.grad(ys[0], leaves, vs[0], allow_unused=True)
        jv = torch.zeros_like(vs[0]) if g is None else g
        return [[jv]], [[jv.abs()]], [torch.ones_like(jv, dtype=torch.bool)]
    want, scale, checked = [], [], []
    for y in ys:
        jv = [torch.zeros(y.numel(), dtype=x.dtype, device=x.device) for x in xs]
        sc = [torch.zeros_like(t) for t in jv]
        rows = torch.zeros(y.numel(), dtype=torch.bool, device=y.device)
        # an output the Function marks non-differentiable has no rows to hold a jvp to
        for r in _rows(y.numel()) if y.requires_grad else ():
            e = torch.zeros(y.numel(), dtype=y.dtype, device=y.device)
            e[r] = 1
            grads = torch.autograd.grad(y, leaves, e.reshape(y.shape), retain_graph=True, allow_unused=True)
            for i, (g, v) in enumerate(zip(grads, vs)):
                if g is not None:
                    jv[i][r] = (g * v).sum()
                    sc[i][r] = (g.abs() * v.abs()).sum()
            rows[r] = True
        want.append([t.reshape(y.shape) for t in jv])
        scale.append([t.reshape(y.shape) for t in sc])
        checked.append(rows.reshape(y.shape))
    return want, scale, checked


def _rows(n: int) -> list[int]:
    if n <= MAX_ROWS:
        return list(range(n))
    return sorted({round(i * (n - 1) / (MAX_ROWS - 1)) for i in range(MAX_ROWS)})


def _jvp_raises(op: Bound, xs: Tensors, *, func: bool = True) -> None:
    xs = tuple(x.detach() for x in xs)
    vs = tuple(_ramp(x, i) for i, x in enumerate(xs))
    asks: dict[str, Callable[[], Any]] = {}
    if func:
        asks["torch.func.jvp"] = lambda: torch.func.jvp(op, xs, vs)
    asks["forward_ad dual tensors"] = lambda: _dual(op, xs, vs)
    for what, ask in asks.items():
        try:
            ask()
        except Exception:
            continue
        _fail(f"forward mode returned a value although the op defines no jvp ({what})")


def _dual(op: Bound, xs: Tensors, vs: Tensors) -> None:
    with forward_ad.dual_level():
        op(*(forward_ad.make_dual(x, v) for x, v in zip(xs, vs)))


def _jacfwd_is_jacrev(op: Bound, xs: Tensors) -> None:
    """A learnable Module's forward mode is autograd's own: it must agree with reverse mode, for
    each input, each learnable tensor and each output."""
    inputs = (*(x.detach() for x in xs), *op.extras)
    argnums = tuple(range(len(inputs)))
    fwd = torch.func.jacfwd(op, argnums=argnums)(*inputs)
    rev = torch.func.jacrev(op, argnums=argnums)(*inputs)
    n = len(xs)
    names = [f"input {i}" if n > 1 else "x" for i in range(n)]
    names += [f"learnable tensor {i}" for i in range(len(op.extras))]
    one = xs[0] if n == 1 else None
    multi = isinstance(fwd, tuple) and bool(fwd) and isinstance(fwd[0], tuple)
    per_output = fwd if multi else (fwd,)
    rev_outputs = rev if multi else (rev,)
    m = len(per_output)
    smooth = _smooth(op, tuple(x.detach() for x in xs), op.extras)
    for j, (fs, rs) in enumerate(zip(per_output, rev_outputs)):
        for name, f, r in zip(names, fs, rs):
            what = f"jacfwd differs from jacrev{where(j, m, 'for output')} with respect to {name}"
            _close(f, r, what, one, lambda j=j: smooth(j))


# -- vmap -----------------------------------------------------------------------------------------


def _batch(x: torch.Tensor) -> torch.Tensor:
    """BATCH inputs made of x's own values (so inside the domain and off the kinks), reordered."""
    flat = x.detach().reshape(-1)
    return torch.stack([flat, flat.flip(0), flat.roll(1)][:BATCH]).reshape(BATCH, *x.shape)


def _grads(y: torch.Tensor, k: int = 0) -> torch.Tensor:
    """BATCH distinct grad_outputs: a sum or the first of them alone would not pass for all."""
    g = _ramp(y, k).reshape(-1)
    return torch.stack([g, -0.5 * g.flip(0), 1.7 * g.roll(1)][:BATCH]).reshape(BATCH, *y.shape)


def _vmap_is_a_loop(op: Bound, xs: Tensors) -> None:
    n = len(xs)
    one = xs[0] if n == 1 else None
    xss = tuple(_batch(x) for x in xs)
    loop = [op.outputs(*(xb[b] for xb in xss)) for b in range(BATCH)]
    batched = _as_tuple(torch.func.vmap(op)(*xss))
    m = len(loop[0])
    if len(batched) != m:
        _fail(f"vmap(op) returned {len(batched)} output(s), a loop {m}")
    for j in range(m):
        what = f"vmap(op) differs from a loop over the batch{where(j, m, 'for output')}"
        _close(batched[j], torch.stack([outs[j] for outs in loop]), what, one)
    _batched_backward(op, xs)
    leaves = tuple(x.detach().clone().requires_grad_() for x in xs)
    ys = op.outputs(*leaves)
    weights = tuple(_ramp(y.detach(), k) for k, y in enumerate(ys))

    def total(*ts: torch.Tensor) -> torch.Tensor:
        return sum((o * w).sum() for o, w in zip(_as_tuple(op(*ts)), weights))  # type: ignore[return-value]

    per_sample = torch.func.vmap(torch.func.grad(total, argnums=tuple(range(n))))(*xss)
    loop_grads = []
    for b in range(BATCH):
        ls = tuple(xb[b].clone().requires_grad_() for xb in xss)
        outs = op.outputs(*ls)
        loop_grads.append(_grad(outs, ls, weights))
    for i in range(n):
        what = f"vmap(grad(op)) differs from a loop of gradients{where(i, n, 'for input')}"
        _close(per_sample[i], torch.stack([lg[i] for lg in loop_grads]), what, one)


def _batched_backward(op: Bound, xs: Tensors, *, refusal_ok: bool = False) -> str | None:
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
        _close(g, want, what, one, factor=factor)
    return None


def _grad(ys: Tensors, xs: Tensors, gs: Tensors) -> Tensors:
    grads = grad(ys, xs, gs, retain_graph=True)
    return tuple(torch.zeros_like(x) if g is None else g for x, g in zip(xs, grads))


def _vmap_raises(op: Bound, xs: Tensors) -> None:
    try:
        torch.func.vmap(op)(*(_batch(x) for x in xs))
    except Exception:
        return
    _fail(
        "vmap returned a value although the op defines no vmap rule "
        "(neither a vmap staticmethod nor generate_vmap_rule = True)"
    )


# -- helpers --------------------------------------------------------------------------------------


def _ramp(like: torch.Tensor, k: int = 0) -> torch.Tensor:
    """A deterministic tangent with distinct, non-zero entries (a ones tangent hides a missing
    multiplication by it); ``k`` makes each input's (or output's) its own, not a multiple of
    another's (a jvp that swaps two inputs' terms would pass equal ones)."""
    n = like.numel()
    lo, hi = -1.3 + 0.41 * k, 1.9 - 0.23 * k
    ramp = torch.linspace(lo, hi, max(n, 1), dtype=like.dtype, device=like.device)[:n] + 0.03
    if k % 2:
        ramp = ramp.flip(0)
    return ramp.reshape(like.shape)


def _as_tuple(out: Any) -> Tensors:
    return out if isinstance(out, tuple) else (out,)


def _close(
    got: torch.Tensor,
    want: torch.Tensor,
    what: str,
    x: torch.Tensor | None,
    smooth: Callable[[], torch.Tensor | None] | None = None,
    *,
    factor: float = 1.0,
) -> None:
    """:func:`_compare` at the scale of ``want``'s largest element; ``factor`` widens the
    tolerance for a computation in a coarser dtype than float64."""
    scale = max(1.0, want.abs().nan_to_num(posinf=0.0, neginf=0.0).max().item()) if want.numel() else 1.0
    _compare(got, want, torch.full_like(want, scale * factor), what, x, smooth=smooth)


def _compare(
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
        _fail(f"{what}: shape {tuple(got.shape)}, expected {tuple(want.shape)}")
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
    _fail(
        f"{what}: {int(bad.sum())} of {total} elements differ; first at flat index {i}: "
        f"got {g:.9g}, expected {w:.9g}{at}",
        worst=worst,
    )


def _fail(message: str, **details: Any) -> None:
    raise PropertyFailed(message, **details)
