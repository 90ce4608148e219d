"""opzoo's own code and the process it runs in, as a plugin's import may change them.

A hook plugin that assigns ``opzoo.testing.properties._resolve`` at import changes no torch state,
yet turns every failing check into a pass. :class:`OwnState` is to opzoo's modules what
``TorchState`` is to torch's: a snapshot that names what changed since and puts it back. It covers
every loaded ``opzoo`` module: its globals, the items of its tables (a dict, list, tuple or set
global, such as ``PROPERTIES``) and the attributes of the records in them, the attributes of the
classes it defines, and the code and defaults of its functions (through ``functools`` wrappers).
A module loaded after the snapshot is walked as soon as its own code has run
(:meth:`OwnState.seeing_loads`, an import hook while a plugin is imported), so that a plugin that
imports a checker module the command had not loaded, then patches it, is seen too. What it cannot
see: a module loaded after the watch (a patch made later, by a hook or an import hook the plugin
installs), and code that reaches further (ctypes, closure cells, the libraries opzoo uses).

The process part, the working directory and every signal's disposition, is reported apart: such a
change alters no verdict, so the plugin is named and the change undone, not refused.

Imports no torch.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import os
import signal
import sys
import threading
import types
from dataclasses import dataclass, field
from typing import Any, Iterator

#: Globals opzoo itself changes while it runs (a plugin's import may call opzoo): not a change.
RUNTIME = frozenset(
    {
        "opzoo._lifetime._requested",
        "opzoo.core._default._default",
        "opzoo.core._own_state._WALKED",
        "opzoo.library._BRIDGED",
        "opzoo.testing.running._cases._memo",
        "opzoo.testing.mutation._mutant_facts._FOUND",
    }
)
#: Names Python itself adds to a module's globals or a class (annotations are made on first use
#: from Python 3.14, as inspect or dataclasses read them).
_PYTHON_OWN = frozenset({"__builtins__", "__warningregistry__", "__annotations__", "__annotations_cache__"})
#: How deep a table is followed (PROFILES: a dict of tuples holding dicts).
_DEPTH = 3


def own_modules() -> dict[str, types.ModuleType]:
    """The loaded modules of the opzoo package, by name."""
    return {
        name: module
        for name, module in list(sys.modules.items())
        if (name == "opzoo" or name.startswith("opzoo.")) and isinstance(module, types.ModuleType)
    }


@dataclass
class OwnState:
    """A snapshot of opzoo's own code (``places``) and of the process (``cwd``, ``signals``)."""

    places: list[tuple[str, Any, Any]] = field(repr=False)  # (label, object, its contents then)
    cwd: str | None
    signals: dict[int, Any] = field(repr=False)
    #: The places of the modules loaded while :meth:`seeing_loads` was open, as their code left them.
    loaded: list[tuple[str, Any, Any]] = field(default_factory=list, repr=False)

    @classmethod
    def now(cls) -> OwnState:
        """Take a snapshot (a few milliseconds with all of opzoo loaded)."""
        modules = own_modules()
        walked = _WALKED.get(frozenset(modules))
        # Where every place still holds the very objects it held, a walk would find the same places
        # and copy the same contents: the last walk is the snapshot.
        if walked is None or not all(_same(obj, then) for _, obj, then in walked):
            walked, seen = [], set()
            for name, module in modules.items():
                _track(walked, seen, name, module, _DEPTH, module=name)
            _WALKED.clear()
            _WALKED[frozenset(modules)] = walked
        return cls(walked, _cwd(), _signals())

    @contextlib.contextmanager
    def seeing_loads(self) -> Iterator[None]:
        """While open, each opzoo module that finishes loading is added to the snapshot as its own
        code left it, before the code that imported it can change it."""
        witness = _Witness(self.loaded)
        sys.meta_path.insert(0, witness)
        try:
            yield
        finally:
            with contextlib.suppress(ValueError):
                sys.meta_path.remove(witness)

    def changes(self) -> list[str]:
        """What differs in opzoo's code now from this snapshot, in words (empty: nothing)."""
        found: list[str] = []
        for label, obj, then in [*self.places, *self.loaded]:
            if not _same(obj, then):
                found += _differences(label, obj, then)
        return found

    def process_changes(self) -> list[str]:
        """What differs in the process now: the working directory, signal dispositions, in words."""
        found = []
        cwd = _cwd()
        if cwd != self.cwd:
            found.append(f"changed the working directory to {cwd!r}")
        now = _signals()
        for signum, then in self.signals.items():
            if then is not None and now.get(signum) is not then:
                found.append(_disposition(now.get(signum), signal.Signals(signum).name))
        return found

    def restore(self) -> None:
        """Put back what :meth:`changes` and :meth:`process_changes` find."""
        for label, obj, then in [*self.places, *self.loaded]:
            if not _same(obj, then) and _differences(label, obj, then):  # by identity, no __eq__
                _put_back(label, obj, then)
        if self.cwd is not None and _cwd() != self.cwd:
            with contextlib.suppress(OSError):
                os.chdir(self.cwd)
        if _main_thread():
            for signum, then in self.signals.items():
                if then is not None and signal.getsignal(signum) is not then:
                    with contextlib.suppress(OSError, ValueError, TypeError):
                        signal.signal(signum, then)


class _Witness(importlib.abc.MetaPathFinder):
    """An import hook that finds nothing itself: it hands each opzoo module's loader to
    :class:`_Walking`, which walks the module the moment its own code has run."""

    def __init__(self, into: list) -> None:
        self.into, self.seen = into, set()

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if not (name == "opzoo" or name.startswith("opzoo.")):
            return None
        for finder in sys.meta_path:
            find = getattr(finder, "find_spec", None)
            spec = find(name, path, target) if finder is not self and find is not None else None
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _Walking(spec.loader, self)
                return spec
        return None


class _Walking(importlib.abc.Loader):
    def __init__(self, loader: Any, witness: _Witness) -> None:
        self.loader, self.witness = loader, witness

    def create_module(self, spec: Any) -> Any:
        return self.loader.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        module.__loader__ = module.__spec__.loader = self.loader  # its code sees its own loader
        self.loader.exec_module(module)
        _track(self.witness.into, self.witness.seen, module.__name__, module, _DEPTH, module=module.__name__)


# -- what is tracked -------------------------------------------------------------------------------


def _track(places: list, seen: set[int], label: str, obj: Any, depth: int, module: str | None = None) -> None:
    """Add ``obj`` and what it holds that is opzoo's (functions, classes, records, tables)."""
    if id(obj) in seen or depth < 0:
        return
    seen.add(id(obj))
    places.append((label, obj, _contents(obj)))
    if isinstance(obj, types.ModuleType):
        for name, value in list(vars(obj).items()):
            if f"{label}.{name}" not in RUNTIME and name not in _PYTHON_OWN:
                _track_member(places, seen, f"{label}.{name}", value, depth, module)
    elif isinstance(obj, type):
        for name, value in list(vars(obj).items()):
            if isinstance(value, (staticmethod, classmethod)):
                value = value.__func__
            if isinstance(value, types.FunctionType):
                _track(places, seen, f"{label}.{name}", value, depth - 1)
    elif isinstance(obj, dict):
        for key, value in list(obj.items()):
            _track_member(places, seen, f"{label}[{key!r}]", value, depth - 1, None)
    elif isinstance(obj, (list, tuple, set, frozenset)):
        for i, value in enumerate(list(obj)):
            _track_member(places, seen, f"{label}[{i}]", value, depth - 1, None)


def _track_member(
    places: list, seen: set[int], label: str, value: Any, depth: int, module: str | None
) -> None:
    if isinstance(value, (types.ModuleType, bool, int, float, str, bytes)) or value is None:
        return  # modules are tracked themselves; plain values are compared by the holder
    inner = _wrapped(value)
    while inner is not None:  # a functools.cache'd or wraps'd function: the code is the inner one's
        if isinstance(value, types.FunctionType):
            _track(places, seen, label, value, depth)
        value, inner = inner, _wrapped(inner)
    if isinstance(value, (types.FunctionType, type)):
        defined = getattr(value, "__module__", None) or ""
        if defined == module or (module is None and defined.split(".")[0] == "opzoo"):  # opzoo's
            _track(places, seen, label, value, depth)
    elif isinstance(value, (dict, list, tuple, set, frozenset)):
        _track(places, seen, label, value, depth)
    elif _is_record(value):
        _track(places, seen, label, value, depth)


def _wrapped(value: Any) -> types.FunctionType | None:
    try:
        inner = vars(value).get("__wrapped__") if hasattr(value, "__dict__") else None
    except TypeError:
        return None
    return inner if isinstance(inner, types.FunctionType) and not isinstance(value, type) else None


def _is_record(value: Any) -> bool:
    """An instance of one of opzoo's classes with attributes of its own (a Property, a Mutant)."""
    kind = type(value)
    return hasattr(value, "__dict__") and (kind.__module__ or "").split(".")[0] == "opzoo"


def _contents(obj: Any) -> Any:
    if isinstance(obj, types.FunctionType):
        return (obj.__code__, obj.__defaults__, obj.__kwdefaults__)
    if isinstance(obj, (types.ModuleType, type)) or _is_record(obj):
        return dict(vars(obj))
    if isinstance(obj, dict):
        return dict(obj)
    if isinstance(obj, (list, tuple)):
        return tuple(obj)
    return frozenset(obj)


#: The last walk over opzoo's modules, by the names of the modules it walked.
_WALKED: dict[frozenset[str], list[tuple[str, Any, Any]]] = {}


def _same(obj: Any, then: Any) -> bool:
    """Whether ``obj`` holds the very objects it held (``then``, its contents then), read in place:
    no copy, since nearly every place is unchanged."""
    if isinstance(obj, types.FunctionType):
        return obj.__code__ is then[0] and obj.__defaults__ is then[1] and obj.__kwdefaults__ is then[2]
    if isinstance(then, tuple):
        return len(obj) == len(then) and all(a is b for a, b in zip(obj, then))
    if isinstance(then, frozenset):
        return frozenset(obj) == then
    held = obj if isinstance(obj, dict) else vars(obj)
    return len(held) == len(then) and all(held.get(key, _MISSING) is old for key, old in then.items())


def _differences(label: str, obj: Any, then: Any) -> list[str]:
    now = _contents(obj)
    if isinstance(obj, types.FunctionType):
        return [f"{label}'s code replaced"] if any(a is not b for a, b in zip(now, then)) else []
    if isinstance(then, frozenset):
        return [f"{label} changed"] if now != then else []
    if isinstance(then, tuple):
        same = len(now) == len(then) and all(a is b for a, b in zip(now, then))
        return [] if same else [f"{label} changed"]
    keyed = isinstance(obj, dict)
    found = []
    for key, old in then.items():
        where = f"{label}[{key!r}]" if keyed else f"{label}.{key}"
        if key not in now:
            found.append(f"{where} deleted")
        elif now[key] is not old and where not in RUNTIME:
            found.append(f"{where} replaced")
    for key in now.keys() - then.keys():
        where = f"{label}[{key!r}]" if keyed else f"{label}.{key}"
        if not (key in _PYTHON_OWN or _submodule(obj, key, now[key])):
            found.append(f"{where} added")
    return found


def _submodule(obj: Any, key: Any, value: Any) -> bool:
    """A package's attribute that is its submodule, set by importing that submodule."""
    return (
        isinstance(obj, types.ModuleType)
        and isinstance(value, types.ModuleType)
        and value.__name__ == f"{obj.__name__}.{key}"
    )


def _put_back(label: str, obj: Any, then: Any) -> None:
    with contextlib.suppress(AttributeError, TypeError, ValueError):
        if isinstance(obj, types.FunctionType):
            obj.__code__, obj.__defaults__, obj.__kwdefaults__ = then
        elif isinstance(obj, types.ModuleType) or isinstance(obj, dict):
            held = vars(obj) if isinstance(obj, types.ModuleType) else obj
            for key in [k for k in held if k not in then and not _submodule(obj, k, held[k])]:
                del held[key]
            held.update({k: v for k, v in then.items() if f"{label}.{k}" not in RUNTIME})
        elif isinstance(obj, type) or _is_record(obj):
            setter = setattr if isinstance(obj, type) else object.__setattr__
            deleter = delattr if isinstance(obj, type) else object.__delattr__
            for key in vars(obj).keys() - then.keys():
                deleter(obj, key)
            for key, value in then.items():
                if vars(obj).get(key, _MISSING) is not value:
                    setter(obj, key, value)
        elif isinstance(obj, list):
            obj[:] = then
        elif isinstance(obj, set):
            obj.clear()
            obj.update(then)


_MISSING = object()


# -- the process -----------------------------------------------------------------------------------


def _cwd() -> str | None:
    try:
        return os.getcwd()
    except OSError:  # a folder since removed
        return None


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _signals() -> dict[int, Any]:
    """Each catchable signal's disposition (None: set outside Python, which cannot be put back)."""
    found = {}
    for signum in signal.valid_signals():
        if signum in (signal.SIGKILL, signal.SIGSTOP):
            continue
        with contextlib.suppress(ValueError, OSError):
            found[signum] = signal.getsignal(signum)
    return found


def _disposition(handler: Any, name: str) -> str:
    if handler is signal.SIG_IGN:
        return f"ignored {name}"
    if handler is signal.SIG_DFL:
        return f"reset {name} to its default action"
    return f"replaced {name}'s handler"


def own_reason(changes: list[str], *, undone: bool = False) -> str:
    """Why a plugin whose import made ``changes`` to opzoo's code is not loaded, in one line."""
    shown = ", ".join(changes[:3]) + (f" and {len(changes) - 3} more" if len(changes) > 3 else "")
    then = "undone, and not loaded" if undone else "not loaded"
    return f"importing it changes opzoo's own code ({shown}), which every op's verdict depends on: {then}"
