"""One call of a mutated op (:mod:`opzoo.testing.mutation._mutant_ops`): what it keeps for the mutant's
hooks (the parts of a :class:`~opzoo.testing.mutation._mutant_hooks.Site` on the autograd context, the
op's kinks at the call's params), and whether the mutant changed anything in it, which a callback
counts, so that a survivor that never did can be told from a blind spot. The Function and the
learnable Module forms of a mutant share these.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from opzoo.core._registry import OpSpec
from opzoo.testing.mutation._mutant_facts import found_kinks
from opzoo.testing.mutation._mutant_hooks import Grads, Site
from opzoo.testing.mutation._mutants import Mutant

# -- what changed -----------------------------------------------------------------------------------


def quiet(*groups: Grads) -> bool:
    """Whether to leave the bookkeeping out: under torch.compile it would be traced (a graph break
    the op does not have), and under vmap (torch.func's, or the legacy one of a batched
    ``autograd.grad``, whose tensors in ``groups`` say so) or functionalization tensors hold no
    values to compare. Under torch.func.jvp or grad they do, and forward mode is counted."""
    if torch.compiler.is_compiling():
        return True
    from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

    if any(
        str(i.key()) != "TransformType.Jvp" and str(i.key()) != "TransformType.Grad"
        for i in retrieve_all_functorch_interpreters()
    ):
        return True
    return any(t is not None and not _plain_tensor(t) for g in groups for t in g)


def _plain_tensor(t: Any) -> bool:
    """Whether ``t`` holds values here and now: not batched (vmap, legacy or not), not a fake or
    functional tensor of a trace (opcheck's aot_dispatch), whose values cannot be read."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        return False
    keys = str(torch._C._dispatch_keys(t)).replace("FuncTorchGradWrapper", "")
    return not any(k in keys for k in ("Batched", "Functionalize", "Python"))


def differ(before: Grads, after: Grads) -> bool:
    """Whether any of ``after`` differs from ``before``: values (nan matches nan), shape, dtype, or
    whether it requires grad; a None against zeros is no difference."""
    for a, b in zip(before, after):
        if a is b:
            continue
        if a is None or b is None:
            t = b if a is None else a
            if bool(t.ne(0).any()):
                return True
            continue
        if a.shape != b.shape or a.dtype != b.dtype or a.requires_grad != b.requires_grad:
            return True  # requires_grad: a detached gradient has the same values, not the same graph
        with torch.no_grad():
            if not bool(((a == b) | (a.isnan() & b.isnan())).all()):
                return True
    return False


def pick(out: Any, positions: list[int]) -> Grads:
    """The gradients of the differentiable inputs among what a backward returned."""
    outs = [out] if not isinstance(out, tuple) else list(out)
    return tuple(outs[k] if k < len(outs) else None for k in positions)


def as_tuple(out: Any) -> Grads:
    """``out`` as a tuple: a backward's or jvp's one result, or its tuple."""
    return out if isinstance(out, tuple) else (out,)


def versions(gs: Grads) -> list[int | None]:
    """Each tensor's version counter (None for None): an in-place write moves it."""
    return [None if g is None else g._version for g in gs]


# -- what a call keeps --------------------------------------------------------------------------------


def keep(ctx: Any, xs: tuple[Any, ...], kinks: dict[float, float]) -> None:
    """Keep on ``ctx`` what the mutant's hooks need of this call. Plain tuples, a dict and a count,
    not a Site: torch.compile traces a context's attributes of those kinds, not of a class of ours."""
    ctx._opzoo_xs = tuple(x.detach() for x in xs)
    ctx._opzoo_contiguous = tuple(x.is_contiguous() for x in xs)
    ctx._opzoo_kinks = kinks
    ctx._opzoo_calls = 0


def site_of(ctx: Any, signature: int, cores: tuple[int, ...], requires: tuple[bool, ...] = ()) -> Site:
    """The :class:`Site` of the call that ``ctx`` belongs to, from what :func:`keep` kept."""
    return Site(
        ctx._opzoo_xs, signature, cores, ctx._opzoo_contiguous, ctx._opzoo_kinks, requires, ctx._opzoo_calls
    )


def plain(value: Any) -> Any:
    """A param as the contract knows it: a 0-d tensor (``Param(tensor=True)``) as its number."""
    return value.item() if isinstance(value, torch.Tensor) and value.dim() == 0 else value


def add(g: Any, e: Any) -> Any:
    """``g + e``, either of them possibly None (no gradient)."""
    if e is None:
        return g
    return e if g is None else g + e


def kinks_of(spec: OpSpec, m: Mutant) -> Callable[[dict[str, Any]], dict[float, float]]:
    """params -> the op's kinks there, each with how far off the mutant ``at_kinks`` puts its
    gradient: 1 at a declared kink (the kinks property pins its exact value), more than the gap
    between the one-sided derivatives at a found one (any value between them is a valid
    subgradient). Elementwise ops only, and only for a mutant that reads them: the function is
    traced under torch.compile, so it calls the contract's own kinks function, nothing of ours."""
    contract = spec.contract
    if not m.reads_kinks or not contract.sig.elementwise or contract.surrogate is not None:
        return lambda values: {}
    if contract.kinks_at():
        if not callable(contract.kinks):
            fixed = {k: 1.0 for k in contract.kinks_at()}
            return lambda values: fixed
        raw, defaults = contract.kinks, contract.defaults()
        return lambda values: {float(k): 1.0 for k in raw(**{**defaults, **values})}
    found = found_kinks(spec)
    return lambda values: found


__all__ = ["add", "as_tuple", "differ", "keep", "kinks_of", "pick", "plain", "quiet", "site_of", "versions"]
