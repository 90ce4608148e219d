"""How opzoo's processes end: on a signal, cleanly and with one line; with their parent, always.

- :func:`deferred`: while ``opzoo train`` runs (one process), the first SIGINT, SIGTERM or SIGHUP
  asks the run to stop; the trainer sees it between two steps (:func:`requested`), so that its
  weights, optimizer and losses agree, writes its checkpoint and raises :class:`Stopped` with what it
  trained; the command line writes the metrics and plot and exits 128 + the signal's number. A
  second signal stops at once.
- :class:`Terminated`: SIGTERM or SIGHUP raised as an exception (a KeyboardInterrupt, so that what
  already stops on Ctrl-C stops on it too: ``opzoo check``'s workers, its report).
- :func:`die_with_parent`: a child process (a check worker, a plugin probe, a torchrun rank) that the
  kernel kills when its parent ends, however the parent ends (``kill -9`` included); :func:`one_thread`:
  a forked child's torch at one thread (GNU OpenMP is not fork-safe).
- :func:`become_subreaper` and :func:`end_descendants`: a process (a check worker) that adopts what
  its children leave behind and ends it all before it exits, so that nothing an op started (a
  background process of its backward) outlives the command.

Imports no torch.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
from typing import Any, Iterator

#: The signals that end a command cleanly (SIGHUP: the terminal went away).
STOPPING = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))

_requested: list[int] = []  # the signal that asked the run in deferred() to stop, if any


class Terminated(KeyboardInterrupt):
    """A stopping signal, raised: ``signum`` says which (exit status 128 + signum)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def signum_name(self) -> str:
        return signal.Signals(self.signum).name


class Stopped(BaseException):
    """A run stopped between two steps by a signal; ``results`` holds what was trained (the run in
    progress last, its losses up to the step it finished). A BaseException, so that no ``except
    Exception`` on the way (a callback's, a plugin's) takes it for an error and carries on."""

    def __init__(self, signum: int, results: list[Any] | None = None) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.results: list[Any] = list(results or [])

    @property
    def exit_code(self) -> int:
        return 128 + self.signum


def exit_status(exc: BaseException) -> int:
    """The exit status of a command that a signal ended: 128 + its number (130 for Ctrl-C)."""
    return 128 + getattr(exc, "signum", signal.SIGINT)


def requested() -> int | None:
    """The signal that asked the run to stop, or None (always None outside :func:`deferred`)."""
    return _requested[0] if _requested else None


def check(results: list[Any] | None = None) -> None:
    """Raise :class:`Stopped` (with ``results``) if a signal asked the run to stop."""
    if _requested:
        raise Stopped(_requested[0], results)


@contextlib.contextmanager
def deferred(signals: tuple[int, ...] = STOPPING) -> Iterator[None]:
    """Turn the first of ``signals`` into a request to stop (see :func:`requested`), the second into
    an exception at once (KeyboardInterrupt for SIGINT, else :class:`Terminated`). Main thread only;
    a signal the process ignores (a background job's SIGINT) stays ignored."""
    if sys.platform == "win32" or not _main_thread():
        yield
        return

    def handle(signum: int, frame: Any) -> None:
        if _requested:
            raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)
        _requested.append(signum)
        # os.write, not print: the handler may run while the main thread is inside a print.
        with contextlib.suppress(OSError):
            os.write(
                2,
                f"opzoo: {signal.Signals(signum).name}: stopping after this step (again: at once)\n".encode(),
            )

    previous = {s: signal.getsignal(s) for s in signals}
    for s, handler in previous.items():
        if handler is not signal.SIG_IGN:
            signal.signal(s, handle)
    try:
        yield
    finally:
        for s, handler in previous.items():
            if handler is not signal.SIG_IGN:
                signal.signal(s, handler)
        _requested.clear()


def die_with_parent(parent: int | None = None) -> None:
    """Have the kernel SIGKILL this process when its parent ends (Linux; elsewhere nothing).

    ``parent``: the pid the caller knows as its parent; if it has already ended (so that this process
    was handed to another), exit now. Called first thing in a forked child.
    """
    if not sys.platform.startswith("linux"):
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):  # no prctl: the parent's own clean-up is all there is
        return
    if parent is not None and os.getppid() != parent:
        os._exit(1)


def one_thread() -> None:
    """Have torch (if this process loaded it) run one thread: called in a forked child before it
    runs any torch code, as torch's DataLoader workers do. GNU OpenMP is not fork-safe: a child
    forked from a process that ever ran a parallel region waits forever at its own first one if it
    runs more than one thread (a report's plots drawn before its mutation's workers: every control
    "hung"; a plugin that sums a large tensor at import, probed after a user's training: "hung")."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Have the kernel hand this process its orphaned descendants rather than to init (Linux 3.4+),
    so that :func:`end_descendants` finds a grandchild whose parent has ended. Whether it did."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def end_descendants() -> None:
    """SIGKILL every child of this process and reap it, until none is left: with
    :func:`become_subreaper`, the grandchildren each killed child leaves come to this process and
    are ended in turn. Linux (``/proc/PID/task/TID/children``); elsewhere nothing."""
    while children := _children():
        for pid in children:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for pid in children:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)  # reaped: its orphans are this process's children now


def _children() -> list[int]:
    """The pids of this process's children (every thread's), from /proc; where the kernel has no
    ``/proc/PID/task/TID/children``, every process whose parent is this one."""
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return []
    found: list[int] = []
    try:
        for tid in tasks:
            with open(f"/proc/self/task/{tid}/children") as f:
                found += [int(pid) for pid in f.read().split()]
        return found
    except FileNotFoundError:  # no CONFIG_PROC_CHILDREN: read every process's parent
        return _children_by_parent(os.getpid())
    except OSError:  # a thread ended meanwhile: the next round looks again
        return found


def _children_by_parent(me: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            with open(f"/proc/{entry}/stat") as f:
                if entry.isdigit() and int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                    found.append(int(entry))
    return found


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()
