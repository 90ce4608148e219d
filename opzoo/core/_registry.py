"""OpSpec (a resolved op and its contract) and the Registry that maps names to ops.

The registry holds *offers*: a name, where it came from, and either the op itself or an import path.
Import paths are resolved, validated and cached on first use, so listing names imports no plugin.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import re
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

from opzoo._records import PLUGIN_ERRORS, SLOW_IMPORT, Failure, Source, canonical_dist
from opzoo.core._arguments import PARAM, TENSOR, Arguments, arguments
from opzoo.core._contract import Contract, contract_of, summary_of, validate
from opzoo.exceptions import (
    ConfigError,
    ContractError,
    DuplicateOpError,
    OpNotFoundError,
    OpZooError,
    PluginError,
    one_line,
)

__all__ = [
    "Declared",
    "Failure",
    "OpSpec",
    "Registry",
    "Source",
    "canonical_dist",
    "declare",
    "import_path",
    "lookup",
    "make_spec",
    "spec_of",
]

_NAME = re.compile(r"^[a-z_][a-z0-9_.\-]*$")


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


@dataclass(frozen=True)
class OpSpec:
    """A resolved op: the class, its kind, its validated contract and its source."""

    name: str
    target: type
    kind: str  # "function" (an autograd.Function) or "module" (an nn.Module, maybe learnable)
    contract: Contract
    source: Source
    summary: str = ""
    #: How the forward takes its tensors and params (None for a learnable Module: its params go to
    #: its constructor).
    arguments: Arguments | None = None

    @property
    def module(self) -> str:
        return f"{self.target.__module__}:{self.target.__qualname__}"

    @property
    def params(self) -> Mapping[str, Any]:
        return self.contract.params

    def bound(self, **params: Any) -> Callable[..., Any]:
        """Return the op with validated parameters fixed (defaults for those not given).

        Call the result on the op's tensor inputs. A Function gives a plain callable; a learnable
        Module gives a fresh instance of itself, an ``nn.Module`` holding its parameters. This is
        the one place that tells the two kinds apart.
        """
        values = self.contract.bind(params)
        if self.kind == "module":
            return self.target(**values)
        apply, plan = self.target.apply, self.arguments
        assert plan is not None
        if (
            plan.slots
            == tuple((TENSOR, i) for i in range(len(plan.names))) + tuple((PARAM, k) for k in values)
            and not plan.tensor_params
        ):
            args = tuple(values.values())  # the usual order: the call costs nothing more

            def op(*tensors: Any) -> Any:
                return apply(*tensors, *args)

        else:

            def op(*tensors: Any) -> Any:
                return apply(*plan(tensors, values))

        op.__name__ = op.__qualname__ = self.name
        return op

    def apply(self, *tensors: Any, **params: Any) -> Any:
        """Apply the op to its tensor inputs, with validated parameters."""
        return self.bound(**params)(*tensors)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready description (used by ``opzoo info --json``)."""
        c = self.contract
        return {
            "name": self.name,
            "kind": self.kind,
            "signature": c.signature,
            "summary": self.summary,
            "dist": self.source.dist,
            "version": self.source.version,
            "module": self.module,
            "entry_point": self.source.entry_point,
            "via": self.source.via,
            "domain": [c.domain[0], c.domain[1]],
            "kinks": {str(k): v for k, v in c.kinks_at().items()},
            "params": {
                n: {"default": p.default, "low": p.low, "high": p.high, "doc": p.doc}
                for n, p in c.params.items()
            },
            "reference": _describe(c.reference),
            "surrogate": _describe(c.surrogate),
            "double_backward": c.double_backward,
            "dtypes": list(c.dtypes),
            "formula": c.formula,
            "derivative": c.derivative,
        }


def _describe(obj: Any) -> str | None:
    if obj is None:
        return None
    name = getattr(obj, "__name__", None) or repr(obj)
    for public in ("torch", "torch.nn.functional", "torch.special"):
        module = sys.modules.get(public)
        if module is not None and getattr(module, name, None) is obj:
            return f"{public}.{name}"
    mod = getattr(obj, "__module__", None) or ""
    qual = getattr(obj, "__qualname__", name)
    return f"{mod}.{qual}" if mod else qual


def make_spec(name: str, target: Any, source: Source) -> OpSpec:
    """Validate ``target`` as an op and return its spec; raise ContractError on what is wrong."""
    import torch

    declared = None
    if isinstance(target, Declared):
        target, declared = target.target, target.contract
    if not inspect.isclass(target):
        raise ContractError(f"{target!r} is not a class (expected a torch.autograd.Function subclass)")
    if issubclass(target, torch.autograd.Function):
        kind = "function"
        if target.forward is torch.autograd.Function.forward:
            raise ContractError(f"{target.__qualname__} does not define forward")
        if target.backward is torch.autograd.Function.backward and getattr(target, "vjp", None) is getattr(
            torch.autograd.Function, "vjp", None
        ):
            raise ContractError(f"{target.__qualname__} does not define backward")
        forward = target.forward
    elif issubclass(target, torch.nn.Module):
        kind = "module"
        forward = None
    else:
        raise ContractError(
            f"{target.__module__}.{target.__qualname__} is not a torch.autograd.Function "
            "or torch.nn.Module subclass"
        )
    contract = declared if declared is not None else contract_of(target)
    validate(contract)
    plan = None
    if forward is not None:
        # The classic form, forward(ctx, ...), is the one that does not define setup_context.
        ctx = target.setup_context is torch.autograd.Function.setup_context
        plan = arguments(contract, forward, ctx=ctx)
    if kind == "module" and contract.surrogate is not None:
        raise ContractError(
            "a surrogate applies to Functions only: a learnable Module's backward is autograd's, the "
            "derivative of its forward"
        )
    if kind == "module" and (contract.inputs or contract.axis):
        raise ContractError("a learnable Module takes float tensors only, along their last dimensions")
    return OpSpec(name, target, kind, contract, source, summary_of(target, contract), plan)


def spec_of(target: Any, contract: Contract | None = None, *, name: str | None = None) -> OpSpec:
    """An op's spec made directly, registered nowhere: ``target`` a Function or learnable Module
    class, what :func:`declare` returned, or its import path ``"package.module:Class"`` (which
    ``opzoo check`` and ``pytest --opzoo`` accept in place of a name). ``contract`` declares one
    as :func:`declare` does; ``name`` defaults to the path, or the class's name."""
    via, path = "register", None
    if isinstance(target, str):
        path = target.strip()
        if ":" not in path:
            raise ContractError(f"an import path is 'package.module:Class', got {target!r}")
        target, via = import_path(path), "path"
    offered = declare(target, contract) if contract is not None else target
    inner = offered.target if isinstance(offered, Declared) else offered
    if path is None:
        path = f"{getattr(inner, '__module__', '?')}:{getattr(inner, '__qualname__', repr(inner))}"
    shown = name or (path if via == "path" else getattr(inner, "__name__", path).lower())
    return make_spec(shown, offered, Source(entry_point=path, via=via))


_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def lookup(registry: Registry, name: str) -> OpSpec:
    """Op ``name`` from ``registry``; where it has none and ``name`` is an import path
    (``package.module:Class``), that class as it is (:func:`spec_of`): how ``opzoo check`` and
    ``pytest --opzoo`` take ops that no plugin publishes."""
    try:
        return registry.info(name)
    except OpNotFoundError:
        if not _PATH.match(name.strip()):
            raise
    try:
        return spec_of(name)
    except OpZooError:
        raise
    except PLUGIN_ERRORS as exc:  # importing the user's module may raise anything
        raise ConfigError(f"cannot import {name.strip()!r}: {one_line(exc, with_type=True)}") from None


def import_path(path: str) -> Any:
    """Import ``"module:attr.path"`` and return the attribute."""
    module_name, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module_name.strip())
    for part in filter(None, attr.strip().split(".")):
        obj = getattr(obj, part)
    return obj


@dataclass
class _Offer:
    name: str
    source: Source
    ref: Any  # the op class, or an import path resolved on first use
    spec: OpSpec | None = None
    failure: Failure | None = None
    seconds: float = 0.0  # how long resolving (importing) took
    guard: Any = None  # an opzoo.core._guard.Guard: a plugin's first import in a child, its effects watched

    def resolve(self) -> OpSpec:
        if self.spec is not None:
            return self.spec
        if self.failure is not None:
            raise PluginError(self.failure)
        # Every op needs torch, and its import (seconds) is nobody's plugin's fault: not timed.
        import torch  # noqa: F401

        guarded = self.guard is not None and isinstance(self.ref, str)
        refused = self.guard.refusal(self.ref, self.source) if guarded else None  # not timed either
        if refused is not None:
            self.failure = Failure(self.source, refused, self.name)
            raise PluginError(self.failure)
        began = time.perf_counter()
        try:
            with self.guard.watching(self.source) if guarded else contextlib.nullcontext():
                target = import_path(self.ref) if isinstance(self.ref, str) else self.ref
            self.spec = make_spec(self.name, target, self.source)
        except PLUGIN_ERRORS as exc:  # a plugin's import may raise anything; isolate it
            self.failure = Failure(self.source, one_line(exc), self.name)
            raise PluginError(self.failure) from exc
        finally:
            self.seconds = time.perf_counter() - began
        return self.spec


@dataclass
class Registry:
    """Maps case-insensitive names to ops. Build one with :func:`opzoo.load`, or empty for tests."""

    _offers: dict[str, list[_Offer]] = field(default_factory=dict)
    _failures: list[Failure] = field(default_factory=list)
    #: The pluggy plugins (:class:`opzoo.core._loading.Plugins`), when loaded with any; None for tests.
    plugins: Any = None
    _strategies: dict[tuple[str, str], Any] = field(default_factory=dict)
    _slow: list[str] = field(default_factory=list)  # hook plugins that were slow to import
    #: A core._guard.Guard for plugins' imports (set by core._loading.load); None: imported as is.
    guard: Any = None

    # -- adding -----------------------------------------------------------------------------

    def offer(self, name: str, ref: Any, source: Source) -> None:
        """Record that ``source`` offers op ``name``; a second source makes the name ambiguous."""
        key = name.lower()
        if not _NAME.match(key):
            self._failures.append(Failure(source, f"invalid op name {name!r}", name))
            return
        offers = self._offers.setdefault(key, [])
        if offers:
            others = " and ".join(str(o.source) for o in offers)
            self._failures.append(Failure(source, f"duplicate op name, also offered by {others}", key))
        offers.append(_Offer(key, source, ref, guard=self.guard))

    def record(self, failure: Failure) -> None:
        """Record a plugin failure that is not tied to a single offer."""
        self._failures.append(failure)

    def register(
        self, target: Any = None, *, name: str | None = None, contract: Contract | None = None
    ) -> Any:
        """Register an op in-process; usable as ``register(Fn)`` or as a decorator.

        ``contract`` declares one for a class that has none (or another), leaving the class as it
        is, as :func:`declare` does; ``target`` may also be what ``declare`` returned. The op is
        validated at once. A name already taken raises :class:`DuplicateOpError`, except that
        re-running a notebook cell that defines the same class again replaces it.
        """

        def add(cls: Any) -> Any:
            offered = declare(cls, contract) if contract is not None else cls
            inner = offered.target if isinstance(offered, Declared) else offered
            if not isinstance(inner, type):
                raise TypeError(
                    "register() takes an autograd Function or nn.Module class (or what declare() "
                    f"returned), got {type(inner).__name__} {inner!r:.80}"
                )
            key = (name or inner.__name__).lower()
            source = Source(entry_point=f"{inner.__module__}:{inner.__qualname__}")
            spec = make_spec(key, offered, source)
            existing = self._offers.get(key, [])
            if existing:
                same = [o for o in existing if o.source == source]
                if len(same) != len(existing):
                    raise DuplicateOpError(key, [str(o.source) for o in existing] + [str(source)])
            self._offers[key] = [_Offer(key, source, offered, spec=spec)]
            return cls

        return add(target) if target is not None else add

    def unregister(self, name: str) -> None:
        """Remove every offer of ``name``."""
        if self._offers.pop(name.lower(), None) is None:
            raise OpNotFoundError(name, self.names())

    # -- looking up -------------------------------------------------------------------------

    def names(self) -> list[str]:
        """Return every offered op name, sorted, without importing any plugin."""
        return sorted(self._offers)

    def __contains__(self, name: object) -> bool:
        if not isinstance(name, str):
            return False
        try:
            self._offer(name)
        except OpZooError:
            return False
        return True

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self._offers)

    def info(self, name: str) -> OpSpec:
        """Return the spec of op ``name`` (``dist:name`` picks one source), importing it if needed."""
        return self._offer(name).resolve()

    def get(self, name: str) -> type:
        """Return the op class registered as ``name``."""
        return self.info(name).target

    def sources(self, name: str) -> list[Source]:
        """Return every source offering ``name``, without importing anything."""
        offers = self._offers.get(name.lower())
        if not offers:
            raise OpNotFoundError(name, self.names())
        return [o.source for o in offers]

    def _offer(self, name: str) -> _Offer:
        if not isinstance(name, str) or not name.strip():
            raise OpNotFoundError(str(name), self.names())
        qualifier, _, base = name.strip().lower().rpartition(":")
        offers = self._offers.get(base)
        if not offers:
            raise OpNotFoundError(base, self.names())
        if qualifier:
            picked = [o for o in offers if o.source.qualifier == canonical_dist(qualifier)]
            if not picked:
                raise OpNotFoundError(name, [f"{o.source.qualifier}:{base}" for o in offers])
            offers = picked
        if len(offers) > 1:
            raise DuplicateOpError(base, [o.source.qualifier for o in offers])
        return offers[0]

    def input_strategy(self, spec: OpSpec, dtype: Any, accept: Callable[[Any], bool] | None = None) -> Any:
        """Return a plugin's input strategy for ``spec`` in ``dtype``, or None for the default.

        Asked once per op and dtype, then cached. A plugin whose hook raises, or returns something
        ``accept`` refuses, is recorded as that plugin's failure and passed over, so it cannot fail
        the checks of another plugin's op.
        """
        key = (spec.name, str(dtype))
        if key not in self._strategies:
            found = None
            if self.plugins is not None:
                found = self.plugins.first(
                    "opzoo_input_strategy", self.record, accept, spec=spec, dtype=dtype
                )
            self._strategies[key] = found
        return self._strategies[key]

    # -- loading everything -----------------------------------------------------------------

    def load_all(self) -> list[OpSpec]:
        """Resolve every offer; return the specs that loaded. Failures are recorded, not raised."""
        specs = []
        for offers in self._offers.values():
            for offer in offers:
                try:
                    specs.append(offer.resolve())
                except PluginError:
                    pass
        return specs

    def slow(self, threshold: float = SLOW_IMPORT) -> list[str]:
        """One line per plugin source whose imports took longer than ``threshold`` seconds."""
        lines = [
            f"importing {o.source} ({o.source.entry_point}) took {o.seconds:.1f} s"
            for offers in self._offers.values()
            for o in offers
            if o.seconds > threshold
        ]
        return lines + [line for line in self._slow if line not in lines]

    def failures(self) -> list[Failure]:
        """Return every failure seen so far (loading, validation, duplicates)."""
        lazy = [o.failure for offers in self._offers.values() for o in offers if o.failure]
        return self._failures + [f for f in lazy if f not in self._failures]

    def rows(self) -> list[dict[str, Any]]:
        """Return one listing row per offer (resolving each) plus one per failure with no op."""
        rows = []
        for key in self.names():
            offers = self._offers[key]
            for offer in offers:
                row: dict[str, Any] = {
                    "name": key if len(offers) == 1 else f"{offer.source.qualifier}:{key}",
                    "dist": offer.source.dist,
                    "version": offer.source.version,
                    "source": str(offer.source),
                }
                try:
                    spec = offer.resolve()
                except PluginError as exc:
                    row.update(status="broken", summary=exc.failure.reason, kind=None, signature=None)
                else:
                    status = "ok" if len(offers) == 1 else "duplicate"
                    row.update(
                        status=status, summary=spec.summary, kind=spec.kind, signature=spec.contract.signature
                    )
                rows.append(row)
        for failure in self._failures:
            if failure.name is None or failure.name.lower() not in self._offers:
                rows.append(
                    {
                        "name": failure.name or "-",
                        "dist": failure.source.dist,
                        "version": failure.source.version,
                        "source": str(failure.source),
                        "status": "broken",
                        "summary": failure.reason,
                        "kind": None,
                        "signature": None,
                    }
                )
        return rows
