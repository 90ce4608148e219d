"""What an op's forward takes besides its differentiable tensors: parameters (numbers, flags, choices,
the dimension it works along) and tensors that are not differentiated (class targets, masks).

Nothing here imports torch: a contract is declared and validated at load, before any op runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from opzoo.exceptions import ContractError, ParamError

_WORDS = {"none": None, "true": True, "false": False}


@dataclass(frozen=True)
class Param:
    """A non-tensor argument of an op's forward: its default, and the values it may take.

    - A number, ``Param(1.0, 0.0, 10.0)``: the closed range ``[low, high]``. An ``int`` default (or
      ``integer=True``) makes an integer parameter: validated, drawn and passed as an ``int``.
    - Choices, ``Param("zero", choices=("zero", "periodization"))``: the only values it takes
      (strings, tuples, anything compared with ``==``). A ``bool`` default means ``(False, True)``;
      a string or tuple default without choices is the one value it takes.
    - Optional, ``Param(None, 1, 8)``: None, or a number in ``[low, high]`` (an integer one where
      low and high are ints, or with ``integer=True``).

    ``tensor=True`` passes the value to forward as a 0-d tensor in the inputs' dtype (for a Function
    that saves it for backward); ``axis`` marks the dimension the op works along (see :func:`Dim`).
    """

    default: Any
    low: float = -math.inf
    high: float = math.inf
    doc: str = ""
    choices: tuple[Any, ...] = ()
    integer: bool | None = None
    tensor: bool = False
    axis: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "choices", tuple(self.choices))
        if self.integer is None:
            whole = isinstance(self.default, int) and not isinstance(self.default, bool)
            if self.default is None:
                whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (self.low, self.high))
            object.__setattr__(self, "integer", whole)

    @property
    def kind(self) -> str:
        """``"choice"`` (a listed set of values), ``"optional"`` (None or a number), or ``"number"``."""
        if self.choices or isinstance(self.default, (bool, str, tuple)):
            return "choice"
        return "optional" if self.default is None else "number"

    def values(self) -> tuple[Any, ...]:
        """The values a choice parameter takes, its default first (hypothesis shrinks to it)."""
        if self.choices:
            listed = self.choices
        elif isinstance(self.default, bool):
            listed = (False, True)
        else:
            listed = (self.default,)
        return (self.default, *(v for v in listed if not _same(v, self.default)))

    def check(self, name: str, value: Any) -> Any:
        """Return ``value`` as the op takes it (an int for an integer parameter, a float for a
        number), or raise :class:`ParamError` saying what it must be."""
        kind = self.kind
        if kind == "choice":
            for v in self.values():
                if _same(v, value) or (isinstance(value, str) and _parse(value, v)):
                    return v
            shown = ", ".join(repr(v) for v in self.values())
            raise ParamError(f"parameter {name!r} must be one of {shown}, got {value!r}")
        if kind == "optional" and (value is None or (isinstance(value, str) and value.lower() == "none")):
            return None
        what = "an integer" if self.integer else "a number"
        if kind == "optional":
            what += " or None"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ParamError(f"parameter {name!r} must be {what}, got {value!r}") from None
        if self.integer:
            if not (isinstance(value, int) or (math.isfinite(value) and float(value).is_integer())):
                raise ParamError(f"parameter {name!r} must be {what}, got {value!r}")
            value = int(value)
        else:
            value = float(value)
        if (not self.integer and math.isnan(value)) or not (self.low <= value <= self.high):
            raise ParamError(f"parameter {name!r} must lie in [{self.low:g}, {self.high:g}], got {value!r}")
        return value

    def validate(self, name: str) -> None:
        """Raise :class:`ContractError` naming what is wrong with this declaration."""
        if not name.isidentifier():
            raise ContractError(f"parameter name {name!r} is not an identifier")
        if not self.low <= self.high:
            raise ContractError(f"parameter {name!r} has an empty range [{self.low}, {self.high}]")
        if self.choices and not any(_same(v, self.default) for v in self.choices):
            raise ContractError(f"parameter {name!r}: its default {self.default!r} is not among its choices")
        if self.axis and not (self.integer and isinstance(self.default, int)):
            raise ContractError(
                f"parameter {name!r} is a Dim: its default must be an int, got {self.default!r}"
            )
        if self.tensor and self.kind == "choice":
            raise ContractError(f"parameter {name!r}: tensor=True passes a number as a tensor, not a choice")
        try:
            self.check(name, self.default)
        except ParamError as exc:
            raise ContractError(f"default out of range: {exc}") from None


def Dim(default: int = -1, doc: str = "the dimension the op works along") -> Param:  # noqa: N802
    """The parameter that says along which dimension the op works (``dim``): the property tests put
    the op's core dimension at every position it can take, positive and negative, and pass that."""
    return Param(default, doc=doc, integer=True, axis=True)


@dataclass(frozen=True)
class Index:
    """An integer tensor input that is not differentiated (class targets, indices): its values are
    drawn from ``[low, high)``, where either end is an int or the name of a core dimension of the
    signature (its size: ``Index(high="c")`` for a target among ``c`` classes). ``optional``: the
    forward also takes None there."""

    high: int | str
    low: int | str = 0
    dtype: str = "int64"
    optional: bool = field(default=False, kw_only=True)

    def validate(self, where: str, dims: set[str]) -> None:
        _flag(where, self.optional)
        for end in (self.low, self.high):
            if isinstance(end, str) and end not in dims:
                raise ContractError(f"{where}: {end!r} is not a dimension of the signature")
            if not isinstance(end, (int, str)) or isinstance(end, bool):
                raise ContractError(f"{where}: the ends of an Index are ints or dimension names, got {end!r}")
        if self.dtype not in ("int64", "int32", "int16", "int8", "uint8"):
            raise ContractError(f"{where}: an Index's dtype is an integer dtype, got {self.dtype!r}")


@dataclass(frozen=True)
class Mask:
    """A bool tensor input that is not differentiated (a mask); ``optional``: the forward also takes
    None there (kornia's ``valid=None``: every element)."""

    dtype: str = "bool"
    optional: bool = field(default=False, kw_only=True)

    def validate(self, where: str, dims: set[str]) -> None:
        _flag(where, self.optional)
        if self.dtype != "bool":
            raise ContractError(f"{where}: a Mask is a bool tensor, got dtype {self.dtype!r}")


def _flag(where: str, optional: Any) -> None:
    if not isinstance(optional, bool):
        raise ContractError(f"{where}: optional must be True or False, got {optional!r}")


def _same(a: Any, b: Any) -> bool:
    """Equal and of the same kind: ``True`` is not the choice ``1``, nor ``1.0`` the choice ``1``."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    try:
        return type(a) is type(b) and bool(a == b)
    except Exception:  # an exotic value's == may raise
        return False


def _parse(text: str, like: Any) -> bool:
    """Whether ``text`` (from the command line) spells the choice ``like``."""
    if isinstance(like, str):
        return text == like
    word = text.strip().lower()
    if word in _WORDS:
        return _same(_WORDS[word], like)
    try:
        return isinstance(like, (int, float)) and float(word) == like
    except ValueError:
        return False
