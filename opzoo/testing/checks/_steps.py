"""An op's own float64 computation with each of its steps rounded as in a lower dtype: what its
formula is worth in that dtype, the allowance ``reference`` adds to a gradient's error budget
(``k_steps``, see ``_budget.within``).

:class:`StepsIn` is a dispatch mode: while it is on, every aten op that reads a float64 tensor and
computes something runs on those tensors cast to the dtype, by torch's own kernel for that dtype,
and its results are cast back to float64. Views pass through (they are exact); an op that writes
into a float64 tensor runs in the dtype on a copy, written back. A step with no kernel in the dtype
(``log_ndtr`` in bfloat16, a linear solve in float16) runs in float64, its results rounded to the
dtype. So :func:`stepped` gives the gradient the op's float64 code path computes when each step
rounds as it would in the dtype: a property of its formula, whatever its lower-dtype path does.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterable, Sequence

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves, tree_map

from opzoo.exceptions import one_line
from opzoo.testing.checks._bound import Bound, Tensors, vjp

#: In-place ops that change a tensor's shape or storage, not its values: run as they are.
_RESHAPING = frozenset({"resize_", "resize_as_", "set_"})


def _wide(t: object) -> bool:
    return isinstance(t, torch.Tensor) and t.dtype == torch.float64


def _passes_through(func: torch._ops.OpOverload) -> bool:
    """A view (its result aliases an input, nothing written), an in-place change of shape, or what
    has no schema to say which it is (a higher-order op): run as it is."""
    schema = getattr(func, "_schema", None)
    if schema is None or torch.Tag.inplace_view in func.tags or schema.name.split("::")[-1] in _RESHAPING:
        return True
    written = any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    return not written and any(r.alias_info is not None for r in schema.returns)


def _written(func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> set[int]:
    """The ids of the float64 tensors ``func`` writes into (``self`` of ``mul_``, ``out=``)."""
    ids = set()
    for i, a in enumerate(func._schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        value = args[i] if i < len(args) else kwargs.get(a.name)
        ids.update(id(t) for t in tree_leaves(value) if _wide(t))
    return ids


class StepsIn(TorchDispatchMode):
    """While on, each computing aten op on float64 tensors runs in ``dtype`` (module docstring)."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def __torch_dispatch__(
        self,
        func: torch._ops.OpOverload,
        types: Sequence[type],
        args: tuple[Any, ...] = (),
        kwargs: dict[str, Any] | None = None,
    ) -> Any:
        kwargs = kwargs or {}
        if _passes_through(func) or not any(_wide(t) for t in tree_leaves((args, kwargs))):
            return func(*args, **kwargs)
        written = _written(func, args, kwargs)
        try:
            return self._low(func, args, kwargs, written)
        except RuntimeError:  # no kernel in the dtype (NotImplementedError is one), or none for it
            return self._rounded(func, args, kwargs, written)

    def _low(
        self, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], written: set[int]
    ) -> Any:
        """``func`` by the dtype's kernel on the float64 tensors cast to it; results back in float64,
        the tensors it writes into written back."""
        copies: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

        def low(t: Any) -> Any:
            if not _wide(t):
                return t
            c = t.to(self.dtype)
            if id(t) in written:
                copies[id(c)] = (t, c)
            return c

        out = func(*tree_map(low, args), **tree_map(low, kwargs))
        for original, copy in copies.values():
            original.copy_(copy)

        def back(r: Any) -> Any:
            if id(r) in copies:
                return copies[id(r)][0]
            return r.double() if isinstance(r, torch.Tensor) and r.dtype == self.dtype else r

        return tree_map(back, out)

    def _rounded(
        self, func: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any], written: set[int]
    ) -> Any:
        """``func`` in float64, its results (and what it writes into) rounded to the dtype."""
        out = func(*args, **kwargs)
        for t in tree_leaves((args, kwargs)):
            if id(t) in written:
                t.copy_(t.to(self.dtype))

        def rounded(r: Any) -> Any:
            return r.to(self.dtype).double() if _wide(r) and id(r) not in written else r

        return tree_map(rounded, out)


def stepped(op: Bound, lows: Tensors, gs: Sequence[torch.Tensor]) -> Tensors:
    """The gradients of ``op`` at ``lows`` (its inputs in a lower dtype) for the grad_outputs ``gs``,
    computed by its float64 code with each step rounded as in that dtype (module docstring), in
    float64."""
    dtype = lows[0].dtype
    x64, g64 = tuple(x.double() for x in lows), [g.double() for g in gs]
    with StepsIn(dtype):
        return vjp(op, x64, g64)[1]


def lazily(op: Bound, lows: Tensors, gs: Sequence[torch.Tensor]) -> Callable[[], Tensors | None]:
    """:func:`stepped`, computed on the first call only (a budget that holds needs none of it);
    None where the op cannot be run step by step (noted): the budget is then held without it."""
    memo: list[Tensors | None] = []

    def steps() -> Tensors | None:
        if not memo:
            try:
                memo.append(stepped(op, lows, gs))
            except Exception as exc:  # the op's own code, in a mode it may not expect
                note = f"its formula could not be run step by step in {_name(lows[0].dtype)}: {one_line(exc)}"
                if note not in op.notes:
                    op.notes.append(note)
                memo.append(None)
        return memo[0]

    return steps


def _name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def rounding_note(
    dtype: torch.dtype, k: float, k_par: float, k_steps: float, oracle: str = "the reference"
) -> str:
    """What ``reference`` (or ``autograd``) tells where a gradient in ``dtype`` loses to the
    ``oracle`` computed in ``dtype`` (torch's kernels) but no more than its own formula does, step by
    step: the figures (at the element where it loses most) and how to do better."""
    name = _name(dtype)
    said = (
        f"gradient in {name}: {k:.3g} eps off where {oracle} in {name} is {k_par:.3g} off; the op's "
        f"formula run step by step in {name} is as far off ({k_steps:.3g}): its rounding, not an error"
    )
    if dtype == torch.float32:
        return said + "; a cancellation: compute the cancelling part another way, or in float64"
    return said + "; computing in float32 inside, as torch's kernels do, would make it about torch's"


_ROUNDING = re.compile(r"gradient in (\w+): (\S+) eps off where .+? in \1 is ")


def worst_rounding(notes: Iterable[str]) -> list[str]:
    """``notes`` with one :func:`rounding_note` per dtype, the one whose gradient is furthest off
    (each failing element of each example tells its own figures), where the first of them was."""
    out: list[str] = []
    at: dict[str, tuple[int, float]] = {}
    for note in notes:
        told = _ROUNDING.match(note)
        if told is None:
            out.append(note)
            continue
        dtype, k = told[1], float(told[2])
        if dtype not in at:
            at[dtype] = (len(out), k)
            out.append(note)
        elif k > at[dtype][1]:
            at[dtype] = (at[dtype][0], k)
            out[at[dtype][0]] = note
    return out
