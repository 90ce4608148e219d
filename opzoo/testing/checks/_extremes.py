"""The ``extremes`` property: at inputs scaled up to about 1e4, wherever the forward is finite nearby,
the backward is finite too (a gradient that overflows to inf or nan where the true one is about 0
is a bug that no small input shows); where the forward jumps or is not finite within a small step,
no finite gradient is asked for.
"""

from __future__ import annotations

import itertools

import torch

from opzoo.exceptions import one_line
from opzoo.testing.checks import _kinks, _onesided
from opzoo.testing.checks._bound import Bound, PropertyFailed, Tensors, rejects, vjp
from opzoo.testing.checks._compare import where
from opzoo.testing.checks._onesided import Probe

#: The magnitudes the extremes check scales an input to.
SCALES = (1e2, 1e4)


def extremes(op: Bound, *xs: torch.Tensor) -> None:
    """At inputs scaled up to about 1e4 (inside the domain), in float64 and float32: wherever the
    forward is finite nearby, the backward is finite (a gradient that overflows to inf or nan where
    the true one is about 0 is a bug that no small input shows)."""
    low, high = op.spec.contract.domain
    dtypes = [d for d in ("float64", "float32") if d in op.spec.contract.dtypes]
    diagonal = _kinks.diagonal(op, xs)
    for scale, name in itertools.product(SCALES, dtypes):
        dtype = getattr(torch, name)
        # an input whose set scaling would leave (orthogonal, unit norm, an interval) keeps its values
        big = tuple(
            (x * scale if k is None or k.scales else x).clamp(low, high).to(dtype)
            for x, k in zip(xs, op.sets)
        )
        if op.spec.contract.sig.elementwise:
            inside = torch.ones(torch.broadcast_shapes(*(b.shape for b in big)), dtype=torch.bool)
            for b in big:
                inside = inside & (b > low) & (b < high)  # the open domain's ends dropped
            if diagonal:
                big = tuple(b[inside] for b in big)
        if all(b.numel() == 0 for b in big):
            continue
        op_d = op.cast(dtype)
        refused = rejects(op_d, big)
        if refused is not None:
            # a limit of the forward (a matrix that float32 rounds to singular), not of the backward:
            # left out, as every property leaves out an input the forward rejects
            op.notes.append(
                f"in {name}, the forward rejects the input scaled by {scale:g} "
                f"({one_line(refused, with_type=True)}): not checked there"
            )
            continue
        outs, grads = vjp(op_d, big)
        finite = _finite_nearby(op_d, big, outs, diagonal)
        wrong = [finite & ~g.isfinite() if diagonal else finite.all() & ~g.isfinite() for g in grads]
        if any(bool(w.any()) for w in wrong):
            # Finite at x and at a relative step either side, yet no derivative: a jump (atan2 at
            # the origin), or not finite at a small step that a relative one misses (log y at y = 0,
            # which 0 times 1.001 does not leave). Such elements are not held to a finite gradient.
            excused = _no_derivative(op, big, diagonal)
            wrong = [w & ~excused if diagonal else w & ~excused.any() for w in wrong]
        for i, (b, g, w) in enumerate(zip(big, grads, wrong)):
            if w.any():
                e = int(w.reshape(-1).nonzero()[0])
                raise PropertyFailed(
                    f"in {name}, at x = {b.reshape(-1)[e].item():.6g} (an input scaled by {scale:g}) the "
                    f"forward is finite but the gradient{where(i, len(big), 'of input')} is "
                    f"{g.reshape(-1)[e].item()}",
                    worst={"index": (e,), "x": b.reshape(-1)[e].item(), "analytic": g.reshape(-1)[e].item()},
                )


def _finite_nearby(op: Bound, xs: Tensors, outs: Tensors, diagonal: bool) -> torch.Tensor:
    """Where every output is finite at x and a relative step either side (for an elementwise op of
    inputs of one shape, per element; otherwise one flag): there the true derivative is finite too."""
    if diagonal:
        with torch.no_grad():
            ok = torch.ones_like(outs[0], dtype=torch.bool)
            for factor in (1.0, 1 + 1e-3, 1 - 1e-3):
                for o in _kinks.outputs_of(op)(*(x * factor for x in xs)) if factor != 1.0 else outs:
                    ok = ok & o.isfinite()
        return ok
    ok = torch.ones((), dtype=torch.bool)
    for o in outs:
        ok = ok & o.isfinite().all()
    return ok


def _no_derivative(op: Bound, xs: Tensors, diagonal: bool) -> torch.Tensor:
    """Where the forward jumps or is not finite within a small step, found in float64 (per element
    for a diagonal op, else one flag per output element)."""
    kinds = (_onesided.JUMPS, _onesided.UNBOUNDED, _onesided.UNDEFINED)
    probe = Probe(_kinks.outputs_of(op), tuple(x.double() for x in xs), diagonal=diagonal)
    none = torch.isin(probe.kind, torch.tensor(kinds))
    if none.any():
        op.notes.append(
            "large inputs where the forward jumps or is not finite within a small step: no "
            "finite gradient is asked for there"
        )
    if not diagonal:
        return none
    return none.reshape(-1, probe.elements).any(0).reshape(xs[0].shape).to(xs[0].device)
