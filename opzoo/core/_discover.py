"""What an installed package holds, found without running its code in the asking process: every
module imported in a forked child, and the ``torch.autograd.Function`` subclasses each defines.

``opzoo scan`` asks. The modules are listed from the package's folders (no import), then a child
imports them one by one, each with a time limit (``OPZOO_IMPORT_TIMEOUT``, as a plugin's first
import), and writes one JSON line per module: ok (with its Functions: import path, form, forward's
parameters as text), failed (the error in one line), or changed torch's global state (as the guard
judges a plugin's import: undone, and that module's Functions not used). A module that hangs or
ends the child is named so, and a new child resumes after it. Imports no torch here.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import pkgutil
import select
import signal
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from opzoo.core._guard import Guard
from opzoo.exceptions import OpZooError

T = TypeVar("T")

__all__ = ["Discovery", "Found", "ModuleVerdict", "discover", "modules_of"]

#: What became of one module: the statuses a :class:`ModuleVerdict` takes.
OK, FAILED, HUNG, ENDED, CHANGED = "ok", "failed", "hung", "ended the process", "changed torch's state"


@dataclass(frozen=True)
class Found:
    """One Function class a module defines: ``pkg.mod:Class``, its form (``classic``,
    ``setup_context`` or ``classmethod``) and its forward's parameters as text."""

    path: str
    form: str
    forward: str


@dataclass(frozen=True)
class ModuleVerdict:
    """One module of the package: its status, why (one line; empty when ok), its Functions."""

    module: str
    status: str
    why: str = ""
    functions: tuple[Found, ...] = ()


@dataclass
class Discovery:
    """A package's modules, in the order they were imported."""

    package: str
    version: str
    modules: list[ModuleVerdict] = field(default_factory=list)

    @property
    def functions(self) -> list[Found]:
        """The Functions of the modules that imported cleanly, in module order."""
        return [f for m in self.modules if m.status == OK for f in m.functions]

    @property
    def failed(self) -> list[ModuleVerdict]:
        """The modules that did not import cleanly."""
        return [m for m in self.modules if m.status != OK]


def modules_of(package: str) -> list[str]:
    """Every module of ``package`` (a top-level name, or a dotted subpackage), read from its
    folders: nothing of it is imported (a ``__main__`` neither: importing it runs a command).
    Raise OpZooError for a name that is no installed package."""
    top, *rest = package.split(".")
    spec = importlib.util.find_spec(top) if top.isidentifier() else None
    if spec is None:
        raise OpZooError(f"no installed package named {package!r}")
    folders = list(spec.submodule_search_locations or [])
    for part in rest:  # down the folders, as an import would go, without importing
        entry = {m.name: m.ispkg for m in pkgutil.iter_modules(folders)}.get(part)
        if entry is None:
            raise OpZooError(f"no installed package named {package!r}")
        if not entry:
            return [package]
        folders = [os.path.join(f, part) for f in folders if os.path.isdir(os.path.join(f, part))]
    names = [package]
    for module in pkgutil.iter_modules(folders, package + "."):
        if module.name.endswith(".__main__"):
            continue
        names += modules_of(module.name) if module.ispkg else [module.name]
    return names


def discover(package: str, timeout: float | None = None) -> Discovery:
    """Import every module of ``package`` in forked children (``timeout`` seconds each; None: the
    guard's, ``OPZOO_IMPORT_TIMEOUT``) and return what each gave."""
    names = modules_of(package)
    limit = Guard.from_env().timeout if timeout is None else timeout
    found = Discovery(package, _version(package))
    while len(found.modules) < len(names):
        found.modules += _child(names, len(found.modules), limit)
    return found


def _version(package: str) -> str:
    from importlib import metadata

    top = package.split(".")[0]
    with contextlib.suppress(Exception):
        for dist in metadata.packages_distributions().get(top, []):
            return metadata.version(dist)
    return ""


# -- the child -------------------------------------------------------------------------------------


def _child(names: list[str], start: int, limit: float) -> list[ModuleVerdict]:
    """Import ``names[start:]`` in one forked child; the verdicts it gave, and the one for the module
    it hung or ended on (the caller forks the next child after it)."""
    return forked(
        lambda write, parent: _import_all(names, start, write, parent),
        lambda pid, read: _follow(pid, read, names, start, limit),
    )


def forked(child: Callable[[int, int], object], follow: Callable[[int, int], T]) -> T:
    """``follow(pid, read)`` of a forked child, in a process group of its own, that runs
    ``child(write, parent)`` and never returns; its whole group killed and reaped afterwards,
    whatever ``follow`` did (whatever the child started goes with it)."""
    read, write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        child(write, parent)
        os._exit(1)  # not reached: the child ends itself
    os.close(write)
    with contextlib.suppress(OSError):
        os.setpgid(pid, pid)
    try:
        return follow(pid, read)
    finally:
        os.close(read)
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)


def _follow(pid: int, read: int, names: list[str], start: int, limit: float) -> list[ModuleVerdict]:
    """Read the child's lines: a module whose line does not come within ``limit`` seconds of its
    start hung; one under way when the child exited ended it."""
    got: list[ModuleVerdict] = []
    current: int | None = None
    buffer = b""
    ready = False  # torch loads before the first module: not the package's time
    exited = os.pidfd_open(pid)
    try:
        while True:
            wait = None if not ready else limit
            readable = select.select([read, exited], [], [], wait)[0]
            if not readable:
                os.killpg(pid, signal.SIGKILL)
                return [*got, ModuleVerdict(names[current or start], HUNG, _hung(limit))]
            chunk = os.read(read, 1 << 16) if read in readable else b""
            if chunk:
                *lines, buffer = (buffer + chunk).split(b"\n")
                for line in lines:
                    message = json.loads(line)
                    ready = True
                    current = message["start"] if "start" in message else None
                    if "start" not in message:
                        got.append(_verdict_of(message))
                continue
            # the pipe's end, or the child exited (a process it started may hold the pipe open)
            status = os.waitpid(pid, 0)[1]
            if current is None and start + len(got) >= len(names):
                return got
            at = names[current if current is not None else start + len(got)]
            return [*got, ModuleVerdict(at, ENDED, _ended(status))]
    finally:
        os.close(exited)


def _hung(limit: float) -> str:
    return f"importing it did not finish within {limit:g} s (OPZOO_IMPORT_TIMEOUT)"


def _ended(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"importing it killed the process with {signal.Signals(os.WTERMSIG(status)).name}"
    return f"importing it ended the process with exit status {os.WEXITSTATUS(status)} (os._exit? a crash?)"


def _verdict_of(message: dict[str, Any]) -> ModuleVerdict:
    functions = tuple(Found(**f) for f in message.get("functions", ()))
    return ModuleVerdict(message["module"], message["status"], message.get("why", ""), functions)


def _import_all(names: list[str], start: int, write: int, parent: int) -> None:
    try:
        from opzoo.core._probe import _quiet

        os.setpgid(0, 0)
        _quiet(parent)
        import torch  # noqa: F401  (not the package's time: the limit starts at the first module)

        for i in range(start, len(names)):
            _send(write, {"start": i})
            _send(write, _import_one(names[i]))
    finally:
        os._exit(0)


def _send(fd: int, message: dict[str, Any]) -> None:
    data = (json.dumps(message) + "\n").encode()
    while data:
        data = data[os.write(fd, data) :]


def _import_one(name: str) -> dict[str, Any]:
    """One module imported, watched as the guard watches a plugin's import."""
    import importlib

    from opzoo.core._torch_state import TorchState, changed_reason
    from opzoo.exceptions import one_line

    before = TorchState.now()
    try:
        module = importlib.import_module(name)
    except BaseException as exc:  # SystemExit, KeyboardInterrupt raised at import: its failure too
        return {"module": name, "status": FAILED, "why": one_line(exc, with_type=True)}
    finally:
        changes = before.changes()
        if changes:
            before.restore()
    if changes:
        return {"module": name, "status": CHANGED, "why": changed_reason(changes, undone=True)}
    return {"module": name, "status": OK, "functions": functions_in(module)}


def functions_in(module: Any) -> list[dict[str, str]]:
    """The Function subclasses ``module`` defines (not those it imports), those nested in its
    classes' bodies too (``pkg.mod:Neuron.ATan``: an import path reaches them), as :class:`Found`'s
    fields."""
    import inspect

    import torch

    found = []
    for obj in _classes_in(module):
        if not issubclass(obj, torch.autograd.Function) or obj.forward is torch.autograd.Function.forward:
            continue
        try:
            forward = str(inspect.signature(obj.forward))
        except (TypeError, ValueError):
            forward = "(?)"
        path = f"{module.__name__}:{obj.__qualname__}"
        found.append({"path": path, "form": form_of(obj), "forward": forward})
    return found


def _classes_in(module: Any) -> list[type]:
    """The classes ``module`` defines, at its top level and in class bodies, by their qualified name."""
    found: list[type] = []
    pending = [(module, "")]
    while pending:
        owner, prefix = pending.pop(0)
        for name, obj in list(vars(owner).items()):
            if isinstance(obj, staticmethod):  # `@staticmethod class ATan(Function)`, as snntorch has it
                obj = obj.__func__
            mine = isinstance(obj, type) and obj.__module__ == module.__name__
            if mine and obj.__qualname__ == prefix + name:
                found.append(obj)
                pending.append((obj, obj.__qualname__ + "."))
    return found


def form_of(cls: type) -> str:
    """How ``cls`` defines forward: ``classmethod``, ``classic`` (ctx first) or ``setup_context``."""
    import inspect

    import torch

    if isinstance(inspect.getattr_static(cls, "forward"), classmethod):
        return "classmethod"
    return "classic" if cls.setup_context is torch.autograd.Function.setup_context else "setup_context"  # type: ignore[attr-defined]
