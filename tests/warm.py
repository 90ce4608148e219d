"""`python -m opzoo ARGS` (and `python -m pytest ARGS`) for the tests, started warm: forked from a
process that has imported torch (and what a check loads besides: Dynamo, the properties' `loads`).

Most of what a test's `opzoo` subprocess costs is the interpreter starting and importing torch (about
2 CPU seconds here, ~120 commands in the suite), and, for the commands that check, torch._dynamo and
the modules the properties' first checks load (`Property.loads`: 1.8 s more; a command that checks
several ops imports them before it forks its workers, one op's workers each). A *zygote* — a
Python started once per test worker, which imports those third-party modules and nothing of opzoo —
forks one child per command; the child takes the command's working directory, environment,
`sys.path` and standard streams, then runs `opzoo`'s (or pytest's) `__main__` as `python -m opzoo`
would, and exits through the interpreter's own shutdown (atexit handlers, flushed streams, the exit
status of `SystemExit` or 1 with a traceback).

What differs from a fresh interpreter, and so is never started warm (`run` returns None, and the
caller starts a cold process): an environment whose interpreter or torch start-up variables (PYTHON*
but PYTHONPATH, TORCH*, OMP*, MKL*, CUDA*, LD_*) differ from the zygote's, and any keyword but `cwd`.
A test that depends on a fresh interpreter in another way (`--help` importing no torch, Dynamo not
loaded yet, a hash seed of its own) passes `cold=True` to `conftest.run_opzoo`.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

# Variables an interpreter or torch reads as it starts: the zygote's start decided them.
_AT_START = ("PYTHON", "TORCH", "OMP_", "MKL_", "KMP_", "CUDA", "LD_", "GOMP_")

# The zygote, run with `python -c`: import torch, then fork a child per request line until EOF. A
# child leaves the loop with its request and becomes the command (the code after `serve()`).
_SERVER = r"""
import gc, json, os, sys
gc.disable()  # while torch loads, as opzoo's own commands import it (opzoo/_imports.py)
import torch  # noqa: F401  (what every command imports first, and the cost the zygote saves)
# What a command that checks loads besides (its parent loads them before forking its workers:
# torch._dynamo and the properties' `loads`, named on the command line): here, once per test
# worker, not once per command. Not hypothesis: pytest warns that a plugin's module (hypothesis is
# one) imported before it starts cannot be rewritten.
import importlib
import torch._dynamo  # noqa: F401

def preload(names):
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:  # another torch release
            pass

preload(sys.argv[1:])
gc.freeze()  # the imports' objects: out of every child's collections (pytest's at exit took 0.4 s)
gc.enable()

def serve():
    base = list(sys.path[1:])  # '' (python -c) left out: the child puts its own first
    while True:
        line = sys.stdin.readline()
        if not line:
            return None, None
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            return req, base
        print(pid, flush=True)
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]), flush=True)

req, base = serve()
if req is None:
    sys.exit(0)
os.chdir(req["cwd"])
os.environ.clear()
os.environ.update(req["env"])
streams = ((0, os.devnull, os.O_RDONLY), (1, req["out"], os.O_WRONLY), (2, req["err"], os.O_WRONLY))
for fd, path, flags in streams:
    opened = os.open(path, flags)
    os.dup2(opened, fd)
    os.close(opened)
entries = [p for p in req["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
sys.path[:] = [os.getcwd(), *(os.path.abspath(p) for p in entries), *base]
import runpy
importlib.invalidate_caches()
sys.argv = ["-m", *req["args"]]
module = req["module"]
del req, base, serve, preload, entries, streams, fd, path, flags, opened
runpy.run_module(module, run_name="__main__", alter_sys=True)
"""


class _Zygote:
    def __init__(self) -> None:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        self.start_env = env
        from opzoo.testing.properties import PROPERTIES

        loads = sorted({name for p in PROPERTIES.values() for name in p.loads})
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, *loads],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            bufsize=0,  # unbuffered: a line read never takes the next one, which select must see
        )
        self.lock = threading.Lock()
        atexit.register(self.stop)

    def stop(self) -> None:
        """End the zygote (it leaves its loop at the end of its input) and reap it."""
        if self.proc.stdin is not None and not self.proc.stdin.closed:
            self.proc.stdin.close()
        self.proc.wait()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def suits(self, env: dict[str, str]) -> bool:
        """Whether ``env`` starts an interpreter and torch as the zygote's own did."""

        def at_start(e: dict[str, str]) -> dict[str, str]:
            return {k: v for k, v in e.items() if k.startswith(_AT_START) and k != "PYTHONPATH"}

        empty_entry = "PYTHONPATH" in env and "" in env["PYTHONPATH"].split(os.pathsep)
        return at_start(env) == at_start(self.start_env) and not empty_entry

    def run(
        self, module: str, args: list[str], env: dict[str, str], cwd: str, timeout: float | None
    ) -> tuple[int, str, str]:
        with tempfile.TemporaryDirectory(prefix="opzoo-warm-") as tmp:
            out, err = Path(tmp, "out"), Path(tmp, "err")
            out.touch()
            err.touch()
            request = {
                "module": module,
                "args": args,
                "env": env,
                "cwd": cwd,
                "out": str(out),
                "err": str(err),
            }
            assert self.proc.stdin is not None and self.proc.stdout is not None
            self.proc.stdin.write(json.dumps(request).encode() + b"\n")
            # Raw pipes: readline reads byte by byte, so the status line, once written, is still in
            # the pipe for select (a buffered read of the pid line could have taken it too).
            pid = int(self.proc.stdout.readline())
            ready = select.select([self.proc.stdout], [], [], timeout)[0]
            if not ready:
                os.kill(pid, signal.SIGKILL)
            code = int(self.proc.stdout.readline())
            text = out.read_text(errors="replace"), err.read_text(errors="replace")
            if not ready:
                raise subprocess.TimeoutExpired(args, timeout or 0, output=text[0], stderr=text[1])
            return code, *text


_zygote: _Zygote | None = None


def run(
    args: list[str], env: dict[str, str], timeout: float | None, module: str = "opzoo", **kw: Any
) -> subprocess.CompletedProcess | None:
    """``python -m MODULE ARGS`` (opzoo, or pytest) forked from the zygote, as subprocess.run(...,
    capture_output=True, text=True) would give it; None where a warm start would differ from a cold
    one (see above)."""
    global _zygote
    if set(kw) - {"cwd"} or os.environ.get("OPZOO_TEST_COLD"):
        return None
    if _zygote is None or not _zygote.alive():
        _zygote = _Zygote()
    if not _zygote.suits(env) or not _zygote.lock.acquire(blocking=False):  # busy: another thread's
        return None
    try:
        cwd = os.path.abspath(kw.get("cwd") or os.getcwd())
        code, out, err = _zygote.run(module, args, env, cwd, timeout)
    finally:
        _zygote.lock.release()
    return subprocess.CompletedProcess([sys.executable, "-m", module, *args], code, out, err)
