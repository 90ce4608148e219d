"""The properties every registered op must have, one :class:`Property` record each.

A property's check takes a bound op and its float64 inputs, ``check(op, *inputs)`` (one tensor per
signature input), and raises :class:`PropertyFailed` (or any error the op itself raises) when the
property does not hold. To add a property, write its check and add one record to
:data:`PROPERTIES`; ``opzoo check``, the pytest plugin and the docs pick it up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.autograd.gradcheck import GradcheckError

from opzoo._records import one_line
from opzoo._registry import OpSpec
from opzoo.testing import _kinks, _oracles
from opzoo.testing._bound import (
    EXACT,
    LARGE,
    TOLERANCES,
    Bound,
    PropertyFailed,
    PropertySkipped,
    Tensors,
    bind,
    close,
    grad_outputs,
    noncontiguous,
    ramp,
    vjp,
    where,
    worst_gradient_mismatch,
)
from opzoo.testing._forward import defines_jvp, forward_mode
from opzoo.testing._library import library, why_not_bridged
from opzoo.testing._surrogate import piecewise_constant_hint, surrogate_double_backward, surrogate_gradient
from opzoo.testing.strategies import KINK_MARGIN

# -- the properties -------------------------------------------------------------------------------


def gradient(op: Bound, *xs: torch.Tensor) -> None:
    """gradcheck in float64: analytic backward vs central differences; undefined grads, dtypes.
    A surrogate op: its backward vs its declared surrogate's autograd gradient (_surrogate.py)."""
    if op.spec.contract.surrogate is not None:
        return surrogate_gradient(op, *xs)
    if all(x.numel() == 0 for x in xs):
        return  # nothing to differentiate (and an empty reduction's -inf confuses gradcheck)
    if sum(x.numel() for x in xs) > LARGE:
        # gradcheck would build the whole Jacobian to word a failure: a directional check instead
        moved = _off_undeclared_kinks(op, xs, None, order=1)
        directional(op, moved or xs)
        return

    def check(inputs: Sequence[torch.Tensor]) -> None:
        gradcheck(
            op,
            op.inputs(*inputs),
            fast_mode=op.fast,
            check_undefined_grad=True,
            check_grad_dtypes=True,
            eps=1e-6,
            atol=1e-5,
            rtol=1e-3,
        )

    try:
        try:
            check(xs)
        except GradcheckError as exc:
            moved = _off_undeclared_kinks(op, xs, exc, order=1)
            if moved is None:
                raise
            check(moved)  # the kinks excused, everything else is checked again
    except GradcheckError as exc:
        message = one_line(exc, with_type=False, lines=3) + piecewise_constant_hint(op, *xs)
        raise PropertyFailed(message, worst=worst_gradient_mismatch(op, xs)) from None


def directional(op: Bound, xs: Sequence[torch.Tensor], eps: float = 1e-6) -> None:
    """vᵀJu against central differences along a random direction u: one backward and two forwards,
    so a large input costs what it weighs (the check gradcheck's fast mode makes)."""
    gen = torch.Generator().manual_seed(len(xs))
    us = [torch.randn(x.shape, generator=gen, dtype=x.dtype).to(x.device) for x in xs]
    outs, grads = vjp(op, xs)
    vs = grad_outputs(outs)
    analytic = sum(float((g * u).sum()) for g, u in zip(grads, us))
    with torch.no_grad():
        up = op.outputs(*(x + eps * u for x, u in zip(xs, us)))
        down = op.outputs(*(x - eps * u for x, u in zip(xs, us)))
    numeric = sum(float(((a - b) * v).sum()) for a, b, v in zip(up, down, vs)) / (2 * eps)
    size = sum(x.numel() for x in xs)
    if not abs(analytic - numeric) <= 1e-5 * max(1.0, size**0.5) + 1e-3 * abs(numeric):
        raise PropertyFailed(
            f"directional derivative mismatch on a large input ({size:,} elements): numerical "
            f"{numeric:.9g}, analytical {analytic:.9g} (vᵀJu along a random u)"
        )


def _off_undeclared_kinks(
    op: Bound, xs: Sequence[torch.Tensor], exc: GradcheckError | None, *, order: int
) -> tuple[torch.Tensor, ...] | None:
    """An elementwise op's input moved off undeclared kinks (see ``_kinks``), or None."""
    if not op.spec.contract.sig.elementwise or op.module is not None:
        return None
    if exc is not None and "Jacobian mismatch" not in str(exc):
        return None
    moved = _kinks.excuse(op, xs[0], order=order)
    return None if moved is None else (moved,)


def double_backward(op: Bound, *xs: torch.Tensor) -> None:
    """Second derivatives that come back are right: gradgradcheck with contiguous and
    non-contiguous grad_outputs, in a graph where each input is also used elsewhere (so that a
    silently detached backward shows as a wrong second derivative, not as an error that hides it).
    One that raises, or is marked once_differentiable, is a skip, unless double_backward=True is
    declared: then it must work. A surrogate op: against its surrogate's second derivative."""
    if op.spec.contract.surrogate is not None:
        return surrogate_double_backward(op, *xs)
    if all(x.numel() == 0 for x in xs) or sum(x.numel() for x in xs) > LARGE:
        return  # nothing to differentiate; or too large for second-order finite differences
    declared = op.spec.contract.double_backward
    n = op.arity

    def also_elsewhere(*leaves: torch.Tensor) -> Tensors:
        # x**3 adds a non-zero second derivative of its own: the graph of the first derivative
        # always requires grad, whatever the op's backward does.
        return (*op.outputs(*leaves[:n], *leaves[n:]), *(x**3 for x in leaves[:n]))

    leaves = op.inputs(*xs)
    try:
        outs = also_elsewhere(*leaves)
        # grad_outputs that require grad, as gradgradcheck's do: once_differentiable raises then
        gs = tuple(g.requires_grad_() for g in grad_outputs(outs))
        firsts = torch.autograd.grad(outs, leaves, gs, create_graph=True, allow_unused=True)
        if _marked_once_differentiable(firsts):
            raise RuntimeError("the backward is marked once_differentiable")
        torch.autograd.grad([g.sum() for g in firsts if g is not None], leaves, allow_unused=True)
    except RuntimeError as exc:
        if declared:
            raise PropertyFailed(f"double_backward=True is declared, but: {one_line(exc)}") from None
        raise PropertySkipped(f"no second derivative ({one_line(exc, with_type=False)})") from None
    gs = grad_outputs(also_elsewhere(*(x.detach() for x in leaves)))
    for layout, grads in (("contiguous", gs), ("non-contiguous", tuple(noncontiguous(g) for g in gs))):

        def check(inputs: Sequence[torch.Tensor]) -> None:
            gradgradcheck(
                also_elsewhere,
                op.inputs(*inputs),
                grads,
                fast_mode=op.fast,
                eps=1e-6,
                atol=1e-5,
                rtol=1e-3,
                gen_non_contig_grad_outputs=True,
            )

        try:
            try:
                check(xs)
            except GradcheckError as exc:
                moved = _off_undeclared_kinks(op, xs, exc, order=2)
                if moved is None:
                    raise
                check(moved)
        except GradcheckError as exc:
            message = one_line(exc, with_type=False, lines=3)
            hint = (
                ""
                if declared
                else (
                    " (a backward that is not differentiable should be decorated with "
                    "torch.autograd.function.once_differentiable, so that asking is an error)"
                )
            )
            raise PropertyFailed(
                f"second derivative is wrong, with {layout} grad_output: {message}{hint}"
            ) from None


def _marked_once_differentiable(grads: Sequence[torch.Tensor | None]) -> bool:
    """Whether the graph of ``grads`` holds the error node once_differentiable leaves. (Asking for
    the derivative through it raises, but only where autograd walks it: a gradient with respect
    to the inputs alone may prune it and come back silently wrong.)"""
    stack = [g.grad_fn for g in grads if g is not None and g.grad_fn is not None]
    seen: set[int] = set()
    while stack:
        fn = stack.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        if type(fn).__name__ in ("Error", "DelayedError"):
            return True
        stack.extend(nxt for nxt, _ in fn.next_functions if nxt is not None)
    return False


def reference(op: Bound, *xs: torch.Tensor) -> None:
    """Forward and gradient match the declared reference: in float64, and in each lower dtype the
    op declares against the float64 reference (at the rounded inputs), where the op may be off by
    the dtype's tolerance plus twice what the reference itself is off by in that dtype. A surrogate
    op: the forward only (its gradient is the surrogate's, checked by gradient)."""
    ref = op.spec.contract.reference
    kinks = op.spec.contract.kinks_at(op.params)
    for name in op.spec.contract.dtypes:
        dtype = getattr(torch, name)
        lows = tuple(x.to(dtype) for x in xs)
        lop = op if dtype == torch.float64 else op.cast(dtype)
        outs, grads = vjp(lop, lows)
        gs = grad_outputs(outs)
        surrogate = op.spec.contract.surrogate is not None
        x64, g64 = tuple(x.double() for x in lows), [g.double() for g in gs]
        want, want_grads = _ref_vjp(ref, op.params, x64, g64, forward_only=surrogate)
        par = par_grads = (None,) * max(len(outs), len(xs))
        if dtype != torch.float64:
            par, par_grads = _ref_vjp(ref, op.params, lows, gs, forward_only=surrogate)
            par_grads = par_grads or (None,) * len(xs)
        tol = TOLERANCES[dtype]
        x0 = lows[0] if len(lows) == 1 else None
        scaled = not op.spec.contract.sig.elementwise
        for j, (got, expected) in enumerate(zip(outs, want)):
            what = f"forward in {name} differs from the reference{where(j, len(outs), 'output')}"
            close(got, expected, tol, what, x0, par=par[j], scaled=scaled)
        if surrogate:
            continue  # the gradient is the declared surrogate's, which gradient checks
        for i, (got, expected, x) in enumerate(zip(grads, want_grads, xs)):
            what = f"gradient in {name} differs from the reference's{where(i, len(xs), 'input')}"
            if not kinks:
                close(got, expected, tol, what, x0, par=par_grads[i], scaled=scaled)
                continue
            away = torch.ones_like(x, dtype=torch.bool)
            for k in kinks:
                # In a low precision the kink itself is rounded (a param like min_val, too): keep
                # the comparison a few of that dtype's steps away from it.
                step = torch.finfo(dtype).eps * max(1.0, abs(k))
                away &= (lows[i].double() - k).abs() >= max(KINK_MARGIN / 2, 4 * step)
            p = par_grads[i][away] if par_grads[i] is not None else None
            close(got[away], expected[away], tol, what, x0[away], par=p)


def _ref_vjp(
    ref: Callable[..., object],
    params: dict[str, object],
    xs: Tensors,
    gs: Sequence[torch.Tensor],
    *,
    forward_only: bool = False,
) -> tuple[Tensors, Tensors]:
    """The reference's outputs and its autograd gradient, in the dtype of ``xs`` (no gradient for
    ``forward_only``: a surrogate op's reference, like torch.heaviside, may have none)."""
    leaves = tuple(x.detach().clone().requires_grad_(not forward_only) for x in xs)
    outs = ref(*leaves, **params)
    outs = outs if isinstance(outs, tuple) else (outs,)
    if forward_only:
        return tuple(o.detach() for o in outs), ()
    grads = torch.autograd.grad(outs, leaves, tuple(gs), allow_unused=True)
    return (
        tuple(o.detach() for o in outs),
        tuple(torch.zeros_like(x) if g is None else g for x, g in zip(leaves, grads)),
    )


def layout(op: Bound, *xs: torch.Tensor) -> None:
    """Each input and each grad_output non-contiguous in turn (then all at once) gives the values
    and gradients of contiguous ones."""
    outs0, grads0 = vjp(op, xs)
    gs = grad_outputs(outs0)
    n, m = len(xs), len(gs)
    variants = [
        ([noncontiguous(x) if k == i else x for k, x in enumerate(xs)], gs, f"input{where(i, n, '')}")
        for i in range(n)
    ]
    variants += [
        (xs, [noncontiguous(g) if k == j else g for k, g in enumerate(gs)], f"grad_output{where(j, m, '')}")
        for j in range(m)
    ]
    variants.append(([noncontiguous(x) for x in xs], [noncontiguous(g) for g in gs], "everything"))
    for vxs, vgs, what in variants:
        if all(t.is_contiguous() for t in (*vxs, *vgs)):
            continue  # 0-d or empty: no other layout exists
        outs, grads = vjp(op, vxs, vgs)
        for j, (got, want) in enumerate(zip(outs, outs0)):
            what_j = f"forward{where(j, m, 'output')} differs for a non-contiguous {what}"
            close(got, want, EXACT, what_j, scaled=True)
        for i, (got, want) in enumerate(zip(grads, grads0)):
            what_i = f"gradient{where(i, n, 'input')} differs for a non-contiguous {what}"
            close(got, want, EXACT, what_i, scaled=True)


def hygiene(op: Bound, *xs: torch.Tensor) -> None:
    """Outputs follow the signature's shapes and the inputs' dtype and device; nothing is
    mutated; backward repeats exactly."""
    leaves = tuple(x.detach().clone().requires_grad_() for x in xs)
    before = [(x.detach().clone(), x._version) for x in leaves]

    def unchanged(when: str) -> None:
        for i, (x, (value, version)) in enumerate(zip(leaves, before)):
            if x._version != version or not torch.equal(x.detach(), value):
                raise PropertyFailed(f"{when} mutated its input{where(i, len(leaves), '')}")

    outs = op.outputs(*leaves)  # checks the count and shapes against the signature
    for j, o in enumerate(outs):
        for what, got, want in (("dtype", o.dtype, xs[0].dtype), ("device", o.device, xs[0].device)):
            if got != want:
                raise PropertyFailed(
                    f"output{where(j, len(outs), '')} {what} is {got}, expected {want} (the input's)"
                )
    unchanged("forward")
    gs = grad_outputs(outs)
    g_before = [(g.clone(), g._version) for g in gs]
    first = torch.autograd.grad(outs, leaves, gs, retain_graph=True, allow_unused=True)
    for j, (g, (value, version)) in enumerate(zip(gs, g_before)):
        if g._version != version or not torch.equal(g, value):
            raise PropertyFailed(f"backward mutated grad_output{where(j, len(gs), '')}")
    unchanged("backward")
    second = torch.autograd.grad(outs, leaves, gs, allow_unused=True)
    for i, (x, g1, g2) in enumerate(zip(xs, first, second)):
        if g1 is None or g2 is None:
            continue
        if g1.dtype != x.dtype or tuple(g1.shape) != tuple(x.shape):
            raise PropertyFailed(
                f"gradient{where(i, len(xs), 'of input')} is {g1.dtype} {tuple(g1.shape)}, "
                f"expected {x.dtype} {tuple(x.shape)}"
            )
        if not torch.equal(g1, g2):
            raise PropertyFailed("running backward twice gave different gradients")


def kinks(op: Bound, x: torch.Tensor) -> None:
    """At each declared kink, the gradient equals the declared subgradient (elementwise ops)."""
    declared = op.spec.contract.kinks_at(op.params)
    points = torch.tensor(list(declared), dtype=torch.float64, device=x.device)
    want = torch.tensor(list(declared.values()), dtype=torch.float64, device=x.device)
    _, (got,) = vjp(op, (points,), (torch.ones_like(points),))
    if not torch.allclose(got, want, rtol=1e-9, atol=1e-12):
        i = int((got - want).abs().argmax())
        raise PropertyFailed(
            f"at the kink x = {points[i].item():g} the gradient is {got[i].item():g}, "
            f"but the op declares {want[i].item():g}",
            worst={
                "index": (i,),
                "x": points[i].item(),
                "declared": want[i].item(),
                "analytic": got[i].item(),
            },
        )


def compile(op: Bound, *xs: torch.Tensor) -> None:
    """Under torch.compile (aot_eager: no C compiler needed) outputs and gradients match eager,
    without graph breaks."""
    import torch._dynamo

    if any(x.numel() == 0 for x in xs):
        return

    def step(*ts: torch.Tensor) -> object:
        return op(*ts)

    outs0, grads0 = vjp(op, xs)
    try:
        outs, grads = vjp(_compiled(op, step, fullgraph=True), xs)
    except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError) as exc:
        # Unsupported: code dynamo cannot trace; UserError: a branch on a tensor's values.
        message = one_line(exc, with_type=False)
        if not (defines_jvp(op.spec.target) and "jvp" in message):
            raise PropertyFailed(f"graph break under torch.compile (fullgraph=True): {message}") from None
        # Not the op's fault: torch.compile breaks the graph at any Function that defines jvp
        # (torch 2.13). Said, and the values checked across the break.
        op.notes.append(
            "torch.compile breaks the graph at a Function that defines jvp; values checked with "
            "the break (opzoo's ops keep jvp off the compiled path: see opzoo/ops/_base.py)"
        )
        outs, grads = vjp(_compiled(op, step, fullgraph=False), xs)
    tol = TOLERANCES[torch.float64]
    for j, (got, want) in enumerate(zip(outs, outs0)):
        close(got, want, tol, f"compiled forward{where(j, len(outs), 'output')} differs from eager")
    for i, (got, want) in enumerate(zip(grads, grads0)):
        close(got, want, tol, f"compiled gradient{where(i, len(xs), 'input')} differs from eager")


def _compiled(op: Bound, step: Callable[..., object], *, fullgraph: bool) -> Bound:
    # Dynamo caches compiled code per code object, and `step` has one code object for every op:
    # past its recompile limit (8) it ran later ops eagerly, blind to their graph breaks. Each
    # check compiles afresh, so that its verdict does not depend on the checks before it.
    # fullgraph: a graph break is an error, found in the one trace that compiles the op (asking
    # torch._dynamo.explain first traced it twice, half the property's time).
    torch._dynamo.reset()
    fn = torch.compile(step, backend="aot_eager", fullgraph=fullgraph)
    return Bound(op.spec, op.params, fn, op.extras, op.module)


# -- the records ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Property:
    """One property: its check, when it applies to an op, and which inputs it runs on.

    drawn: run on hypothesis-drawn inputs (the profile sets how many).
    fixed: also run on this many small fixed inputs, with full Jacobians (see the runner).
    edges: also run on the edge inputs: 0-d, one element, empty and large (the runner's
           ``edge_inputs``), in fast mode, so the cost stays linear in their size.
    """

    name: str
    check: Callable[..., None]
    applies: Callable[[OpSpec], str | None] = lambda spec: None  # why it does not apply, or None
    drawn: bool = True
    fixed: int = 0
    edges: bool = False

    @property
    def doc(self) -> str:
        return (self.check.__doc__ or "").strip().splitlines()[0]

    def __call__(self, op: Bound, *xs: torch.Tensor) -> None:
        self.check(op, *xs)


def _needs_reference(spec: OpSpec) -> str | None:
    return None if spec.contract.reference is not None else "no reference declared"


def _needs_kinks(spec: OpSpec) -> str | None:
    return None if spec.contract.kinks_at() else "no kinks declared"


#: name -> property, in the order they are reported.
PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in (
        # Fast mode has missed wrong gradients: full Jacobians on a few small fixed inputs too.
        Property("gradient", gradient, fixed=2, edges=True),
        Property("double_backward", double_backward, edges=True),
        Property("reference", reference, _needs_reference, edges=True),
        Property("layout", layout, edges=True),
        Property("hygiene", hygiene, edges=True),
        Property("kinks", kinks, _needs_kinks),
        Property("autograd", _oracles.autograd, _oracles.oracle_applies, fixed=2, edges=True),
        Property("extremes", _oracles.extremes, fixed=2),
        Property("subsets", _oracles.subsets, _oracles.subsets_apply, edges=True),
        # Compiling is slow: once, on one fixed input.
        Property("compile", compile, drawn=False, fixed=1),
        Property("forward_mode", forward_mode, fixed=1),
        Property("library", library, why_not_bridged, fixed=1),  # drawn: quick opcheck; fixed: all
    )
}


# ramp and PropertyFailed are imported from here by plugins' and opzoo's own tests.
__all__ = [
    "PROPERTIES",
    "Bound",
    "Property",
    "PropertyFailed",
    "PropertySkipped",
    "bind",
    "noncontiguous",
    "ramp",
]
