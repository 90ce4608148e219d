"""What a mutant needs to know of an op before it is applied: its learnable tensors, whether it
has a hand-written jvp, and the kinks of an elementwise op that declares none, found numerically.
Apart from :mod:`opzoo.testing.mutation._mutant_ops`, so that the table of mutants can ask (on first use)
without importing the wrappers that import the table."""

from __future__ import annotations

import math

import torch

from opzoo.core._registry import OpSpec
from opzoo.testing.checks._bound import bind
from opzoo.testing.checks._forward import defines_jvp
from opzoo.testing.strategies import KINK_MARGIN, domain_box

__all__ = ["found_kinks", "hand_written_jvp", "learnable_tensors", "outputs_of_a_function"]


def learnable_tensors(spec: OpSpec) -> int:
    """How many learnable tensors the op holds (a Module built with its default params)."""
    if spec.kind != "module":
        return 0
    return sum(1 for _ in spec.bound().parameters())


def hand_written_jvp(spec: OpSpec) -> str | None:
    """Why the op has no hand-written jvp to mutate, or None if it has one."""
    if spec.kind == "module":
        return "a learnable op's forward mode is autograd's own: no hand-written jvp to get wrong"
    return None if defines_jvp(spec.target) else "the op defines no jvp"


def outputs_of_a_function(spec: OpSpec) -> str | None:
    """Why a mutant cannot rewrite the op's outputs (a learnable op's are its Module's), or None."""
    if spec.kind == "module":
        return "a learnable op: its outputs are its Module's, which the mutants leave as they are"
    return None


# -- kinks nobody declared ---------------------------------------------------------------------------

_FOUND: dict[tuple[str, int], dict[float, float]] = {}
#: Points of the domain's box where the derivative is looked at first; bisection finds a kink between.
GRID = 2001
H = 1e-6  # the one-sided step of the checks' own look at undeclared kinks


def found_kinks(spec: OpSpec) -> dict[float, float]:
    """The kinks of an elementwise op that declares none, found numerically: where its own
    derivative jumps between two points of a grid over the domain, bisected down to the point,
    where the one-sided derivatives of the forward differ while the forward is continuous. Each
    with ``1 + |right - left|``: how far off ``at_kinks`` puts the gradient there."""
    key = (spec.name, id(spec.target))
    if key not in _FOUND:
        _FOUND[key] = _find_kinks(spec) if spec.contract.sig.elementwise else {}
    return _FOUND[key]


def _find_kinks(spec: OpSpec) -> dict[float, float]:
    op = bind(spec, spec.contract.defaults())
    lo, hi = domain_box(spec.contract.domain, KINK_MARGIN)

    def forward(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return op(x)

    def slope(x: torch.Tensor) -> torch.Tensor:
        leaf = x.detach().clone().requires_grad_()
        (g,) = torch.autograd.grad(op(leaf), (leaf, *()), torch.ones_like(leaf), allow_unused=True)
        return torch.zeros_like(x) if g is None else g.detach()

    try:
        x = torch.linspace(lo, hi, GRID, dtype=torch.float64)
        d = slope(x)
        jump = (d[1:] - d[:-1]).abs() > 1e-2 * (1 + torch.maximum(d[1:].abs(), d[:-1].abs()))
        found: dict[float, float] = {}
        for i in jump.nonzero().reshape(-1).tolist()[:32]:
            a, b = x[i].item(), x[i + 1].item()
            da, db = d[i].item(), d[i + 1].item()
            for _ in range(60):  # bisect towards the jump: the half where the derivative moves most
                mid = (a + b) / 2
                dm = slope(torch.tensor([mid], dtype=torch.float64)).item()
                if abs(dm - da) >= abs(db - dm):
                    b, db = mid, dm
                else:
                    a, da = mid, dm
            point = (a + b) / 2
            point = round(point, 9) + 0.0 if abs(point - round(point, 9)) < 1e-10 else point
            f0, up, down = forward(torch.tensor([point, point + H, point - H], dtype=torch.float64)).tolist()
            right, left = (up - f0) / H, (f0 - down) / H
            if not (math.isfinite(right) and math.isfinite(left)):
                continue
            continuous = abs(up - down) <= 1e-3 * (1 + abs(f0))
            if continuous and abs(right - left) > 1e-3 * (1 + max(abs(right), abs(left))):
                found[point] = 1.0 + abs(right - left)
        return found
    except Exception:  # the op's own code may raise anything: then nothing is found
        return {}
