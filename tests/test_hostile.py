"""Hostile or broken plugins are contained: exit, print, slow imports (plugins/opzoo-hostile-fixtures)."""

from __future__ import annotations

import json

import pytest
from conftest import install_fixture, run_opzoo


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    return {"PYTHONPATH": install_fixture(tmp_path_factory.mktemp("hostile-site"), "opzoo-hostile-fixtures")}


def test_a_plugin_calling_sys_exit_is_that_plugins_failure(env):
    """sys.exit(3) at a plugin's import, or in its hook, is recorded as its failure; opzoo goes on."""
    out = run_opzoo("list", "--json", env=env)
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["quitter"]["status"] == "broken" and rows["quitter"]["summary"] == "SystemExit: 3"
    assert any(r["summary"] == "hook opzoo_ops raised SystemExit: 4" for r in rows.values())
    assert rows["myrelu"]["status"] == "ok"
    check = run_opzoo("check", "chatty", "-p", "hygiene", "--profile", "ci", "--device", "cpu", env=env)
    assert check.returncode == 0, check.stdout + check.stderr


@pytest.mark.parametrize("argv", [["list", "--json"], ["info", "chatty", "--json"]])
def test_plugin_output_stays_off_stdout_while_printing_json(env, argv):
    """A plugin printing at import does not break `opzoo list --json` or `info --json`."""
    out = run_opzoo(*argv, env=env)
    assert out.returncode == 0, out.stderr
    json.loads(out.stdout)  # parses: nothing else is on stdout
    assert "hello from chatty" in out.stderr


def test_a_slow_plugin_import_is_named(env):
    """A plugin that takes over a second to import gets a one-line note naming it."""
    out = run_opzoo("list", env=env)
    notes = [line for line in out.stderr.splitlines() if line.startswith("opzoo: note: ")]
    assert any("opzoo-hostile-fixtures" in n and "sluggish" in n and "took" in n for n in notes), out.stderr
    assert not any("chatty" in n for n in notes)


def test_a_hung_op_fails_once_and_the_others_are_checked(env):
    """A backward that never returns fails its first property at the limit; the op's other
    properties are 'not run: the op hung'; another op in the same run is checked as usual."""
    # The limit is 20x what chatty's two one-example checks take; hang never returns.
    argv = "check hang chatty -p hygiene,layout --examples 1 --timeout 20 --profile ci --device cpu --json"
    out = run_opzoo(*argv.split(), env=env)
    assert out.returncode == 1, out.stderr
    got = {r["id"]: (r["status"], r["reason"]) for r in json.loads(out.stdout)["results"]}
    assert got["hygiene[hang]"] == ("fail", "timed out after 20 s: the op hung?")
    assert got["layout[hang]"] == ("skip", "not run: the op hung")
    assert got["hygiene[chatty]"][0] == got["layout[chatty]"][0] == "pass"
