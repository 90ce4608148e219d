"""A plugin's first import, tried in a forked child with a time limit: what it would do to opzoo.

The child loads torch and all of opzoo first (not the plugin's time), takes snapshots of torch's
global state and of opzoo's own code, imports the plugin (and calls its hook), and reports what
changed and which files the import loaded. opzoo.core._guard decides and caches by that report.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

from opzoo.core._own_state import OwnState, own_reason
from opzoo.core._torch_state import TorchState, changed_reason


def probe(ref: str, timeout: float, call: str | None = None) -> str | None:
    """Import ``ref`` (``module:attr`` or a module) in a forked child, and call its ``call``
    function if it has one (a hook plugin's ``opzoo_ops``); return why it must not be imported
    here, or None. An import that merely raises is None: importing it here raises the same, and
    is recorded as usual."""
    return trial(ref, timeout, call)[0]


def trial(ref: str, timeout: float, call: str | None = None) -> tuple[str | None, list[Stat]]:
    """:func:`probe`'s verdict, and the files the import loaded (each a :data:`Stat`; none when the
    child did not report)."""
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
        return (
            f"importing it did not finish within {timeout:g} s (tried in a child process): not imported",
            [],
        )
    if not data:
        if os.WIFSIGNALED(status):
            how = f"killed the process with {signal.Signals(os.WTERMSIG(status)).name}"
        else:
            how = f"ended the process with exit status {os.WEXITSTATUS(status)}"
        return f"importing it {how} (tried in a child process: os._exit? a crash?): not imported", []
    report = json.loads(data)
    if report["own"]:
        return own_reason(report["own"]), report["loaded"]
    return (changed_reason(report["changes"]) if report["changes"] else None), report["loaded"]


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
        before, own, modules = TorchState.now(), OwnState.now(), set(sys.modules)
        with contextlib.suppress(BaseException):
            target = import_path(ref)
            hook = getattr(target, call, None) if call else None
            if callable(hook):
                hook()
        loaded = _loaded_files([m for name, m in list(sys.modules.items()) if name not in modules])
        report = {"changes": before.changes(), "own": own.changes(), "loaded": loaded}
        os.write(write, json.dumps(report).encode())
    finally:
        os._exit(0)


#: A file as last seen: [path, size, mtime_ns, inode].
Stat = list


def stat_of(path: str) -> Stat | None:
    """``path``'s size, time and inode (None: it cannot be read)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [path, st.st_size, st.st_mtime_ns, st.st_ino]


def _loaded_files(modules: list[Any]) -> list[Stat]:
    """The files of ``modules`` (newly imported), but torch's own: its version is in the key."""
    torch_folder = os.path.dirname(sys.modules["torch"].__file__ or "") + os.sep
    files = {getattr(m, "__file__", None) for m in modules}
    found = [
        stat_of(f) for f in sorted(f for f in files if isinstance(f, str) and not f.startswith(torch_folder))
    ]
    return [s for s in found if s is not None]


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
