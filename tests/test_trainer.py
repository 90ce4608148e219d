"""The trainer: seed reproduction, every option, checkpoints, kill-and-resume, bad input."""

from __future__ import annotations

import csv
import json
import os
import random
import re
import subprocess
import sys

import pytest
import torch
from conftest import run_opzoo
from seed_program import seed_losses

import opzoo
from opzoo.cli import main
from opzoo.trainer import _trainer
from opzoo.trainer._config import TrainConfig
from opzoo.trainer._data import make_data
from opzoo.trainer._preflight import DTYPES

SMALL = dict(batch=8, d_in=20, hidden=12, d_out=3, steps=30, lr=1e-3, seed=3)


def test_cli_reproduces_the_seed_program_float_for_float():
    """`opzoo train --activation myrelu --seed 0` prints the seed program's five losses exactly."""
    out = run_opzoo("train", "--activation", "myrelu", "--seed", "0")
    assert out.returncode == 0, out.stderr
    expected = [f"{t} {loss}" for t, loss in seed_losses(0)]
    assert out.stdout.splitlines() == expected
    assert len(expected) == 5


def test_api_reproduces_the_seed_program():
    """opzoo.train(seed=0) gives the same losses at the log steps, and the history of every step."""
    result = opzoo.train(seed=0)
    assert result.logged() == seed_losses(0)
    assert len(result.losses) == 500 and result.steps_per_sec > 0
    assert set(result.weights) == {"w1", "w2"}


def test_exact_zeros_occur_so_the_kink_convention_matters():
    """With torch.relu's gradient at 0 the losses drift from the seed's: the convention is load-bearing."""
    native = opzoo.train(seed=0, activation="torch:relu")
    assert native.logged()[0] == seed_losses(0)[0]  # identical before exact zeros appear
    assert native.logged()[-1] != seed_losses(0)[-1]


@pytest.mark.parametrize("optimizer", ["manual", "sgd", "adam"])
@pytest.mark.parametrize("dtype", ["float32", "float64", "bfloat16"])
def test_optimizers_and_dtypes_train(optimizer, dtype):
    """Every optimizer and dtype lowers the loss."""
    r = opzoo.train(**SMALL, optimizer=optimizer, dtype=dtype)
    assert r.weights["w1"].dtype == DTYPES[dtype]
    assert r.final_loss < r.losses[0]


def test_sgd_equals_the_manual_update():
    """torch.optim.SGD without momentum is the seed's update: same losses."""
    manual = opzoo.train(**SMALL)
    sgd = opzoo.train(**SMALL, optimizer="sgd")
    assert manual.losses == pytest.approx(sgd.losses, rel=1e-5)


def test_sizes_and_log_every():
    """The sizes shape the weights, and on_log fires every log_every steps."""
    seen = []
    r = _trainer.run(TrainConfig(**SMALL, log_every=7), on_log=lambda t, v: seen.append(t))
    assert r.weights["w1"].shape == (20, 12) and r.weights["w2"].shape == (12, 3)
    assert seen == [6, 13, 20, 27]


def test_act_args_reach_the_op():
    """--act-arg values reach the op; an out-of-range one is refused with the declared range."""
    a = opzoo.train(**SMALL, activation="isru", act_args={"alpha": 0.0})
    b = opzoo.train(**SMALL, activation="isru", act_args={"alpha": 5.0})
    assert a.label == "isru(alpha=0)" and a.losses != b.losses
    with pytest.raises(opzoo.ParamError, match=r"\[0, 10\]"):
        opzoo.train(**SMALL, activation="isru", act_args={"alpha": 11.0})


def test_act_args_must_be_taken_by_the_activation():
    """An --act-arg the activation does not take is an error, never silently dropped."""
    with pytest.raises(opzoo.ParamError, match="'myrelu' takes no parameter 'alpha'; its parameters: none"):
        opzoo.train(**SMALL, activation="myrelu", act_args={"alpha": 2.0})
    cfg = TrainConfig(**SMALL, act_args={"negative_slope": 0.2})
    results = opzoo.compare(cfg, ["leaky_relu", "myrelu", "torch:leaky_relu"])
    assert [r.label for r in results] == [
        "leaky_relu(negative_slope=0.2)",
        "myrelu",
        "torch:leaky_relu(negative_slope=0.2)",
    ]
    assert results[0].losses == results[2].losses  # the baseline got the same slope
    with pytest.raises(opzoo.ParamError, match="no activation among myrelu, silu takes parameter 'beta'"):
        opzoo.compare(TrainConfig(**SMALL, act_args={"beta": 1.0}), ["myrelu", "silu"])


def test_act_lr_sets_the_activations_learning_rate():
    """--act-lr overrides the scaled default for a learnable activation's parameters only."""
    from opzoo.trainer._update import learning_rates

    params = {"w1": torch.zeros(3), "act.inner.slope": torch.zeros(())}
    assert learning_rates(TrainConfig(lr=1e-6), params) == {"w1": 1e-6, "act.inner.slope": 1e-6 / 6400}
    assert learning_rates(TrainConfig(lr=1e-6, act_lr=1e-3), params)["act.inner.slope"] == 1e-3
    assert learning_rates(TrainConfig(lr=1e-3, optimizer="adam"), params)["act.inner.slope"] == 1e-3
    frozen = opzoo.train(**SMALL, activation="prelu", act_lr=1e-30)
    assert frozen.weights["act.inner.slope"].item() == pytest.approx(0.25)
    with pytest.raises(opzoo.ConfigError, match="act-lr must be a positive finite number"):
        opzoo.train(**SMALL, activation="prelu", act_lr=-1.0)


def test_learnable_activation_compiles():
    """--compile also trains a learnable activation's parameters, agreeing with eager."""
    eager = opzoo.train(**SMALL, activation="prelu")
    compiled = opzoo.train(**SMALL, activation="prelu", compile=True, compile_backend="aot_eager")
    torch.testing.assert_close(compiled.losses, eager.losses, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(
        compiled.weights["act.inner.slope"], eager.weights["act.inner.slope"], rtol=1e-4, atol=1e-6
    )


def test_compare_uses_the_same_data_and_initial_weights():
    """Compared activations start from the same data: identical ops give identical losses."""
    results = opzoo.compare(TrainConfig(**SMALL), ["myrelu", "torch:relu", "bentid"])
    assert [r.label for r in results] == ["myrelu", "torch:relu", "bentid"]
    assert results[0].losses[0] == results[1].losses[0]
    assert results[0].losses[0] != results[2].losses[0]


def test_compare_from_the_cli_prints_a_table(tmp_path):
    """Several activations end with a table; --plot draws one chart for all."""
    plot = tmp_path / "cmp.png"
    out = run_opzoo(
        "train",
        "-a",
        "myrelu,torch:relu",
        "--steps",
        "20",
        "--log-every",
        "10",
        "--d-in",
        "30",
        "--plot",
        str(plot),
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    blank = lines.index("")  # the log lines, a blank line, then the table
    logged = [line.split() for line in lines[:blank]]
    # each activation logs steps 9 and 19 (log-every 10), in the order they were given
    assert [(name, step) for name, step, _ in logged] == [
        ("myrelu", "9"),
        ("myrelu", "19"),
        ("torch:relu", "9"),
        ("torch:relu", "19"),
    ]
    final = {name: float(loss) for name, step, loss in logged if step == "19"}
    table = lines[blank + 1 :]
    assert "FINAL LOSS" in table[0] and "STEPS/S" in table[0]
    rows = {row.split()[0]: row.split() for row in table[1:] if row.strip() and not row.startswith("-")}
    assert {name: float(row[1]) for name, row in rows.items()} == pytest.approx(final, rel=1e-5)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_json_metrics_and_plot(tmp_path):
    """--json prints the result; --metrics writes a row per step as CSV or JSONL; --plot a PNG."""
    for ext in ("csv", "jsonl"):
        metrics = tmp_path / f"m.{ext}"
        out = run_opzoo(
            "train",
            "--steps",
            "25",
            "--d-in",
            "50",
            "--json",
            "--metrics",
            str(metrics),
            "--plot",
            str(tmp_path / "p.png"),
        )
        assert out.returncode == 0, out.stderr
        result = json.loads(out.stdout)
        assert [e["step"] for e in result["logged"]] == []  # 25 steps < one log period of 100
        assert result["config"]["d_in"] == 50 and result["steps_per_sec"] > 0
        if ext == "csv":
            rows = list(csv.DictReader(metrics.open()))
        else:
            rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        assert [int(r["step"]) for r in rows] == list(range(25))
        assert float(rows[-1]["loss"]) == result["final_loss"]
    assert (tmp_path / "p.png").stat().st_size > 1000


def test_quiet_prints_nothing():
    """--quiet prints neither loss lines nor a summary."""
    out = run_opzoo("train", "--steps", "100", "--d-in", "50", "--quiet")
    assert out.returncode == 0 and out.stdout == "" and out.stderr == ""


def test_progress_bar_on_a_terminal_only():
    """On a terminal the trainer draws a progress bar; piped, it prints only the loss lines."""
    import fcntl
    import os
    import pty
    import struct
    import termios

    leader, follower = pty.openpty()
    # a new pseudo-terminal is 0 columns wide, and tqdm draws nothing in 0 columns
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 100, 0, 0))
    proc = subprocess.Popen(
        [sys.executable, "-m", "opzoo", "train", "--steps", "200", "--d-in", "50"],
        stdout=follower,
        stderr=follower,
        close_fds=True,
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 4096)
        except OSError:  # the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    assert proc.wait(timeout=120) == 0
    shown = b"".join(chunks).decode(errors="replace")
    assert "step/s" in shown or "s/step" in shown, shown  # tqdm's rate
    assert "99 " in shown and "199 " in shown
    piped = run_opzoo("train", "--steps", "200", "--d-in", "50")
    assert piped.stdout.splitlines()[0].startswith("99 ") and "step/s" not in piped.stdout


def test_progress_bar_runs():
    """The progress bar (tqdm) does not change the results."""
    cfg = TrainConfig(**SMALL)
    assert _trainer.run(cfg, progress=True).losses == _trainer.run(cfg).losses


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compiled_step_matches_eager(backend):
    """--compile runs forward, backward and update as one graph; losses agree with eager."""
    eager = opzoo.train(**SMALL)
    compiled = opzoo.train(**SMALL, compile=True, compile_backend=backend)
    torch.testing.assert_close(compiled.losses, eager.losses, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(compiled.weights["w2"], eager.weights["w2"], rtol=1e-4, atol=1e-5)


def test_checkpoint_holds_everything_and_resume_continues(tmp_path):
    """A checkpoint holds weights, optimizer, step, RNG and config; resuming ends where a full run does."""
    ck = tmp_path / "ck.pt"
    full = opzoo.train(**SMALL, optimizer="adam")
    opzoo.train(**{**SMALL, "steps": 12}, optimizer="adam", checkpoint=str(ck))
    state = torch.load(ck, weights_only=True)
    assert {"config", "weights", "optimizer", "rng", "losses", "data"} <= set(state)
    assert len(state["losses"]) == 12 and state["optimizer"]["state"]
    resumed = opzoo.train(**SMALL, optimizer="adam", resume=str(ck))
    assert resumed.steps_run == SMALL["steps"] - 12
    assert resumed.losses == full.losses
    assert torch.equal(resumed.weights["w1"], full.weights["w1"])


def test_resume_refuses_other_settings(tmp_path):
    """A checkpoint resumed with another activation or size is refused, not silently mixed."""
    ck = tmp_path / "ck.pt"
    opzoo.train(**{**SMALL, "steps": 5}, checkpoint=str(ck))
    with pytest.raises(opzoo.CheckpointError, match="activation='myrelu'"):
        opzoo.train(**SMALL, activation="bentid", resume=str(ck))
    with pytest.raises(opzoo.CheckpointError, match="hidden=12"):
        opzoo.train(**{**SMALL, "hidden": 13}, resume=str(ck))


@pytest.mark.parametrize("content", [b"", b"garbage" * 10, b"PK\x03\x04truncated zip"])
def test_corrupt_checkpoint_is_a_clear_error_and_overwrites_nothing(tmp_path, content):
    """A corrupt, truncated or foreign file gives one clear line and is left as it was."""
    ck = tmp_path / "bad.pt"
    ck.write_bytes(content)
    out = run_opzoo("train", "--resume", str(ck), "--checkpoint", str(ck))
    assert out.returncode == 2
    assert out.stderr.startswith("opzoo: error: ") and out.stderr.count("\n") == 1
    assert ck.read_bytes() == content


def test_truncated_real_checkpoint_and_foreign_pickle(tmp_path):
    """A real checkpoint cut short, or a torch file that is not ours, is refused."""
    ck = tmp_path / "ck.pt"
    opzoo.train(**{**SMALL, "steps": 5}, checkpoint=str(ck))
    data = ck.read_bytes()
    ck.write_bytes(data[: len(data) // 2])
    with pytest.raises(opzoo.CheckpointError, match="corrupt, truncated or foreign"):
        opzoo.train(**SMALL, resume=str(ck))
    torch.save({"something": torch.ones(2)}, tmp_path / "foreign.pt")
    with pytest.raises(opzoo.CheckpointError, match="not an opzoo checkpoint"):
        opzoo.train(**SMALL, resume=str(tmp_path / "foreign.pt"))


# Adam amplifies a one-ulp difference in the first steps to the fifth digit by step 1500: the runs
# that are compared across processes are --deterministic, which makes them bit-identical (below).
KILLED_RUN = [
    "--seed",
    "5",
    "--steps",
    "1500",
    "--d-in",
    "200",
    "--hidden",
    "50",
    "--optimizer",
    "adam",
    "--lr",
    "1e-3",
    "--deterministic",
]


def _steps_saved(path) -> int:
    return len(torch.load(path, weights_only=True)["losses"])


PIPE_BYTES = 4096  # the smallest pipe Linux makes: a run blocks once it is this far ahead of us


def _run_until_step(cmd: list[str], step: int) -> tuple[subprocess.Popen, int]:
    """Start `opzoo CMD` logging every step; return once it has printed step ``step`` or later.

    A printed step t means steps up to t-1 are done and checkpointed: training is under way. The
    run writes to a one-page pipe, so it cannot get more than a page of lines ahead of the test.
    """
    import fcntl

    read_end, write_end = os.pipe()
    fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, PIPE_BYTES)
    proc = subprocess.Popen(
        [sys.executable, "-m", "opzoo", *cmd, "--log-every", "1"],
        stdout=write_end,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    os.close(write_end)
    # Unbuffered, read a byte at a time: the test holds no lines the run has written beyond this one.
    proc.stdout = os.fdopen(read_end, "rb", buffering=0)
    for line in iter(proc.stdout.readline, b""):
        t = int(line.split()[0])
        if t >= step:
            return proc, t
    raise AssertionError(f"the run ended (exit {proc.wait()}) before step {step}")


def _most_lines_in_a_pipe(losses: list[float]) -> int:
    """How many consecutive log lines can sit unread in the pipe, at most."""
    sizes = [len(f"{t} {loss}\n") for t, loss in enumerate(losses)]
    most, total, first = 0, 0, 0
    for last, size in enumerate(sizes):
        total += size
        while total > PIPE_BYTES:
            total -= sizes[first]
            first += 1
        most = max(most, last - first + 1)
    return most


@pytest.mark.parametrize("kills", [1, pytest.param(3, marks=pytest.mark.long)])
def test_killed_at_random_moments_then_resumed_ends_exactly_like_an_uninterrupted_run(tmp_path, kills):
    """SIGKILL mid-training (also mid-write), once (three times in the long tier), then --resume: the
    same weights and losses.

    Each kill comes after the run has printed a step past the previous kill's checkpoint, so every
    run resumes mid-training, and it lands anywhere in a step, the checkpoint write included.
    """
    reference = tmp_path / "reference.pt"
    assert run_opzoo("train", *KILLED_RUN, "--quiet", "--checkpoint", str(reference)).returncode == 0
    ref = torch.load(reference, weights_only=True)
    # When killed, a run is at most a pipe of lines, plus the step it computes, past the line the
    # test read: three kills drawn below 500 all land before the end, none after a run finished.
    ahead = _most_lines_in_a_pipe(ref["losses"]) + 2
    assert 500 + 3 * (ahead + 1) < 1500, ahead

    ck = tmp_path / "ck.pt"
    cmd = ["train", *KILLED_RUN, "--checkpoint", str(ck), "--checkpoint-every", "1"]
    saved = 0
    for kill_at in sorted(random.Random(1234).sample(range(1, 500), 3))[-kills:]:
        proc, printed = _run_until_step(cmd, max(kill_at, saved + 1))
        proc.kill()
        proc.wait()
        proc.stdout.close()
        before, saved = saved, _steps_saved(ck)
        assert before < printed <= saved < 1500  # it resumed where the last one stopped, and got on
        state = torch.load(ck, weights_only=True)
        assert state["losses"] == ref["losses"][:saved]  # no step lost or doubled
        cmd = ["train", "--resume", str(ck)]
    assert run_opzoo("train", "--resume", str(ck), "--quiet").returncode == 0

    done = torch.load(ck, weights_only=True)
    assert done["losses"] == ref["losses"] and len(done["losses"]) == 1500
    for name in ("w1", "w2"):
        assert torch.equal(done["weights"][name], ref["weights"][name])
    for mine, theirs in zip(done["optimizer"]["state"].values(), ref["optimizer"]["state"].values()):
        assert all(torch.equal(mine[k], theirs[k]) for k in ("exp_avg", "exp_avg_sq"))
    assert not list(tmp_path.glob(".ck.pt.*.tmp"))  # temp files of killed writers are swept


@pytest.mark.parametrize("every", [False, pytest.param(True, marks=pytest.mark.long, id="all")])
def test_deterministic_runs_are_bit_identical_across_processes(every):
    """--deterministic gives the same floats whatever the thread count or MKL code path asked for.

    Without it, MKL_CBWR=AVX2 alone moves the final loss of this run in the fifth digit: the default
    run compares that path with torch's default threads, the long tier all four settings.
    """
    every_core = {"OMP_NUM_THREADS": str(os.cpu_count())}  # torch's default (the suite sets 1)
    settings = [every_core, {"MKL_CBWR": "AVX2"}, {"OMP_NUM_THREADS": "1"}, {"MKL_CBWR": "COMPATIBLE"}]
    settings = settings if every else settings[:2]
    finals = set()
    for env in settings:
        out = run_opzoo("train", *KILLED_RUN, "--json", env=env)
        assert out.returncode == 0, out.stderr
        finals.add(json.loads(out.stdout)["final_loss"])
    assert len(finals) == 1, finals


def test_deterministic_mode_is_restored_after_the_run():
    """--deterministic changes torch's thread count, kernel choice and MKL's environment only for
    the run (a subprocess started later must not inherit another MKL code path)."""
    import os

    threads, env = torch.get_num_threads(), os.environ.get("MKL_CBWR")
    a = opzoo.train(**SMALL, deterministic=True)
    assert torch.get_num_threads() == threads and not torch.are_deterministic_algorithms_enabled()
    assert os.environ.get("MKL_CBWR") == env
    assert a.losses == opzoo.train(**SMALL, deterministic=True).losses


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--steps", "0"], "steps must be a positive integer, got 0"),
        (["--steps", "-3"], "steps must be a positive integer"),
        (["--lr", "0"], "lr must be a positive finite number"),
        (["--lr", "inf"], "lr must be a positive finite number"),
        (["--lr", "fast"], "argument --lr: invalid float value"),
        (["--hidden", "0"], "hidden must be a positive integer"),
        (["--dtype", "int8"], "unknown dtype 'int8'"),
        (["--device", "cuda"] if not torch.cuda.is_available() else ["--device", "tpu"], "cuda"),
        (["--optimizer", "lbfgs"], "unknown optimizer 'lbfgs'"),
        (["--activation", "relu6x"], "no op named 'relu6x'"),
        (["--activation", "torch:nope"], "torch:nope is not a native activation; baselines: torch:celu"),
        (["--activation", "torch:save"], "torch:save is not a native activation"),
        (["--act-arg", "alpha"], "--act-arg takes KEY=VALUE"),
        (["--resume", "/nonexistent/ck.pt"], "no checkpoint at"),
        (["--metrics", "out.txt"], "must end in .csv or .jsonl"),
        (["--checkpoint-every", "5"], "--checkpoint-every needs a --checkpoint path"),
        (["--checkpoint", "/nonexistent/ck.pt"], "folder '/nonexistent' does not exist"),
        (["--plot", "/nonexistent/loss.png"], "cannot write plot"),
        (["--metrics", "/nonexistent/m.csv"], "cannot write metrics"),
        (["--seed", str(10**23)], "seed must be an integer from -2**63 to 2**64-1, got 1000000000"),
        (["--seed", str(-(2**63) - 1)], "seed must be an integer from -2**63 to 2**64-1"),
        (["--d-in", "1000000", "--hidden", "1000000"], "need about 10.9 TiB of memory, but "),
        (["--batch", "10000000000000"], "need about 50.8 PiB of memory, but "),
        (["--batch", "1e13"], "argument --batch: invalid int value: '1e13'"),
        (["--compile", "--compile-backend", "nonsense"], "unknown compile-backend 'nonsense'; choose from"),
        (["--data", "mnist"], "unknown data 'mnist'; choose from random, digits, or give module:function"),
        (["--data", "no_such_module:load"], "cannot import data loader 'no_such_module:load'"),
        (["--data", "os:no_such_function"], "data loader 'os:no_such_function': module 'os' has no"),
        (["--data", "os:getcwd"], "data loader 'os:getcwd' must return four tensors"),
    ],
)
def test_bad_input_is_one_line_exit_2(argv, message, capsys):
    """Bad input prints one 'opzoo: error:' line, exits 2 and shows no traceback."""
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opzoo: error: ") and err.count("\n") == 1, err
    assert message in err


def test_memory_estimate_is_within_reach_of_the_real_footprint():
    """The estimate counts every tensor the run holds: it is at least the bytes of x, y, w1, w2."""
    from opzoo.trainer._preflight import memory_needed

    cfg = TrainConfig(batch=64, d_in=1000, hidden=100, d_out=10)
    data = make_data(cfg)
    held = sum(t.numel() * t.element_size() for t in data.values())
    assert 2 * held <= memory_needed(cfg) <= 6 * held


class _WrongShape(torch.autograd.Function):
    """ReLU whose backward returns a slice of the gradient."""

    @staticmethod
    def forward(ctx, x):
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        return grad[:, :5]


class _WrongCount(_WrongShape):
    """ReLU whose backward returns two gradients for its one input."""

    @staticmethod
    def backward(ctx, grad):
        return grad, grad


class _NoGradient(_WrongShape):
    """ReLU whose backward returns None: w1 would never learn."""

    @staticmethod
    def backward(ctx, grad):
        return None


@pytest.mark.parametrize(
    "op, message",
    [
        (
            _WrongShape,
            "opzoo: error: activation 'broken' has a broken backward: Function _WrongShapeBackward "
            "returned an invalid gradient at index 0 - got [8, 5] but expected shape compatible with [8, 12]",
        ),
        (
            _WrongCount,
            "opzoo: error: activation 'broken' has a broken backward: function _WrongCountBackward "
            "returned an incorrect number of gradients (expected 1, got 2)",
        ),
        (
            _NoGradient,
            "opzoo: error: activation 'broken' returned None as the gradient of its input, so w1 would "
            "never learn; its backward must return a tensor shaped like the input",
        ),
    ],
)
def test_a_broken_backward_is_one_line_naming_the_activation(op, message, monkeypatch, capsys):
    """A backward of the wrong shape, count, or None stops `train` at the first step with one line."""
    from opzoo.cli import _train as train_command

    load = train_command.registry_from

    def with_broken_op(args):
        registry = load(args)
        registry.register(op, name="broken")
        return registry

    monkeypatch.setattr(train_command, "registry_from", with_broken_op)
    argv = ["train", "-a", "broken", "--batch", "8", "--d-in", "20", "--hidden", "12", "--steps", "5"]
    assert main(argv) == 2
    assert capsys.readouterr().err == message + "\n"


def test_non_finite_loss_stops_with_exit_1(capsys):
    """A diverging run stops at the first non-finite loss with a clear message."""
    assert main(["train", "--lr", "1", "--steps", "50", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("opzoo: error: loss became") and "smaller --lr" in err


DIGITS_FAST = ["--data", "digits", "--steps", "150", "--seed", "0", "--device", "cpu"]


def test_digits_trains_on_held_out_data_and_reports_accuracy(tmp_path):
    """--data digits: 64 inputs, 10 classes, test_accuracy in the table, --json and --metrics."""
    pytest.importorskip("sklearn")
    metrics = tmp_path / "m.csv"
    out = run_opzoo("train", *DIGITS_FAST, "-a", "myrelu,torch:relu", "--json", "--metrics", str(metrics))
    assert out.returncode == 0, out.stderr
    runs = json.loads(out.stdout)
    for r in runs:
        assert r["config"]["data"] == "digits" and r["config"]["d_in"] == 64 and r["config"]["d_out"] == 10
        # chance is 0.1; 150 Adam steps of a 64-100-10 net get far past it on this fixed split
        assert r["test_accuracy"] > 0.8
    # myrelu and torch.relu differ only at exact zeros, which standardised data does not hit here
    assert runs[0]["test_accuracy"] == runs[1]["test_accuracy"]
    rows = list(csv.DictReader(metrics.open()))
    last = [row for row in rows if row["test_accuracy"]]
    assert [float(row["test_accuracy"]) for row in last] == [r["test_accuracy"] for r in runs]
    table = run_opzoo("train", *DIGITS_FAST, "-a", "myrelu,gelu", "--quiet")
    assert table.returncode == 0 and "TEST ACCURACY" in table.stdout.splitlines()[1]


def test_digits_defaults_differ_and_explicit_flags_win():
    """digits has its own defaults; the seed's stay as they were; a given setting wins."""
    pytest.importorskip("sklearn")
    assert _trainer.config_for() == TrainConfig()
    digits = _trainer.config_for("digits")
    assert (digits.d_in, digits.d_out, digits.optimizer) == (64, 10, "adam")
    assert _trainer.config_for("digits", lr=0.5, optimizer="sgd").lr == 0.5
    with pytest.raises(opzoo.ConfigError, match="d-in=64"):
        opzoo.train(data="digits", d_in=1000, steps=1)


def test_digits_resumes_exactly(tmp_path):
    """A digits run checkpointed and resumed sees the same mini-batches: same losses."""
    pytest.importorskip("sklearn")
    ck = str(tmp_path / "ck.pt")
    whole = opzoo.train(data="digits", seed=1, steps=40, device="cpu")
    opzoo.train(data="digits", seed=1, steps=20, device="cpu", checkpoint=ck)
    resumed = opzoo.train(data="digits", seed=1, steps=40, device="cpu", resume=ck)
    assert resumed.losses == whole.losses and resumed.test_accuracy == whole.test_accuracy


def test_digits_without_scikit_learn_is_one_line_with_the_pip_command(monkeypatch, capsys):
    """Without scikit-learn, --data digits is exit 2 and says what to install."""
    monkeypatch.setitem(sys.modules, "sklearn", None)
    assert main(["train", "--data", "digits", "--steps", "1"]) == 2
    assert capsys.readouterr().err == (
        "opzoo: error: data 'digits' needs scikit-learn: pip install 'opzoo[data]'\n"
    )


def test_a_diverging_activation_is_marked_and_the_others_go_on():
    """In a comparison a diverging op is marked 'diverged at step K'; the others train to the end."""
    out = run_opzoo(
        "train",
        "-a",
        "myrelu,legendre_p3,gelu",
        "--steps",
        "20",
        "--d-in",
        "50",
        "--seed",
        "0",
        "--quiet",
        "--device",
        "cpu",
    )
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line for line in out.stdout.splitlines()[2:]}
    assert "diverged at step 1" in rows["legendre_p3"]
    assert "diverged" not in rows["myrelu"] and "diverged" not in rows["gelu"]
    results = opzoo.compare(TrainConfig(steps=20, d_in=50, seed=0, device="cpu"), ["legendre_p3", "myrelu"])
    assert results[0].diverged_at == 1 and results[0].to_dict()["final_loss"] is None
    assert results[1].diverged_at is None and len(results[1].losses) == 20


def test_a_single_diverging_run_names_its_activation(capsys):
    """Alone, a diverging run stops with exit 1 and a message naming the activation."""
    assert main(["train", "-a", "legendre_p3", "--steps", "5", "--seed", "0", "--quiet"]) == 1
    err = capsys.readouterr().err
    assert err == (
        "opzoo: error: loss became inf at step 1 with activation 'legendre_p3'; "
        "try a smaller --lr (now 1e-06)\n"
    )


def test_seeds_give_mean_and_spread_a_rank_every_run_in_json_and_a_band_plot(tmp_path):
    """--seeds: a row per activation with mean ± std, a rank; --json keeps each run with its seed."""
    pytest.importorskip("sklearn")
    plot = tmp_path / "cmp.png"
    argv = ["train", "--data", "digits", "-a", "myrelu,gelu", "--steps", "60", "--device", "cpu"]
    out = run_opzoo(*argv, "--seeds", "0,3,7", "--quiet", "--plot", str(plot))
    assert out.returncode == 0, out.stderr
    head, *rows = out.stdout.strip().splitlines()
    assert head.split()[:2] == ["RANK", "ACTIVATION"] and "TEST ACCURACY (MEAN ± STD)" in head
    assert sorted(row.split()[0] for row in rows) == ["1", "2"]
    assert all(row.count("±") == 2 and row.split()[-1] == "3" for row in rows)
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    runs = json.loads(run_opzoo(*argv, "--seeds", "2", "--json").stdout)
    assert [(r["activation"], r["config"]["seed"]) for r in runs] == [
        ("myrelu", 0),
        ("gelu", 0),
        ("myrelu", 1),
        ("gelu", 1),
    ]
    # each seed draws its own initial weights (and batches): the runs differ
    assert runs[0]["final_loss"] != runs[2]["final_loss"]


def test_seeds_table_statistics():
    """The table's mean and std are those of the runs, and the rank follows accuracy."""

    def result(label, loss, acc, seed):
        cfg = TrainConfig(seed=seed)
        return _trainer.TrainResult(cfg, label, [loss], 1, 1.0, {}, test_accuracy=acc)

    runs = [result("a", 1.0, 0.5, 0), result("b", 2.0, 0.9, 0)]
    runs += [result("a", 3.0, 0.7, 1), result("b", 2.0, 0.9, 1)]
    head, rows = opzoo.Comparison(tuple(runs), seeds=(0, 1)).table()
    assert rows == [
        ("2", "a", "2 ± 1.4", "0.6000 ± 0.1414", "2"),
        ("1", "b", "2 ± 0", "0.9000 ± 0.0000", "2"),
    ]


def test_compare_takes_seeds_and_returns_every_run_seed_by_seed():
    """opzoo.compare(activations=..., seeds=N): each seed's activations start from that seed's data,
    each run is the run that seed gives alone, and on_log hears the seed."""
    small = {k: v for k, v in SMALL.items() if k != "seed"}
    heard = set()
    comparison = opzoo.compare(
        activations=["myrelu", "torch:relu", "gelu"],
        seeds=[3, 5],
        on_log=lambda name, t, loss, seed: heard.add((name, seed)),
        log_every=10,
        **small,
    )
    assert isinstance(comparison, opzoo.Comparison) and comparison.seeds == (3, 5)
    assert [(r.label, r.config.seed) for r in comparison] == [
        ("myrelu", 3),
        ("torch:relu", 3),
        ("gelu", 3),
        ("myrelu", 5),
        ("torch:relu", 5),
        ("gelu", 5),
    ]
    assert heard == {(n, s) for n in ("myrelu", "torch:relu", "gelu") for s in (3, 5)}
    assert comparison[0].losses[0] == comparison[1].losses[0]  # one seed: the same data and weights
    assert comparison[0].losses[0] != comparison[3].losses[0]  # another seed: other data
    alone = opzoo.train(activation="gelu", **SMALL)  # SMALL's seed is 3
    assert alone.losses == comparison[2].losses
    standings = comparison.ranking()
    assert [s.rank for s in standings] == [1, 2, 3]
    assert {s.label for s in standings} == {"myrelu", "torch:relu", "gelu"}
    assert all(len(s.runs) == 2 for s in standings)
    losses = [s.final_loss.mean for s in standings]
    assert losses == sorted(losses)


def test_the_cli_prints_the_librarys_table():
    """`opzoo train -a A,B --seeds N` prints Comparison.table(), and its ranks are ranking()'s."""
    from opzoo._table import text_table

    argv = ["-a", "myrelu,softsign", "--steps", "20", "--d-in", "30", "--device", "cpu"]
    out = run_opzoo("train", *argv, "--seeds", "2", "--quiet")
    assert out.returncode == 0, out.stderr
    comparison = opzoo.compare(activations=["myrelu", "softsign"], seeds=2, steps=20, d_in=30, device="cpu")
    assert out.stdout == "\n" + text_table(*comparison.table(), wrap_last=False) + "\n"
    _, rows = comparison.table()
    assert {(s.rank, s.label) for s in comparison.ranking()} == {(int(r[0]), r[1]) for r in rows}


def test_ranking_puts_diverged_activations_last_and_keeps_ties_in_order():
    """ranking(): the lower mean final loss first, a tie in the order given, all-diverged last."""

    def result(label, loss, seed, diverged_at=None):
        return _trainer.TrainResult(TrainConfig(seed=seed), label, [loss], 1, 1.0, {}, None, diverged_at)

    runs = [
        result("gone", 1.0, 0, diverged_at=4),
        result("b", 2.5, 0),
        result("c", 1.0, 0),
        result("d", 2.0, 0),
    ]
    runs += [
        result("gone", 1.0, 1, diverged_at=2),
        result("b", 2.5, 1),
        result("c", 3.0, 1),
        result("d", 2.0, 1),
    ]
    standings = opzoo.Comparison(tuple(runs), seeds=(0, 1)).ranking()
    assert [(s.rank, s.label) for s in standings] == [(1, "c"), (2, "d"), (3, "b"), (4, "gone")]
    assert standings[0].final_loss == (2.0, pytest.approx(2**0.5))
    assert standings[3].final_loss is None and standings[3].diverged_at == [4, 2]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"seeds": 0}, "`seeds` N must be a positive integer, got 0"),
        ({"seeds": [1, 1]}, "`seeds` lists each seed once"),
        ({"seeds": "3"}, "`seeds` takes a count N or a list of seeds"),
        ({"seeds": [0, 1.5]}, "`seeds` takes integers"),
        ({"seeds": 2, "seed": 1}, "`seeds` runs each of its seeds; leave out `seed`"),
        ({"seeds": 2, "checkpoint": "ck.pt"}, "`checkpoint` takes one run, not `seeds`"),
        ({"activations": []}, "`activations` needs at least one op name"),
        ({"seeds": [0, 2**64]}, "seed must be an integer from -2**63 to 2**64-1"),
        ({"seeds": 10**11}, "`seeds` N runs at most 10000 seeds, got 100000000000"),
    ],
)
def test_compare_refuses_bad_seeds_before_any_training(kwargs, message):
    """A bad seed, anywhere in `seeds`, or a setting a comparison does not take, is refused before the
    first run starts."""
    logged = []
    with pytest.raises(opzoo.ConfigError, match=message.replace("*", r"\*")):
        opzoo.compare(activations=kwargs.pop("activations", ["myrelu"]), on_log=logged.append, **kwargs)
    assert logged == []


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--seeds", "0"], "--seeds N must be a positive integer, got '0'"),
        (["--seeds", "a,b"], "--seeds takes a count N or a list S,S,..., got 'a,b'"),
        (["--seeds", "1,1"], "--seeds lists each seed once"),
        (["--seeds", "3", "--seed", "1"], "--seeds runs each of its seeds; leave out --seed"),
    ],
)
def test_bad_seeds_are_one_line_exit_2(argv, message, capsys):
    """A bad --seeds is one line, exit 2."""
    assert main(["train", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("opzoo: error: ") and err.count("\n") == 1 and message in err


def test_held_out_data_runs_on_one_thread_and_restores_the_setting():
    """A digits run on the CPU uses one intra-op thread, and puts torch's setting back afterwards."""
    pytest.importorskip("sklearn")
    before, seen = torch.get_num_threads(), []
    opzoo.train(data="digits", steps=3, device="cpu", log_every=1)
    _trainer.run(
        _trainer.config_for("digits", steps=2, device="cpu", log_every=1),
        on_log=lambda t, v: seen.append(torch.get_num_threads()),
    )
    assert seen == [1, 1] and torch.get_num_threads() == before


def test_the_settings_import_no_torch():
    """_config is plain Python: importing it, building and validating a TrainConfig loads no torch
    (tests/test_architecture.py checks the import graph, deferred imports included)."""
    code = (
        "import sys; from opzoo.trainer._config import TrainConfig; TrainConfig(lr=0.1).validate(); "
        "print('torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_every_setting_is_one_flag_whose_help_is_its_record(monkeypatch, capsys):
    """Each TrainConfig field is declared once, with its record: `opzoo train --help` shows a flag
    for every setting with the record's help (other settings named as flags), and explains rather
    than cites a seed file by number."""
    from opzoo.cli import _as_flags
    from opzoo.trainer._config import SETTINGS

    monkeypatch.setenv("COLUMNS", "2000")  # nothing wrapped mid-phrase
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for s in SETTINGS:
        flag = {"activation": "--activation", "act_args": "--act-arg"}.get(s.name, "--" + s.label)
        assert re.search(re.escape(flag) + r"[ ,]", shown), flag
        assert _as_flags(s.help) in shown, s.name
    assert "--no-deterministic" in shown and "learning rate (default 1e-6)" in shown
    assert not re.search(r"seed \d{3}", shown)


def test_each_setting_is_checked_by_its_record():
    """A value a setting's record refuses is one ConfigError naming the setting, in the library; the
    same rule refuses it on the command line (test_bad_input_is_one_line_exit_2)."""
    for bad, message in [
        ({"act_lr": True}, "act-lr must be a positive finite number, got True"),
        ({"checkpoint_every": 0, "checkpoint": "ck.pt"}, "checkpoint-every must be a positive integer"),
        ({"log_every": 2.5}, "log-every must be a positive integer, got 2.5"),
        ({"optimizer": "lbfgs"}, "unknown optimizer 'lbfgs'; choose from manual, sgd, adam"),
    ]:
        with pytest.raises(opzoo.ConfigError, match=re.escape(message)):
            TrainConfig(**bad).validate()
