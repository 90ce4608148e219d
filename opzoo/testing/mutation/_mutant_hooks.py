"""What a mutant does to the gradients: the :class:`Site` its hooks see, and the building blocks the
table's hooks (:data:`~opzoo.testing.mutation._mutants.MUTANTS`) are made of.

A hook is a function of a :class:`Site` and a tuple of gradients (or tangents), one per
differentiable input, ``None`` where an input gets none; it returns that tuple changed. The blocks
use tensor methods only (the few that need a torch function import it when called), so that the
table imports no torch and ``opzoo mutate --help`` lists it in a fraction of a second. The
``compile`` property traces them under torch.compile: plain functions, no record of ours.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

Grads = tuple[Any, ...]  # one tensor or None per differentiable input (learnable tensors last)


@dataclass
class Site:
    """What a mutant knows of one call of the op, kept from its forward for its backward and jvp.

    xs:         the differentiable inputs as the op saw them (detached), learnable tensors last.
    signature:  how many of ``xs`` are the signature's inputs (the rest are learnable tensors).
    cores:      each signature input's number of core dimensions.
    contiguous: whether each of ``xs`` was contiguous.
    kinks:      the op's kinks at this call's params (declared, or found), each with how far off
                the mutated gradient there is (``at_kinks``).
    requires:   which of ``xs`` require grad (known in backward).
    calls:      how many times backward has run on this call's graph (counting the current one).
    """

    xs: tuple[Any, ...]
    signature: int
    cores: tuple[int, ...]
    contiguous: tuple[bool, ...]
    kinks: dict[float, float] = field(default_factory=dict)
    requires: tuple[bool, ...] = ()
    calls: int = 0


# -- hooks from functions of one gradient ---------------------------------------------------------


def each(fn: Callable[[Any], Any]) -> Callable[[Site, Grads], Grads]:
    """A hook applying ``fn`` to every gradient (or tangent) that is there."""

    def hook(site: Site, gs: Grads) -> Grads:
        return tuple(None if g is None else fn(g) for g in gs)

    return hook


def each_with(fn: Callable[[Site, int, Any], Any]) -> Callable[[Site, Grads], Grads]:
    """A hook applying ``fn(site, i, g)`` to every gradient (or tangent) ``i`` that is there."""

    def hook(site: Site, gs: Grads) -> Grads:
        return tuple(None if g is None else fn(site, i, g) for i, g in enumerate(gs))

    return hook


def same(site: Site, gs: Grads) -> Grads:
    """The gradients as they are (the control's hook)."""
    return gs


def is_float64(t: Any) -> bool:
    """Whether ``t`` is a float64 tensor (read from its dtype's name: no torch imported)."""
    return str(t.dtype) == "torch.float64"


def float32_if_short(out: Any) -> Any:
    """An output in bfloat16 or float16 as float32 (a mask added as ``.float()``); others as they are."""
    return out.float() if str(getattr(out, "dtype", "")) in ("torch.bfloat16", "torch.float16") else out


def _big_dim(t: Any) -> int | None:
    """The last dimension of ``t`` with more than one element, or None."""
    return next((d for d in reversed(range(t.dim())) if t.shape[d] > 1), None)


def rolled(shift: int) -> Callable[[Any], Any]:
    """A gradient rolled by ``shift`` along its last dimension of more than one element."""

    def roll(g: Any) -> Any:
        d = _big_dim(g)
        return g if d is None else g.roll(shift, d)

    return roll


def zero_slice(g: Any) -> Any:
    """``g`` with one slice zeroed, along its first dimension of more than one element."""
    d = next((d for d in range(g.dim()) if g.shape[d] > 1), None)
    if d is None:
        return g
    keep = g.new_ones(g.shape)
    keep.select(d, (g.numel() * 7 + 3) % g.shape[d]).fill_(0)  # "random", but the same every call
    return g * keep


def double_half(g: Any) -> Any:
    """``g`` with every other element (by flat index) doubled."""
    factor = g.new_ones(g.numel())
    factor[1::2] = 2
    return g * factor.reshape(g.shape)


def noise(g: Any) -> Any:
    """``g`` with 1e-6 relative noise, different at every call."""
    import torch

    # A generator of its own, seeded afresh: the checks seed torch's, and noise that repeated
    # whenever they did would not be the nondeterminism this mutant is about.
    gen = torch.Generator(device=g.device).manual_seed(random.SystemRandom().randrange(2**62))
    return g * (1 + 1e-6 * torch.randn(g.shape, generator=gen, dtype=g.dtype, device=g.device))


def in_place(g: Any) -> Any:
    """``g``'s value, computed by writing into ``g`` and writing it back."""
    # grad_output as scratch space, written and written back (the values the op sees are right):
    # only where its memory allows and nobody differentiates through it, as such code does.
    if g.requires_grad or not g.is_contiguous() or not g.dim() or min(g.stride()) == 0 or transformed(g):
        return g
    g.mul_(2.0)
    out = g / 2
    g.div_(2.0)
    return out


def as_if_contiguous(g: Any) -> Any:
    """A non-contiguous ``g``'s memory read as if it were laid out contiguously."""
    # Reading a grad_output's memory as if it were laid out contiguously: only where that memory is
    # large enough (an expanded grad_output, stride 0, is not), so that nothing reads past it.
    if g.is_contiguous() or transformed(g):
        return g
    needed = (g.storage_offset() + g.numel()) * g.element_size()
    if g.untyped_storage().nbytes() < needed:
        return g
    strides, step = [], 1
    for size in reversed(g.shape):
        strides.append(step)
        step *= max(size, 1)
    return g.as_strided(g.shape, tuple(reversed(strides)))


def transformed(g: Any = None) -> bool:
    """Whether a torch.func transform (vmap, grad, jvp) is running, or ``g`` is batched by the
    legacy vmap of ``autograd.grad(is_grads_batched=True)`` or traced: tensors are wrapped then,
    and in-place writes, raw memory reads or a detach are not what the mutant means (nor possible)."""
    import torch

    active = getattr(torch._C, "_are_functorch_transforms_active", None)
    if active and active():
        return True
    if g is None:
        return False
    if type(g) not in (torch.Tensor, torch.nn.Parameter):
        return True  # a fake or functional tensor of a trace (opcheck's aot_dispatch)
    keys = str(torch._C._dispatch_keys(g))
    return any(k in keys for k in ("Batched", "Functionalize", "Python"))


# -- hooks that read the site --------------------------------------------------------------------


def _broadcast(site: Site) -> list[float]:
    """How many times each of ``site.xs`` was used by broadcasting: the loop shape all signature
    inputs broadcast to over its own (a learnable tensor: the first input's elements over its own)."""
    loops = [tuple(x.shape[: x.dim() - c]) for x, c in zip(site.xs, site.cores)]
    rank = max([0, *(len(s) for s in loops)])  # not default=0: Dynamo traces this, and warns at it
    full = [1] * rank
    for s in loops:
        for k, size in enumerate(s):
            at = rank - len(s) + k
            full[at] = size if full[at] == 1 else full[at]
    total = math.prod(full)
    out = []
    for i, x in enumerate(site.xs):
        if i < site.signature:
            own = math.prod(loops[i])
            out.append(total / own if own and total else 1.0)
        else:
            first = site.xs[0].numel() if site.xs else 0
            out.append(first / x.numel() if x.numel() and first > x.numel() else 1.0)
    return out


def mean_not_sum(site: Site, gs: Grads) -> Grads:
    """Each gradient divided by how many times broadcasting used its input: a mean, not a sum."""
    factors = _broadcast(site)
    return tuple(None if g is None else (g / f if f != 1 else g) for g, f in zip(gs, factors))


def swap(site: Site, gs: Grads) -> Grads:
    """The gradients of the first two inputs of the same shape, swapped."""
    pair = _same_core_pair(site.cores, site.xs)
    if pair is None:
        return gs
    i, j = pair
    a, b = gs[i], gs[j]
    if a is None or b is None or a.shape != b.shape:
        return gs
    out = list(gs)
    out[i], out[j] = b, a
    return tuple(out)


def _same_core_pair(cores: Sequence[int], xs: Sequence[Any]) -> tuple[int, int] | None:
    """The first two signature inputs of the same shape at this call."""
    n = len(cores)
    for i in range(n):
        for j in range(i + 1, n):
            if xs[i].shape == xs[j].shape:
                return i, j
    return None


def drop_last(site: Site, gs: Grads) -> Grads:
    """The last gradient zero."""
    *first, last = gs
    return (*first, None if last is None else last.new_zeros(last.shape))


def _at_kinks(site: Site, i: int, x: Any) -> Any:
    """Where ``x`` sits on one of the site's kinks (within 1e-6: where the checks' one-sided look at
    an undeclared kink sees it too), the extra amount the mutant puts there; zero elsewhere."""
    off = x.new_zeros(x.shape)
    for kink, delta in site.kinks.items():
        off = off + (x - kink).abs().le(1e-6).to(x.dtype) * delta
    return off


def kink_extra(site: Site, gs: Grads) -> Grads:
    """A term added to the gradient where the input sits on a kink: grad_output times how far off."""
    # elementwise ops only (the only ones with kinks to declare): one input, one output
    (g,) = gs
    return (g * _at_kinks(site, 0, site.xs[0]),)


def kink_tangent(site: Site, outs: Grads, ts: Grads) -> Grads:
    """The same term in forward mode: the input tangent times how far off, added to the output's."""
    (t_out,), (t_in,) = outs, ts
    if t_out is None or t_in is None:
        return outs
    return (t_out + t_in * _at_kinks(site, 0, site.xs[0]),)


def second_output(site: Site, gs: Grads) -> Grads:
    """The second output's grad_output (or tangent) with the wrong sign."""
    first, second, *rest = gs
    return (first, None if second is None else -second, *rest)


def nan_where_large(site: Site, i: int, g: Any) -> Any:
    """Input ``i``'s gradient nan wherever the input is larger than 1000 in magnitude."""
    return g.masked_fill(site.xs[i].abs() > 1e3, math.nan)


__all__ = [
    "float32_if_short",
    "Grads",
    "Site",
    "as_if_contiguous",
    "double_half",
    "drop_last",
    "each",
    "each_with",
    "in_place",
    "is_float64",
    "kink_extra",
    "kink_tangent",
    "mean_not_sum",
    "nan_where_large",
    "noise",
    "rolled",
    "same",
    "second_output",
    "swap",
    "transformed",
    "zero_slice",
]
