"""Checking many ops on several cores: each (op, property, device) check is a task, run by a pool
of worker processes forked from this one (``_pool``), or here where they cannot be.

An op's code runs in a worker even for one task on one job: there an exit, a hang or an escape is
that op's failed check, where in this process it would end or hang the command (``isolate``;
only a caller that wants the op in its own process, a test comparing, passes False).

The parent has run no torch computation when it forks. A check gives the same verdict in any
process and any order (see ``_repeatable``), so the results equal a serial run's; they are returned
in the serial order.

What a serial run cannot do and the pool does: a check that hangs in code no signal interrupts, or
that crashes its process (a segfault in an extension), is killed or reported, and the rest go on.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from typing import Any, Callable, Sequence

from opzoo._imports import collector_paused, heavy
from opzoo.core._spec import OpSpec
from opzoo.testing.properties import COMPILER, PROPERTIES
from opzoo.testing.running._hooks import Asked, hooks_of
from opzoo.testing.running._options import RunOptions, in_shard
from opzoo.testing.running._pool import GRACE, Pool, Task
from opzoo.testing.running._result import Result
from opzoo.testing.running._runner import check, check_property

__all__ = ["GRACE", "Task", "can_fork", "check_all", "default_jobs", "run_pool", "usable_cpus"]


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
    options: RunOptions,
    *,
    registry: Asked = None,
    into: list[Result] | None = None,
    started: Callable[[OpSpec], None] = lambda spec: None,
    grace: float = GRACE,
    isolate: bool = True,
) -> list[Result]:
    """Check ``options.properties`` of every spec on each of its devices, with ``options.jobs``
    worker processes (at least one; in this process where workers cannot be forked, or with
    ``isolate`` False and one job). ``registry`` is asked
    for plugins' input strategies (a run's ``RunHooks`` gets every hook failure, a worker's too).
    ``started(spec)`` is called as an op's first check begins. Results come in the serial order;
    each is also put in ``into`` — as it is known when serial, and all finished ones when the pool
    stops (an interrupt included), so that the caller keeps what finished. A worker whose check
    runs ``grace`` seconds past ``options.timeout`` is killed.

    An op's first check runs alone; its others start once it is back. An op that hangs in every
    check thus costs one time limit, and its other checks are "not run: the op hung", as serially;
    meanwhile the other workers check other ops."""
    props, devices = list(options.properties or PROPERTIES), options.devices
    hooks = hooks_of(registry) if registry is not None else None
    kw: dict[str, Any] = dict(options.check_kwargs(), registry=hooks)
    tasks = [
        (i, prop, device)
        for i in range(len(specs))
        for prop in props
        if in_shard(options.shard, specs[i].name, prop)
        for device in devices
    ]
    jobs = max(1, min(options.jobs or default_jobs(), len(tasks)))
    if not tasks or not _forks(jobs, isolate):
        results: list[Result] = []
        for spec in specs:
            started(spec)
            results += check(spec, props, devices=devices, into=into, **kw)
        return results
    preload(props, ops=len(specs))
    done: dict[Task, Result] = {}
    try:
        # Run order: an op's first check (alone), then its slow ones, so that they do not end the
        # run on one worker while the other idles; the results keep the serial order.
        order = sorted(tasks, key=lambda t: (t[0], t[1] != props[0], not PROPERTIES[t[1]].slow))
        pool = Pool(specs, jobs, grace, kw, work=check_property, hooks=hooks)
        pool.run(order, done, started)
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
    isolate: bool = True,
    **kw: Any,
) -> dict[Task, Any]:
    """Run ``work(specs[i], what, device=device, **kw)`` for each task ``(i, what, device)``, in
    ``jobs`` forked workers as :func:`check_all` runs checks (in this process where it would: no
    fork, CUDA initialised, or one job and not ``isolate``): an op's first task alone, its others
    once it is back; a task that crashes its worker, or runs ``grace`` seconds past ``limit``,
    becomes a failing :class:`~opzoo.testing.running._runner.Result`, as does anything the task
    raises. ``work`` returns a picklable record with a ``timed_out`` attribute (true: the op's other
    tasks are not run). The results by task, in ``done`` (if given) as they come, so that an
    interrupted caller keeps those finished. A ``registry`` in ``kw`` becomes the run's
    ``RunHooks``, as in :func:`check_all`."""
    done = {} if done is None else done
    hooks = hooks_of(kw["registry"]) if kw.get("registry") is not None else None
    if hooks is not None:
        kw["registry"] = hooks
    jobs = max(1, min(jobs, len(tasks)))
    if not tasks or not _forks(jobs, isolate):
        seen: set[int] = set()
        for task in tasks:
            i, what, device = task
            if i not in seen:
                seen.add(i)
                started(specs[i])
            done[task] = work(specs[i], what, device=device, **kw)
        return done
    heavy("torch._dynamo")  # once here, not in every worker: see check_all
    preload([what for _, what, _ in tasks if what in PROPERTIES], ops=len({i for i, _, _ in tasks}))

    Pool(specs, jobs, grace, kw, hooks=hooks, work=work, limit=limit).run(list(tasks), done, started)
    return done


def preload(props: Sequence[str], *, ops: int) -> None:
    """Import here, once, before forking, what the first check of each property in ``props`` would
    import in each of ``ops`` ops' fresh workers: torch._dynamo for a slow property (1-2 s; every
    worker of a slow check needs it) and, for several ops, the rest (0.5 s a worker): its module of
    opzoo's checks, torch's modules it loads (``Property.loads``), hypothesis's search helpers. For
    one op, its workers import the rest beside each other's checks (measured: importing it here
    made `opzoo check myrelu` 0.35 s slower, 4.45 against 4.10 s, for no CPU saved). Never an op's
    code, and no torch computation: a fork stays safe (see _pool). The collector is paused
    meanwhile (``opzoo._imports``)."""
    import importlib
    import warnings

    loads = {m for p in props for m in PROPERTIES[p].loads}
    if ops < 2:  # but the compiler, which both workers of one op would load (compile, library)
        loads &= {COMPILER}
    # torch's own modules warn of torch.jit.script as they load: theirs, not the user's
    with warnings.catch_warnings(), collector_paused():
        warnings.simplefilter("ignore", DeprecationWarning)
        if any(PROPERTIES[p].slow for p in props):
            import torch._dynamo  # noqa: F401  (torch.compile, torch.func and opcheck load it)
        for name in ("hypothesis.internal.conjecture.optimiser", *sorted(loads)):
            try:
                importlib.import_module(name)
            except ImportError:  # another torch or hypothesis release: a speed hint only
                pass
        for p in props:
            PROPERTIES[p].run  # noqa: B018  (imports the check's module)


def _forks(jobs: int, isolate: bool) -> bool:
    """Whether tasks go to forked workers rather than run here."""
    return (isolate or jobs > 1) and can_fork() and not _cuda_initialized()


def _cuda_initialized() -> bool:
    """Whether this process has initialised CUDA (a plugin might, at import): a forked child
    cannot use it then, so the checks run here instead."""
    import torch

    return torch.cuda.is_initialized()
