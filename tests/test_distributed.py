"""Data-parallel training under torchrun: the same run as one process, rank 0 alone prints and writes.

Each torchrun starts two processes that import torch (about 6 s here); the five below took 55 s
together on this 2-core machine shared with other jobs (load 4). They share one xdist group, so that
two never compete for this machine's two cores at once.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import re
import select
import signal
import subprocess
import sys

import pytest

import opzoo
from opzoo.cli import main
from opzoo.trainer import _distributed
from opzoo.trainer._network import Network, seed_linear, seed_loss

TORCHRUN_ENV = {
    "WORLD_SIZE": "2",
    "RANK": "0",
    "LOCAL_RANK": "0",
    "MASTER_ADDR": "127.0.0.1",
    "MASTER_PORT": "1",
}
SMALL_FLAGS = [
    *("--batch", "7", "--d-in", "20", "--hidden", "12", "--d-out", "3", "--lr", "1e-3", "--seed", "3"),
    *("--optimizer", "sgd"),
]
torchrun_group = pytest.mark.xdist_group("torchrun")


@torchrun_group
def test_a_group_of_tests_shares_one_worker(request):
    """Under --dist loadgroup (dev.py test) a test of an xdist_group carries the group in its node id,
    which is how pytest-xdist sends the group to one worker. With pytest 9.2 it silently did not:
    the torchrun tests, which each want both cores, ran side by side (pytest-dev/pytest-xdist#1386)."""
    if not request.config.getoption("loadgroup", default=False):
        pytest.skip("not run with --dist loadgroup")
    assert request.node.nodeid.endswith("@torchrun"), request.node.nodeid


def torchrun(*args: str, cwd, nproc: int = 2) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc-per-node NPROC -m opzoo train --device cpu ARGS`` (a free port)."""
    env = {k: v for k, v in os.environ.items() if k not in _distributed.ENV} | {"OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc)]
    command += ["-m", "opzoo", "train", "--device", "cpu", *args]
    return subprocess.run(command, capture_output=True, text=True, env=env, cwd=cwd, timeout=300)


def opzoo_lines(stderr: str) -> list[str]:
    """opzoo's own lines on stderr (torchrun adds its own log and failure report)."""
    return [line for line in stderr.splitlines() if line.startswith("opzoo:")]


def logged(stdout: str) -> list[tuple[int, float]]:
    return [(int(t), float(v)) for t, v in (line.split() for line in stdout.splitlines())]


def assert_rel(got: list[tuple[int, float]], want: list[tuple[int, float]], rel: float) -> None:
    assert [t for t, _ in got] == [t for t, _ in want]
    worst = max(abs(a - b) / abs(b) for (_, a), (_, b) in zip(got, want))
    assert worst <= rel, f"relative difference {worst:.3g} > {rel:g}: {got} vs {want}"


@torchrun_group
@pytest.mark.parametrize(
    "dtype, steps, rel",
    [("float32", 100, 1e-5), pytest.param("float64", 500, 1e-7, marks=pytest.mark.long)],
    ids=["float32", "float64"],
)
def test_two_processes_match_one_on_the_seed_config(tmp_path, dtype, steps, rel):
    """The seed config with sgd on 2 ranks logs the losses of one process to 1e-5 relative, over 100
    steps in float32 (rounding, summed in another order, is chaotic beyond: 1.7e-3 apart at step 499
    as SGD against the manual update is) and over all 500 steps in float64 (the long tier)."""
    out = torchrun("--seed", "0", "--optimizer", "sgd", "--dtype", dtype, "--steps", str(steps), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    one = opzoo.train(seed=0, optimizer="sgd", dtype=dtype, steps=steps, device="cpu")
    assert_rel(logged(out.stdout), one.logged(), rel)


@torchrun_group
def test_rank_zero_alone_prints_and_writes_and_a_resume_continues(tmp_path):
    """On digits' mini-batches of 7 rows (split 4 and 3) only rank 0 prints, takes the lock and writes
    the checkpoint, metrics and plot; a resume under torchrun ends where one uninterrupted process
    does (its default Adam, 40 steps)."""
    digits = ("--data", "digits", "--batch", "7", "--seed", "3")
    first = torchrun(
        *digits,
        *("--steps", "20", "--log-every", "5", "--checkpoint", "ck.pt", "--checkpoint-every", "10"),
        *("--metrics", "m.csv", "--plot", "p.png"),
        cwd=tmp_path,
    )
    assert first.returncode == 0, first.stderr
    assert [t for t, _ in logged(first.stdout)] == [4, 9, 14, 19]  # once each: one rank printed
    assert len(opzoo_lines(first.stderr)) == 1  # the summary line
    assert sorted(os.listdir(tmp_path)) == ["ck.pt", "ck.pt.lock", "m.csv", "p.png"]
    with open(tmp_path / "m.csv") as f:
        assert len(list(csv.DictReader(f))) == 20

    resumed = torchrun("--resume", "ck.pt", "--steps", "40", "--json", cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    result = json.loads(resumed.stdout)  # one document: one rank printed
    assert result["steps_run"] == 20 and result["config"]["batch"] == 7
    one = opzoo.train(data="digits", batch=7, seed=3, steps=40, device="cpu")
    assert result["final_loss"] == pytest.approx(one.final_loss, rel=1e-5)
    assert result["test_accuracy"] == pytest.approx(one.test_accuracy, abs=1e-9)
    assert opzoo_lines(resumed.stderr) == []


@torchrun_group
def test_an_error_on_one_rank_stops_all_with_one_line(tmp_path):
    """A metrics file rank 0 cannot write fails rank 0 alone before training: every rank stops (none
    waits for it), rank 0 prints one line and exits 2, the other exits 0."""
    missing = tmp_path / "missing" / "m.csv"
    out = torchrun(*SMALL_FLAGS, "--steps", "5", "--metrics", str(missing), cwd=tmp_path)
    assert out.returncode != 0
    folder = str(missing.parent)
    assert opzoo_lines(out.stderr) == [
        f"opzoo: error: cannot write metrics {str(missing)!r}: folder {folder!r} does not exist"
    ]
    # torchrun's own failure report gives each rank's exit status
    assert re.search(r"rank\s*:\s*0 \(local_rank: 0\)\s*exitcode\s*:\s*2\b", out.stderr), out.stderr
    assert not re.search(r"rank\s*:\s*1 \(local_rank: 1\)", out.stderr)  # it succeeded


def start_torchrun(*args: str, cwd) -> subprocess.Popen:
    """:func:`torchrun` started, not waited for: ten million steps, a loss line at each."""
    env = {k: v for k, v in os.environ.items() if k not in _distributed.ENV} | {"OMP_NUM_THREADS": "1"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]
    command += ["-m", "opzoo", "train", "--device", "cpu", *SMALL_FLAGS, "--steps", "10000000"]
    command += ["--log-every", "1", *args]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd
    )


def ranks_of(agent: subprocess.Popen) -> dict[int, int]:
    """The rank -> pid of torchrun's worker processes (its children), from their environment."""
    ranks = {}
    for pid in open(f"/proc/{agent.pid}/task/{agent.pid}/children").read().split():
        environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        ranks[int(next(v for v in environ if v.startswith(b"RANK="))[5:])] = int(pid)
    return ranks


@torchrun_group
def test_a_stopped_rank_fails_the_job_at_the_collective_timeout(tmp_path):
    """A rank stopped with SIGSTOP held the others in their next collective for gloo's 30 minutes;
    now rank 0 gives up after --collective-timeout with one line, and torchrun ends the job.
    Exact: rank 1 is stopped once rank 0 has printed a step (both are past every rendezvous), and
    then nothing but the timeout can end rank 0's wait. (The 10 s limit is the test's only wait; a
    step here takes milliseconds.)"""
    agent = start_torchrun("--collective-timeout", "10", cwd=tmp_path)
    stopped = None
    try:
        assert agent.stdout.readline().startswith("0 ")  # both ranks have trained step 0
        stopped = ranks_of(agent)[1]
        os.kill(stopped, signal.SIGSTOP)
        for line in agent.stderr:
            if line.startswith("opzoo: error:"):
                break
        os.kill(stopped, signal.SIGKILL)  # torchrun would wait out its own grace for a stopped rank
        _, rest = agent.communicate(timeout=120)
    finally:
        agent.kill()
        if stopped is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(stopped, signal.SIGKILL)
    assert line == (
        "opzoo: error: rank 0: a collective waited 10 s for the other ranks and gave up: one of them "
        "stopped, hung or died (--collective-timeout sets the wait)\n"
    )
    assert agent.returncode != 0


@torchrun_group
def test_ranks_end_when_torchrun_is_killed(tmp_path):
    """torchrun killed outright (no handler runs): the kernel ends each rank with it
    (PR_SET_PDEATHSIG). Exact: the ranks' pidfds are opened before the kill, and the test waits
    until each has ended. (Before: the ranks trained on, orphaned.)"""
    agent = start_torchrun(cwd=tmp_path)
    try:
        assert agent.stdout.readline().startswith("0 ")
        pidfds = [os.pidfd_open(pid) for pid in ranks_of(agent).values()]
        agent.kill()
        agent.communicate(timeout=120)
        pending = list(pidfds)
        while pending:
            ready, _, _ = select.select(pending, [], [], 120)
            assert ready, "a rank outlived torchrun by two minutes"
            pending = [fd for fd in pending if fd not in ready]
    finally:
        agent.kill()
    for fd in pidfds:
        os.close(fd)


def test_the_collective_timeout_reaches_the_process_group(monkeypatch):
    """--collective-timeout is the process group's timeout (every collective's)."""
    import datetime

    seen = {}
    monkeypatch.setattr(_distributed.dist, "init_process_group", lambda *a, **kw: seen.update(kw))
    monkeypatch.setattr(_distributed.dist, "destroy_process_group", lambda: None)
    with _distributed.process_group(_distributed.World(0, 2, 0), "cpu", 7.5):
        pass
    assert seen["timeout"] == datetime.timedelta(seconds=7.5)


@pytest.mark.parametrize(
    "args",
    [
        ["--seeds", "2"],
        ["-a", "myrelu,gelu"],
        ["--compile"],
        ["--device", "cuda:1"],
    ],
)
@pytest.mark.parametrize("rank", ["0", "1"])
def test_what_torchrun_does_not_take_is_one_line_on_rank_zero(args, rank, monkeypatch, capsys):
    """--seeds, a comparison, --compile and a GPU index are refused before the process group: one
    `opzoo: error:` line from rank 0, exit 2; the others say nothing and exit 0 (a failed status would
    make torchrun stop rank 0, perhaps before it had said why)."""
    for key, value in (TORCHRUN_ENV | {"RANK": rank, "LOCAL_RANK": rank}).items():
        monkeypatch.setenv(key, value)
    code = main(["train", *args])
    err = capsys.readouterr().err
    if rank == "0":
        assert code == 2
        assert len(err.splitlines()) == 1 and err.startswith("opzoo: error: under torchrun"), err
    else:
        assert code == 0 and err == ""


def test_a_failure_on_one_rank_is_raised_on_all(monkeypatch):
    """agree: rank 0 raises another rank's failure as `rank N: message` with its exit code; a rank's
    own error is raised as it is; with no failure each rank gets its result."""

    def gathered(told):
        def all_gather_object(out, mine):
            out[:] = [mine if t is None else t for t in told]

        return all_gather_object

    def fail():
        raise opzoo.ConfigError("no such folder")

    monkeypatch.setattr(_distributed.dist, "all_gather_object", gathered([None, ("rank one broke", 1)]))
    with pytest.raises(_distributed.RankError, match="^rank 1: rank one broke$") as caught:
        _distributed.agree(_distributed.World(0, 2, 0), lambda: 42)
    assert caught.value.exit_code == 1 and caught.value.reported_by_rank_0
    with pytest.raises(opzoo.ConfigError, match="no such folder"):
        _distributed.agree(_distributed.World(1, 2, 1), fail)
    monkeypatch.setattr(_distributed.dist, "all_gather_object", gathered([None, None]))
    assert _distributed.agree(_distributed.World(0, 2, 0), lambda: 42) == 42


def test_the_world_comes_from_torchrun_environment():
    """WORLD_SIZE unset or 1 is one process; a partial torchrun environment is refused by name."""
    assert _distributed.from_env({}) is None
    assert _distributed.from_env({"WORLD_SIZE": "1"}) is None
    assert _distributed.from_env(TORCHRUN_ENV | {"RANK": "1", "LOCAL_RANK": "1"}) == _distributed.World(
        1, 2, 1
    )
    with pytest.raises(opzoo.ConfigError, match="MASTER_ADDR is not set"):
        _distributed.from_env({k: v for k, v in TORCHRUN_ENV.items() if k != "MASTER_ADDR"})
    with pytest.raises(opzoo.ConfigError, match="does not fit"):
        _distributed.from_env(TORCHRUN_ENV | {"RANK": "2"})


def test_shards_cover_the_batch_and_each_rank_needs_a_row():
    """Shards are consecutive, differ by at most one row and cover the batch; fewer rows than ranks
    is refused."""
    import torch

    rows = torch.arange(7)
    parts = [_distributed.shard(_distributed.World(r, 3, r), rows).tolist() for r in range(3)]
    assert parts == [[0, 1, 2], [3, 4], [5, 6]]
    _distributed.check_batch(_distributed.World(0, 7, 0), 7)
    with pytest.raises(opzoo.ConfigError, match="the global batch has 2 row"):
        _distributed.check_batch(_distributed.World(0, 3, 0), 2)


def test_a_loss_that_is_not_a_sum_over_rows_is_refused():
    """The ranks' losses must add up to the global batch's: a mean is refused, the seed's sum taken."""
    import torch

    world = _distributed.World(0, 2, 0)
    g = torch.Generator().manual_seed(0)
    x, y, w1, w2 = (torch.randn(*s, generator=g) for s in ((6, 4), (6, 2), (4, 3), (3, 2)))
    act = torch.nn.ReLU()
    _distributed.check_additive(world, Network(act, seed_linear, seed_loss), x, y, w1, w2)
    mean = Network(act, seed_linear, lambda p, t: (p - t).pow(2).mean())
    with pytest.raises(opzoo.ConfigError, match="the loss must be a sum over rows"):
        _distributed.check_additive(world, mean, x, y, w1, w2)
