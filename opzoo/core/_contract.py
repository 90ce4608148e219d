"""The op contract: what an op author may declare next to a Function, and its validation.

Nothing here imports torch, so declaring a contract and listing ops stay cheap.
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping, Sequence, Union

from opzoo.core._inputs import InputSet
from opzoo.core._params import Index, Mask, Param
from opzoo.core._signature import ELEMENTWISE, Signature
from opzoo.exceptions import ContractError, ParamError

#: The dtypes opzoo knows how to test, by their torch name.
KNOWN_DTYPES = ("float64", "float32", "bfloat16", "float16")
DEFAULT_DTYPES = ("float64", "float32", "bfloat16")
#: The dtypes an output may declare (``Contract.output_dtypes``): not differentiated, whatever the inputs'.
OUTPUT_DTYPES = ("int64", "int32", "int16", "int8", "uint8", "bool")
#: The most dimensions a checked input has (``opzoo.testing._domain.MAX_RANK``).
MAX_RANK = 5

#: ``Contract.gradient``: the default, and the prefix of a backward that is no derivative by design.
DERIVATIVE, BY_DESIGN = "derivative", "by design:"

Kinks = Union[Mapping[float, float], Callable[..., Mapping[float, float]]]


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
    double_backward: True: the backward is itself differentiable, and second derivatives must
                     work. Either way every second derivative that comes back is checked (one
                     that raises is a skip): a backward that is not differentiable is marked
                     ``@once_differentiable``.
    surrogate:       for a backward that is deliberately not the derivative of the forward (a
                     straight-through estimator, a spiking neuron's smooth surrogate, gradient
                     reversal): a differentiable function of the op's tensor inputs and params,
                     called as ``surrogate(*tensors, **params)``, whose autograd gradient is what
                     ``backward`` must compute. ``reference`` then checks the forward only.
    dtypes:          the floating dtypes the op supports, by torch name.
    formula, derivative: short formulas for the generated docs.
    inputs:          what a tensor input is, by the forward's name for it (or its position among
                     the signature's inputs): not differentiated, :class:`Index` (integer: class
                     targets) or :class:`Mask` (bool), whose gradient is None, rightly; or the set
                     its values live in (:class:`Floats`, :class:`Symmetric`, :class:`SPD`,
                     :class:`Permutation`, :class:`Drawn`... ``grad=False``: not differentiated).
    loop_dims:       how many loop dimensions the op takes: None for any (they broadcast), 0 for
                     an op of a fixed rank (exactly its core dimensions), n for at most n.
    min_sizes:       the smallest size each named core dimension may have (``{"n": 1}``: the op
                     refuses an empty one).
    output_sizes:    how to compute an output dimension that appears in no input, from the inputs'
                     dimension sizes and the params, by name: ``{"m": lambda l, k: (l + k - 1) // 2}``.
    gradient:        ``"derivative"`` (the backward is the forward's derivative), or ``"by design:
                     <reason>"``: a backward deliberately not the derivative of anything (guided
                     backprop, a natural or Lie-algebra gradient). Its derivative checks skip with the
                     reason; every other property runs (docs/surrogates.md).
    linear_in_grad:  whether the backward is linear in grad_output (a derivative always is); False is
                     declared with a by-design ``gradient`` only, and turns the linearity check off.
    random:          the forward draws from torch's generator (``rand_like``): every call in a check
                     runs under the same seed, and what cannot be compared so is skipped with why.
    broadcast:       whether the inputs' loop dimensions broadcast (the default); ``False``: every
                     input has the same loop dimensions (an op that takes tensors of one shape).
    min_rank:        the fewest dimensions an input has in all (``1``: the op takes no 0-d tensor).
    output_dtypes:   an output that is an integer or bool tensor whatever the inputs' dtype, by its
                     position: ``{1: "int64"}`` for the indices a max returns beside its values.
                     Every other output has the inputs' dtype. Such an output is not differentiated.
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
    inputs: Mapping[str | int, Index | Mask | InputSet] = field(default_factory=dict)
    loop_dims: int | None = None
    min_sizes: Mapping[str, int] = field(default_factory=dict)
    output_sizes: Mapping[str, Callable[..., int]] = field(default_factory=dict)
    gradient: str = DERIVATIVE
    linear_in_grad: bool = True
    random: bool = False
    broadcast: bool = True
    min_rank: int = 0
    output_dtypes: Mapping[int, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Frozen records should not share a mutable dict with their caller.
        for name in ("params", "inputs", "min_sizes", "output_sizes"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))
        if not callable(self.kinks):
            object.__setattr__(self, "kinks", MappingProxyType(dict(self.kinks)))
        object.__setattr__(self, "dtypes", tuple(str(d).removeprefix("torch.") for d in self.dtypes))
        if isinstance(self.output_dtypes, Mapping):  # else validate() says what it must be
            named = {k: str(v).removeprefix("torch.") for k, v in self.output_dtypes.items()}
            object.__setattr__(self, "output_dtypes", MappingProxyType(named))

    @property
    def sig(self) -> Signature:
        """The parsed :attr:`signature`."""
        return Signature.parse(self.signature, tuple(self.output_sizes))

    @property
    def by_design(self) -> str | None:
        """The reason a by-design backward gives (``gradient="by design: <reason>"``), or None."""
        if not self.gradient.startswith(BY_DESIGN):
            return None
        return self.gradient.removeprefix(BY_DESIGN).strip() or None

    @property
    def axis(self) -> str | None:
        """The name of the :func:`Dim` parameter, the dimension the op works along; or None."""
        return next((name for name, p in self.params.items() if p.axis), None)

    def output_shapes(
        self, shapes: Sequence[Sequence[int]], params: Mapping[str, Any] | None = None
    ) -> list[tuple[int, ...]]:
        """The output shapes for input ``shapes`` at ``params`` (the computed sizes included);
        ``ShapeError`` if the shapes do not fit the signature."""
        sig = self.sig
        if not self.output_sizes:
            return sig.output_shapes(shapes)
        known = sig.dims(shapes) | dict(params if params is not None else self.defaults())
        computed = {dim: int(_call_with(fn, known)) for dim, fn in self.output_sizes.items()}
        return sig.output_shapes(shapes, computed)

    def defaults(self) -> dict[str, Any]:
        """Return every parameter at its default value."""
        return {name: p.default for name, p in self.params.items()}

    def bind(self, params: Mapping[str, Any] | None = None) -> dict[str, Any]:
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


def validate(contract: Contract) -> None:
    """Raise :class:`ContractError` naming the first thing wrong with ``contract``. (How a forward
    takes what it declares is checked by :func:`opzoo.core._arguments.arguments`.)"""
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
    _validate_gradient(contract)
    for name, p in contract.params.items():
        if not isinstance(p, Param):
            raise ContractError(f"parameter {name!r} must be an opzoo.Param, got {p!r}")
        p.validate(name)
    _validate_shapes(contract)
    _validate_output_dtypes(contract)
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


def _validate_gradient(contract: Contract) -> None:
    """``gradient``, ``linear_in_grad`` and ``random``: their types, and what a by-design backward
    cannot be declared with."""
    gradient = contract.gradient
    if not isinstance(gradient, str) or (gradient != DERIVATIVE and contract.by_design is None):
        raise ContractError(
            f'gradient must be "{DERIVATIVE}" or "{BY_DESIGN} <reason>" (a reason that says what the '
            f"backward computes instead), got {gradient!r}"
        )
    for name in ("linear_in_grad", "random"):
        if not isinstance(getattr(contract, name), bool):
            raise ContractError(f"{name} must be True or False, got {getattr(contract, name)!r}")
    if contract.by_design is None:
        if not contract.linear_in_grad:
            raise ContractError(
                "linear_in_grad=False is declared with a by-design gradient only: a derivative is linear "
                'in grad_output (declare gradient="by design: <reason>" if the backward is no derivative)'
            )
        return
    if contract.surrogate is not None:
        raise ContractError(
            "a by-design gradient declares no surrogate: a surrogate says the backward is the derivative "
            "of another function (checked against it); by design says it is the derivative of none"
        )
    if callable(contract.kinks) or contract.kinks:
        raise ContractError(
            "a by-design gradient declares no kinks: a kink declares the derivative's value there, and "
            "the backward is declared no derivative"
        )


def _pair(what: str, value: Any) -> tuple[float, float]:
    try:
        low, high = (float(v) for v in value)
    except (TypeError, ValueError):
        raise ContractError(f"{what} must be a pair of numbers, got {value!r}") from None
    return low, high


def _validate_shapes(contract: Contract) -> None:
    """The declarations about shapes: the Dim parameter, loop dims, sizes, and the tensors that are
    not differentiated."""
    sig = contract.sig
    dims = {d for core in (*sig.inputs, *sig.outputs) for d in core if not d.isdigit()}
    axes = [name for name, p in contract.params.items() if p.axis]
    if len(axes) > 1:
        raise ContractError(f"one Dim parameter at most, got {axes!r}")
    if axes and (any(len(core) > 1 for core in (*sig.inputs, *sig.outputs)) or not any(sig.inputs)):
        raise ContractError(
            f"a Dim parameter ({axes[0]!r}) places one core dimension: every input and output of the "
            f"signature must have one at most, and some input one; the signature is {sig}"
        )
    if contract.loop_dims is not None and (
        not isinstance(contract.loop_dims, int)
        or isinstance(contract.loop_dims, bool)
        or contract.loop_dims < 0
    ):
        raise ContractError(f"loop_dims must be None or an int >= 0, got {contract.loop_dims!r}")
    for dim, size in contract.min_sizes.items():
        if dim not in dims:
            raise ContractError(f"min_sizes names {dim!r}, which is not a dimension of the signature {sig}")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise ContractError(f"min_sizes[{dim!r}] must be an int >= 0, got {size!r}")
    inputs_dims = {d for core in sig.inputs for d in core}
    for dim, fn in contract.output_sizes.items():
        if dim in inputs_dims or not any(dim in core for core in sig.outputs):
            raise ContractError(
                f"output_sizes names {dim!r}: only an output dimension that appears in no input is computed"
            )
        if not callable(fn):
            raise ContractError(f"output_sizes[{dim!r}] must be callable, got {fn!r}")
    if not isinstance(contract.broadcast, bool):
        raise ContractError(f"broadcast must be True or False, got {contract.broadcast!r}")
    if (
        not isinstance(contract.min_rank, int)
        or isinstance(contract.min_rank, bool)
        or not 0 <= contract.min_rank <= MAX_RANK
    ):
        raise ContractError(f"min_rank must be an int from 0 to {MAX_RANK}, got {contract.min_rank!r}")
    fewest = min((len(core) for core in sig.inputs), default=0)
    if contract.loop_dims is not None and contract.min_rank - fewest > contract.loop_dims:
        raise ContractError(
            f"min_rank={contract.min_rank} needs {contract.min_rank - fewest} loop dimension(s), but "
            f"loop_dims={contract.loop_dims}; the signature is {sig}"
        )
    for key, kind in contract.inputs.items():
        if not isinstance(kind, (Index, Mask, InputSet)):
            raise ContractError(
                f"inputs[{key!r}] must be an opzoo.Index, opzoo.Mask or a set (opzoo.Floats, "
                f"opzoo.Symmetric...), got {kind!r}"
            )
        if isinstance(kind, InputSet) and sig.elementwise:
            raise ContractError(
                f"inputs[{key!r}]: the input of a unary elementwise op is declared by domain=, not a "
                f"set; the signature is {sig}"
            )
        kind.validate(f"inputs[{key!r}]", dims)


def _validate_output_dtypes(contract: Contract) -> None:
    """``output_dtypes``: positions of the signature's outputs, each an integer or bool dtype."""
    sig = contract.sig
    if not isinstance(contract.output_dtypes, Mapping):
        raise ContractError(
            f'output_dtypes must map output positions to dtypes ({{1: "int64"}}), got '
            f"{contract.output_dtypes!r}"
        )
    for j, dtype in contract.output_dtypes.items():
        if not isinstance(j, int) or isinstance(j, bool) or not 0 <= j < len(sig.outputs):
            raise ContractError(
                f"output_dtypes names output {j!r}: the signature {sig} has outputs 0 to "
                f"{len(sig.outputs) - 1}"
            )
        if dtype not in OUTPUT_DTYPES:
            raise ContractError(
                f"output_dtypes[{j}] must be one of {OUTPUT_DTYPES} (an output that is not differentiated), "
                f"got {dtype!r}"
            )


def _call_with(fn: Callable[..., Any], known: Mapping[str, Any]) -> Any:
    """Call ``fn`` with the keywords it names among ``known`` (dimension sizes and params)."""
    try:
        names = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return fn(**known)
    if any(p.kind == p.VAR_KEYWORD for p in names.values()):
        return fn(**known)
    return fn(**{k: v for k, v in known.items() if k in names})
