"""The worker processes that run checks side by side: forked from the parent, each sent one task
at a time and sending back its result; a worker that crashes is replaced, one deaf to its time
limit killed. What to run, and when to run it in the parent instead, is ``_parallel``'s.

A worker runs the tasks of one op only: when the next task it would take is another op's, it is
stopped and a fresh one forked in its place. The parent runs no op's code, so whatever an op's code
changes in its process (torch, opzoo's checks) reaches no other op's verdict. Workers prefer their
own op's tasks, and modules a first compile loads are loaded in the parent, so forks stay cheap.

Workers are forked, not spawned, so that they share the registry as it stands (ops registered at
run time, a private :class:`~opzoo.Registry`) and start in milliseconds rather than re-importing
torch. Each holds a copy of the run's :class:`~opzoo.testing.running._hooks.RunHooks`: the failures
of plugins' hooks it meets go back to the parent with its results.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import time
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence

from opzoo._lifetime import become_subreaper, die_with_parent, end_descendants, one_thread
from opzoo.core._spec import OpSpec
from opzoo.exceptions import one_line
from opzoo.testing.running._hooks import RunHooks
from opzoo.testing.running._result import HUNG, Result

#: Seconds past a check's own time limit before its worker is killed: the limit is raised inside the
#: worker first, and only a check stuck where no signal reaches (a C loop) lasts this long.
GRACE = 10.0

Task = tuple[int, str, str]  # (index of the spec, property, device)

__all__ = ["GRACE", "Pool", "Task"]


class _Schedule:
    """Which task a free worker takes next, and what a finished one tells: in order, but none of an
    op whose first check is still running, so that an op that hangs in every check costs one time
    limit, as serially; an op that hung has its other tasks "not run"."""

    def __init__(
        self,
        specs: Sequence[OpSpec],
        tasks: list[Task],
        done: dict[Task, Any],
        started: Callable[[OpSpec], None],
    ) -> None:
        self.specs, self.pending, self.done, self.started = specs, list(tasks), done, started
        self.hung: set[int] = set()  # ops with a check that timed out: their other checks are not run
        self.probing: set[int] = set()  # ops whose first check is running: their others wait for it
        self.probed: set[int] = set()

    def take(self, prefer: int | None = None) -> Task | None:
        """The next task to run, or None for now: the first of op ``prefer`` that may run (the op
        the asking worker serves: it needs no new worker), else the first that may."""
        chosen: int | None = None
        seen: set[int] = set()
        k = 0
        while k < len(self.pending):
            task = self.pending[k]
            i, prop, device = task
            if i in self.hung:
                del self.pending[k]
                self.done[task] = Result(self.specs[i].name, prop, device, "skip", HUNG)
                continue
            first = i not in seen
            seen.add(i)
            # An op's first check is its first in the order (the quick one); then any.
            if i not in self.probing and (i in self.probed or first):
                if i == prefer or prefer is None:
                    chosen = k
                    break
                chosen = k if chosen is None else chosen
            k += 1
        if chosen is None:
            return None
        task = self.pending.pop(chosen)
        if task[0] not in self.probed:
            self.probing.add(task[0])
            self.started(self.specs[task[0]])
        return task

    def finish(self, task: Task, result: Any) -> None:
        self.done[task] = result
        if result.timed_out:
            self.hung.add(task[0])
        if task[0] in self.probing:
            self.probing.discard(task[0])
            self.probed.add(task[0])


class Pool:
    """``jobs`` forked workers that run ``work(spec, what, device=..., **kw)`` for each task, an op's
    first task alone (:class:`_Schedule`), as :func:`~opzoo.testing.running._parallel.check_all`
    and ``run_pool`` ask."""

    def __init__(
        self,
        specs: Sequence[OpSpec],
        jobs: int,
        grace: float,
        kw: dict[str, Any],
        *,
        work: Callable[..., Any],
        hooks: RunHooks | None = None,
        limit: float | None = None,
    ) -> None:
        self.specs, self.jobs, self.grace, self.kw = specs, jobs, grace, kw
        self.hooks, self.work = hooks, work
        self.timeout: float | None = limit if limit is not None else kw.get("timeout")
        self.context = multiprocessing.get_context("fork")
        self.workers: list[tuple[Any, Connection]] = []
        self.busy: dict[Connection, tuple[Any, Task, float]] = {}
        self.serves: dict[Any, int] = {}  # worker -> the op whose tasks it runs
        self.retired: list[tuple[Any, Connection]] = []  # asked to stop, not yet joined

    def run(self, tasks: list[Task], done: dict[Task, Any], started: Callable[[OpSpec], None]) -> None:
        schedule = _Schedule(self.specs, tasks, done, started)
        # The workers share the parent's memory until they write to it, and a garbage collection
        # writes to every object it visits: frozen, the parent's objects are left out of the
        # workers' collections (and copies).
        gc.freeze()
        try:
            self.workers = [self._start() for _ in range(self.jobs)]
            while schedule.pending or self.busy:
                for w, (proc, conn) in enumerate(self.workers):
                    if conn not in self.busy and (task := schedule.take(self.serves.get(proc))) is not None:
                        proc, conn = self._serving(w, task[0])
                        conn.send(task)
                        self.busy[conn] = (proc, task, time.monotonic())
                if self.busy:
                    self._collect(schedule)
                    self._kill_deaf(schedule)
        finally:
            self._stop()
            gc.unfreeze()

    def _collect(self, schedule: _Schedule) -> None:
        """Take the results that are ready (a worker that died: its task failed, a new worker)."""
        for conn in wait(list(self.busy), timeout=0.5):
            proc, task, _ = self.busy.pop(conn)
            try:
                result, failures = conn.recv()
            except (EOFError, OSError):
                _kill(proc)  # ended (an os._exit?): what its op started, in its group, goes too
                proc.join(1.0)
                result, failures = self._crashed(task, proc.exitcode), []
                self._replace(proc)
            for failure in failures:  # a plugin's hook that failed in the worker: the run's
                if self.hooks is not None:
                    self.hooks.record(failure)
            schedule.finish(task, result)

    def _kill_deaf(self, schedule: _Schedule) -> None:
        """Kill each worker whose check ran ``grace`` seconds past its limit: deaf to it."""
        if self.timeout is None:
            return
        now = time.monotonic()
        for conn, (proc, task, began) in list(self.busy.items()):
            if now - began > self.timeout + self.grace:
                self.busy.pop(conn)
                _kill(proc)
                proc.join()
                schedule.finish(task, self._killed(task, now - began))
                self._replace(proc)

    def _serving(self, w: int, op: int) -> tuple[Any, Connection]:
        """Worker ``w``, to run a task of op ``op``: itself if it has run none or only that op's, else
        retired for a fresh one, forked from this process (which runs no op's code), so that nothing
        an op's code changes in its worker (torch, opzoo's checks) reaches another op's verdict."""
        proc, conn = self.workers[w]
        if self.serves.setdefault(proc, op) != op:
            self._ask_to_stop(proc, conn)
            self.retired.append(self.workers[w])
            proc, conn = self.workers[w] = self._start()
            self.serves[proc] = op
        return proc, conn

    def _ask_to_stop(self, proc: Any, conn: Connection) -> None:
        """A worker between tasks: asked to stop (it ends what its op started), killed if deaf."""
        try:
            conn.send(None)
        except OSError:
            _kill(proc)

    def _stop(self) -> None:
        """Stop every worker: those between tasks asked to, those in one (interrupted) killed."""
        for proc, conn in self.workers:
            if proc.is_alive():
                if conn in self.busy:
                    _kill(proc)  # interrupted: a check in progress is abandoned
                else:
                    self._ask_to_stop(proc, conn)
        for proc, conn in self.retired + self.workers:
            proc.join(5.0)
            if proc.is_alive():
                _kill(proc)
                proc.join()
            conn.close()

    def _start(self) -> tuple[Any, Connection]:
        ours, theirs = self.context.Pipe()
        proc = self.context.Process(
            target=_serve,
            args=(theirs, self.specs, self.kw, self.work, os.getpid(), self.hooks),
            name="opzoo-check",
            daemon=True,
        )
        proc.start()
        theirs.close()
        return proc, ours

    def _replace(self, dead: Any) -> None:
        kept = []
        for proc, conn in self.workers:
            if proc is dead:
                conn.close()
                kept.append(self._start())
            else:
                kept.append((proc, conn))
        self.workers = kept

    def _crashed(self, task: Task, exitcode: int | None) -> Result:
        i, prop, device = task
        if exitcode is not None and exitcode < 0:
            how = f"killed by {signal.Signals(-exitcode).name}"
            reason = f"the check crashed its worker process ({how}): the op crashed the interpreter?"
        else:
            reason = (
                f"the check ended its worker process (exit status {exitcode}): "
                "the op called os._exit, or crashed the interpreter?"
            )
        return Result(self.specs[i].name, prop, device, "fail", reason)

    def _killed(self, task: Task, took: float) -> Result:
        i, prop, device = task
        reason = (
            f"timed out after {self.timeout:g} s: the op hung where no signal reaches it (in C?); "
            f"its worker was killed after {took:.0f} s"
        )
        return Result(self.specs[i].name, prop, device, "fail", reason, seconds=took, timed_out=True)


def _kill(proc: Any) -> None:
    """SIGKILL a worker and its process group: what its op started goes with it (a worker killed
    before it made its group: itself alone)."""
    import contextlib

    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.kill()


def _serve(
    conn: Connection,
    specs: Sequence[OpSpec],
    kw: dict[str, Any],
    work: Callable[..., Any],
    parent: int,
    hooks: RunHooks | None,
) -> None:
    """A worker: run the tasks the parent sends, send back each result with the failures of
    plugins' hooks met since the last (``hooks``: this worker's copy of the run's), until the
    parent sends None."""
    # Ends with the parent, however the parent ends: a parent killed with SIGKILL (or whose SIGTERM
    # handler never ran) left its workers asleep on the output pipes for minutes.
    die_with_parent(parent)
    # What an op starts (a background process of its backward) is this worker's to end: in its
    # process group, which the parent kills with it, and adopted here if it outlives its parent.
    os.setpgid(0, 0)
    become_subreaper()
    try:
        _tasks(conn, specs, kw, work, hooks)
    finally:
        end_descendants()


def _tasks(
    conn: Connection,
    specs: Sequence[OpSpec],
    kw: dict[str, Any],
    work: Callable[..., Any],
    hooks: RunHooks | None,
) -> None:
    """Run the tasks the parent sends until it sends None or is gone (see :func:`_serve`)."""
    import torch  # noqa: F401  (loaded, so that one_thread sets its threads)

    # Ctrl-C is the parent's to handle: it stops the pool and reports what finished. SIGTERM and
    # SIGHUP (`timeout`, a closed terminal, which signal the whole group) end a worker at once,
    # quietly: the parent's handlers, inherited through fork, would raise in the check instead.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, signal.SIG_DFL)
    one_thread()  # GNU OpenMP is not fork-safe: a correct op "hung" at two threads
    _each_warning_once()
    if hooks is not None:
        hooks.news()  # the failures the parent already has
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if task is None:
            return
        i, prop, device = task
        try:
            result = work(specs[i], prop, device=device, **kw)
        except BaseException as exc:  # the op's own SystemExit, KeyboardInterrupt...: its failure
            result = Result(specs[i].name, prop, device, "fail", one_line(exc, with_type=True))
        failures = hooks.news() if hooks is not None else []
        try:
            conn.send((result, failures))
        except (OSError, EOFError):
            return
        except Exception as exc:  # a result that cannot be pickled (an op's odd exception text?)
            reason = f"{result.reason} (the full result could not be sent: {exc})"
            short = Result(result.op, prop, device, result.status, reason, seconds=result.seconds)
            conn.send((short, failures))


def _each_warning_once() -> None:
    """Show each warning this process meets once (by text, category and place), as Python's default
    shows a warning once per place: torch's and the checks' own ``catch_warnings`` blocks reset
    Python's record of what was shown, so an op that warns at every call printed its warning at
    every check (61 times for one op under the ci profile). Only what is shown changes: a warning
    made an error by a filter still raises, and one recorded by ``catch_warnings(record=True)`` is
    still recorded."""
    import warnings

    shown: set[tuple[str, type, str, int]] = set()
    show = warnings.showwarning

    def once(
        message: Any, category: type, filename: str, lineno: int, file: Any = None, line: Any = None
    ) -> None:
        key = (str(message), category, filename, lineno)
        if key not in shown:
            shown.add(key)
            show(message, category, filename, lineno, file, line)

    warnings.showwarning = once
