"""The ``subsets`` property: for an op of several inputs, any subset of them requiring grad gets the
gradients that all of them requiring grad get (a backward that reads ``ctx.needs_input_grad`` at the
wrong index does not), to within a few units in the last place of the terms each gradient sums.
"""

from __future__ import annotations

import itertools
import math
from typing import Sequence

import torch

from opzoo.testing.checks._bound import Bound, PropertyFailed, Tensors, grad_outputs, vjp
from opzoo.testing.checks._compare import agree


def subsets(op: Bound, *xs: torch.Tensor) -> None:
    """For an op of several inputs, every subset of them requiring grad gets the gradients that all
    requiring grad get (a backward that reads ``needs_input_grad`` at the wrong index does not), to
    within a few units in the last place: another path may sum in another order, or meet another
    BLAS kernel (2.339999999999998 against 2.339999999999999 on one CPU, equal on another)."""
    outs0, grads0 = vjp(op, xs)
    gs = grad_outputs(outs0)
    n = len(xs)
    terms: Tensors | None = None
    for size in range(1, n):
        for chosen in itertools.combinations(range(n), size):
            leaves = tuple(x.detach().clone().requires_grad_(i in chosen) for i, x in enumerate(xs))
            outs = op.outputs(*leaves)
            asked: Sequence[torch.Tensor] = [leaves[i] for i in chosen]
            got = torch.autograd.grad(outs, asked, gs, allow_unused=True)
            for i, g in zip(chosen, got):
                want = grads0[i]
                g = torch.zeros_like(want) if g is None else g
                ok = agree(g, want)
                if not bool(ok.all()):
                    terms = terms or _terms(op, xs, gs)
                    ok = agree(g, want, terms[i])
                if bool(ok.all()):
                    continue
                diff = torch.where(ok, 0.0, (g - want).abs().nan_to_num(math.inf))
                e = int(diff.reshape(-1).argmax())
                raise PropertyFailed(
                    f"with only input(s) {list(chosen)} requiring grad, the gradient of input {i} "
                    f"differs from the one computed with all inputs requiring grad (at flat index {e}: "
                    f"{g.reshape(-1)[e].item()!r} vs {want.reshape(-1)[e].item()!r}): does backward read "
                    "ctx.needs_input_grad at the right index?"
                )


def _terms(op: Bound, xs: Sequence[torch.Tensor], gs: Tensors) -> Tensors:
    """Per input element, the size of the terms its gradient sums (sum_r v_r J_rj): a backward with
    the grad_outputs' signs flipped at random gives sums of the same terms with other signs, about
    their root-sum-square each; the largest of a few, per element."""
    gen = torch.Generator().manual_seed(1)
    sizes = [torch.zeros_like(x) for x in xs]
    for _ in range(4):
        flips = tuple(g * (2 * torch.randint(0, 2, g.shape, generator=gen) - 1).to(g) for g in gs)
        _, grads = vjp(op, xs, flips)
        sizes = [torch.maximum(s, g.abs().nan_to_num(0.0, 0.0, 0.0)) for s, g in zip(sizes, grads)]
    return tuple(sizes)
