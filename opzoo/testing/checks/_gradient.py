"""The ``gradient`` and ``double_backward`` properties: the backward against finite differences
(gradcheck, and gradcheck of the first derivative, in float64), a surrogate op's against its declared
surrogate. Where the function (or, for double backward, its first derivative) is not differentiable,
``_kinks`` holds the backward to the valid generalised gradients instead."""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Sequence

import torch
from torch.autograd import gradcheck
from torch.autograd.gradcheck import GradcheckError

from opzoo.exceptions import one_line
from opzoo.testing.checks import _kinks
from opzoo.testing.checks._backward_rows import jacobian_rows
from opzoo.testing.checks._bound import (
    LARGE,
    Bound,
    PropertyFailed,
    PropertySkipped,
    Tensors,
    differentiable,
    grad,
    grad_outputs,
    noncontiguous,
    once_differentiable,
    ramp,
    vjp,
)
from opzoo.testing.checks._by_design import by_design_gradient
from opzoo.testing.checks._compare import index_of
from opzoo.testing.checks._kink_words import describe
from opzoo.testing.checks._onesided import KINDS, Probe
from opzoo.testing.checks._second_directional import directional_second, fits, own_direction
from opzoo.testing.checks._surrogate import piecewise_constant_hint, surrogate_gradient
from opzoo.testing.checks._surrogate_second import surrogate_double_backward

#: gradcheck's settings for both properties.
EPS, ATOL, RTOL = 1e-6, 1e-5, 1e-3

#: What a wrong second derivative of an op that declares none may mean.
ONCE = (
    " (a backward that is not differentiable should be decorated with "
    "torch.autograd.function.once_differentiable, so that asking is an error)"
)


def gradient(op: Bound, *xs: torch.Tensor) -> None:
    """gradcheck in float64: analytic backward vs central differences; undefined grads, dtypes.
    A surrogate op: its backward vs its declared surrogate's autograd gradient (_surrogate.py). A
    by-design backward: linear in grad_output, or a skip (_by_design.py)."""
    if op.spec.contract.surrogate is not None:
        return surrogate_gradient(op, *xs)
    if op.spec.contract.by_design is not None:
        return by_design_gradient(op, *xs)
    if all(x.numel() == 0 for x in xs):
        return  # nothing to differentiate (and an empty reduction's -inf confuses gradcheck)
    if sum(x.numel() for x in xs) > LARGE:
        # gradcheck would build the whole Jacobian to word a failure: a directional check instead
        directional(op, xs)
        return
    inputs = op.inputs(*xs)

    def run(fn: Callable[..., object]) -> None:
        gradcheck(
            fn,
            inputs,
            fast_mode=op.fast,
            check_undefined_grad=True,
            check_grad_dtypes=True,
            eps=EPS,
            atol=ATOL,
            rtol=RTOL,
        )

    try:
        _kinks.gradcheck_rows(op, inputs, run, op.notes, diagonal=_kinks.diagonal(op, xs))
    except GradcheckError as exc:
        message = (
            one_line(exc, with_type=False, lines=3) + piecewise_constant_hint(op, *xs) + _dtype_hint(op, xs)
        )
        output, input_ = _pair(exc)
        worst = worst_gradient_mismatch(op, inputs, output=output, input=input_)
        raise PropertyFailed(message, worst=worst) from None
    except PropertyFailed as exc:
        hint = _dtype_hint(op, xs)
        if not hint:
            raise
        raise PropertyFailed(str(exc) + hint, **exc.details) from None


def _dtype_hint(op: Bound, xs: Sequence[torch.Tensor]) -> str:
    """What to add to a failed ``gradient`` whose op returns a shorter floating dtype than its
    float64 inputs: its finite differences carry that dtype's rounding (``hygiene`` fails it)."""
    given = next((x.dtype for x in xs if x.is_floating_point()), None)
    try:
        outs = op.outputs(*(x.detach() for x in xs))
    except Exception:  # a hint must never hide the failure it decorates
        return ""
    short = [f"{j} is {o.dtype}" for j, o in enumerate(outs) if o.is_floating_point() and o.dtype != given]
    if given is None or not short:
        return ""
    return (
        f" (output {', '.join(short)} for {given} inputs: its finite differences carry that dtype's "
        "rounding; the output dtype is hygiene's to judge)"
    )


def _pair(exc: GradcheckError) -> tuple[int | None, int | None]:
    """The output and input a gradcheck error names ("... for output 1 with respect to input 0")."""
    found = re.search(r"for output (\d+) with respect to input (\d+)", str(exc))
    return (int(found.group(1)), int(found.group(2))) if found else (None, None)


def worst_gradient_mismatch(
    op: Bound,
    xs: Sequence[torch.Tensor],
    eps: float = 1e-6,
    *,
    output: int | None = None,
    input: int | None = None,
) -> dict[str, Any] | None:
    """Compare the analytic gradient of ``sum(out_j * g_j)`` with central differences, element by
    element, for output ``output`` and input ``input`` (every one where None: so that the worst
    agrees with a headline that names them); return where they differ most."""
    if sum(x.numel() for x in xs) > LARGE or all(x.numel() == 0 for x in xs):
        return None
    xs = tuple(x.detach().clone() for x in xs)
    outs = op.outputs(*xs)
    gs = grad_outputs(outs)
    worst: dict[str, Any] | None = None
    for j in range(len(outs)) if output is None else [output]:
        only_j = [g if k == j else torch.zeros_like(g) for k, g in enumerate(gs)]
        _, analytic = vjp(op, xs, only_j)
        for i, x in enumerate(xs):
            if x.numel() == 0 or input not in (None, i):
                continue
            numeric = torch.empty_like(x).reshape(-1)
            flat = x.reshape(-1)
            with torch.no_grad():
                for e in range(flat.numel()):
                    orig = flat[e].item()
                    flat[e] = orig + eps
                    up = (op.outputs(*xs)[j] * gs[j]).sum().item()
                    flat[e] = orig - eps
                    down = (op.outputs(*xs)[j] * gs[j]).sum().item()
                    flat[e] = orig
                    numeric[e] = (up - down) / (2 * eps)
            diff = (numeric - analytic[i].reshape(-1)).abs().nan_to_num(nan=math.inf)
            e = int(diff.argmax())
            if worst is None or diff[e].item() > worst["_diff"]:
                worst = {
                    "_diff": diff[e].item(),
                    "input": i,
                    "output": j,
                    "index": index_of(e, x.shape),
                    "x": flat[e].item(),
                    "numerical": numeric[e].item(),
                    "analytic": analytic[i].reshape(-1)[e].item(),
                    "of": "sum(output * grad_output), grad_output a fixed ramp",
                }
    if worst is None:
        return None
    worst.pop("_diff")
    if len(xs) == 1 and len(outs) == 1:
        del worst["input"], worst["output"]
    return worst


def directional(op: Bound, xs: Sequence[torch.Tensor], eps: float = EPS) -> None:
    """vᵀJu against central differences along a random direction u: one backward and two forwards,
    so a large input costs what it weighs (the check gradcheck's fast mode makes). Where they differ
    at elements that are not smooth, those are judged on their own (a unary elementwise op: one-sided
    derivatives, all elements at once) and left out, or (another op) the input is not checked."""
    gen = torch.Generator().manual_seed(len(xs))
    us = [torch.randn(x.shape, generator=gen, dtype=x.dtype).to(x.device) for x in xs]
    # no weight on an output the op does not differentiate: its differences are not the backward's
    live = differentiable(op, xs)
    vs = tuple(v if d else torch.zeros_like(v) for v, d in zip(grad_outputs(op.outputs(*xs)), live))
    analytic, numeric = _along(op, xs, us, vs, eps)
    size = sum(x.numel() for x in xs)
    if fits(analytic, numeric, size):
        return
    fn = _kinks.outputs_of(op)
    if _kinks.diagonal(op, xs):
        probe = Probe(fn, xs, diagonal=True)
        rows = (~probe.smooth).nonzero().reshape(-1)
        if len(rows):
            _kinks.judge(probe, rows, jacobian_rows(fn, xs, rows, probe))
            describe(probe, op.notes)
            keep = probe.mask(probe.smooth)
            vs = tuple(v * k.to(v.device) for v, k in zip(vs, keep))
            analytic, numeric = _along(op, xs, us, vs, eps)
    else:
        weighted = _weighted(op, vs)
        probe = Probe(weighted, xs)
        if not bool(probe.smooth.all()):
            op.notes.append(
                f"a large input where the op is not differentiable ({_kind(probe)}): its directional "
                "derivative is not checked there (the small inputs are checked element by element)"
            )
            return
    if not fits(analytic, numeric, size):
        raise PropertyFailed(
            f"directional derivative mismatch on a large input ({size:,} elements): numerical "
            f"{numeric:.9g}, analytical {analytic:.9g} (vᵀJu along a random u)"
        )


def _along(
    op: Bound, xs: Sequence[torch.Tensor], us: Sequence[torch.Tensor], vs: Tensors, eps: float
) -> tuple[float, float]:
    """vᵀJu from the backward, and from central differences along u."""
    _, grads = vjp(op, xs, vs)
    analytic = sum(float((g * u).sum()) for g, u in zip(grads, us))
    with torch.no_grad():
        up = op.outputs(*(x + eps * u for x, u in zip(xs, us)))
        down = op.outputs(*(x - eps * u for x, u in zip(xs, us)))
    numeric = sum(float(((a - b) * v).sum()) for a, b, v in zip(up, down, vs)) / (2 * eps)
    return analytic, numeric


def _weighted(op: Bound, vs: Tensors) -> Callable[..., Tensors]:
    """x -> (sum of out_j * v_j,): the one function a large input's directional check sees."""

    def fn(*xs: torch.Tensor) -> Tensors:
        return (sum((o * v).sum() for o, v in zip(op.outputs(*xs), vs)),)  # type: ignore[return-value]

    return fn


def _kind(probe: Probe) -> str:
    return KINDS[int(probe.kind[~probe.smooth][0])]


def _through_grad_outputs(
    outs: Tensors,
    leaves: Tensors,
    gs: Tensors,
    firsts: Sequence[torch.Tensor | None],
    smooth: Callable[[], bool],
) -> None:
    """The first derivative's derivative with respect to the grad_outputs, which gradcheck of it in
    the inputs alone does not see: a gradient is linear in its grad_outputs, so for any u and v,
    <d<first(g), u>/dg, v> = <first(v), u>, exactly. A backward that detaches its result (or runs
    under no_grad) breaks this even where the op's second derivative in its inputs is zero (a
    ReLU): a gradient penalty through such an op is silently wrong. A derivative along them that is
    not finite where the gradient is and the op is ``smooth()`` there is the backward's own 0 * inf."""
    us = tuple(ramp(x.detach(), k + 3) for k, x in enumerate(leaves))
    pairs = [(f, u) for f, u in zip(firsts, us) if f is not None and f.requires_grad]
    if not pairs:
        return
    hs = torch.autograd.grad(
        [f for f, _ in pairs], gs, [u for _, u in pairs], retain_graph=True, allow_unused=True
    )
    vs = tuple(ramp(g.detach(), k + 5) for k, g in enumerate(gs))
    seconds = grad(outs, leaves, vs, retain_graph=True)  # the differentiable outputs only
    left = [(h * v).sum() for h, v in zip(hs, vs) if h is not None]
    right = [(s * u).sum() for s, u in zip(seconds, us) if s is not None]
    lhs, rhs = float(sum(left, torch.tensor(0.0))), float(sum(right, torch.tensor(0.0)))
    scale = sum(float((h * v).abs().sum()) for h, v in zip(hs, vs) if h is not None)
    scale += sum(float((s * u).abs().sum()) for s, u in zip(seconds, us) if s is not None)
    if not math.isfinite(rhs):
        return  # the gradient is not finite at this input: nothing to compare
    if not math.isfinite(lhs):
        if not smooth():
            return  # at a kink (a norm's cone): the first derivative has no derivative to hold
        raise PropertyFailed(
            f"second derivative is {lhs} with respect to grad_output where the gradient is finite "
            f"({rhs:.9g}): the first derivative is linear in the grad_outputs, so its derivative along "
            "them is finite (a backward that multiplies by sqrt(0 * g) + 1, or another 0 * inf of its own?)"
        )
    if abs(lhs - rhs) > 1e-7 * scale + 1e-12:
        raise PropertyFailed(
            "second derivative is wrong with respect to grad_output: the first derivative is linear in "
            f"the grad_outputs, yet its derivative along them gives {lhs:.9g} where the backward "
            f"gives {rhs:.9g} (a backward that detaches its result, or runs under no_grad?)"
        )


def _smooth_at(op: Bound, xs: Sequence[torch.Tensor]) -> bool:
    """Whether one-sided differences find no kink, jump or non-finite value of ``op`` at ``xs``."""
    probe = Probe(_kinks.outputs_of(op), tuple(x.detach() for x in xs), diagonal=_kinks.diagonal(op, xs))
    return bool(probe.smooth.all())


def double_backward(op: Bound, *xs: torch.Tensor) -> None:
    """Second derivatives that come back are right: gradgradcheck with contiguous and
    non-contiguous grad_outputs, in a graph where each input is also used elsewhere (so that a
    silently detached backward shows as a wrong second derivative, not as an error that hides it).
    One that raises, or is marked once_differentiable, is a skip, unless double_backward=True is
    declared: then it must work. A surrogate op: against its surrogate's second derivative. A
    backward not linear in grad_output (by design): without the derivative along the grad_outputs."""
    if op.spec.contract.surrogate is not None:
        return surrogate_double_backward(op, *xs)
    if all(x.numel() == 0 for x in xs):
        return  # nothing to differentiate
    declared = op.spec.contract.double_backward
    n = op.arity

    def also_elsewhere(*leaves: torch.Tensor) -> Tensors:
        # 0 * x**2 puts each input in the first derivative's graph, whatever the op's backward
        # does, and adds nothing to it: x**3 did, 6x to each diagonal entry of the second
        # derivative, and gradcheck's rtol with it, which hid a wrong entry up to 6e-3 |x| (gpytorch's
        # RBF covariance: 0 where it is 2e-5, which gradgradcheck fails).
        return (*op.outputs(*leaves[:n], *leaves[n:]), *(0 * x**2 for x in leaves[:n]))

    leaves = op.inputs(*xs)
    try:
        outs = also_elsewhere(*leaves)
        # grad_outputs that require grad, as gradgradcheck's do: once_differentiable raises then
        gs = tuple(g.requires_grad_() for g in grad_outputs(outs))
        firsts = grad(outs, leaves, gs, create_graph=True)
        if once_differentiable(firsts):
            raise RuntimeError("the backward is marked once_differentiable")
        torch.autograd.grad(
            [g.sum() for g in firsts if g is not None], leaves, allow_unused=True, retain_graph=True
        )
        if op.spec.contract.linear_in_grad:  # what it holds the first derivative to assumes linearity
            _through_grad_outputs(outs, leaves, gs, firsts, lambda: _smooth_at(op, xs))
    except RuntimeError as exc:
        if declared:
            raise PropertyFailed(f"double_backward=True is declared, but: {one_line(exc)}") from None
        raise PropertySkipped(f"no second derivative ({one_line(exc, with_type=False)})") from None
    gs = grad_outputs(outs)  # fresh ones (a backward may have written into those): no forward again
    if sum(x.numel() for x in xs) > LARGE:  # gradgradcheck would build the whole Jacobian
        return directional_second(op, xs, leaves, _kinks.first_derivative(also_elsewhere, gs), EPS)
    for layout, grads in (("contiguous", gs), ("non-contiguous", tuple(noncontiguous(g) for g in gs))):
        first = _kinks.first_derivative(also_elsewhere, grads)

        def run(fn: Callable[..., object], own: bool = op.fast and layout == "contiguous") -> None:
            # what gradgradcheck does: gradcheck of the first derivative, with its settings; in fast
            # mode also along a direction of opzoo's own (torch's are the same at every input)
            gradcheck(fn, leaves, fast_mode=op.fast, eps=EPS, atol=ATOL, rtol=RTOL, check_undefined_grad=True)
            if own:
                own_direction(fn, leaves, EPS, ATOL, RTOL)  # type: ignore[arg-type]

        try:
            _kinks.gradcheck_rows(first, leaves, run, op.notes, diagonal=_kinks.diagonal(op, xs), order=2)
        except (GradcheckError, PropertyFailed) as exc:
            message = one_line(exc, with_type=False, lines=3)
            hint = "" if declared else ONCE
            worst = getattr(exc, "details", {}).get("worst")
            raise PropertyFailed(
                f"second derivative is wrong, with {layout} grad_output: {message}{hint}", worst=worst
            ) from None
