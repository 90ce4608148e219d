"""How an op's forward takes its arguments, read from the forward itself: which of them are the
signature's tensors, which the declared parameters, and which are left at their defaults.

A Function written for opzoo takes its tensors, then its params; one written elsewhere takes them in
its own order (``forward(ctx, X, alpha=1.5, dim=-1, n_iter=50, ensure_sum_one=True)``), with
trailing arguments nobody needs to declare. :func:`arguments` maps either to one plan, which every
caller of the op uses (``OpSpec.bound``, the torch.library bridge, the oracles), so that upstream code
registers unchanged. Everything is passed positionally: ``Function.apply`` of the classic
``forward(ctx, ...)`` form takes no keywords.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from opzoo.core._contract import Contract
from opzoo.core._inputs import InputSet, Permutation
from opzoo.core._params import Index, Mask
from opzoo.exceptions import ContractError

TENSOR, PARAM, DEFAULT = "tensor", "param", "default"


@dataclass(frozen=True)
class Arguments:
    """The forward's positional arguments (after ``ctx``), each a signature tensor by its index, a
    declared param by its name, or a value (a default that a later argument makes us pass)."""

    slots: tuple[tuple[str, Any], ...]
    #: The forward's names for the signature's tensors, in order (``x0``, ``x1``... where unknown).
    names: tuple[str, ...]
    #: Tensors that are not differentiated, by their index among the signature's inputs.
    constants: Mapping[int, Index | Mask | InputSet]
    #: Params passed as 0-d tensors (``Param(tensor=True)``).
    tensor_params: frozenset[str] = frozenset()
    #: The set each declared input's values live in, by its index (differentiated or not).
    sets: Mapping[int, InputSet] = field(default_factory=dict)
    #: Each inverse permutation's index -> the index of the permutation it is the inverse of.
    inverses: Mapping[int, int] = field(default_factory=dict)

    def __call__(self, tensors: Sequence[Any], params: Mapping[str, Any]) -> tuple[Any, ...]:
        """The forward's positional arguments for ``tensors`` (one per signature input) and
        ``params`` (validated, every declared one)."""
        out = []
        for kind, what in self.slots:
            if kind == TENSOR:
                out.append(tensors[what])
            elif kind == PARAM:
                value = params[what]
                out.append(_as_tensor(value, tensors) if what in self.tensor_params else value)
            else:
                out.append(what)
        return tuple(out)

    @property
    def differentiable(self) -> tuple[int, ...]:
        """The indices of the signature's inputs that are differentiated."""
        return tuple(i for i in range(len(self.names)) if i not in self.constants)


def arguments(contract: Contract, forward: Callable[..., Any] | None, *, ctx: bool) -> Arguments:
    """The plan for calling ``forward`` (``ctx`` first for the classic form), or
    :class:`ContractError` saying what in the contract does not fit it.

    The forward's positional arguments are read in order: one named like a declared param is that
    param; otherwise the next of the signature's tensors, until each has one; after that, an
    argument with a default keeps it, and one without is an error (it must be declared).
    """
    n = len(contract.sig.inputs)
    declared = list(contract.params)
    tensor_params = frozenset(k for k, p in contract.params.items() if p.tensor)
    try:
        params = list(inspect.signature(forward).parameters.values()) if forward is not None else None
    except (TypeError, ValueError):  # a builtin or C forward: nothing to read
        params = None
    if params is not None and ctx:
        params = params[1:]
    if params is None or any(p.kind == p.VAR_POSITIONAL for p in params):
        # Nothing to read the order from: the signature's tensors, then the params as declared.
        slots = [(TENSOR, i) for i in range(n)] + [(PARAM, k) for k in declared]
        names = tuple(f"x{i}" if n > 1 else "x" for i in range(n))
        return _plan(contract, tuple(slots), names, tensor_params)
    slots: list[tuple[str, Any]] = []
    names: list[str] = []
    extra: list[str] = []  # arguments without a default that are neither tensor nor param
    for p in params:
        if p.kind == p.VAR_KEYWORD:
            continue
        if p.kind == p.KEYWORD_ONLY:
            if p.name in declared:
                raise ContractError(
                    f"parameter {p.name!r} is keyword-only in forward, and Function.apply passes "
                    "arguments by position"
                )
            continue
        if p.name in declared:
            slots.append((PARAM, p.name))
        elif len(names) < n:
            slots.append((TENSOR, len(names)))
            names.append(p.name)
        elif p.default is p.empty:
            extra.append(p.name)
        else:
            slots.append((DEFAULT, p.default))
    if len(names) < n or extra:
        taken = len(names) + len(extra)
        raise ContractError(
            f"forward takes {taken} tensor(s) but the signature {contract.signature!r} declares {n}"
            + (f"; declare {extra[0]!r} in params if it is not a tensor" if extra else "")
        )
    missing = [k for k in declared if (PARAM, k) not in slots]
    if missing:
        takes = ", ".join(p.name for p in params) or "nothing"
        raise ContractError(
            f"parameter {missing[0]!r} is not an argument of forward, which takes ({takes}): a "
            "param is passed by the forward's name for it"
        )
    while slots and slots[-1][0] == DEFAULT:  # trailing defaults: forward fills them itself
        slots.pop()
    return _plan(contract, tuple(slots), tuple(names), tensor_params)


def _plan(
    contract: Contract,
    slots: tuple[tuple[str, Any], ...],
    names: tuple[str, ...],
    tensor_params: frozenset[str],
) -> Arguments:
    """The Arguments, ``contract.inputs`` read by index: the constants, and each set checked against
    its input's core dimensions."""
    kinds = {_index(key, names): kind for key, kind in contract.inputs.items()}
    constants = {i: k for i, k in kinds.items() if not isinstance(k, InputSet) or not k.grad}
    if len(constants) == len(names):
        raise ContractError("every tensor input is declared not differentiated: there is nothing to check")
    sets = {i: k for i, k in kinds.items() if isinstance(k, InputSet)}
    cores = contract.sig.inputs
    inverses = {}
    for i, kind in sets.items():
        where = f"inputs[{names[i]!r}]"
        kind.fits(where, cores[i])
        if isinstance(kind, Permutation) and kind.inverse_of is not None:
            j = _index(kind.inverse_of, names)
            other = sets.get(j)
            if not isinstance(other, Permutation) or other.inverse_of is not None or cores[j] != cores[i]:
                raise ContractError(
                    f"{where}: inverse_of names {kind.inverse_of!r}, which must be a Permutation (not "
                    "itself an inverse) of the same core dimensions"
                )
            inverses[i] = j
    return Arguments(slots, names, constants, tensor_params, sets, inverses)


def _index(key: str | int, names: tuple[str, ...]) -> int:
    """The index of the tensor input ``key`` names (or is); a key that names none is an error."""
    if isinstance(key, int) and not isinstance(key, bool) and 0 <= key < len(names):
        return key
    if isinstance(key, str) and key in names:
        return names.index(key)
    raise ContractError(f"inputs names {key!r}, which is none of the forward's tensor inputs {list(names)!r}")


def _as_tensor(value: Any, tensors: Sequence[Any]) -> Any:
    import torch

    like = next((t for t in tensors if isinstance(t, torch.Tensor) and t.is_floating_point()), None)
    if like is None:
        return torch.tensor(value)
    return torch.tensor(value, dtype=like.dtype, device=like.device)
