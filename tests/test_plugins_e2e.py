"""End to end: real installed plugin distributions from plugins/, found through entry points."""

from __future__ import annotations

import json

import pytest
from conftest import run_opzoo


def listing(*args, env=None):
    out = run_opzoo("list", "--json", *args, env=env)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_example_plugins_show_up_with_their_source():
    """The installed example plugins are listed with distribution and version; opzoo unchanged."""
    rows = {r["name"]: r for r in listing()}
    assert rows["myrelu"]["source"] == "opzoo 0.1.0"
    assert rows["bentid"]["source"] == "opzoo-bentid 1.0.0"
    assert rows["logcosh"]["source"] == rows["isru"]["source"] == "opzoo-smooth 0.3.0"
    assert all(r["status"] == "ok" for r in rows.values())


def test_broken_plugin_is_reported_not_fatal(broken_plugin_path):
    """Each fault of the broken plugin is a row with its reason; everything else still works."""
    env = {"PYTHONPATH": broken_plugin_path}
    rows = listing(env=env)
    by_status = {}
    for r in rows:
        by_status.setdefault(r["status"], []).append(r)
    broken = {r["name"]: r["summary"] for r in by_status["broken"] if r["name"] != "-"}
    plugin_level = [r["summary"] for r in by_status["broken"] if r["name"] == "-"]
    assert "this plugin module fails to import" in broken["crash"]
    assert "is not a torch.autograd.Function" in broken["notafunction"]
    assert "does not define backward" in broken["noback"]
    assert "low < high" in broken["badcontract"]
    assert len(plugin_level) == 2
    assert any("hook opzoo_ops raised ValueError" in s for s in plugin_level)
    assert any("No module named 'opzoo_broken.not_there'" in s for s in plugin_level)
    assert {r["name"] for r in by_status["duplicate"]} == {"opzoo:myrelu", "opzoo-broken-fixtures:myrelu"}
    assert {r["name"] for r in by_status["ok"]} >= {"bentid", "fine", "logcosh"}

    out = run_opzoo("list", env=env)
    assert out.returncode == 0 and "problem(s)" in out.stderr
    assert "broken" in out.stdout and "duplicate" in out.stdout


def test_duplicate_is_an_error_naming_both_and_qualified_works(broken_plugin_path):
    """A name offered twice is refused naming both sources; dist:name reaches either."""
    env = {"PYTHONPATH": broken_plugin_path}
    out = run_opzoo("info", "myrelu", env=env)
    assert out.returncode == 2
    assert "'opzoo' and 'opzoo-broken-fixtures'" in out.stderr and "Traceback" not in out.stderr
    assert "opzoo.ops.relu:MyReLU" in run_opzoo("info", "opzoo:myrelu", env=env).stdout
    assert "opzoo_broken.ops:Fine" in run_opzoo("info", "opzoo-broken-fixtures:myrelu", env=env).stdout


def test_strict_mode_fails_one_line(broken_plugin_path):
    """--strict and OPZOO_STRICT turn the first failure into an error."""
    env = {"PYTHONPATH": broken_plugin_path}
    for args, extra in ((["--strict", "list"], {}), (["list"], {"OPZOO_STRICT": "1"})):
        out = run_opzoo(*args, env={**env, **extra})
        assert out.returncode == 2
        assert out.stderr.startswith("opzoo: error: ") and out.stderr.count("\n") == 1


@pytest.mark.parametrize(
    "how",
    [
        {"args": ["--block", "opzoo-broken-fixtures"]},
        {"args": ["list", "--block", "opzoo_broken_fixtures"]},
        {"env": {"OPZOO_BLOCK": "opzoo-broken-fixtures"}},
        {"env": {"OPZOO_DISABLE_PLUGIN_AUTOLOAD": "1"}},
    ],
)
def test_blocking_the_broken_plugin(broken_plugin_path, how):
    """Blocking by name, or disabling autoload, leaves a clean registry."""
    env = {"PYTHONPATH": broken_plugin_path, **how.get("env", {})}
    args = how.get("args", [])
    if "list" not in args:
        args = [*args, "list"]
    out = run_opzoo(*args, "--json", env=env)
    rows = json.loads(out.stdout)
    assert all(r["status"] == "ok" for r in rows) and "crash" not in {r["name"] for r in rows}
    if "OPZOO_DISABLE_PLUGIN_AUTOLOAD" in env:
        assert {r["dist"] for r in rows} == {"opzoo"} and "myrelu" in {r["name"] for r in rows}
