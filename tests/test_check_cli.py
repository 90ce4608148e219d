"""`opzoo check` and `pytest --opzoo`: bad input is one line, and what a run prints holds up
(the cases a newcomer's trial of the product found)."""

from __future__ import annotations

import json
import os

import pytest
from conftest import run_opzoo, run_pytest

from opzoo.core._contract import Contract, summary_of
from opzoo.core._loading import load
from opzoo.testing import PROPERTIES, check_property
from opzoo.testing.properties import parse_properties


@pytest.mark.parametrize("value, shown", [("nan", "nan"), ("inf", "inf"), ("-1", "-1"), ("1e300", "1e+300")])
def test_a_timeout_that_is_no_positive_number_is_refused(value, shown):
    """1e300 made every property fail with OverflowError (the timer underneath overflows)."""
    out = run_opzoo("check", "myrelu", "-p", "kinks", "--timeout", value)
    assert out.returncode == 2
    assert out.stderr.strip() == (
        f"opzoo: error: --timeout must be a positive number of seconds, at most 604800 (a week), got {shown}"
    )


def test_an_empty_property_list_is_refused_not_read_as_all():
    with pytest.raises(ValueError, match="no property named"):
        parse_properties([""])
    assert parse_properties(None) == list(PROPERTIES)  # None: every property
    out = run_opzoo("check", "myrelu", "-p", "")
    assert out.returncode == 2 and out.stderr.startswith("opzoo: error: no property named")


def test_an_op_named_twice_is_checked_once():
    out = run_opzoo("check", "myrelu", "myrelu", "-p", "kinks", "--device", "cpu", "--json")
    assert [r["id"] for r in json.loads(out.stdout)["results"]] == ["kinks[myrelu]"]


def test_info_json_is_strict_json():
    """An unbounded domain was written as -Infinity / Infinity, which strict parsers refuse."""
    out = run_opzoo("info", "softmax", "--json")

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    data = json.loads(out.stdout, parse_constant=refuse)
    assert "-inf" in json.dumps(data)


def test_an_op_without_a_docstring_has_no_summary_not_torchs():
    import torch

    class Bare(torch.autograd.Function):
        @staticmethod
        def forward(x):
            return x

    class Documented(torch.autograd.Function):
        """Mine."""

    class Inherits(Documented):
        pass

    assert summary_of(Bare, Contract()) == ""
    assert summary_of(Inherits, Contract()) == "Mine."


def test_the_reproduce_command_keeps_the_example_count(broken_plugin_path, monkeypatch):
    """Another --examples draws other examples: the printed command must say the count it ran."""
    monkeypatch.syspath_prepend(broken_plugin_path)
    reg = load()
    result = check_property(reg.info("wrongsign"), "gradient", profile="ci", examples=3)
    assert result.status == "fail"
    assert result.repro.startswith("opzoo check wrongsign --property gradient --profile ci --examples 3")


def test_pytest_opzoo_with_a_misspelled_op_is_one_usage_error(broken_plugin_path, tmp_path):
    """Before: one failing test per property, each with a traceback."""
    out = run_pytest("--opzoo=wrongsing", env={"PYTHONPATH": broken_plugin_path}, cwd=tmp_path)
    assert out.returncode == 4  # pytest's usage error
    assert "--opzoo: no op named 'wrongsing'; did you mean 'wrongsign'?" in out.stderr
    assert "Traceback" not in out.stdout + out.stderr


def test_pytest_opzoo_with_a_broken_op_is_one_failing_test(broken_plugin_path, tmp_path):
    """An op named that fails to load is one failing `load[...]` test, not one per property."""
    out = run_pytest(
        "--opzoo=crash", "-q", "--opzoo-timeout", "30", env={"PYTHONPATH": broken_plugin_path}, cwd=tmp_path
    )
    assert out.returncode == 1
    assert "1 failed" in out.stdout and "load[crash]" in out.stdout, out.stdout[-2000:]


@pytest.mark.parametrize("names", ["", ",,"])
def test_pytest_opzoo_naming_no_op_is_a_usage_error(tmp_path, names):
    """`--opzoo=` and `--opzoo=,,` ran no test and passed (exit 5, or 0 beside other tests)."""
    out = run_pytest(f"--opzoo={names}", env={}, cwd=tmp_path)
    assert out.returncode == 4
    assert f"--opzoo={names} names no op: give --opzoo for every op, or --opzoo=NAME[,NAME...]" in out.stderr


def test_pytest_opzoo_timeout_must_be_finite(tmp_path):
    out = run_pytest("--opzoo=myrelu", "--opzoo-timeout", "inf", env={}, cwd=tmp_path)
    assert out.returncode == 4 and "--opzoo-timeout must be a positive number" in out.stderr


def test_a_strategy_hook_that_fails_in_a_worker_is_reported_broken(tmp_path):
    """`opzoo check --jobs 2` with a plugin whose opzoo_input_strategy raises: the failure, met in
    a worker process, is one BROKEN line and exit 1 (it was lost with the worker's copy of the
    registry, and the run passed)."""
    site = tmp_path / "site"
    info = site / "opzoo_raising_strategy-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: opzoo-raising-strategy\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[opzoo.ops]\ndouble = fakeops:Double\n\n[opzoo]\nraising = fakehooks:raising_strategy\n"
    )
    tests = os.path.dirname(__file__)
    env = {"PYTHONPATH": os.pathsep.join([str(site), tests]), "OPZOO_CACHE_DIR": str(tmp_path / "cache")}
    args = ("double", "-p", "accepts,gradient", "--examples", "3", "--profile", "ci", "--device", "cpu")
    out = run_opzoo("check", *args, "--jobs", "2", "--json", env=env)
    assert out.returncode == 1, out.stderr
    report = json.loads(out.stdout)
    assert [r["status"] for r in report["results"]] == ["pass", "pass"]
    assert report["broken"] == [
        "opzoo-raising-strategy 1.0 (opzoo: raising = fakehooks:raising_strategy): "
        "hook opzoo_input_strategy raised for op 'double': RuntimeError: strategy boom"
    ]
    text = run_opzoo("check", *args, "--jobs", "2", env=env)
    assert text.returncode == 1 and text.stdout.count("BROKEN ") == 1, text.stdout


WARNS = """
import warnings
import torch


class Warns(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        warnings.warn("Warns is deprecated")
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * g
"""


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_op_that_warns_at_every_call_is_shown_warning_once_per_worker(tmp_path, jobs):
    """Checks reset Python's record of the warnings shown (torch's own catch_warnings blocks), and
    an op warning at every call printed its warning at every check: 61 times for one op. Each
    worker shows it once, as Python shows a warning once per place."""
    (tmp_path / "warns.py").write_text(WARNS)
    argv = ("check", "warns:Warns", "-p", "gradient,double_backward,layout", "--profile", "ci")
    out = run_opzoo(*argv, "-j", str(jobs), "--device", "cpu", env={"PYTHONPATH": str(tmp_path)})
    assert out.returncode == 0, out.stderr
    assert 1 <= out.stderr.count("UserWarning: Warns is deprecated") <= jobs, out.stderr
