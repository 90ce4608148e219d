"""The Registry: names mapped to ops, and ``lookup``, an op by name or import path.

The registry holds *offers*: a name, where it came from, and either the op itself or an import path.
Import paths are resolved, validated and cached on first use, so listing names imports no plugin.
Once :func:`opzoo.load` returns, a registry changes only as it resolves an op on first use (its
spec, or its failure) and as ``register`` and ``unregister`` add ops in-process: its plugins and
guard are given when it is made, and what a run of the checks asks of the plugins stays with the
run (``opzoo/testing/running/_hooks.py``).

What an op is lives beside it: ``OpSpec`` and ``spec_of`` in ``_spec``, ``declare`` in ``_declare``;
they are named here too, as the registry's users have always imported them.
"""

from __future__ import annotations

import contextlib
import re
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

from opzoo._records import PLUGIN_ERRORS, SLOW_IMPORT, Failure, Source, canonical_dist
from opzoo.core._contract import Contract
from opzoo.core._declare import Declared, declare
from opzoo.core._spec import OpSpec, import_path, make_spec, spec_of
from opzoo.exceptions import (
    ContractError,
    DuplicateOpError,
    OpNotFoundError,
    OpZooError,
    PluginError,
    one_line,
)

if TYPE_CHECKING:
    from opzoo.core._guard import Guard
    from opzoo.core._plugins import Plugins

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

#: An op name, as an entry point's name may be (lower-cased); matched whole (fullmatch: a `$` would
#: let a final newline through).
_NAME = re.compile(r"[a-z_][a-z0-9_.\-]*")
_NAME_RULE = "lower-case letters, digits, '_', '.' and '-', starting with a letter or '_'"


_PATH = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def lookup(registry: Registry, name: str, *, here: bool = True) -> Any:
    """Op ``name`` from ``registry``; where it has none and ``name`` is an import path
    (``package.module:Class``), that class as it is (:func:`spec_of`): how ``opzoo check`` and
    ``pytest --opzoo`` take ops that no plugin publishes. ``here=False``: the path's module is tried
    in a forked child and left unimported here, a ``_path_op.PathSpec`` resolved where it is used
    (a worker), for callers that need only its name (``opzoo check``)."""
    try:
        return registry.info(name)
    except OpNotFoundError:
        if not _PATH.match(name.strip()):
            raise
    from opzoo.core._path_op import by_path, resolved

    return resolved(name) if here else by_path(name)


@dataclass
class _Offer:
    name: str
    source: Source
    ref: Any  # the op class, or an import path resolved on first use
    spec: OpSpec | None = None
    failure: Failure | None = None
    seconds: float = 0.0  # how long resolving (importing) took
    guard: Guard | None = None  # a plugin's first import in a child, its effects watched

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
        try:
            with self.guard.watching(self.source) if guarded else contextlib.nullcontext():
                # the import alone is timed: the watch around it is opzoo's time, not the plugin's
                began = time.perf_counter()
                try:
                    target = import_path(self.ref) if isinstance(self.ref, str) else self.ref
                finally:
                    self.seconds = time.perf_counter() - began
            self.spec = make_spec(self.name, target, self.source)
        except PLUGIN_ERRORS as exc:  # a plugin's import may raise anything; isolate it
            self.failure = Failure(self.source, one_line(exc), self.name)
            raise PluginError(self.failure) from exc
        return self.spec


@dataclass(frozen=True, eq=False)
class Registry:
    """Maps case-insensitive names to ops. Build one with :func:`opzoo.load`, or empty for tests.

    ``plugins``: the pluggy plugins it was loaded with (None: none, as in tests); ``guard``: what
    watches plugins' imports (None: imported as they are). Both are given when it is made.
    """

    plugins: Plugins | None = None
    guard: Guard | None = None
    _offers: dict[str, list[_Offer]] = field(default_factory=dict)
    _failures: list[Failure] = field(default_factory=list)

    # -- adding -----------------------------------------------------------------------------

    def offer(self, name: str, ref: Any, source: Source) -> None:
        """Record that ``source`` offers op ``name``; a second source makes the name ambiguous."""
        key = name.lower()
        if not _NAME.fullmatch(key):
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
            key = (inner.__name__ if name is None else name).lower()
            if not _NAME.fullmatch(key):  # '' too: an empty name is no name, not the class's
                what = repr(name) if name is not None else f"{key!r} (the class's name; give name=)"
                raise ContractError(f"invalid op name {what}: {_NAME_RULE} (as an entry point's name)")
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
        """One line per plugin source whose imports took longer than ``threshold`` seconds, or
        changed the working directory or a signal's disposition (undone)."""
        lines = [
            f"importing {o.source} ({o.source.entry_point}) took {o.seconds:.1f} s"
            for offers in self._offers.values()
            for o in offers
            if o.seconds > threshold
        ]
        hooks = [*(self.plugins.slow if self.plugins is not None else [])]
        hooks += self.guard.notes if self.guard is not None else []  # imports that changed the process
        return lines + [line for line in hooks if line not in lines]

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
