"""A plugin's first import, tried in a forked child with a time limit: what it would do to opzoo.

Three processes: opzoo's, which asks, and loads torch and all of opzoo once before it forks (so that
neither is the plugin's time, nor loaded again per plugin); a supervisor (opzoo's own code only),
which forks the importer and waits for the importer's exit,
never for a pipe's end (a plugin that forks a daemon at import would hold a pipe open); and the
importer, which takes snapshots of torch's global state and of opzoo's own code, imports the
plugin (and calls its hook), and writes what changed and which files the import loaded. The
supervisor is a subreaper in a process group of its own: before it exits it ends every process
the import left behind, however it was detached. opzoo.core._guard decides and caches by the report.
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

from opzoo._lifetime import become_subreaper, end_descendants, one_thread
from opzoo.core._own_state import OwnState, own_reason
from opzoo.core._torch_state import TorchState, changed_reason

#: Seconds the supervisor may take past the import's limit (ending what the import left behind).
GRACE = 30.0
_READY = b"R"


def probe(ref: str, timeout: float, call: str | None = None) -> str | None:
    """Import ``ref`` (``module:attr`` or a module) in a forked child, and call its ``call``
    function if it has one (a hook plugin's ``opzoo_ops``); return why it must not be imported
    here, or None. An import that merely raises is None: importing it here raises the same, and
    is recorded as usual."""
    return trial(ref, timeout, call)[0]


def trial(ref: str, timeout: float, call: str | None = None) -> tuple[str | None, list[Stat]]:
    """:func:`probe`'s verdict, and the files the import loaded (each a :data:`Stat`; none when the
    importer did not report)."""
    _load_before_forking()
    report = _scratch()
    ready, ready_w = os.pipe()
    parent = os.getpid()
    pid = os.fork()
    if pid == 0:  # the supervisor: never returns
        _supervise(ref, call, timeout, (ready, ready_w, report), parent)
    os.close(ready_w)
    with contextlib.suppress(OSError):  # the supervisor does the same: whichever comes first
        os.setpgid(pid, pid)
    try:
        _await(pid, ready, timeout + GRACE)
        os.lseek(report, 0, os.SEEK_SET)
        data = _read_all(report)
    finally:
        os.close(ready)
        os.close(report)
    return _verdict(data, timeout)


def _load_before_forking() -> None:
    """Load torch and all of opzoo here, in opzoo's own process (their code, no plugin's), before a
    probe's fork: the supervisor inherits them rather than loading them again for each plugin (2 s
    a plugin here; a first ``opzoo list`` with two plugins to try: 5.8 s, then 3.9)."""
    import torch  # noqa: F401

    load_all_of_opzoo()


def _verdict(data: bytes, timeout: float) -> tuple[str | None, list[Stat]]:
    try:
        result = json.loads(data)
        status, report = result["status"], json.loads(result["report"] or "null")
    except (ValueError, KeyError, TypeError):  # the supervisor was ended before it reported
        return "importing it ended the process that tried it (tried in a child process): not imported", []
    if status is None:
        return (
            f"importing it did not finish within {timeout:g} s (tried in a child process): not imported",
            [],
        )
    if report is None:
        if os.WIFSIGNALED(status):
            how = f"killed the process with {signal.Signals(os.WTERMSIG(status)).name}"
        else:
            how = f"ended the process with exit status {os.WEXITSTATUS(status)}"
        return f"importing it {how} (tried in a child process: os._exit? a crash?): not imported", []
    if report["own"]:
        return own_reason(report["own"]), report["loaded"]
    return (changed_reason(report["changes"]) if report["changes"] else None), report["loaded"]


def _await(pid: int, ready: int, limit: float) -> None:
    """Wait for the supervisor: no limit until it has loaded torch and opzoo, then ``limit``
    seconds, past which its whole group is killed; reap it."""
    try:
        if os.read(ready, 1) == _READY and not _ends_within(pid, limit):
            os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except BaseException:  # Ctrl-C while waiting: the probe's processes go too
        with contextlib.suppress(OSError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)
        raise


def _supervise(ref: str, call: str | None, timeout: float, fds: tuple[int, int, int], parent: int) -> None:
    ready, ready_w, report = fds
    try:
        os.close(ready)
        os.setpgid(0, 0)
        become_subreaper()
        _quiet(parent)
        import torch  # noqa: F401  (not the plugin's time: the limit starts once it is loaded)

        load_all_of_opzoo()  # so that a patch of a module the parent has not loaded is seen
        out = _scratch()
        os.write(ready_w, _READY)
        os.close(ready_w)  # only this process held it: nothing the import starts can keep it open
        importer = os.fork()
        if importer == 0:
            _import(ref, call, out, os.getppid())
        status = os.waitpid(importer, 0)[1] if _ends_within(importer, timeout) else None
        if status is None:
            os.kill(importer, signal.SIGKILL)
            os.waitpid(importer, 0)
        end_descendants()
        os.lseek(out, 0, os.SEEK_SET)
        result = {"status": status, "report": _read_all(out).decode(errors="replace")}
        os.write(report, json.dumps(result).encode())
    finally:
        os._exit(0)


def _import(ref: str, call: str | None, out: int, parent: int) -> None:
    try:
        from opzoo._lifetime import die_with_parent
        from opzoo.core._spec import import_path

        die_with_parent(parent)
        before, own, modules = TorchState.now(), OwnState.now(), set(sys.modules)
        with contextlib.suppress(BaseException):
            target = import_path(ref)
            hook = getattr(target, call, None) if call else None
            if callable(hook):
                hook()
        loaded = _loaded_files([m for name, m in list(sys.modules.items()) if name not in modules])
        os.write(
            out, json.dumps({"changes": before.changes(), "own": own.changes(), "loaded": loaded}).encode()
        )
    finally:
        os._exit(0)


def _quiet(parent: int) -> None:
    """Die with opzoo's process; signals as a fresh process has them; torch (if loaded) at one thread
    (``one_thread``: OpenMP is not fork-safe); output to /dev/null (a plugin that prints at import
    prints once, in the process that keeps it)."""
    from opzoo._lifetime import die_with_parent

    die_with_parent(parent)
    one_thread()
    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_DFL)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    sys.stdout = sys.stderr = open(os.devnull, "w")  # noqa: SIM115


# -- processes -------------------------------------------------------------------------------------


def _ends_within(pid: int, seconds: float) -> bool:
    """Whether child ``pid`` ends within ``seconds`` (it is not reaped)."""
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):  # Linux < 5.3: ask now and then
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
            time.sleep(0.01)
        return False
    try:
        return bool(select.select([fd], [], [], seconds)[0])
    finally:
        os.close(fd)


def _scratch() -> int:
    """A file only descriptors reach (memory where memfd exists)."""
    if hasattr(os, "memfd_create"):
        return os.memfd_create("opzoo-probe")
    import tempfile

    return os.dup(tempfile.TemporaryFile().fileno())


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 1 << 16):
        chunks.append(chunk)
    return b"".join(chunks)


# -- what the import loaded ------------------------------------------------------------------------

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
