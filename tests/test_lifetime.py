"""How opzoo's processes end (opzoo/_lifetime.py): a training run stopped by a signal keeps what it
trained; a child ends with its parent."""

from __future__ import annotations

import csv
import os
import select
import signal
import subprocess
import sys

import pytest
import torch

from opzoo import _lifetime
from opzoo.cli import main

TINY = ["--batch", "8", "--d-in", "20", "--hidden", "12", "--d-out", "3", "--lr", "1e-3", "--device", "cpu"]


def default_signals() -> None:
    """In the child before exec: the stopping signals as a terminal gives them (neither ignored nor
    blocked, whatever the test runner inherited)."""
    for s in _lifetime.STOPPING:
        signal.signal(s, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, set(_lifetime.STOPPING))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_training_between_steps_and_keeps_metrics_and_checkpoint(tmp_path, signum):
    """Ctrl-C or SIGTERM mid-run: the step in progress finishes, then the checkpoint and the metrics
    of every step trained are written, one line says so, and the exit status is 130 or 143; the
    checkpoint resumes. Exact: the signal is sent after the first loss line, and the run has ten
    million steps to go. (Before: no metrics file at all, and SIGTERM ended the run silently.)"""
    metrics, ck = tmp_path / "m.csv", tmp_path / "ck.pt"
    argv = [
        *TINY,
        "--steps",
        "10000000",
        "--log-every",
        "1",
        "--metrics",
        str(metrics),
        "--checkpoint",
        str(ck),
    ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "opzoo", "train", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=default_signals,
    )
    try:
        assert proc.stdout.readline().startswith("0 ")  # step 0 is trained
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 128 + signum, err
    with open(metrics, newline="") as f:
        rows = list(csv.DictReader(f))
    steps = len(rows)
    assert steps >= 1 and [int(r["step"]) for r in rows] == list(range(steps))
    assert len(torch.load(ck, weights_only=True)["losses"]) == steps
    name = signal.Signals(signum).name
    assert err.splitlines() == [
        f"opzoo: {name}: stopping after this step (again: at once)",
        f"opzoo: interrupted by {name} after {steps} step(s); metrics written to {str(metrics)!r}; "
        f"checkpoint written to {str(ck)!r}",
    ]
    assert main(["train", "--resume", str(ck), "--steps", str(steps + 2), "--quiet"]) == 0
    assert len(torch.load(ck, weights_only=True)["losses"]) == steps + 2


def test_a_run_stopped_in_a_comparison_keeps_the_runs_before_it(monkeypatch):
    """A stop during the second activation of a comparison raises Stopped with the first run whole
    and the second as far as it got (the step it was in finished); the third never starts."""
    from opzoo.trainer import _compare
    from opzoo.trainer._config import TrainConfig

    def stop_at_second(name, t, loss):
        if name == "myrelu":
            _lifetime._requested.append(signal.SIGTERM)  # as deferred()'s handler does

    config = TrainConfig(
        batch=8, d_in=20, hidden=12, d_out=3, steps=3, lr=1e-3, seed=0, device="cpu", log_every=1
    )
    try:
        with pytest.raises(_lifetime.Stopped) as exc:
            _compare.compare(config, ["elu", "myrelu", "gelu"], on_log=stop_at_second)
    finally:
        _lifetime._requested.clear()
    got = [(r.config.activation, len(r.losses)) for r in exc.value.results]
    assert got == [("elu", 3), ("myrelu", 1)]
    assert exc.value.exit_code == 143


def test_a_second_signal_stops_at_once():
    """The first signal asks for a stop between steps; a second one raises at once (for a step that
    never ends): KeyboardInterrupt for Ctrl-C, Terminated for SIGTERM."""
    with _lifetime.deferred():
        os.kill(os.getpid(), signal.SIGTERM)
        assert _lifetime.requested() == signal.SIGTERM
        with pytest.raises(_lifetime.Terminated) as exc:
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(10**6):  # the handler runs at the next bytecode boundary
                pass
    assert exc.value.signum == signal.SIGTERM and _lifetime.requested() is None


_CHILD = """
import os, sys, time
from opzoo._lifetime import die_with_parent
parent = os.getpid()
child = os.fork()
if child == 0:
    die_with_parent(parent)
    os.write(1, f"ready {os.getpid()}\\n".encode())  # one write: one line
    while True:
        time.sleep(1)
os.read(0, 1)  # until the test closes our stdin... or kills us
"""


def test_die_with_parent_ends_a_child_when_its_parent_is_killed():
    """A child that called die_with_parent is killed by the kernel when its parent is SIGKILLed.
    Exact: the child's pidfd is opened before the kill, and the test waits until it is readable."""
    proc = subprocess.Popen([sys.executable, "-c", _CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        word, child = proc.stdout.readline().split()
        assert word == b"ready"
        pidfd = os.pidfd_open(int(child))
        proc.kill()
        proc.wait()
        ready, _, _ = select.select([pidfd], [], [], 120)
        assert ready == [pidfd], "the child outlived its parent by two minutes"
        os.close(pidfd)
    finally:
        proc.kill()
        proc.communicate()
