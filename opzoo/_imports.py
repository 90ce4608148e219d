"""The heavy imports of a command's process, made with the cyclic garbage collector paused.

Importing torch and torch._dynamo allocates a few hundred thousand long-lived objects, and the
collections those allocations set off (five full ones here) found almost nothing to free: 0.4 of the
2.1 s the two imports took. Paused while they load, and their objects frozen out of later collections
(``gc.freeze``, as for a process about to fork), the same imports take 1.55 s. What garbage the
imports left in cycles (9 thousand objects, once) is kept rather than searched for.

Imports no torch itself. Called by the command line, and by the check pool's parent before it forks
(which freezes its objects then in any case: ``_pool``); not by ``assert_correct``, which checks in
the caller's own process.
"""

from __future__ import annotations

import contextlib
import gc
import importlib
from typing import Iterator


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """Pause the cyclic collector in the block (unless it was off already), then freeze what the
    block left: the objects made so far are left out of every later collection."""
    was_on = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_on:
            gc.freeze()
            gc.enable()


def heavy(*names: str) -> None:
    """Import the modules ``names`` (torch, ...) with the collector paused, those not loaded yet."""
    import sys

    missing = [name for name in names if name not in sys.modules]
    if missing:
        with collector_paused():
            for name in missing:
                importlib.import_module(name)
