"""The ``opzoo`` command's exit status, guarded from outside: :func:`supervised` forks the command
and waits for it, so that a command ended before its result (a plugin's import or hook, an op run
in the process, an exit handler, calling ``os._exit(0)``) exits 70, not 0, with one line.

The command runs in the child; the parent (the supervisor) only waits, and passes on the signals
it is sent (SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1/2, Ctrl-Z and ``fg``), so that each reaches
the command once, however it was sent:

- in the foreground of a terminal, the command stays in the supervisor's process group, so that it
  owns the terminal as before (a ``breakpoint()`` reads it); what the terminal sends (Ctrl-C: the
  kernel's, ``SI_KERNEL``) reaches both, and is not passed on; a ``kill`` from a process is;
- elsewhere (CI, ``timeout``, a script, a test), the command has a process group of its own, and
  every signal reaches it through the supervisor: one sent to the pid or to the group, once.

The child dies with the supervisor (``die_with_parent``). When the command has ended, the supervisor
ends whatever it left behind (a plugin's daemon, adopted: it is a subreaper). A command killed by a
signal is re-raised on the supervisor, as a shell expects.

Linux only (``fork``, ``sigwaitinfo``, subreapers); elsewhere the command runs unsupervised. No torch.
"""

from __future__ import annotations

import os
import signal
import struct
import sys
from typing import Callable, NoReturn

from opzoo._lifetime import become_subreaper, die_with_parent, end_descendants

#: EX_SOFTWARE of sysexits.h: the command ended without its result.
EXIT_NO_RESULT = 70
#: Why, as the one line the command line makes of it says.
ENDED = "the command ended before its result (a plugin or an op ended the process: os._exit?)"

_NAMES = ("SIGINT", "SIGTERM", "SIGHUP", "SIGQUIT", "SIGUSR1", "SIGUSR2", "SIGTSTP", "SIGCONT")
#: What the supervisor passes on to the command.
FORWARD = frozenset(getattr(signal, n) for n in _NAMES if hasattr(signal, n))
_SI_KERNEL = 0x80  # <asm-generic/siginfo.h>: sent by the kernel (a terminal's Ctrl-C, Ctrl-Z)


def can_supervise() -> bool:
    return sys.platform.startswith("linux") and hasattr(signal, "sigwaitinfo") and hasattr(os, "fork")


def supervised(command: Callable[[Callable[[int], None]], NoReturn], ended: str) -> NoReturn:
    """Run ``command(report)`` in a forked child, which calls ``report(code)`` with its exit status
    just before it leaves; exit with what the child reported, or 70 and the line ``ended`` if it
    ended with status 0 and reported nothing."""
    waited = FORWARD | {signal.SIGCHLD}
    own_group = not _terminal_foreground()
    old_mask = signal.pthread_sigmask(signal.SIG_BLOCK, waited)  # nothing lost before the wait
    done_r, done_w = os.pipe()
    supervisor = os.getpid()
    pid = os.fork()
    if pid == 0:  # the command
        os.close(done_r)
        if own_group:  # signals reach it through the supervisor only: exactly once
            os.setpgid(0, 0)
        die_with_parent(supervisor)
        signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)

        def report(code: int) -> None:
            os.write(done_w, struct.pack("<i", code))

        try:
            command(report)
        except BaseException:  # the command never returns; a crash of ours is a traceback, exit 1
            import traceback

            traceback.print_exc()
        os._exit(1)
    os.close(done_w)
    if own_group:  # here too, as a shell does: whichever of the two runs first, no signal misses
        try:
            os.setpgid(pid, pid)
        except OSError:  # the child has already (or has already ended)
            pass
    become_subreaper()
    status = _wait(pid, waited, own_group)
    os.set_blocking(done_r, False)
    try:
        got = os.read(done_r, 4)
    except BlockingIOError:
        got = b""
    end_descendants()  # what the command left behind: a plugin's daemon, an op's child
    if len(got) == 4:
        os._exit(struct.unpack("<i", got)[0])
    if os.WIFSIGNALED(status):
        _die_of(os.WTERMSIG(status))
    code = os.waitstatus_to_exitcode(status)
    if code == 0:
        os.write(2, (ended + "\n").encode())
        code = EXIT_NO_RESULT
    os._exit(code)


def _terminal_foreground() -> bool:
    """Whether this process is in the foreground process group of its controlling terminal."""
    try:
        fd = os.open("/dev/tty", os.O_RDONLY | os.O_NOCTTY)
    except OSError:  # no controlling terminal
        return False
    try:
        return os.tcgetpgrp(fd) == os.getpgrp()
    except OSError:
        return False
    finally:
        os.close(fd)


def _wait(pid: int, waited: frozenset[int] | set[int], own_group: bool) -> int:
    """Pass each signal on to the command until it has ended; its wait status."""
    while True:
        info = signal.sigwaitinfo(waited)
        if info.si_signo != signal.SIGCHLD:
            if own_group or info.si_code != _SI_KERNEL:
                _forward(pid, info.si_signo)
            elif info.si_signo == signal.SIGTSTP:  # Ctrl-Z: the command stopped itself; so does this
                os.kill(os.getpid(), signal.SIGSTOP)
            continue
        while True:  # reap: the command, or an orphan that came to this subreaper
            try:
                child, status = os.waitpid(-1, os.WNOHANG | os.WUNTRACED)
            except ChildProcessError:
                child = 0
            if child == 0:
                break
            if child == pid and os.WIFSTOPPED(status):
                continue  # stopped (SIGSTOP, SIGTTOU): its own business
            if child == pid:
                return status


def _forward(pid: int, signum: int) -> None:
    try:
        if signum == signal.SIGTSTP:  # Ctrl-Z: stop the command, then this (the shell's job)
            os.kill(pid, signal.SIGSTOP)
            os.kill(os.getpid(), signal.SIGSTOP)
        else:
            os.kill(pid, signum)
    except ProcessLookupError:  # ended meanwhile: its SIGCHLD is on the way
        pass


def _die_of(signum: int) -> NoReturn:
    """End this process by ``signum``, as the command ended (a shell tells 130 from Ctrl-C)."""
    if signum not in (signal.SIGKILL, signal.SIGSTOP):  # neither can be caught, blocked or reset
        signal.signal(signum, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signum})
    os.kill(os.getpid(), signum)
    os._exit(128 + signum)  # a signal whose default is not to end (SIGCHLD...)
