"""Kinks nobody declared: where an elementwise op's one-sided derivatives differ.

Finite differences that straddle a kink measure neither side, so gradcheck fails a correct op there
(the tutorial's MyReLU at x = 0: "numerical 0.5, analytical 1.0"). At such a point any value between
the one-sided derivatives is a valid subgradient: the op's is accepted if it lies between them (and
noted), the element is moved off the kink, and the check runs again. A value outside (5 at 0 for a
ReLU) still fails. Declared kinks keep pinning their exact value: the ``kinks`` property, at the
end of this module.
"""

from __future__ import annotations

from typing import Callable

import torch

from opzoo.testing._bound import Bound, PropertyFailed, vjp

H = 1e-6  # the one-sided step: the same as gradcheck's eps, so whatever it straddles, this sees
MARGIN = 1e-3  # how far a kink's element is moved before the check runs again


def one_sided(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Where ``fn`` (elementwise) has a kink within ``H`` of ``x``: (mask, left, right derivatives)."""
    with torch.no_grad():
        f0, up, down = fn(x), fn(x + H), fn(x - H)
    right, left = (up - f0) / H, (f0 - down) / H
    scale = 1 + torch.maximum(right.abs(), left.abs())
    # continuous (a kink, not a jump: a step's one-sided "derivative" is 1/H, and no subgradient)
    continuous = (up - down).abs() <= 1e-3 * (1 + f0.abs())
    kink = ((right - left).abs() > 1e-3 * scale) & continuous & right.isfinite() & left.isfinite()
    return kink, left, right


def derivative(op: Bound) -> Callable[[torch.Tensor], torch.Tensor]:
    """x -> the op's own (analytic) derivative at each element."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        with torch.enable_grad():
            return vjp(op, (x,), (torch.ones_like(x),))[1][0]

    return fn


def excuse(op: Bound, x: torch.Tensor, *, order: int = 1) -> torch.Tensor | None:
    """If ``x`` has elements at undeclared kinks (of the op for ``order`` 1, of its derivative for
    2): check the op's value there lies between the one-sided derivatives, note it, and return
    ``x`` with those elements moved off the kink; None if there is no kink to excuse."""
    kink, left, right = one_sided(lambda t: op(t), x.detach())
    if order == 2:
        # the derivative jumps at the op's kinks, and has kinks of its own where f'' jumps
        kink = kink | one_sided(derivative(op), x.detach())[0]
    if not kink.any():
        return None
    if order == 1:
        got = derivative(op)(x.detach())
        low, high = torch.minimum(left, right), torch.maximum(left, right)
        slack = 1e-5 + 1e-3 * torch.maximum(low.abs(), high.abs())
        outside = kink & ((got < low - slack) | (got > high + slack))
        if outside.any():
            i = int(outside.reshape(-1).nonzero()[0])
            xi, gi = x.reshape(-1)[i].item(), got.reshape(-1)[i].item()
            li, ri = left.reshape(-1)[i].item(), right.reshape(-1)[i].item()
            raise PropertyFailed(
                f"at x = {xi:.9g}, an undeclared kink, the gradient is {gi:.9g}: not between the "
                f"one-sided derivatives {li:.9g} and {ri:.9g}, so no valid subgradient",
                worst={"index": (i,), "x": xi, "left": li, "right": ri, "analytic": gi},
            )
    for i in kink.reshape(-1).nonzero()[:3].reshape(-1).tolist():
        # rounded, so that the same kink met in many examples is one note
        where = f"undeclared kink near x = {round(x.reshape(-1)[i].item(), 3) + 0.0:g}"
        if order == 2:
            op.notes.append(f"{where}: its second derivative is not checked there; declare kinks= to skip it")
            continue
        sides = [round(v.reshape(-1)[i].item(), 6) + 0.0 for v in (left, right)]
        op.notes.append(
            f"{where} (one-sided derivatives {sides[0]:.4g} and {sides[1]:.4g}): its gradient lies "
            "between them; declare kinks= to pin its value"
        )
    moved = x.detach().clone()
    moved[kink] += MARGIN
    return moved


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
