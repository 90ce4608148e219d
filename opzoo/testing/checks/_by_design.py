"""A backward that is not the derivative of anything, by design (``Contract(gradient="by design:
<reason>")``): guided backprop, a natural gradient, a gradient on a Lie algebra, a documented clamp.

There is no derivative to compare it with, so ``gradient`` holds it to what every consumer of a
backward relies on whatever it computes: linearity in grad_output (gradient accumulation, batched
grad_outputs and ``jacrev`` assume it). A backward declared not linear (``linear_in_grad=False``:
guided backprop keeps g only where g > 0) is a skip, with the reason. The other properties run.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from opzoo.testing.checks._bound import Bound, PropertyFailed, PropertySkipped, Tensors, ramp, vjp
from opzoo.testing.checks._compare import agree, where
from opzoo.testing.checks._subsets import _terms

#: The combination checked: vjp(A g1 + B g2) = A vjp(g1) + B vjp(g2). A + B != 1, so a backward
#: that reads only the grad_output's sign or replaces it by ones is not linear by accident.
A, B = 0.5, -2.0


def by_design_gradient(op: Bound, *xs: torch.Tensor) -> None:
    """A by-design backward: linear in grad_output (vjp(a g1 + b g2) = a vjp(g1) + b vjp(g2), and a
    zero grad_output gives a zero gradient); not compared with a derivative (shapes, dtypes and
    repeats: hygiene). Declared not linear (``linear_in_grad=False``): a skip, with the reason."""
    contract = op.spec.contract
    if not contract.linear_in_grad:
        raise PropertySkipped(f"by design: {contract.by_design} (declared not linear in grad_output)")
    if all(x.numel() == 0 for x in xs):
        return
    outs, _ = vjp(op, xs)
    g1 = tuple(ramp(o, k) for k, o in enumerate(outs))
    g2 = tuple(ramp(o, k + 3) for k, o in enumerate(outs))  # not a multiple of g1
    _, v1 = vjp(op, xs, g1)
    _, v2 = vjp(op, xs, g2)
    gm = tuple(A * a + B * b for a, b in zip(g1, g2))
    _, mixed = vjp(op, xs, gm)
    _, zero = vjp(op, xs, tuple(torch.zeros_like(g) for g in g1))
    want = tuple(A * a + B * b for a, b in zip(v1, v2))
    scales = tuple((A * a).abs() + (B * b).abs() for a, b in zip(v1, v2))
    _held(op, xs, mixed, want, scales, ((g1, v1), (g2, v2), (gm, mixed)), "linear")
    _held(op, xs, zero, tuple(torch.zeros_like(z) for z in zero), scales, None, "zero")
    op.notes.append(
        f"by design ({contract.by_design}): the backward is not compared with a derivative; "
        "linear in grad_output checked"
    )


def _held(
    op: Bound,
    xs: Sequence[torch.Tensor],
    got: Tensors,
    want: Tensors,
    scales: Tensors,
    evaluated: tuple[tuple[Tensors, Tensors], ...] | None,
    what: str,
) -> None:
    """Fail unless ``got`` agrees with ``want`` per input, at the scale of the terms (widened, where
    they first disagree, to the terms each backward sums, as ``subsets`` does, then to the
    backward's own rounding: :func:`_rounding`). ``evaluated``: the (grad_outputs, gradients) of
    the three vjps combined, g1, g2 and their combination."""
    for i, (g, w, s) in enumerate(zip(got, want, scales)):
        ok = agree(g, w, s)
        if not bool(ok.all()) and evaluated is not None:
            (g1, _), (g2, _), _ = evaluated
            wide = abs(A) * _terms(op, xs, g1)[i] + abs(B) * _terms(op, xs, g2)[i]
            ok = agree(g, w, torch.maximum(s, wide))
            if not bool(ok.all()):
                ok = (g - w).abs() <= _rounding(op, xs, evaluated, i)
        if bool(ok.all()):
            continue
        diff = torch.where(ok, 0.0, (g - w).abs().nan_to_num(math.inf))
        e = int(diff.reshape(-1).argmax())
        at = f"{where(i, len(xs), 'of input')} at flat index {e}: {g.reshape(-1)[e].item()!r}"
        if what == "zero":
            raise PropertyFailed(
                f"a zero grad_output gives a non-zero gradient{at}: a backward linear in grad_output "
                "(declared: linear_in_grad=True, the default) gives zero (an affine term? declare "
                "linear_in_grad=False)"
            )
        raise PropertyFailed(
            f"the backward is not linear in grad_output: vjp({A:g} g1 {B:+g} g2) differs from "
            f"{A:g} vjp(g1) {B:+g} vjp(g2){at} vs {w.reshape(-1)[e].item()!r} (declared "
            "linear_in_grad=True, the default; a by-design backward that is not, guided backprop, "
            "declares linear_in_grad=False)"
        )


#: How many times the backward's measured rounding the combination may be off (three vjps'
#: rounding against the difference of two vjps': a few, and a margin for the spread).
ROUNDING = 8
#: The factor the grad_outputs are scaled by to measure the rounding: not a power of two (each
#: product rounds, so the backward rounds otherwise), close to 1 (a backward not linear, g -> g^2,
#: moves by 2^-10 of its size, not by its size).
NUDGE = 1 + 2.0**-10


def _rounding(
    op: Bound, xs: Sequence[torch.Tensor], evaluated: tuple[tuple[Tensors, Tensors], ...], i: int
) -> torch.Tensor:
    """Per element of input ``i``'s gradient: how far a linear backward's combination may be off by
    rounding alone, measured on the backward itself: each of the three vjps run again on its
    grad_outputs times NUDGE, and divided by it. In exact arithmetic a linear backward gives the
    same; what it moves by is its rounding at these inputs (a backward that cancels before it
    multiplies, a Cholesky backward of a 317 x 317 matrix, rounds at 1e-14 of 1.5 where one
    element's ulps say 1e-15). A one-ulp nudge is not enough: rounding that happens at a larger
    scale than the result's does not move with it. A backward not linear but homogeneous (guided
    backprop) does not move either; one not homogeneous moves by 2^-10 of what is nonlinear.
    Each element's own movement can be 0 by chance: the root-mean-square over the input is added."""
    moved = torch.zeros_like(evaluated[0][1][i])
    for weight, (gs, grads) in zip((abs(A), abs(B), 1.0), evaluated):
        _, again = vjp(op, xs, tuple(g * NUDGE for g in gs))
        moved = moved + weight * (again[i] / NUDGE - grads[i]).abs().nan_to_num(0.0, 0.0, 0.0)
    rms = moved.square().mean().sqrt() if moved.numel() else moved.sum()
    return ROUNDING * (moved + rms)
