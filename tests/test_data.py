"""The trainer's data sets (opzoo/trainer/_data.py): whatever a `--data module:function` loader does, it is
one line and exit 2, never a traceback, an allocation of hundreds of GB, or a silent exit 0."""

from __future__ import annotations

import pytest
from conftest import run_opzoo

from opzoo.cli import main

LOADERS = """
import torch

def good():
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=g)
    y = (x[:, 0] > 0).long()
    return x[:30], y[:30], x[30:], y[30:]

def nan():
    x, y, xt, yt = good()
    x[0, 0] = float("nan")
    return x, y, xt, yt

def inf_target():
    x, y, xt, yt = good()
    yt = torch.nn.functional.one_hot(yt).double()
    yt[0, 0] = float("inf")
    return x, torch.nn.functional.one_hot(y).double(), xt, yt

def huge_label():
    x, y, xt, yt = good()
    y[0] = 10**9
    return x, y, xt, yt

def negative_label():
    x, y, xt, yt = good()
    y[0] = -1
    return x, y, xt, yt

def raises():
    raise ValueError("boom")

def exits():
    raise SystemExit(0)

def meta():
    x, y, xt, yt = good()
    return x.to("meta"), y, xt, yt

def sparse():
    x, y, xt, yt = good()
    return x, y, xt.to_sparse(), yt

def complex_x():
    x, y, xt, yt = good()
    return x.to(torch.complex64), y, xt, yt

def huge():  # finite, but the squares of their spread overflow: std inf, every feature 0
    x, y, xt, yt = good()
    return x.double() * 1e300, y, xt.double() * 1e300, yt

def one_row():  # no spread at all: torch warned and opzoo trained on a scale of 1
    x, y, xt, yt = good()
    return x[:1], y[:1], xt, yt

def far_test():  # x_train's column 1 spreads 5e-151; x_test's 1e200 standardized is 2e350
    x, y, xt, yt = good()
    x, xt = x.double(), xt.double()
    x[:, 1] = torch.tensor([0.0, 1e-150], dtype=torch.float64).repeat(15)
    xt[0, 1] = 1e200
    return x, y, xt, yt
"""

EXIT_AT_IMPORT = "raise SystemExit(0)\n"


@pytest.fixture
def loaders(tmp_path, monkeypatch):
    (tmp_path / "opzoo_test_loaders.py").write_text(LOADERS)
    (tmp_path / "opzoo_test_exit_at_import.py").write_text(EXIT_AT_IMPORT)
    monkeypatch.syspath_prepend(str(tmp_path))


@pytest.mark.parametrize(
    "loader, message",
    [
        ("nan", "returned x_train with 1 value(s) that are not finite (NaN or infinite)"),
        ("inf_target", "returned y_test with 1 value(s) that are not finite"),
        (
            "huge_label",
            "has 1000000001 classes (its largest label plus one): one-hot targets for its 40 rows "
            "need about 298 GiB of memory, but cpu has",
        ),  # fmt: skip
        ("negative_label", "1-D y must hold class indices (non-negative integers)"),
        ("raises", "data loader 'opzoo_test_loaders:raises' raised ValueError: boom"),
        ("exits", "data loader 'opzoo_test_loaders:exits' raised SystemExit: 0"),
        ("meta", "returned x_train on device meta; give a CPU or CUDA tensor"),
        ("sparse", "returned x_test of layout torch.sparse_coo; give a dense tensor (.to_dense())"),
        ("complex_x", "returned x_train of dtype torch.complex64; give real numbers"),
        (
            "huge",
            "data 'opzoo_test_loaders:huge': x_train's column 0 is too large to standardize (its values "
            "reach ",
        ),
        (
            "one_row",
            "data 'opzoo_test_loaders:one_row' has 1 training row: standardizing its features needs at "
            "least 2\n",
        ),
        (
            "far_test",
            "x_test's column 1 overflows float64 when standardized (its values reach 1e+200, x_train",
        ),
    ],
)
def test_a_bad_loader_is_one_line_exit_2(loaders, loader, message, capsys):
    """Each was a traceback (an allocation of 240 GB for a label of 1e9, a meta tensor in the
    first matmul), a NaN loss at step 0, or, for SystemExit(0), exit 0 with nothing trained; features
    whose spread overflows, or one row, trained silently on features all 0 or torch's raw warning."""
    assert main(["train", "--data", f"opzoo_test_loaders:{loader}", "--steps", "2", "--device", "cpu"]) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("opzoo: error: ") and captured.err.count("\n") == 1, captured.err
    assert message in captured.err
    assert captured.out == ""


def test_a_loader_module_that_exits_at_import_is_one_line(loaders, capsys):
    """sys.exit at the loader module's import is the loader's failure, not the end of opzoo."""
    assert main(["train", "--data", "opzoo_test_exit_at_import:load", "--steps", "2"]) == 2
    err = capsys.readouterr().err
    assert err == "opzoo: error: cannot import data loader 'opzoo_test_exit_at_import:load': SystemExit: 0\n"


def test_a_good_loader_trains(loaders, capsys):
    """The same module's good loader trains: the checks refuse only what is wrong."""
    assert (
        main(["train", "--data", "opzoo_test_loaders:good", "--steps", "2", "--device", "cpu", "--quiet"])
        == 0
    )


def test_one_row_of_data_is_one_line_and_no_warning(loaders, tmp_path):
    """End to end: the refusal is the whole of stderr, with no torch warning before it."""
    out = run_opzoo(
        "train", "--data", "opzoo_test_loaders:one_row", "--steps", "1", env={"PYTHONPATH": str(tmp_path)}
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Warning" not in out.stderr, out.stderr
