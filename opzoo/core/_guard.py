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

The child's verdict is cached (:class:`Verdicts`) under a fingerprint of where imports come from
(the entry, its distribution's files, the folders on ``sys.path``, python, torch and opzoo), with
the files the child's import loaded: a verdict holds while none of them changed (size, time, inode),
so a plugin is tried in a child once per install, and the usual start-up pays only ``stat`` calls.
opzoo's own ops are not probed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

from opzoo import _files
from opzoo._records import Source, canonical_dist
from opzoo.core._own_state import OwnState, own_reason
from opzoo.core._probe import Stat, stat_of, trial
from opzoo.core._torch_state import TorchState, changed_reason
from opzoo.exceptions import OpZooError

#: Seconds a plugin's first import may take in the child (OPZOO_IMPORT_TIMEOUT overrides).
IMPORT_TIMEOUT = 60.0
ENV_TIMEOUT = "OPZOO_IMPORT_TIMEOUT"
#: Where verdicts are kept: $OPZOO_CACHE_DIR, else $XDG_CACHE_HOME/opzoo, else ~/.cache/opzoo.
ENV_CACHE = "OPZOO_CACHE_DIR"
CACHE_FILE = "plugin-imports.json"
#: Bumped when what a verdict means changes: older verdicts are then tried again.
_CACHE_FORMAT = 2
_CACHE_ENTRIES = 500


class Refused(OpZooError):
    """A plugin that opzoo does not import: its import ended or hung the process that tried it, or
    changed torch's global state."""


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
    A cache that cannot be read or written is no cache: every first import is tried again; so is
    one that is not ours to trust (another user's link or file in a shared folder: ``_files.read_own``)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._known: dict[str, Any] | None = None

    def get(self, key: str) -> tuple[bool, str | None]:
        """Whether a verdict is known for ``key`` and every file its import loaded is unchanged;
        that verdict."""
        entry = self._load().get(key)
        if entry is None or any(stat_of(seen[0]) != seen for seen in entry["loaded"]):
            return (False, None)
        return (True, entry["verdict"])

    def put(self, key: str, verdict: str | None, loaded: Iterable[Stat] = ()) -> None:
        known = self._load()
        known[key] = {"verdict": verdict, "loaded": list(loaded)}
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
                # as it is written: no link another user planted, no file of theirs in a shared folder
                data = json.loads(_files.read_own(self.path))
                if data.get("format") == _CACHE_FORMAT and isinstance(data.get("verdicts"), dict):
                    self._known = {k: v for k, v in data["verdicts"].items() if _is_entry(v)}
        return self._known


def _is_entry(value: Any) -> bool:
    """A cached entry as :meth:`Verdicts.put` writes it (anything else is no entry)."""
    return (
        isinstance(value, dict)
        and (value.get("verdict") is None or isinstance(value.get("verdict"), str))
        and isinstance(value.get("loaded"), list)
        and all(
            isinstance(s, list)
            and len(s) == 4
            and isinstance(s[0], str)
            and all(type(n) is int for n in s[1:])
            for s in value["loaded"]
        )
    )


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
        verdict, loaded = trial(ref, self.timeout, call)
        if self.verdicts is not None:
            self.verdicts.put(key, verdict, loaded)
        return verdict

    @contextlib.contextmanager
    def watching(self, source: Source) -> Iterator[None]:
        """Around an import of ``source``'s code here: a change to opzoo's own code (its loaded
        modules, and those the import loads) or to torch's global state (once torch is loaded: the
        child's probe covers a plugin that loads torch itself) is undone and raised as
        :class:`Refused`; a change to the working directory or a signal's disposition is undone and
        noted."""
        if not self.applies(source):
            yield
            return
        own = OwnState.now()
        torch_state = TorchState.now() if "torch" in sys.modules else None
        try:
            with own.seeing_loads():  # a checker module the import loads, then patches, is seen too
                yield
        finally:
            process, changes = own.process_changes(), own.changes()
            torch_changes = torch_state.changes() if torch_state is not None else []
            if process or changes:
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
        if "path" not in self._fingerprints:
            self._fingerprints["path"] = _path_folders()
        parts = [
            _CACHE_FORMAT,
            ref,
            call,
            dist,
            source.version,
            self._fingerprints[dist],
            self._fingerprints["path"],
        ]
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
    """Sizes and times of a distribution's installed files: a changed plugin is tried again. (An
    editable install's source files are among the files its import loads, checked by Verdicts.)"""
    from importlib import metadata

    h = hashlib.sha256()
    try:
        dist = metadata.distribution(name)
    except metadata.PackageNotFoundError:
        return ""
    for path in sorted({Path(str(dist.locate_file(f))) for f in (dist.files or [])}):
        with contextlib.suppress(OSError):
            st = path.stat()
            h.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _path_folders() -> str:
    """The folders imports come from, with their times: an install, upgrade or removal renames or
    adds entries (a dist-info folder) in one, so every verdict is tried again once after it. The
    working directory is left out (commands write files there; what a plugin loaded from it is
    checked by Verdicts)."""
    h = hashlib.sha256()
    here = None
    with contextlib.suppress(OSError):  # a folder since removed
        here = os.getcwd()
    for folder in sys.path:
        with contextlib.suppress(OSError):
            full = os.path.abspath(folder or ".")
            if full != here and os.path.isdir(full):
                h.update(f"{full}\0{os.stat(full).st_mtime_ns}\n".encode())
    return h.hexdigest()


def guarded_call(guard: Guard | None, source: Source, function: Callable[[], Any]) -> Any:
    """Call plugin code ``function`` (a hook) watched by ``guard``, if any."""
    if guard is None:
        return function()
    with guard.watching(source):
        return function()
