"""The ``gradient`` and ``double_backward`` properties: the backward against finite differences
(gradcheck and gradgradcheck in float64), a surrogate op's against its declared surrogate."""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch.autograd import gradcheck, gradgradcheck
from torch.autograd.gradcheck import GradcheckError

from opzoo.exceptions import one_line
from opzoo.testing import _kinks
from opzoo.testing._bound import (
    LARGE,
    Bound,
    PropertyFailed,
    PropertySkipped,
    Tensors,
    grad_outputs,
    noncontiguous,
    once_differentiable,
    vjp,
    worst_gradient_mismatch,
)
from opzoo.testing._surrogate import piecewise_constant_hint, surrogate_double_backward, surrogate_gradient


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
        off_undeclared_kinks(op, xs, check, order=1)
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


def off_undeclared_kinks(
    op: Bound, xs: Sequence[torch.Tensor], check: Callable[[Sequence[torch.Tensor]], None], *, order: int
) -> None:
    """Run ``check(xs)``; where it fails with a Jacobian mismatch because an elementwise op's input
    sits on an undeclared kink (see ``_kinks``: the op's value there is held to the one-sided
    derivatives), run it again with those elements moved off, so that everything else is checked."""
    try:
        check(xs)
    except GradcheckError as exc:
        moved = _off_undeclared_kinks(op, xs, exc, order=order)
        if moved is None:
            raise
        check(moved)


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
        if once_differentiable(firsts):
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
            off_undeclared_kinks(op, xs, check, order=2)
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
