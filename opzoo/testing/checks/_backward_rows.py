"""What a backward says, flat over the inputs' elements (the layout of a
:class:`~opzoo.testing.checks._onesided.Probe`'s columns): the rows of a function's Jacobian at a
point, one backward per row (``jacobian_rows``), and one backward for given weights on the outputs
(``flat_vjp``). ``_kinks`` holds them to the one-sided derivatives a Probe measured.
"""

from __future__ import annotations

from typing import Sequence

import torch

from opzoo.testing.checks._onesided import Fn, Probe, flat


def flat_vjp(
    outs: Sequence[torch.Tensor],
    leaves: Sequence[torch.Tensor],
    weights: Sequence[torch.Tensor | None],
    n: int,
    *,
    retain_graph: bool = False,
) -> torch.Tensor:
    """The gradient of ``sum(outs_j * weights_j)`` with respect to each of ``leaves``, flat in float64
    (zeros where a leaf gets none); an output weighted None, or not differentiable, is left out, and
    where none is left the result is ``n`` zeros."""
    pairs = [(o, w) for o, w in zip(outs, weights) if w is not None and o.requires_grad]
    if not pairs:
        return torch.zeros(n, dtype=torch.float64)
    gs = torch.autograd.grad(
        [o for o, _ in pairs], leaves, [w for _, w in pairs], retain_graph=retain_graph, allow_unused=True
    )
    return flat([torch.zeros_like(x) if g is None else g for x, g in zip(leaves, gs)])


def jacobian_rows(fn: Fn, xs: Sequence[torch.Tensor], rows: torch.Tensor, probe: Probe) -> torch.Tensor:
    """The rows of ``fn``'s Jacobian at ``xs`` from its backward, one backward per row (for a
    diagonal op one per output, each row's own entries: see :meth:`Probe.dots`)."""
    leaves = tuple(x.detach().clone().requires_grad_() for x in xs)
    with torch.enable_grad():
        out = fn(*leaves)
    outs = out if isinstance(out, tuple) else (out,)
    live = [o for o in outs if isinstance(o, torch.Tensor) and o.requires_grad]
    sizes = [o.numel() for o in outs]
    starts = [sum(sizes[:j]) for j in range(len(outs))]

    if not live:
        width = len(xs) if probe.diagonal else probe.n
        return torch.zeros(len(rows), width, dtype=torch.float64)
    if probe.diagonal:
        e = probe.elements
        own = torch.zeros(probe.m, len(xs), dtype=torch.float64)
        for j, o in enumerate(outs):
            if not o.requires_grad:
                continue
            weights = [torch.ones_like(o) if k == j else None for k in range(len(outs))]
            g = flat_vjp(outs, leaves, weights, probe.n, retain_graph=True)
            own[starts[j] : starts[j] + e] = g.reshape(len(xs), e).T
        return own[rows]
    out_rows = []
    for r in rows.tolist():
        j = probe.row(r).tensor
        w = torch.zeros(outs[j].numel(), dtype=outs[j].dtype, device=outs[j].device)
        w[r - starts[j]] = 1
        one: list[torch.Tensor | None] = [None] * len(outs)
        one[j] = w.reshape(outs[j].shape)
        out_rows.append(flat_vjp(outs, leaves, one, probe.n, retain_graph=True))
    return torch.stack(out_rows) if out_rows else torch.zeros(0, probe.n, dtype=torch.float64)
