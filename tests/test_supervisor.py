"""The `opzoo` command's exit status, guarded from outside (opzoo/_supervisor.py): a command ended
before its result never exits 0, and nothing it leaves behind outlives it."""

from __future__ import annotations

import contextlib
import os
import pty
import select
import signal
import sys

import pytest
from conftest import run_opzoo
from hostile_ops import ON_PATH

from opzoo import _supervisor

pytestmark = pytest.mark.skipif(not _supervisor.can_supervise(), reason="supervised on Linux only")


def _module(tmp_path, name: str, text: str) -> dict[str, str]:
    """A module ``name`` in ``tmp_path``; the environment that imports it (and tests/hostile_ops)."""
    (tmp_path / f"{name}.py").write_text(text)
    return {"PYTHONPATH": os.pathsep.join([str(tmp_path), ON_PATH["PYTHONPATH"]])}


def _ended(out) -> bool:
    return out.returncode == 70 and out.stderr.splitlines()[-1] == f"opzoo: error: {_supervisor.ENDED}"


def test_a_command_ended_with_status_0_before_its_result_exits_70(tmp_path):
    """Code in the command's own process (here a data loader's module, which `opzoo train` imports
    there; an op's, by its import path, is imported in workers only) that calls os._exit(0): exit 70
    and one line, never 0 (before: exit 0, no output: a gate passed)."""
    env = _module(tmp_path, "exits_now", "import os\nos._exit(0)\n")
    out = run_opzoo("train", "--data", "exits_now:load", "--steps", "1", "--device", "cpu", env=env)
    assert _ended(out), (out.returncode, out.stderr)
    assert out.stdout == ""


def test_an_exit_handler_that_ends_the_process_cannot_turn_a_failure_into_0(tmp_path):
    """The failure is reported, then an exit handler (registered at import by a data loader's module,
    in the command's own process) calls os._exit(0) before the command leaves with 2: 70, not the
    0 the handler chose. A plugin's: tests/test_hostile.py."""
    text = "import atexit, os\natexit.register(lambda: os._exit(0))\n"
    text += "def load():\n    raise ValueError('no data')\n"
    env = _module(tmp_path, "exits_late", text)
    out = run_opzoo("train", "--data", "exits_late:load", "--steps", "1", "--device", "cpu", env=env)
    assert _ended(out), (out.returncode, out.stderr)
    assert "opzoo: error: data loader 'exits_late:load' raised ValueError: no data" in out.stderr


@pytest.mark.parametrize(
    "args, code", [(("nosuch",), 2), (("--help",), 0), (("list", "--format", "names"), 0)]
)
def test_the_commands_own_status_passes_through(args, code):
    """What the command reports is the exit status: a usage error, --help, a listing."""
    out = run_opzoo(*args)
    assert out.returncode == code, out.stderr
    assert _supervisor.ENDED not in out.stderr


def test_what_the_command_leaves_behind_is_ended_with_it(tmp_path):
    """A process the command started in a session of its own (a plugin's daemon) is gone once the
    command has exited: the supervisor adopted it and ended it. Exact: its pid is on file."""
    pid_file = tmp_path / "daemon"
    text = (
        "import subprocess, sys\n"
        "sleep = [sys.executable, '-c', 'import time; time.sleep(3600)']\n"
        "p = subprocess.Popen(sleep, start_new_session=True)\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        "from hostile_ops import _Doubles as Op\n"
    )
    env = _module(tmp_path, "daemonic", text)
    out = run_opzoo("check", "daemonic:Op", "-p", "accepts", "--device", "cpu", env=env)
    pid = int(pid_file.read_text())
    try:
        assert out.returncode == 0, out.stderr
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_a_command_killed_by_a_signal_ends_its_supervisor_by_that_signal(tmp_path):
    """The command ended by SIGKILL (here by its data loader's module, at import): the supervisor
    dies of SIGKILL too, as a shell expects, rather than exiting with a status."""
    env = _module(tmp_path, "killed", "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n")
    out = run_opzoo("train", "--data", "killed:load", "--steps", "1", "--device", "cpu", env=env)
    assert out.returncode == -signal.SIGKILL, out.stderr


def test_ctrl_c_at_a_terminal_reaches_the_command_once(tmp_path):
    """In the foreground of a terminal the command keeps the terminal (its process group is the
    supervisor's), and Ctrl-C typed there stops `train` after the step, as without a supervisor:
    one line, its metrics written, exit 130. Exact: ^C is typed once the first loss line is on the
    terminal; the run has ten million steps."""
    tiny = "--batch 8 --d-in 20 --hidden 12 --d-out 3 --device cpu --steps 10000000 --log-every 1"
    argv = ["train", *tiny.split(), "--metrics", str(tmp_path / "m.csv")]
    pid, fd = pty.fork()
    if pid == 0:  # the child: a session of its own, the pty its controlling terminal
        try:
            for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
                signal.signal(s, signal.SIG_DFL)
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            os.execv(sys.executable, [sys.executable, "-m", "opzoo", *argv])
        finally:
            os._exit(127)
    seen = b""
    try:
        while b"\n0 " not in b"\n" + seen:
            seen += _read(fd)
        os.write(fd, b"\x03")
        while chunk := _read(fd):
            seen += chunk
        _, status = os.waitpid(pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        os.close(fd)
    assert os.waitstatus_to_exitcode(status) == 130, seen
    assert seen.count(b"opzoo: SIGINT: stopping after this step") == 1, seen
    assert b"step(s); metrics written to" in seen, seen


def _read(fd: int) -> bytes:
    """What the terminal shows next; b"" once every process on it has closed it."""
    ready, _, _ = select.select([fd], [], [], 300)
    assert ready, "nothing on the terminal for 5 minutes"
    try:
        return os.read(fd, 4096)
    except OSError:  # EIO: the other side is closed
        return b""
