"""Checking many ops on several cores: each (op, property, device) check is a task, run by a pool
of worker processes forked from this one.

Workers are forked, not spawned, so that they share the registry as it stands (ops registered at
run time, a private :class:`~opzoo.Registry`) and start in milliseconds rather than re-importing
torch; the parent has run no torch computation when it forks. A check gives the same verdict in any
process and any order (see ``_repeatable``), so the results equal a serial run's; they are returned
in the serial order.

What a serial run cannot do and the pool does: a check that hangs in code no signal interrupts, or
that crashes its process (a segfault in an extension), is killed or reported, and the rest go on.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import sys
import time
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Sequence

from opzoo._lifetime import die_with_parent
from opzoo.core._registry import OpSpec
from opzoo.testing.properties import PROPERTIES
from opzoo.testing.running._runner import HUNG, Result, check, check_property

#: Seconds past a check's own time limit before its worker is killed: the limit is raised inside the
#: worker first, and only a check stuck where no signal reaches (a C loop) lasts this long.
GRACE = 10.0

Task = tuple[int, str, str]  # (index of the spec, property, device)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity, where the platform says)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def can_fork() -> bool:
    """Whether worker processes can be forked here: Linux only (fork is unsafe on macOS, absent on
    Windows)."""
    return sys.platform.startswith("linux") and "fork" in multiprocessing.get_all_start_methods()


def default_jobs() -> int:
    """Worker processes by default: one per usable CPU where workers can be forked, else none."""
    return usable_cpus() if can_fork() else 1


def check_all(
    specs: Sequence[OpSpec],
    props: Sequence[str],
    *,
    devices: Sequence[str],
    jobs: int = 1,
    into: list[Result] | None = None,
    started: Callable[[OpSpec], None] = lambda spec: None,
    grace: float = GRACE,
    **kw: Any,
) -> list[Result]:
    """Check ``props`` of every spec on each device, with ``jobs`` worker processes (1, or where
    workers cannot be forked: in this process). ``started(spec)`` is called as an op's first check
    begins. Results come in the serial order; each is also put in ``into`` — as it is known when
    serial, and all finished ones when the pool stops (an interrupt included), so that the caller
    keeps what finished. ``kw`` goes to
    :func:`~opzoo.testing.running._runner.check_property`; a worker whose check runs ``grace`` seconds past
    its ``timeout`` is killed.

    An op's first check runs alone; its others start once it is back. An op that hangs in every
    check thus costs one time limit, and its other checks are "not run: the op hung", as serially;
    meanwhile the other workers check other ops."""
    tasks = [(i, prop, device) for i in range(len(specs)) for prop in props for device in devices]
    jobs = min(jobs, len(tasks))
    if jobs <= 1 or not can_fork() or _cuda_initialized():
        results: list[Result] = []
        for spec in specs:
            started(spec)
            results += check(spec, props, devices=devices, into=into, **kw)
        return results
    if any(PROPERTIES[p].slow for p in props):
        # Imported once here rather than once in each worker (1-2 s each); torch.compile,
        # torch.func and opcheck all load them.
        import torch._dynamo  # noqa: F401
    done: dict[Task, Result] = {}
    try:
        # Run order: an op's first check (alone), then its slow ones, so that they do not end the
        # run on one worker while the other idles; the results keep the serial order.
        order = sorted(tasks, key=lambda t: (t[0], t[1] != props[0], not PROPERTIES[t[1]].slow))
        _Pool(specs, jobs, grace, kw, compiles=lambda prop: PROPERTIES[prop].compiles).run(
            order, done, started
        )
    finally:
        ordered = [done[t] for t in tasks if t in done]
        if into is not None:
            into.extend(ordered)
    return ordered


def run_pool(
    specs: Sequence[OpSpec],
    tasks: Sequence[Task],
    work: Callable[..., Any],
    *,
    jobs: int,
    limit: float | None,
    done: dict[Task, Any] | None = None,
    started: Callable[[OpSpec], None] = lambda spec: None,
    grace: float = GRACE,
    **kw: Any,
) -> dict[Task, Any]:
    """Run ``work(specs[i], what, device=device, **kw)`` for each task ``(i, what, device)``, in
    ``jobs`` forked workers as :func:`check_all` runs checks (in this process where it would: one
    job, no fork, CUDA initialised): an op's first task alone, its others once it is back; a task
    that crashes its worker, or runs ``grace`` seconds past ``limit``, becomes a failing
    :class:`~opzoo.testing.running._runner.Result`. ``work`` returns a picklable record with a ``timed_out``
    attribute (true: the op's other tasks are not run). The results by task, in ``done`` (if given)
    as they come, so that an interrupted caller keeps those finished."""
    done = {} if done is None else done
    jobs = min(jobs, len(tasks))
    if jobs <= 1 or not can_fork() or _cuda_initialized():
        seen: set[int] = set()
        for task in tasks:
            i, what, device = task
            if i not in seen:
                seen.add(i)
                started(specs[i])
            done[task] = work(specs[i], what, device=device, **kw)
        return done
    import torch._dynamo  # noqa: F401  (once here, not in every worker: see check_all)

    _Pool(specs, jobs, grace, kw, work=work, limit=limit).run(list(tasks), done, started)
    return done


class _Pool:
    def __init__(
        self,
        specs: Sequence[OpSpec],
        jobs: int,
        grace: float,
        kw: dict[str, Any],
        *,
        work: Callable[..., Any] = check_property,
        limit: float | None = None,
        compiles: Callable[[str], bool] = lambda what: False,
    ) -> None:
        self.specs, self.jobs, self.grace, self.kw = specs, jobs, grace, kw
        self.work, self.compiles = work, compiles
        self.timeout: float | None = limit if limit is not None else kw.get("timeout")
        self.threads = max(1, _torch_threads() // jobs)
        self.context = multiprocessing.get_context("fork")

    def run(self, tasks: list[Task], done: dict[Task, Result], started: Callable[[OpSpec], None]) -> None:
        pending = list(tasks)
        hung: set[int] = set()  # ops with a check that timed out: their other checks are not run
        probing: set[int] = set()  # ops whose first check is running: their others wait for it
        probed: set[int] = set()

        def take(compiler: bool) -> Task | None:
            """The next task to run: in order, but none of an op whose first check is still
            running, so that an op that hangs in every check costs one time limit, as serially.
            The first worker takes a compiling check first, the others only when nothing else is
            left for them: the 0.8 s of modules the first compile loads are then loaded once."""
            eligible: list[int] = []
            seen: set[int] = set()
            k = 0
            while k < len(pending):
                task = pending[k]
                i, prop, device = task
                if i in hung:
                    del pending[k]
                    done[task] = Result(self.specs[i].name, prop, device, "skip", HUNG)
                    continue
                first = i not in seen
                seen.add(i)
                # An op's first check is its first in the order (the quick one); then any.
                if i not in probing and (i in probed or first):
                    if compiler == self.compiles(prop):
                        eligible.insert(0, k)
                        break
                    if not eligible:
                        eligible.append(k)
                k += 1
            if not eligible:
                return None
            task = pending.pop(eligible[0])
            if task[0] not in probed:
                probing.add(task[0])
                started(self.specs[task[0]])
            return task

        def finish(task: Task, result: Result) -> None:
            done[task] = result
            if result.timed_out:
                hung.add(task[0])
            if task[0] in probing:
                probing.discard(task[0])
                probed.add(task[0])

        # The workers share the parent's memory until they write to it, and a garbage collection
        # writes to every object it visits: frozen, the parent's objects are left out of the
        # workers' collections (and copies).
        gc.freeze()
        workers: list[tuple[Any, Connection]] = []
        busy: dict[Connection, tuple[Any, Task, float]] = {}
        try:
            for _ in range(self.jobs):
                workers.append(self._start())
            while pending or busy:
                for w, (proc, conn) in enumerate(workers):
                    if conn not in busy and (task := take(compiler=w == 0)) is not None:
                        conn.send(task)
                        busy[conn] = (proc, task, time.monotonic())
                if not busy:
                    continue
                for conn in wait(list(busy), timeout=0.5):
                    proc, task, _ = busy.pop(conn)
                    try:
                        result = conn.recv()
                    except (EOFError, OSError):
                        proc.join(1.0)
                        result = self._crashed(task, proc.exitcode)
                        workers = self._replace(workers, proc)
                    finish(task, result)
                if self.timeout is not None:
                    now = time.monotonic()
                    for conn, (proc, task, began) in list(busy.items()):
                        if now - began > self.timeout + self.grace:  # deaf to its own time limit
                            busy.pop(conn)
                            proc.kill()
                            proc.join()
                            finish(task, self._killed(task, now - began))
                            workers = self._replace(workers, proc)
        finally:
            for proc, conn in workers:
                if proc.is_alive():
                    if conn in busy:
                        proc.kill()  # interrupted: a check in progress is abandoned
                    else:
                        try:
                            conn.send(None)
                        except OSError:
                            proc.kill()
            for proc, conn in workers:
                proc.join(5.0)
                if proc.is_alive():
                    proc.kill()
                    proc.join()
                conn.close()
            gc.unfreeze()

    def _start(self) -> tuple[Any, Connection]:
        ours, theirs = self.context.Pipe()
        proc = self.context.Process(
            target=_serve,
            args=(theirs, self.specs, self.kw, self.threads, self.work, os.getpid()),
            name="opzoo-check",
            daemon=True,
        )
        proc.start()
        theirs.close()
        return proc, ours

    def _replace(self, workers: list[tuple[Any, Connection]], dead: Any) -> list[tuple[Any, Connection]]:
        kept = []
        for proc, conn in workers:
            if proc is dead:
                conn.close()
                kept.append(self._start())
            else:
                kept.append((proc, conn))
        return kept

    def _crashed(self, task: Task, exitcode: int | None) -> Result:
        i, prop, device = task
        if exitcode is not None and exitcode < 0:
            how = f"killed by {signal.Signals(-exitcode).name}"
        else:
            how = f"exit status {exitcode}"
        reason = f"the check crashed its worker process ({how}): the op crashed the interpreter?"
        return Result(self.specs[i].name, prop, device, "fail", reason)

    def _killed(self, task: Task, took: float) -> Result:
        i, prop, device = task
        reason = (
            f"timed out after {self.timeout:g} s: the op hung where no signal reaches it (in C?); "
            f"its worker was killed after {took:.0f} s"
        )
        return Result(self.specs[i].name, prop, device, "fail", reason, seconds=took, timed_out=True)


def _cuda_initialized() -> bool:
    """Whether this process has initialised CUDA (a plugin might, at import): a forked child
    cannot use it then, so the checks run here instead."""
    import torch

    return torch.cuda.is_initialized()


def _torch_threads() -> int:
    import torch

    return torch.get_num_threads()


def _serve(
    conn: Connection,
    specs: Sequence[OpSpec],
    kw: dict[str, Any],
    threads: int,
    work: Callable[..., Any],
    parent: int,
) -> None:
    """A worker: run the tasks the parent sends, send back each result, until it sends None."""
    # Ends with the parent, however the parent ends: a parent killed with SIGKILL (or whose SIGTERM
    # handler never ran) left its workers asleep on the output pipes for minutes.
    die_with_parent(parent)
    import torch

    # Ctrl-C is the parent's to handle: it stops the pool and reports what finished. SIGTERM and
    # SIGHUP (`timeout`, a closed terminal, which signal the whole group) end a worker at once,
    # quietly: the parent's handlers, inherited through fork, would raise in the check instead.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for stop in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(stop, signal.SIG_DFL)
    torch.set_num_threads(threads)  # the workers share the cores rather than each taking all
    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):  # the parent is gone
            return
        if task is None:
            return
        i, prop, device = task
        result = work(specs[i], prop, device=device, **kw)
        try:
            conn.send(result)
        except (OSError, EOFError):
            return
        except Exception as exc:  # a result that cannot be pickled (an op's odd exception text?)
            reason = f"{result.reason} (the full result could not be sent: {exc})"
            conn.send(Result(result.op, prop, device, result.status, reason, seconds=result.seconds))
