"""Hostile or broken plugins are contained: exit, print, slow imports (plugins/opzoo-hostile-fixtures)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from conftest import install_fixture, run_opzoo


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return {"PYTHONPATH": install_fixture(tmp_path_factory.mktemp("hostile-site"), "opzoo-hostile-fixtures")}


def test_a_plugin_calling_sys_exit_is_that_plugins_failure(env):
    """sys.exit(3) at a plugin's import, or in its hook, is recorded as its failure; opzoo goes on."""
    out = run_opzoo("list", "--json", env=env)
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["quitter"]["status"] == "broken" and rows["quitter"]["summary"] == "SystemExit: 3"
    assert any(r["summary"] == "hook opzoo_ops raised SystemExit: 4" for r in rows.values())
    assert rows["myrelu"]["status"] == "ok"
    check = run_opzoo("check", "chatty", "-p", "hygiene", "--profile", "ci", "--device", "cpu", env=env)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("argv", [["list", "--json"], ["info", "chatty", "--json"]])
def test_plugin_output_stays_off_stdout_while_printing_json(env, argv):
    """A plugin printing at import does not break `opzoo list --json` or `info --json`."""
    out = run_opzoo(*argv, env=env)
    assert out.returncode == 0, out.stderr
    json.loads(out.stdout)  # parses: nothing else is on stdout
    assert "hello from chatty" in out.stderr


def test_a_slow_plugin_import_is_named(env):
    """A plugin that takes over a second to import gets a one-line note naming it."""
    out = run_opzoo("list", env=env)
    notes = [line for line in out.stderr.splitlines() if line.startswith("opzoo: note: ")]
    assert any("opzoo-hostile-fixtures" in n and "sluggish" in n and "took" in n for n in notes), out.stderr
    assert not any("chatty" in n for n in notes)


def test_a_hung_op_fails_once_and_the_others_are_checked(env):
    """A backward that never returns fails its first property at the limit; the op's other
    properties are 'not run: the op hung'; another op in the same run is checked as usual."""
    # The limit is 20x what chatty's two one-example checks take; hang never returns.
    argv = "check hang chatty -p hygiene,layout --examples 1 --timeout 20 --profile ci --device cpu --json"
    out = run_opzoo(*argv.split(), env=env)
    assert out.returncode == 1, out.stderr
    got = {r["id"]: (r["status"], r["reason"]) for r in json.loads(out.stdout)["results"]}
    assert got["hygiene[hang]"] == ("fail", "timed out after 20 s: the op hung?")
    assert got["layout[hang]"] == ("skip", "not run: the op hung")
    assert got["hygiene[chatty]"][0] == got["layout[chatty]"][0] == "pass"


def default_sigint() -> None:
    """In the child before exec: Ctrl-C as a terminal gives it. A job started in the background by
    a non-interactive shell (a CI runner may be one) inherits SIGINT ignored, and opzoo rightly
    leaves an ignored SIGINT alone."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def interrupt_when_checking(
    argv: list[str], env: dict[str, str], op: str, **popen
) -> tuple[subprocess.Popen, str, str]:
    """Run ``opzoo`` with ``argv``; send SIGINT once it says on stderr that it is checking ``op``;
    return the finished process, its stdout and stderr."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "opzoo", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **env},
        preexec_fn=default_sigint,
        **popen,
    )
    try:
        for line in proc.stderr:
            if line.startswith(f"checking {op}"):
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc, out, err


@pytest.mark.parametrize("json_out", [False, True], ids=["text", "json"])
def test_ctrl_c_prints_what_finished(env, json_out):
    """Ctrl-C while an op hangs ends the run (exit 130) and reports the results already finished,
    in full, or as JSON marked interrupted (in one process, -j 1: ops in order, so what finished is
    known). SIGINT is sent once `checking hang` is on stderr, that is inside the block where Ctrl-C
    is raised until it has ended the loop: wherever it lands, it stops the run (see the DROPPED_ONCE
    test)."""
    argv = "check chatty hang -p hygiene -j 1 --profile ci --device cpu".split()
    argv += ["--json"] if json_out else []
    proc, out, err = interrupt_when_checking(argv, env, "hang")
    assert proc.returncode == 130, err
    assert "opzoo: interrupted after 1 check(s)" in err
    if json_out:
        data = json.loads(out)
        assert data["interrupted"] is True
        assert [(r["id"], r["status"]) for r in data["results"]] == [("hygiene[chatty]", "pass")]
    else:
        assert "hygiene" in out and "chatty" in out
        assert "1 passed, 0 failed, 0 skipped before the interrupt" in out


def test_ctrl_c_stops_the_worker_processes(env):
    """With workers, Ctrl-C ends the run (exit 130) and no worker outlives it: the command runs in
    a session of its own, and no process of that session is left."""
    argv = "check hang -p hygiene,layout -j 2 --profile ci --device cpu --json".split()
    proc, out, err = interrupt_when_checking(argv, env, "hang", start_new_session=True)
    assert proc.returncode == 130, err
    assert "opzoo: interrupted after 0 check(s)" in err
    assert json.loads(out)["interrupted"] is True
    assert _session_members(proc.pid) == []


def _session_members(sid: int) -> list[int]:
    """The pids still alive in session ``sid`` (zombies excluded)."""
    alive = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            if int(fields[3]) == sid and fields[0] != "Z":  # after ")": state, ppid, pgrp, session
                alive.append(int(entry))
    return alive


# A garbage-collector callback that is running when the signal's exception is raised: Python prints
# and drops it ("Exception ignored in"). Hypothesis registers such a callback, so this happens to a
# real Ctrl-C now and then; here it happens every time, by construction.
DROPPED_ONCE = """
import gc, os, signal, sys
from opzoo.testing._signals import PropertyTimeout, insistent_interrupt, time_limit

dropped = []

def swallowing_callback(phase, info):
    if phase != "start" or dropped:
        return
    try:
        {trigger}
        while True:
            pass
    except BaseException as exc:
        dropped.append(type(exc).__name__)
        raise

try:
    with {block}:
        gc.callbacks.append(swallowing_callback)
        gc.collect()
        print("dropped", dropped, flush=True)
        while True:
            pass
except {expected}:
    print("stopped", flush=True)
"""


@pytest.mark.parametrize(
    ("trigger", "block", "expected"),
    [
        ("os.kill(os.getpid(), signal.SIGINT)", "insistent_interrupt()", "KeyboardInterrupt"),
        ("pass", "time_limit(0.01)", "PropertyTimeout"),
    ],
    ids=["ctrl-c", "time-limit"],
)
def test_a_stop_dropped_in_a_gc_callback_is_raised_again(trigger, block, expected):
    """The first KeyboardInterrupt / PropertyTimeout is raised inside a gc callback and dropped by
    Python; the next one, AGAIN seconds later, stops the loop. (Before: the loop spun forever.)"""
    script = DROPPED_ONCE.format(trigger=trigger, block=block, expected=expected)
    out = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, preexec_fn=default_sigint
    )
    assert out.stdout.splitlines() == [f"dropped ['{expected}']", "stopped"], out.stderr
    assert "Exception ignored" in out.stderr
