"""benchmarks/layout.py, the package's shape in figures: a checkout without ARCHITECTURE.md is measured
without its floors; a folder that is no checkout, a bad argument or a module that does not parse is one
error line and exit status 2, never a traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

LAYOUT = ROOT / "benchmarks" / "layout.py"


def _layout(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(LAYOUT), *args], capture_output=True, text=True, timeout=120)


def test_this_checkout_is_measured_with_its_floors():
    out = _layout(str(ROOT))
    assert out.returncode == 0, out.stderr
    assert "rooms (modules): " in out.stdout
    assert "imports up a floor of ARCHITECTURE.md: " in out.stdout and "not measured" not in out.stdout


def test_a_checkout_without_architecture_md_is_measured_without_floors(tmp_path):
    (tmp_path / "opzoo").mkdir()
    (tmp_path / "opzoo" / "__init__.py").write_text("from opzoo import _a\n")
    (tmp_path / "opzoo" / "_a.py").write_text("def f():\n    return 1\n")
    out = _layout(str(tmp_path))
    assert out.returncode == 0, out.stderr
    assert "rooms (modules): 2; packages: 1" in out.stdout
    assert "arrows (imports between modules): 1" in out.stdout
    assert "imports up a floor of ARCHITECTURE.md: not measured" in out.stdout


@pytest.mark.parametrize(
    "args, said",
    [
        (["{tmp}"], "is no checkout of opzoo: it has no opzoo/ folder"),
        (["{tmp}", "extra"], "unrecognized arguments: extra"),
        (["--nosuch"], "unrecognized arguments: --nosuch"),
    ],
)
def test_a_bad_argument_is_one_error_line(tmp_path, args, said):
    out = _layout(*(a.format(tmp=tmp_path) for a in args))
    assert out.returncode == 2
    assert "Traceback" not in out.stderr and out.stdout == ""
    error = out.stderr.splitlines()[-1]
    assert error.startswith("layout.py: error: ") and said in error, out.stderr


def test_a_module_that_does_not_parse_is_one_error_line(tmp_path):
    (tmp_path / "opzoo").mkdir()
    (tmp_path / "opzoo" / "broken.py").write_text("def f(:\n")
    out = _layout(str(tmp_path))
    assert out.returncode == 2
    (error,) = out.stderr.splitlines()  # the parser's words differ between Pythons
    assert error.startswith(
        f"layout.py: error: a module does not parse: {tmp_path / 'opzoo' / 'broken.py'}:1: "
    )
