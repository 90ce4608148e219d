"""Forward mode against the backward (the ``forward_mode`` property's first half, :mod:`._forward`):
torch.func.jvp and dual tensors give the backward's J v, each input's tangent alone and all at once,
at the drawn inputs and at the declared kinks; a learnable Module's jacfwd equals its jacrev; a
Function without a jvp refuses to answer. Where the op is not differentiable, the two may each pick
another valid generalised gradient, and are not held to each other there.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch.autograd import forward_ad

from opzoo.testing.checks import _kinks
from opzoo.testing.checks._agreement import as_tuple, close_scaled, compare, fail, tangent_ramp
from opzoo.testing.checks._bound import Bound, Tensors
from opzoo.testing.checks._compare import where

#: Jacobian rows computed (one backward each) to compare J v with; more outputs are sampled.
MAX_ROWS = 256


def jvp_is_backwards(op: Bound, xs: Tensors, *, func: bool = True) -> None:
    """torch.func.jvp (unless not ``func``: a classic Function, which torch.func refuses) and dual
    tensors give the backward's J v at ``xs``, and (an elementwise op) at each declared kink."""
    _jvp_at(op, xs, "", func=func)
    kinks = list(op.spec.contract.kinks_at(op.params))
    if kinks and len(xs) == 1:  # kinks are declared for elementwise ops only
        points = torch.tensor(kinks, dtype=xs[0].dtype, device=xs[0].device)
        # at a declared kink the jvp owes the backward's declared value: nothing excused there
        _jvp_at(op, (points,), " at the declared kinks", func=func, excuse=False)


def _jvp_at(op: Bound, xs: Tensors, note: str, *, func: bool = True, excuse: bool = True) -> None:
    """Each input's tangent alone (the others zero for torch.func.jvp, absent for dual tensors, so
    that a jvp meets both), then all tangents at once (a jvp must add their terms). Without
    ``func`` (a classic Function, which torch.func refuses), dual tensors only, all at once too."""
    xs = tuple(x.detach() for x in xs)
    n = len(xs)
    vs = tuple(tangent_ramp(x, i) for i, x in enumerate(xs))
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
                close_scaled(primals[j], ys[j], f"torch.func.jvp's output differs from op(x){at}", one)
                w = sum(want[j]) if i is None else want[j][i]
                sc = sum(scale[j]) if i is None else scale[j][i]
                what = f"torch.func.jvp differs from the backward's J v{at}"
                compare(got[j], w, sc, what, one, vs[0] if n == 1 else None, rows[j], lambda j=j: smooth(j))
            if i is None:
                continue
        with forward_ad.dual_level():
            duals = tuple(
                forward_ad.make_dual(x, v) if i in (None, k) else x for k, (x, v) in enumerate(zip(xs, vs))
            )
            outs = as_tuple(op(*duals))
            tangents_out = [forward_ad.unpack_dual(o).tangent for o in outs]
        for j, t in enumerate(tangents_out):
            at = f"{note}{where(j, m, 'for output')}{wrt}"
            w = sum(want[j]) if i is None else want[j][i]
            sc = sum(scale[j]) if i is None else scale[j][i]
            if t is None:  # a jvp may return None for an output that this tangent does not move
                if (w != 0)[rows[j]].any():
                    fail(f"a dual tensor's output came back without a tangent{at} (forward_ad.make_dual)")
                continue
            what = f"forward_ad dual tensors differ from the backward's J v{at}"
            compare(
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
    return as_tuple(primals), as_tuple(tangents)


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


def jvp_raises(op: Bound, xs: Tensors, *, func: bool = True) -> None:
    """A Function that defines no jvp: torch.func.jvp (unless not ``func``) and dual tensors must
    raise when asked, not answer."""
    xs = tuple(x.detach() for x in xs)
    vs = tuple(tangent_ramp(x, i) for i, x in enumerate(xs))
    asks: dict[str, Callable[[], Any]] = {}
    if func:
        asks["torch.func.jvp"] = lambda: torch.func.jvp(op, xs, vs)
    asks["forward_ad dual tensors"] = lambda: _dual(op, xs, vs)
    for what, ask in asks.items():
        try:
            ask()
        except Exception:
            continue
        fail(f"forward mode returned a value although the op defines no jvp ({what})")


def _dual(op: Bound, xs: Tensors, vs: Tensors) -> None:
    with forward_ad.dual_level():
        op(*(forward_ad.make_dual(x, v) for x, v in zip(xs, vs)))


def jacfwd_is_jacrev(op: Bound, xs: Tensors) -> None:
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
            close_scaled(f, r, what, one, lambda j=j: smooth(j))
