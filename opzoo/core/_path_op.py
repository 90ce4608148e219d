"""An op named by its import path (``package.module:Class``) that no plugin publishes, as ``opzoo
check``, ``mutate``, ``report`` and ``pytest --opzoo`` take it: its module is imported in a forked
child first, which reports whether it imports and declares a valid op (or why not, in one line) and
its summary, and then only in the worker processes that run it. The command's own process never
imports it, as it runs no op's code: what it makes of the op (a mutant) is a :class:`PathSpec` too,
made where it is resolved.

Linux only (fork): elsewhere, and in callers that want the spec itself, the path is resolved where
it is asked for (``core._spec.spec_of``).
"""

from __future__ import annotations

import json
import os
import select
import sys
from functools import partial
from typing import Any, Callable

from opzoo._records import PLUGIN_ERRORS
from opzoo.core._discover import _ended, _hung, forked
from opzoo.core._spec import OpSpec, spec_of
from opzoo.exceptions import ConfigError, OpZooError, one_line


class PathSpec(OpSpec):
    """An op's spec by import path, resolved on first use in the process that uses it: ``name`` (the
    path, as ``spec_of`` names it) and ``summary`` (as the child that tried the path read it)
    without importing anything; every other field, and what is made of them, the resolved
    :class:`OpSpec`'s. An ``OpSpec`` to its users (the torch.library bridge takes a spec where it is
    one), equal only to itself, so that keeping it imports nothing. ``make``: how it is resolved
    (default: the path imported, :func:`resolved`)."""

    def __init__(
        self, path: str, *, summary: str | None = None, make: Callable[[], OpSpec] | None = None
    ) -> None:
        object.__setattr__(self, "name", path.strip())
        object.__setattr__(self, "_make", make or partial(resolved, path.strip()))
        object.__setattr__(self, "_summary", summary)
        object.__setattr__(self, "_spec", None)

    def resolve(self) -> OpSpec:
        if self._spec is None:
            object.__setattr__(self, "_spec", self._make())
        return self._spec

    def derived(self, name: str, make: Callable[[OpSpec], OpSpec]) -> PathSpec:
        """The op ``make`` makes of this one (a mutant of it), named ``name``, made where it is
        resolved: not here."""
        return PathSpec(name, summary=self._summary, make=lambda: make(self.resolve()))

    def __getattr__(self, attr: str) -> Any:  # the fields without a default: target, kind, ...
        if attr.startswith("__") or attr in ("_spec", "_make", "_summary"):
            raise AttributeError(attr)
        return getattr(self.resolve(), attr)

    # the fields with a default are class attributes of OpSpec: read from the resolved spec too
    summary = property(  # type: ignore[assignment]
        lambda self: self.resolve().summary if self._summary is None else self._summary
    )
    arguments = property(lambda self: self.resolve().arguments)  # type: ignore[assignment]

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"PathSpec({self.name!r})"


def settled(spec: OpSpec) -> OpSpec:
    """``spec`` itself, or a :class:`PathSpec`'s resolved spec (its module imported here): for code
    that runs in a worker and needs the op as it is (a ``dataclasses.replace`` of it)."""
    return spec.resolve() if isinstance(spec, PathSpec) else spec


def resolved(path: str) -> OpSpec:
    """The op at ``path``, imported here: an opzoo error as it is, anything the import raises as one
    :class:`ConfigError` line."""
    try:
        return spec_of(path)
    except OpZooError:
        raise
    except PLUGIN_ERRORS as exc:  # importing the user's module may raise anything
        raise ConfigError(_cannot(path, one_line(exc, with_type=True))) from None


def by_path(path: str) -> OpSpec:
    """The op at ``path``, its module tried in a forked child (within the import time limit,
    ``OPZOO_IMPORT_TIMEOUT``) and not imported here: a :class:`PathSpec`, or the error the child met
    raised here as one :class:`ConfigError` line. Where processes cannot be forked: resolved here."""
    here = os.getcwd()
    if "" not in sys.path and here not in sys.path:
        # As `python -m` and pytest find a module of the folder they run in, the `opzoo` script too
        # (it has no such entry): last, so that it shadows no installed module.
        sys.path.append(here)
    if not (sys.platform.startswith("linux") and hasattr(os, "fork")):
        return resolved(path)
    from opzoo.core._guard import Guard

    message = _in_child(path, Guard.from_env().timeout)
    if "error" in message:
        raise ConfigError(message["error"])
    return PathSpec(path, summary=message.get("summary"))


def _in_child(path: str, limit: float) -> dict[str, str]:
    """What a forked child that resolves ``path`` says: ``{"summary": the op's}``, or ``{"error": line}``."""
    return forked(partial(_try, path), lambda pid, read: _answer(pid, read, path, limit))


def _try(path: str, write: int, parent: int) -> None:
    try:
        from opzoo.core._probe import _quiet

        os.setpgid(0, 0)
        _quiet(parent)
        message: dict[str, str] = {}
        try:
            message["summary"] = resolved(path).summary
        except BaseException as exc:  # SystemExit, KeyboardInterrupt raised at import: its failure too
            ours = isinstance(exc, OpZooError)  # resolved's own words (a contract's, an import's)
            message["error"] = str(exc) if ours else _cannot(path, one_line(exc, with_type=True))
        data = (json.dumps(message) + "\n").encode()
        while data:
            data = data[os.write(write, data) :]
    finally:
        os._exit(0)


def _cannot(path: str, why: str) -> str:
    return f"cannot import {path.strip()!r}: {why}"


def _answer(pid: int, read: int, path: str, limit: float) -> dict[str, str]:
    """The child's one line, or why there is none: it hung past ``limit`` or ended first."""
    buffer = b""
    exited = os.pidfd_open(pid)
    try:
        while True:
            readable = select.select([read, exited], [], [], limit)[0]
            if not readable:
                return {"error": _cannot(path, _hung(limit))}
            chunk = os.read(read, 1 << 16) if read in readable else b""
            buffer += chunk
            if b"\n" in buffer:
                return json.loads(buffer.split(b"\n", 1)[0])
            if not chunk:  # the pipe's end, or the child exited with no answer
                status = os.waitpid(pid, 0)[1]
                return {"error": _cannot(path, _ended(status))}
    finally:
        os.close(exited)
