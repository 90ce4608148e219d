"""The op contract: what an op author may declare next to a Function, and its validation.

Nothing here imports torch, so declaring a contract and listing ops stay cheap.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Union

from opzoo._signature import ELEMENTWISE, Signature
from opzoo.exceptions import ContractError, ParamError

#: The dtypes opzoo knows how to test, by their torch name.
KNOWN_DTYPES = ("float64", "float32", "bfloat16", "float16")
DEFAULT_DTYPES = ("float64", "float32", "bfloat16")

Kinks = Union[Mapping[float, float], Callable[..., Mapping[float, float]]]


@dataclass(frozen=True)
class Param:
    """A non-tensor parameter of an op: its default and the closed range ``[low, high]`` it accepts.

    An ``int`` default makes an integer parameter (a ``dim``, a count): validated as an int, drawn
    as ints by the property tests and passed to ``forward`` as an ``int``.
    """

    default: float | int
    low: float = -math.inf
    high: float = math.inf
    doc: str = ""

    @property
    def integer(self) -> bool:
        return isinstance(self.default, int) and not isinstance(self.default, bool)

    def check(self, name: str, value: Any) -> float | int:
        """Return ``value`` as a float (an int for an integer parameter), or raise
        :class:`ParamError` if it is not a number in range."""
        kind = "an integer" if self.integer else "a number"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ParamError(f"parameter {name!r} must be {kind}, got {value!r}") from None
        if self.integer:
            if not (isinstance(value, int) or (math.isfinite(value) and float(value).is_integer())):
                raise ParamError(f"parameter {name!r} must be an integer, got {value!r}")
            value = int(value)
        else:
            value = float(value)
        if (not self.integer and math.isnan(value)) or not (self.low <= value <= self.high):
            raise ParamError(f"parameter {name!r} must lie in [{self.low:g}, {self.high:g}], got {value!r}")
        return value


@dataclass(frozen=True)
class Contract:
    """What an op declares about itself; every field has a sensible default.

    Attach one to a Function (or learnable Module) as the class attribute ``opzoo_contract``.

    summary:         one line for listings (default: the first line of the class docstring).
    reference:       an oracle computing the same function, called as ``reference(x, **params)``.
    domain:          the open interval of inputs the op is defined on (elementwise ops only).
    kinks:           points where the op is not differentiable, mapped to the gradient the op defines
                     there; or a callable taking the op's params as keywords and returning that
                     mapping (elementwise ops only).
    signature:       the tensors the op takes and returns, as a gufunc signature: ``"()->()"`` (the
                     default) is an elementwise unary op, ``"(n,k),(k,m)->(n,m)"`` a matrix
                     product, ``"(n)->()"`` a reduction, ``"()->(),()"`` two outputs.
    params:          the op's non-tensor parameters, in the order ``forward`` takes them, after
                     the tensor inputs.
    double_backward: whether the backward is itself differentiable.
    surrogate:       for a backward that is deliberately not the derivative of the forward (a
                     straight-through estimator, a spiking neuron's smooth surrogate, gradient
                     reversal): a differentiable function of the op's tensor inputs and params,
                     called as ``surrogate(*tensors, **params)``, whose autograd gradient is what
                     ``backward`` must compute. ``reference`` then checks the forward only.
    dtypes:          the floating dtypes the op supports, by torch name.
    formula, derivative: short formulas for the generated docs.
    """

    summary: str | None = None
    reference: Callable[..., Any] | None = None
    domain: tuple[float, float] = (-math.inf, math.inf)
    kinks: Kinks = field(default_factory=dict)
    signature: str = ELEMENTWISE
    params: Mapping[str, Param] = field(default_factory=dict)
    double_backward: bool = False
    surrogate: Callable[..., Any] | None = None
    dtypes: tuple[str, ...] = DEFAULT_DTYPES
    formula: str = ""
    derivative: str = ""

    def __post_init__(self) -> None:
        # Frozen records should not share a mutable dict with their caller.
        object.__setattr__(self, "params", MappingProxyType(dict(self.params)))
        if not callable(self.kinks):
            object.__setattr__(self, "kinks", MappingProxyType(dict(self.kinks)))
        object.__setattr__(self, "dtypes", tuple(str(d).removeprefix("torch.") for d in self.dtypes))

    @property
    def sig(self) -> Signature:
        """The parsed :attr:`signature`."""
        return Signature.parse(self.signature)

    def defaults(self) -> dict[str, float]:
        """Return every parameter at its default value."""
        return {name: p.default for name, p in self.params.items()}

    def bind(self, params: Mapping[str, Any] | None = None) -> dict[str, float]:
        """Return a full, validated parameter dict: defaults overridden by ``params``."""
        params = dict(params or {})
        unknown = sorted(set(params) - set(self.params))
        if unknown:
            known = ", ".join(self.params) or "none"
            raise ParamError(f"unknown parameter {unknown[0]!r}; this op takes: {known}")
        bound = self.defaults()
        for name, value in params.items():
            bound[name] = self.params[name].check(name, value)
        return bound

    def kinks_at(self, params: Mapping[str, float] | None = None) -> dict[float, float]:
        """Return the kinks (point -> declared gradient) for a given parameter setting."""
        if callable(self.kinks):
            return {float(k): float(v) for k, v in self.kinks(**self.bind(params)).items()}
        return {float(k): float(v) for k, v in self.kinks.items()}


def summary_of(target: type, contract: Contract) -> str:
    """Return the op's one-line summary: declared, else the first docstring line, else empty."""
    if contract.summary:
        return contract.summary.strip().splitlines()[0]
    # The op's own docstring, or one from a base class of its author's: torch's Function (and
    # opzoo's own base) would describe "a base class", not the op.
    if not isinstance(target, type):
        doc = inspect.getdoc(target) or ""
        return doc.splitlines()[0] if doc else ""
    for cls in target.__mro__:
        if cls is object or cls.__module__.split(".")[0] == "torch" or cls.__module__ == "opzoo.ops._base":
            continue
        doc = inspect.cleandoc(cls.__dict__.get("__doc__") or "")
        if doc:
            return doc.splitlines()[0]
    return ""


def contract_of(target: Any) -> Contract:
    """Return the contract ``target`` declares, or the default contract if it declares none."""
    contract = getattr(target, "opzoo_contract", None)
    if contract is None:
        return Contract()
    if not isinstance(contract, Contract):
        raise ContractError(f"opzoo_contract must be an opzoo.Contract, got {type(contract).__name__}")
    return contract


def validate(contract: Contract, forward: Callable[..., Any] | None = None, *, ctx: bool = False) -> None:
    """Raise :class:`ContractError` naming the first thing wrong with ``contract``.

    ``forward`` is checked against the signature and params: it takes ``ctx`` first when ``ctx``
    (the classic form), then one tensor per signature input, then the params in order.
    """
    sig = contract.sig
    if not sig.elementwise:
        if contract.domain != (-math.inf, math.inf):
            raise ContractError(f"a domain applies to elementwise ops only; the signature is {sig}")
        if callable(contract.kinks) or contract.kinks:
            raise ContractError(f"kinks apply to elementwise ops only; the signature is {sig}")
    low, high = _pair("domain", contract.domain)
    if not low < high:
        raise ContractError(f"domain must be (low, high) with low < high, got {contract.domain!r}")
    if contract.reference is not None and not callable(contract.reference):
        raise ContractError(f"reference must be callable, got {contract.reference!r}")
    if contract.surrogate is not None:
        if not callable(contract.surrogate):
            raise ContractError(f"surrogate must be callable, got {contract.surrogate!r}")
        if callable(contract.kinks) or contract.kinks:
            # Kinks keep finite differences off the points where the forward has no derivative and
            # declare the gradient there; a surrogate op uses no finite differences and its
            # surrogate defines the gradient everywhere, jumps included.
            raise ContractError(
                "a surrogate op declares no kinks: its backward is checked against the surrogate's "
                "gradient everywhere, so the surrogate (not kinks) says what the gradient is at the "
                "forward's jumps"
            )
    for name, p in contract.params.items():
        if not name.isidentifier():
            raise ContractError(f"parameter name {name!r} is not an identifier")
        if not isinstance(p, Param):
            raise ContractError(f"parameter {name!r} must be an opzoo.Param, got {p!r}")
        if not p.low <= p.high:
            raise ContractError(f"parameter {name!r} has an empty range [{p.low}, {p.high}]")
        try:
            p.check(name, p.default)
        except ParamError as exc:
            raise ContractError(f"default out of range: {exc}") from None
    unknown = [d for d in contract.dtypes if d not in KNOWN_DTYPES]
    if unknown or not contract.dtypes:
        raise ContractError(f"dtypes must be among {KNOWN_DTYPES}, got {contract.dtypes!r}")
    try:
        kinks = contract.kinks_at()
    except ContractError:
        raise
    except Exception as exc:  # a user callable: report, don't crash
        raise ContractError(f"kinks could not be evaluated: {exc}") from None
    for point, grad in kinks.items():
        if not (low < point < high) or not math.isfinite(grad):
            raise ContractError(
                f"kink {point!r} must lie inside the domain with a finite gradient, got {grad!r}"
            )
    if forward is not None:
        _check_forward(contract, forward, ctx)


def _pair(what: str, value: Any) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ContractError(f"{what} must be a pair of numbers, got {value!r}") from None
    return low, high


def _check_forward(contract: Contract, forward: Callable[..., Any], ctx: bool) -> None:
    """Check that ``forward`` takes the signature's tensors, then the declared params in order."""
    try:
        sig = inspect.signature(forward)
    except (TypeError, ValueError):
        return
    if any(p.kind == p.VAR_POSITIONAL for p in sig.parameters.values()):
        return
    names = [
        p.name for p in sig.parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
    ]
    if ctx:
        names = names[1:]
    tensors, params = len(contract.sig.inputs), list(contract.params)
    if names[len(names) - len(params) :] == params and len(names) - len(params) != tensors:
        raise ContractError(
            f"forward takes {len(names) - len(params)} tensor(s) but the signature "
            f"{contract.signature!r} declares {tensors}"
        )
    if names != names[:tensors] + params or len(names) != tensors + len(params):
        raise ContractError(
            f"forward takes {names!r}, but the signature {contract.signature!r} declares {tensors} "
            f"tensor(s), then the params {params!r} in this order"
        )
