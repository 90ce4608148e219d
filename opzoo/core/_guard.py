"""Importing third-party plugins without trusting them: what an import may not do to opzoo.

A plugin's module is arbitrary code, run at import. Three things it must not do to the process that
imports it, and how each is kept out:

- **End it** (``os._exit(0)``, a crash) or **never return**: its first import is tried in a forked
  child process, with a time limit (:func:`probe`); one that ends the child or runs out of time is
  recorded as broken, with its reason, and never imported here.
- **Change torch's global state** (grad mode, default dtype, a patched ``torch.relu`` or
  ``torch.Tensor.__mul__``) **or opzoo's own code** (``opzoo.testing.properties._resolve``, an entry
  of ``PROPERTIES``), either of which would change every other op's verdicts: the child, with all of
  opzoo loaded first, compares both before and after, and so does this process around every plugin
  import it makes (:meth:`Guard.watching`); a change is undone, named, and the plugin is not loaded.

A change to the process itself (the working directory, a signal's disposition) alters no verdict:
it is undone and noted (:attr:`Guard.notes`), and the plugin stays loaded.

The child's verdict is cached (:class:`Verdicts`) under a fingerprint of what was imported (the
entry, its distribution's files, python, torch and opzoo), so a plugin is tried in a child once
per install, and the usual start-up pays only a few ``stat`` calls. opzoo's own ops are not probed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import select
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from opzoo import _files
from opzoo._records import Source, canonical_dist
from opzoo.core._own_state import OwnState, own_reason
from opzoo.core._torch_state import TorchState, changed_reason
from opzoo.exceptions import OpZooError

#: Seconds a plugin's first import may take in the child (OPZOO_IMPORT_TIMEOUT overrides).
IMPORT_TIMEOUT = 60.0
ENV_TIMEOUT = "OPZOO_IMPORT_TIMEOUT"
#: Where verdicts are kept: $OPZOO_CACHE_DIR, else $XDG_CACHE_HOME/opzoo, else ~/.cache/opzoo.
ENV_CACHE = "OPZOO_CACHE_DIR"
CACHE_FILE = "plugin-imports.json"
#: Bumped when what a verdict means changes: older verdicts are then tried again.
_CACHE_FORMAT = 1
_CACHE_ENTRIES = 500


class Refused(OpZooError):
    """A plugin that opzoo does not import: its import ended or hung the process that tried it, or
    changed torch's global state."""


# -- the first import, in a child ------------------------------------------------------------------


def probe(ref: str, timeout: float, call: str | None = None) -> str | None:
    """Import ``ref`` (``module:attr`` or a module) in a forked child, and call its ``call``
    function if it has one (a hook plugin's ``opzoo_ops``); return why it must not be imported
    here, or None. An import that merely raises is None: importing it here raises the same, and
    is recorded as usual."""
    read, write = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the child: never returns
        _child(ref, call, read, write, parent)
    os.close(write)
    try:
        data, status = _collect(pid, read, timeout)
    finally:
        os.close(read)
    if status is None:
        return f"importing it did not finish within {timeout:g} s (tried in a child process): not imported"
    if not data:
        if os.WIFSIGNALED(status):
            how = f"killed the process with {signal.Signals(os.WTERMSIG(status)).name}"
        else:
            how = f"ended the process with exit status {os.WEXITSTATUS(status)}"
        return f"importing it {how} (tried in a child process: os._exit? a crash?): not imported"
    report = json.loads(data)
    if report["own"]:
        return own_reason(report["own"])
    return changed_reason(report["changes"]) if report["changes"] else None


def _child(ref: str, call: str | None, read: int, write: int, parent: int) -> None:
    try:
        os.close(read)
        from opzoo._lifetime import die_with_parent

        die_with_parent(parent)
        for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
            signal.signal(s, signal.SIG_DFL)
        # A plugin that prints at import prints once, in the process that keeps it.
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(null, fd)
        sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115
        import torch  # noqa: F401  (not the plugin's time: the limit starts once it is loaded)

        from opzoo.core._spec import import_path

        load_all_of_opzoo()  # so that a patch of a module the parent has not loaded is seen
        os.write(write, _READY)
        before, own = TorchState.now(), OwnState.now()
        with contextlib.suppress(BaseException):
            target = import_path(ref)
            hook = getattr(target, call, None) if call else None
            if callable(hook):
                hook()
        os.write(write, json.dumps({"changes": before.changes(), "own": own.changes()}).encode())
    finally:
        os._exit(0)


def load_all_of_opzoo() -> None:
    """Import every module of the opzoo package (half a second once torch is loaded), so that a
    snapshot of opzoo's own code covers all of it."""
    import importlib
    import pkgutil

    package = str(Path(__file__).resolve().parent.parent)  # opzoo/, this module's package's parent
    for module in pkgutil.walk_packages([package], "opzoo.", onerror=lambda name: None):
        if module.name != "opzoo.__main__":  # runs the command line when imported
            with contextlib.suppress(Exception):
                importlib.import_module(module.name)


_READY = b"R"


def _collect(pid: int, read: int, timeout: float) -> tuple[bytes, int | None]:
    """Read the child's report until it closes the pipe; its wait status, or None if it ran past
    ``timeout`` (then it is killed)."""
    data, deadline = b"", None
    try:
        while True:
            if deadline is None:  # until the child has loaded torch, which is not the plugin's time
                if not select.select([read], [], [], None)[0]:
                    continue
                first = os.read(read, 1)
                if first != _READY:
                    break  # the child ended before it was ready
                deadline = time.monotonic() + timeout
                continue
            left = deadline - time.monotonic()
            if left <= 0:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return data, None
            ready, _, _ = select.select([read], [], [], left)
            if ready:
                chunk = os.read(read, 1 << 16)
                if not chunk:
                    break
                data += chunk
    except BaseException:  # Ctrl-C while waiting: the child goes too
        with contextlib.suppress(ProcessLookupError, ChildProcessError):
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        raise
    return data, os.waitpid(pid, 0)[1]


# -- the verdicts, cached --------------------------------------------------------------------------


def cache_path() -> Path:
    """The file that keeps the child's verdicts."""
    base = os.environ.get(ENV_CACHE)
    if base:
        return Path(base) / CACHE_FILE
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(xdg) / "opzoo" / CACHE_FILE


class Verdicts:
    """The child's verdicts by fingerprint, read once, written back (whole, atomically) on change.
    A cache that cannot be read or written is no cache: every first import is tried again."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._known: dict[str, Any] | None = None

    def get(self, key: str) -> tuple[bool, str | None]:
        known = self._load()
        return (key in known, known.get(key))

    def put(self, key: str, verdict: str | None) -> None:
        known = self._load()
        known[key] = verdict
        while len(known) > _CACHE_ENTRIES:  # oldest first: dicts keep insertion order
            del known[next(iter(known))]
        text = json.dumps({"format": _CACHE_FORMAT, "verdicts": known}, indent=0).encode()
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if _files.kind(self.path) is None:
                _files.replace(self.path, text)

    def _load(self) -> dict[str, Any]:
        if self._known is None:
            self._known = {}
            with contextlib.suppress(OSError, ValueError, AttributeError, TypeError):
                if _files.kind(self.path) is None:
                    data = json.loads(self.path.read_text())
                    if data.get("format") == _CACHE_FORMAT and isinstance(data.get("verdicts"), dict):
                        self._known = {
                            k: v for k, v in data["verdicts"].items() if v is None or isinstance(v, str)
                        }
        return self._known


# -- the guard -------------------------------------------------------------------------------------


@dataclass
class Guard:
    """What a registry's loader asks before and around importing a third-party plugin.

    ``probe``: try each first import in a child (Linux, installed entry points); off for registries
    built from made-up entry points in tests. ``timeout``: seconds for that import.
    """

    probe: bool = True
    timeout: float = IMPORT_TIMEOUT
    verdicts: Verdicts | None = None
    #: One line per plugin import that changed the process (undone), for the command to print.
    notes: list[str] = field(default_factory=list)
    _fingerprints: dict[str, str] = field(default_factory=dict)

    @classmethod
    def from_env(cls, probe: bool = True) -> Guard:
        timeout = IMPORT_TIMEOUT
        with contextlib.suppress(ValueError):
            timeout = float(os.environ.get(ENV_TIMEOUT, IMPORT_TIMEOUT))
        if not (0 < timeout < float("inf")):
            timeout = IMPORT_TIMEOUT
        can = probe and sys.platform.startswith("linux") and hasattr(os, "fork")
        return cls(probe=can, timeout=timeout, verdicts=Verdicts(cache_path()))

    @staticmethod
    def applies(source: Source) -> bool:
        """Whether ``source`` is a third party's (opzoo's own ops are the core: not guarded)."""
        return not (source.dist and canonical_dist(source.dist) == "opzoo")

    def refusal(self, ref: str, source: Source, call: str | None = None) -> str | None:
        """Why ``ref`` must not be imported here (its child's verdict, cached), or None."""
        if not (self.probe and self.applies(source) and source.dist):
            return None
        key = self._key(ref, source, call)
        if self.verdicts is not None:
            known, verdict = self.verdicts.get(key)
            if known:
                return verdict
        verdict = probe(ref, self.timeout, call)
        if self.verdicts is not None:
            self.verdicts.put(key, verdict)
        return verdict

    @contextlib.contextmanager
    def watching(self, source: Source) -> Iterator[None]:
        """Around an import of ``source``'s code here: a change to opzoo's own code (its loaded
        modules) or to torch's global state (once torch is loaded: the child's probe covers a plugin
        that loads torch itself) is undone and raised as :class:`Refused`; a change to the working
        directory or a signal's disposition is undone and noted."""
        if not self.applies(source):
            yield
            return
        own = OwnState.now()
        torch_state = TorchState.now() if "torch" in sys.modules else None
        try:
            yield
        finally:
            process, changes = own.process_changes(), own.changes()
            torch_changes = torch_state.changes() if torch_state is not None else []
            own.restore()
            if torch_state is not None and torch_changes:
                torch_state.restore()
            if process:
                self.notes.append(f"importing {source} ({source.entry_point}) {', '.join(process)} (undone)")
            if changes:
                raise Refused(own_reason(changes, undone=True))
            if torch_changes:
                raise Refused(changed_reason(torch_changes, undone=True))

    def _key(self, ref: str, source: Source, call: str | None) -> str:
        from importlib import metadata

        from opzoo._version import __version__

        dist = source.dist or ""
        if dist not in self._fingerprints:
            self._fingerprints[dist] = _dist_fingerprint(dist)
        parts = [_CACHE_FORMAT, ref, call, dist, source.version, self._fingerprints[dist]]
        if (
            "torch" not in self._fingerprints
        ):  # its version from metadata: `list --format names` loads no torch
            try:
                self._fingerprints["torch"] = metadata.version("torch")
            except metadata.PackageNotFoundError:
                self._fingerprints["torch"] = ""
        parts += [sys.version, self._fingerprints["torch"], __version__, self.timeout]
        return hashlib.sha256(json.dumps(parts, default=str).encode()).hexdigest()


def _dist_fingerprint(name: str) -> str:
    """Sizes and times of a distribution's installed files (and, for an editable install, of the
    Python files in its source folder): a changed plugin is tried again."""
    from importlib import metadata

    h = hashlib.sha256()
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return ""
    paths = [Path(str(dist.locate_file(f))) for f in (dist.files or [])]
    paths += _editable_sources(dist)
    for path in sorted(set(paths)):
        with contextlib.suppress(OSError):
            st = path.stat()
            h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _editable_sources(dist: Any, most: int = 2000) -> list[Path]:
    """The .py files of an editable install's source folder (its RECORD lists only a .pth)."""
    with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
        info = json.loads(dist.read_text("direct_url.json") or "{}")
        if info.get("dir_info", {}).get("editable") and info.get("url", "").startswith("file://"):
            from urllib.parse import unquote, urlparse

            root = Path(unquote(urlparse(info["url"]).path))
            found: list[Path] = []
            for folder, dirs, files in os.walk(root):
                dirs[:] = [d for d in dirs if not d.startswith(".") and d not in _SKIP_DIRS]
                found += [Path(folder) / f for f in files if f.endswith(".py")]
                if len(found) > most:
                    break
            return found
    return []


_SKIP_DIRS = {"build", "dist", "node_modules", "__pycache__", "venv", ".venv", "site-packages"}


def guarded_call(guard: Guard | None, source: Source, function: Callable[[], Any]) -> Any:
    """Call plugin code ``function`` (a hook) watched by ``guard``, if any."""
    if guard is None:
        return function()
    with guard.watching(source):
        return function()
