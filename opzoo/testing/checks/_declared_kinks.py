"""The ``kinks`` property: at each kink an elementwise op declares, the gradient is the declared
subgradient, exactly (finite differences straddle a kink and measure none; kinks nobody declared
are ``_kinks``' business)."""

from __future__ import annotations

import torch

from opzoo.testing.checks._bound import Bound, PropertyFailed, vjp


def kinks(op: Bound, x: torch.Tensor) -> None:
    """At each declared kink, the gradient equals the declared subgradient (elementwise ops)."""
    declared = op.spec.contract.kinks_at(op.params)
    points = torch.tensor(list(declared), dtype=torch.float64, device=x.device)
    want = torch.tensor(list(declared.values()), dtype=torch.float64, device=x.device)
    _, (got,) = vjp(op, (points,), (torch.ones_like(points),))
    ok = torch.isclose(got, want, rtol=1e-9, atol=1e-12)
    if bool(ok.all()):
        return
    # A threshold kept in a lower precision (a float32 0.1 is 0.100000001490116...) puts the op's kink
    # a rounding away from the declared point, which float64 resolves: the declared gradient is then
    # the op's at the declared point rounded to that precision. (Not where the op's gradient changes
    # within a float64 step of the declared point: there the declared point is the op's kink, and one
    # side of every kink has the declared value, which would make the check say nothing.)
    nearby = [(name, points.to(getattr(torch, name)).double()) for name in op.spec.contract.dtypes]
    for name, there in nearby:
        if bool(ok.all()):
            break
        if torch.equal(there, points):
            continue
        _, (got_there,) = vjp(op, (there,), (torch.ones_like(there),))
        # ... only where the declared point is not the op's kink itself: the op's gradient a float64
        # step towards the rounded point is still its gradient at the declared point
        step = torch.nextafter(points, there)
        _, (got_step,) = vjp(op, (step,), (torch.ones_like(step),))
        fits = ~ok & torch.isclose(got_there, want, rtol=1e-9, atol=1e-12) & (got_step == got)
        for i in fits.nonzero().reshape(-1).tolist():
            op.notes.append(
                f"the kink declared at {points[i].item():g} is where the op's gradient takes the declared "
                f"value in {name} ({there[i].item():.17g}): checked there"
            )
        ok |= fits
    if bool(ok.all()):
        return
    i = int((~ok).nonzero()[0])
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
