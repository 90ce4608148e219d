"""benchmarks/check_speed.py, opzoo's checks against torch's on the same inputs: it runs (one op,
one property, one round) and prints its table's columns; a bad argument is one error line. Nothing
here times anything: the script only prints its figures."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

SCRIPT = ROOT / "benchmarks" / "check_speed.py"


def _speed(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300)


def test_one_op_one_property_prints_the_table():
    out = _speed("--ops", "myrelu", "--properties", "gradient", "--rounds", "1", "--figures", "none")
    assert out.returncode == 0, out.stderr
    header = next(line for line in out.stdout.splitlines() if line.startswith("| op |"))
    columns = [c.strip() for c in header.strip("|").split("|")]
    assert columns == [
        "op",
        "property",
        "inputs",
        "opzoo s",
        "peer",
        "peer s",
        "ratio",
        "opzoo CPU s",
        "peer CPU s",
        "CPU ratio",
        "peer failed on",
    ]
    (row,) = [line for line in out.stdout.splitlines() if line.startswith("| myrelu |")]
    assert "| gradient |" in row and "| gradcheck |" in row
    assert "median over 1 op(s)" in out.stdout and "load average (1 min)" in out.stdout
    assert "End to end" not in out.stdout  # --figures none, and no library row


@pytest.mark.parametrize(
    "args, said",
    [
        (["--rounds", "0"], "--rounds: expected 1 or more, got 0"),
        (["--properties", "reference"], "unknown property ['reference']"),
        (["--figures", "zoo,nosuch"], "unknown figure ['nosuch']"),
        (["--nosuch"], "unrecognized arguments: --nosuch"),
        (["--ops", "myrelu,nosuch", "--figures", "none"], "--ops: no op named nosuch"),
    ],
)
def test_a_bad_argument_is_one_error_line(args, said):
    out = _speed(*args)
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and out.stdout == ""
    (error,) = out.stderr.splitlines()
    assert error.startswith("check_speed.py: error: ") and said in error, out.stderr
