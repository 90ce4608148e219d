"""`pytest --opzoo`: each item's check runs on a forked worker, so that an op's code never ends or
hangs pytest's own process."""

from __future__ import annotations

import pytest
from conftest import run_pytest
from hostile_ops import ON_PATH

#: A module with a correct op that writes its process id on each forward call.
PIDS = """
import os
import torch


class Pid(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        with open(os.environ["OPZOO_TEST_PIDS"], "a") as f:
            f.write(f"{os.getpid()}\\n")
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * g
"""


#: What pytest-timeout (2.4) sets for a per-test limit (--timeout, its ini, PYTEST_TIMEOUT).
PER_TEST_LIMIT = "def pytest_configure(config):\n    config._env_timeout = 300.0\n"


@pytest.mark.parametrize(
    "how, workers",
    # One xdist worker is enough to take the loadgroup path (a worker reads the option), and starts
    # one process importing torch where two started two.
    [(["-n", "0"], 1), (["-n", "1", "--dist", "loadgroup"], 1), (["-n", "0", "-p", "limit"], 3)],
    ids=["serial", "loadgroup", "per-test-limit"],
)
def test_an_ops_tests_are_checked_together_at_the_first_in_one_worker(tmp_path, how, workers):
    """Serially, or under xdist's loadgroup, an op's tests are checked together at the first, in one
    forked worker (its examples drawn once, as `opzoo check` checks it); each reports its verdict.
    Under a per-test time limit (pytest-timeout's) each is checked alone, in a worker of its own."""
    (tmp_path / "pids.py").write_text(PIDS)
    (tmp_path / "limit.py").write_text(PER_TEST_LIMIT)
    pids = tmp_path / "pids.txt"
    env = {"PYTHONPATH": str(tmp_path), "OPZOO_TEST_PIDS": str(pids)}
    args = ("--opzoo=pids:Pid", "--opzoo-property=accepts,gradient,layout", "--opzoo-device=cpu")
    out = run_pytest(*args, "--opzoo-examples=5", *how, "-q", env=env, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "3 passed" in out.stdout
    assert len(set(pids.read_text().split())) == workers


def test_an_op_that_ends_its_process_fails_its_item_and_pytest(tmp_path):
    """An op whose backward calls os._exit: its gradient item fails with why, the rest run, and
    pytest exits 1 (before: `.s` and exit status 0, pytest ended by the op)."""
    args = (
        "--opzoo=hostile_ops:OsExitBackward",
        "--opzoo-property=accepts,gradient",
        "--opzoo-device",
        "cpu",
        "-q",
    )
    out = run_pytest(*args, "-n", "0", env=ON_PATH, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "the check ended its worker process (exit status 0)" in out.stdout
    assert "1 failed, 1 passed" in out.stdout


def test_an_op_that_hangs_fails_its_item_at_the_time_limit(tmp_path):
    """A backward that never returns fails its item at --opzoo-timeout, and the op's next item is
    skipped as hung, as `opzoo check` does."""
    args = ("--opzoo=hostile_ops:HangBackward", "--opzoo-property=gradient,hygiene", "--opzoo-timeout", "2")
    out = run_pytest(*args, "--opzoo-device", "cpu", "-n", "0", "-q", env=ON_PATH, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "timed out after 2 s: the op hung?" in out.stdout
    assert "1 failed, 1 skipped" in out.stdout


def test_an_op_that_raises_any_base_exception_fails_its_item_as_check_fails_it(tmp_path):
    """SystemExit, KeyboardInterrupt and a BaseException of the op's own, raised by a backward: each
    its item's FAIL with the reason `opzoo check` gives, and pytest exits 1 (a KeyboardInterrupt no
    signal raised is the op's, not Ctrl-C: pytest is not interrupted)."""
    ops = {"ExitBackward": "SystemExit: 0", "KeyboardBackward": "KeyboardInterrupt: from the op"}
    ops["BaseExcBackward"] = "Weird: odd"
    names = ",".join(f"hostile_ops:{op}" for op in ops)
    args = (f"--opzoo={names}", "--opzoo-property=gradient", "--opzoo-device", "cpu", "-q", "-rf")
    out = run_pytest(*args, "-n", "0", env=ON_PATH, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    for op, reason in ops.items():
        assert f"FAIL gradient[hostile_ops:{op}]: {reason}" in out.stdout
    assert out.stdout.splitlines()[-1].startswith("3 failed")


def test_every_load_failure_is_one_test_named_by_its_plugin_entry(broken_plugin_path, tmp_path):
    """Under a plain `--opzoo` each op or hook plugin that failed to load is one failing test named
    by it, `load[crash]`, as `--opzoo=crash` names it (it was `load[crash-1]`: an index on every
    id, needed only where one name fails twice)."""
    out = run_pytest(
        "--opzoo",
        "--opzoo-property=accepts",
        "--collect-only",
        "-q",
        env={"PYTHONPATH": broken_plugin_path},
        cwd=tmp_path,
    )
    loads = [line for line in out.stdout.splitlines() if "load[" in line]
    assert "::load[crash]" in loads and "::load[notafunction]" in loads, out.stdout[-3000:]
    assert not any(line[:-1].rsplit("-", 1)[-1].isdigit() for line in loads), loads


def test_a_checks_notes_are_its_items_report_section_and_junit_properties(tmp_path):
    """What opzoo check prints as `note:` lines was lost under pytest: now each item's notes are a
    report section (-rP shows a pass's) and user properties (in --junitxml). The seed's MyReLU
    declares no kink: its gradient passes, with a note on the kink at 0."""
    args = (
        "--opzoo=seed_program:MyReLU",
        "--opzoo-property=gradient",
        "--opzoo-device=cpu",
        "-rP",
        "-n",
        "0",
    )
    out = run_pytest(*args, "--junitxml=j.xml", env=ON_PATH, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Captured opzoo notes call" in out.stdout and "undeclared kink near x = 0" in out.stdout
    assert 'name="opzoo_note" value="undeclared kink near x = 0' in (tmp_path / "j.xml").read_text()
