"""``declare``: a contract for a class from elsewhere, the class itself left as it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from opzoo.core._contract import Contract
from opzoo.exceptions import ContractError

__all__ = ["Declared", "declare"]


@dataclass(frozen=True)
class Declared:
    """A class with the contract declared for it from outside (:func:`declare`): the class itself
    is left as it is. An entry point may name this object as it would name the class."""

    target: type
    contract: Contract

    def __repr__(self) -> str:
        return f"declare({self.target.__module__}.{self.target.__qualname__})"


def declare(target: type, contract: Contract | None = None, **fields: Any) -> Declared:
    """Declare ``target`` (an existing Function or learnable Module, from any package) as an op with
    ``contract``, or with a Contract built from ``fields``; the class is not modified.

    ``sparsemax = opzoo.declare(entmax.SparsemaxFunction, signature="(n)->(n)", params={"dim":
    opzoo.Dim(), "k": opzoo.Param(None, 1, 4)})``, then name ``sparsemax`` in an entry point, or pass
    it to ``opzoo.register``. The contract is validated when the op is first resolved.
    """
    if isinstance(target, Declared):
        target = target.target
    if contract is not None and fields:
        raise ContractError(f"declare() takes a contract or its fields, not both (got {sorted(fields)})")
    if contract is None:
        try:
            contract = Contract(**fields)
        except TypeError as exc:  # an unknown field
            raise ContractError(f"declare(): {exc}") from None
    if not isinstance(contract, Contract):
        raise ContractError(f"declare() takes an opzoo.Contract, got {type(contract).__name__}")
    return Declared(target, contract)
