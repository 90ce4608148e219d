"""Stopping a check from outside: a wall-clock limit per property, and Ctrl-C.

Both work by raising an exception in the main thread from a signal handler, which interrupts the op's
Python code wherever it is (a backward that never returns included). One raise is not enough: Python
prints and drops an exception raised while a garbage-collector callback runs ("Exception ignored in
gc_callback"), and hypothesis registers one, so a signal that lands there would be lost and the check
would spin on. Each is therefore raised again until it has left the block (measured: one Ctrl-C in six
was lost this way, leaving ``opzoo check`` hung).
"""

from __future__ import annotations

import contextlib
import signal
import threading
from typing import Any, Iterator

from opzoo._lifetime import Terminated

#: Seconds between the raises of one limit or one Ctrl-C, until it has ended the block.
AGAIN = 0.25

_handled: list[int] = []  # every stopping signal a handler of insistent_interrupt took, in order


def signals_handled() -> int:
    """How many stopping signals :func:`insistent_interrupt` has handled in this process: a
    KeyboardInterrupt raised while this stayed the same came from code (an op's own), not from
    Ctrl-C, SIGTERM or SIGHUP."""
    return len(_handled)


class PropertyTimeout(BaseException):
    """A property ran past its wall-clock limit. A BaseException, so that neither the op under
    test nor hypothesis (which would shrink by running the hung example again) can swallow it."""


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


@contextlib.contextmanager
def time_limit(seconds: float | None) -> Iterator[None]:
    """Raise PropertyTimeout in this thread after ``seconds``, and every AGAIN seconds after that
    until the block has ended (SIGALRM: the main thread of a POSIX process; elsewhere, or with None,
    no limit). Python code is interrupted; a C call that never returns is not."""
    if seconds is None or not hasattr(signal, "setitimer") or not _main_thread():
        yield
        return

    def expire(signum: int, frame: Any) -> None:
        raise PropertyTimeout(seconds)

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds, AGAIN)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def insistent_interrupt(signals: tuple[int, ...] = (signal.SIGINT,)) -> Iterator[None]:
    """Ctrl-C (SIGINT) raises KeyboardInterrupt in the block, and again every AGAIN seconds until
    it has left the block, so that a raise dropped in a gc callback does not lose it. Outside the
    main thread, or where the process ignores SIGINT, nothing changes.

    ``signals`` may add SIGTERM and SIGHUP (``opzoo check`` does): each is raised the same way, as
    :class:`~opzoo._lifetime.Terminated` (a KeyboardInterrupt that says which signal it was)."""
    if not hasattr(signal, "pthread_kill") or not _main_thread():
        yield
        return
    previous = {s: signal.getsignal(s) for s in signals}
    # e.g. a background job's SIGINT: a signal the process ignores is not ours to turn on
    ours = [s for s, handler in previous.items() if handler is not signal.SIG_IGN]
    if not ours:
        yield
        return
    left = threading.Event()
    resender: list[threading.Thread] = []
    fired: list[int] = []  # the first signal handled in the block
    main = threading.main_thread().ident

    def resend(signum: int) -> None:
        while not left.wait(AGAIN):
            signal.pthread_kill(main, signum)  # type: ignore[arg-type]

    def interrupt(signum: int, frame: Any) -> None:
        if left.is_set():  # a resent signal that arrived as the block ended: already handled
            return
        _handled.append(signum)
        if not resender:
            fired.append(signum)
            thread = threading.Thread(target=resend, args=(signum,), name="opzoo-interrupt", daemon=True)
            resender.append(thread)
            thread.start()
        raise _raised(signum)

    for s in ours:
        signal.signal(s, interrupt)
    try:
        yield
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        # Code on the way (hypothesis's bookkeeping, the op itself) turned the interrupt into another
        # exception: it is still the interrupt that ends the block.
        if fired:
            raise _raised(fired[0]) from exc
        raise
    finally:
        left.set()
        for thread in resender:
            # A signal the thread sent before it saw `left` is handled (and ignored) by `interrupt`
            # at the main thread's next bytecode boundary, before the old handler is back.
            thread.join()
        for s in ours:
            signal.signal(s, previous[s])
    if fired:  # swallowed on the way (an `except BaseException` that went on): it still ends the block
        raise _raised(fired[0])


def _raised(signum: int) -> KeyboardInterrupt:
    """The exception a stopping signal raises: KeyboardInterrupt for SIGINT, else Terminated."""
    return KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)
