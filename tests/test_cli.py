"""The command line: fast help, one-line errors, list and info."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conftest import run_opzoo

from opzoo.cli import main


def test_help_does_not_import_torch():
    """`opzoo --help` returns without importing torch (it costs seconds)."""
    code = (
        "import sys\n"
        "from opzoo.cli import main\n"
        "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
        "for sub in ('list', 'info', 'train', 'check', 'bench'):\n"
        "    try:\n        main([sub, '--help'])\n    except SystemExit:\n        pass\n"
        "assert 'torch' not in sys.modules, 'torch imported'\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "usage: opzoo" in out.stdout


@pytest.mark.parametrize(
    "argv, message",
    [
        (["lst"], "invalid choice: 'lst'"),
        (["trian"], "did you mean 'train'?"),
        (["info", "myrelx"], "no op named 'myrelx'; did you mean 'myrelu'"),
        (["list", "--bogus"], "unrecognized arguments: --bogus"),
        (["info"], "the following arguments are required: name"),
    ],
)
def test_user_mistakes_are_one_line(argv, message, capsys):
    """A user's mistake prints one 'opzoo: error:' line and exits 2, no traceback."""
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("opzoo: error: ") and message in err
    assert err.count("\n") == 1 and "Traceback" not in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["train", "--seeds", "100000000000"], "--seeds N runs at most 10000 seeds, got '100000000000'"),
        (["train", "--compile-backend", "nosuch"], "--compile-backend 'nosuch' is taken with --compile only"),
        (["train", "--collective-timeout", "0"], "--collective-timeout must be a positive number of seconds"),
        (["train", "--collective-timeout", "1e300"], "at most 604800 (a week), got 1e+300"),
        (
            ["check", "myrelu", "--timeout", "1e300"],
            "--timeout must be a positive number of seconds, at most",
        ),
        (
            ["check", "myrelu", "--examples", str(10**20)],
            "--examples must be a positive integer, at most 100000",
        ),
        (["bench", "--sizes", "1e14"], "--sizes 100000000000000: its float32 tensors need about 2.13 PiB"),
        (
            ["bench", "--sizes", "100000000000000"],
            "its float32 tensors need about 2.13 PiB of memory, but cpu",
        ),
        (["bench", "--sizes", "1.5"], "--sizes takes positive integers, got '1.5'"),
        (["bench", "--compile", "--compile-backend", "nosuch"], "unknown compile-backend 'nosuch'; choose"),
        (["bench", "--compile-backend", "nosuch"], "--compile-backend 'nosuch' is taken with --compile only"),
    ],
)
def test_the_audits_bad_input_is_one_line_exit_2(argv, message, capsys):
    """Each of these was a traceback (MemoryError, OverflowError in every property, an allocation of
    400 TB, InvalidBackend after minutes of measuring) or silently ignored (exit 0); now one line, exit 2,
    before any work."""
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("opzoo: error: ") and captured.err.count("\n") == 1, captured.err
    assert message in captured.err
    assert captured.out == ""


def test_no_command_prints_help(capsys):
    """Plain `opzoo` shows the help and exits 2."""
    assert main([]) == 2
    assert "COMMAND" in capsys.readouterr().out


def test_list_json_and_names(capsys):
    """`opzoo list --json` has one row per op with source and status; names only with --format."""
    assert main(["list", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["myrelu"]["dist"] == "opzoo" and rows["myrelu"]["status"] == "ok"
    assert main(["list", "--format", "names"]) == 0
    assert "myrelu" in capsys.readouterr().out.split()


def test_info_json(capsys):
    """`opzoo info NAME --json` describes the contract and the source."""
    assert main(["info", "MyReLU", "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["module"] == "opzoo.ops.relu:MyReLU"
    assert d["kinks"] == {"0.0": 1.0} and d["reference"] == "torch.relu"


def test_info_shows_each_param_with_its_range_and_what_it_is(capsys):
    """`opzoo info` writes a parameter as a user declares one, not as a dict of its fields; a Dim
    (no range: any dimension) as its default and what it is."""
    import math

    from opzoo.cli._listing import _param_text

    assert main(["info", "hardtanh"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if x.startswith("params"))
    assert line.endswith("min_val=-1.0 in [-10, -0.01] (lower end); max_val=1.0 in [0.01, 10] (upper end)")
    dim = {"default": -1, "low": -math.inf, "high": math.inf, "doc": "the dimension the op works along"}
    assert _param_text("dim", dim) == "dim=-1 (the dimension the op works along)"


def test_python_dash_m_runs():
    """`python -m opzoo` is the same command."""
    out = run_opzoo("list")
    assert out.returncode == 0 and "myrelu" in out.stdout


def test_bench_quick_smoke():
    """`opzoo bench --quick` runs every section at tiny sizes (numbers only; no thresholds)."""
    out = run_opzoo("--no-autoload", "bench", "--quick", "--json", timeout=600)
    assert out.returncode == 0, out.stderr
    rows = json.loads(out.stdout)["rows"]
    assert {r["section"] for r in rows} == {"op speed", "saved memory", "trainer", "start-up"}
    timed = [r for r in rows if r["section"] != "saved memory"]
    assert all(r["ours"] > 0 and r["baseline"] > 0 for r in timed)  # every timing measured something
    assert all(r["ratio"] == pytest.approx(r["ours"] / r["baseline"]) for r in timed)
    assert {r["name"] for r in rows if r["section"] == "op speed"} >= {"myrelu", "gelu", "softplus"}
    mine = {r["name"]: r for r in rows if r["section"] == "saved memory"}
    assert mine["leaky_relu"]["ours"] == 0 and mine["myrelu"]["ours"] == 4


def test_bench_bad_input():
    """Bad bench options are one-line errors."""
    for args, message in ((["--sizes", "1,x"], "--sizes takes"), (["--repeat", "0"], "--repeat must")):
        out = run_opzoo("bench", *args)
        assert out.returncode == 2 and out.stderr.startswith("opzoo: error: " + message)


def test_library_errors_name_parameters_and_the_cli_names_flags(capsys):
    """The trainer speaks of its parameters (`lr`); the command line turns them into flags (--lr)."""
    import pytest

    import opzoo
    from opzoo.cli import main

    with pytest.raises(opzoo.ConfigError, match="`checkpoint_every` needs a `checkpoint` path"):
        opzoo.TrainConfig(checkpoint_every=5).validate()
    assert main(["train", "--checkpoint-every", "5"]) == 2
    assert capsys.readouterr().err == "opzoo: error: --checkpoint-every needs a --checkpoint path\n"


def test_bench_times_linear_and_loss_ops_at_the_seeds_own_shapes():
    """At the seed's size, a linear op is timed at both of the seed's layers and a loss at its
    64x10 pair; other general ops get inputs of about that many elements."""
    import opzoo
    from opzoo.bench import _ops

    builtin = opzoo.load(autoload=False)
    shapes = {name: _ops.seed_shapes(builtin.info(name)) for name in ("linear", "sse", "softmax")}
    assert shapes == {
        "linear": [[(64, 1000), (1000, 100)], [(64, 100), (100, 10)]],
        "sse": [[(64, 10), (64, 10)]],
        "softmax": None,
    }
    rows = _ops.bench_ops([builtin.info("linear")], [_ops.SEED_SIZE], repeat=1, devices=["cpu"])
    assert [r.detail for r in rows] == ["64x1000, 1000x100 cpu", "64x100, 100x10 cpu"]


def test_bench_times_an_op_of_two_outputs_like_an_elementwise_one():
    """docs/plugins.md's SinCos, ()->(),() with a reference, made `opzoo bench` a ZeroDivisionError
    (its cores have rank 0); it is timed on inputs of n elements, at every size, as an elementwise op."""
    from correct_ops import Product, SinCos

    import opzoo
    from opzoo.bench import _ops

    reg = opzoo.Registry()
    reg.register(SinCos, name="sincos")
    reg.register(Product, name="product")
    assert _ops.general_shapes(reg.info("sincos"), 64) == [(64,)]
    assert _ops.general_shapes(reg.info("product"), 64) == [(64,), (64,)]
    rows = _ops.bench_ops([reg.info("sincos")], [64, 2_000_000], repeat=1, devices=["cpu"])
    assert [(r.name, r.detail) for r in rows] == [("sincos", "64 cpu"), ("sincos", "2,000,000 cpu")]
    assert all(r.ours > 0 and r.baseline > 0 for r in rows)


@pytest.mark.parametrize("threads", ["0", "-1", "cpus + 1", "100000"])
def test_bench_threads_are_at_most_the_usable_cpus(threads, capsys):
    """`--threads 100000` was a segfault (libgomp could not make the threads): more threads than the
    CPUs this process may use is refused in one line, before anything is measured."""
    from opzoo.testing.running._parallel import usable_cpus

    cpus = usable_cpus()
    value = str(cpus + 1) if threads == "cpus + 1" else threads
    assert main(["bench", "--quick", "--threads", value, "myrelu"]) == 2
    err = capsys.readouterr().err
    assert (
        err
        == f"opzoo: error: --threads must be from 1 to {cpus} (the CPUs this process may use), got {value}\n"
    )
