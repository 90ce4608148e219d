"""The options of a run of the checks are declared once (testing/running/_options.py): the flags of
`opzoo check`, `mutate` and `report`, pytest's `--opzoo-*` options, `RunOptions` and the reproduce
line all follow from the records."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from conftest import run_opzoo, run_pytest

from opzoo.cli import build_parser
from opzoo.testing.running._options import (
    COMMANDS,
    OPTIONS,
    OptionError,
    RunOptions,
    flags,
    in_shard,
    parse,
)


def _subparser(command: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[command]


def test_run_options_has_one_field_per_record_with_its_default():
    """A field of RunOptions for each record, in the records' order, defaulting to the record's."""
    fields = dataclasses.fields(RunOptions)
    assert [f.name for f in fields] == list(OPTIONS)
    assert [f.default for f in fields] == [o.default for o in OPTIONS.values()]


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_takes_the_flags_its_records_name(command):
    """check, mutate and report declare no run flag of their own: each comes from its record, with
    its short flag, and defaults to None (not given), so that the record's default applies."""
    actions = {a.dest: a for a in _subparser(command)._actions}
    for option in OPTIONS.values():
        if command not in option.commands:
            assert option.name not in actions, (command, option.name)
            continue
        action = actions[option.name]
        assert action.option_strings == [option.flag, *([option.short] if option.short else [])]
        assert action.default is None
        assert action.help == option.help_for(command)


def test_pytest_takes_the_records_as_opzoo_options():
    """pytest's --opzoo-NAME options are the records it takes (not --jobs: pytest-xdist's -n is)."""
    from opzoo import pytest_plugin

    added = {}

    class Group:
        def addoption(self, *names, **kw):
            added[names[0]] = kw

    class Parser:
        def getgroup(self, *args):
            return Group()

    pytest_plugin.pytest_addoption(Parser())
    runs = {flag for flag in added if flag not in ("--opzoo", "--opzoo-mutate", "--opzoo-mutant")}
    runs -= {"--opzoo-min-score"}
    assert runs == {"--opzoo-" + o.flag.removeprefix("--") for o in OPTIONS.values() if o.pytest}
    assert "jobs" not in {o.name for o in OPTIONS.values() if o.pytest}


def test_a_commands_own_default_is_data_in_the_record():
    """mutate and report keep a record: the ci profile, whatever $CI says; check takes $CI's."""
    assert parse({}, "check").profile is None
    assert parse({}, "mutate").profile == parse({}, "report").profile == "ci"
    assert parse({"profile": "dev"}, "mutate").profile == "dev"
    assert "(default: ci)" in run_opzoo("mutate", "--help").stdout.replace("\n", " ")


def test_options_are_parsed_and_checked_once():
    """Names are normalised (comma-separated, each once); a bad value is an OptionError that names
    the parameter, never a flag: the library is used from Python too."""
    options = RunOptions(["gradient,kinks", "gradient"], device="cpu")
    assert options.properties == ("gradient", "kinks") and options.devices == ("cpu",)
    assert RunOptions().properties == tuple(OPTIONS["properties"].convert(None))
    for bad, name in (
        (dict(timeout=0.0), "timeout"),
        (dict(examples=10**6), "examples"),
        (dict(jobs=0), "jobs"),
        (dict(profile="fast"), "profile"),
        (dict(properties=["nope"]), "properties"),
        (dict(shard="3"), "shard"),
        (dict(shard="a/b"), "shard"),
        (dict(shard="0/4"), "shard"),
        (dict(shard="5/4"), "shard"),
    ):
        with pytest.raises(OptionError) as caught:
            RunOptions(**bad)
        assert caught.value.option == name and "--" not in str(caught.value)
    assert RunOptions(timeout=None).timeout is None  # the library may run without a limit


def test_the_reproduce_line_names_the_records_flags():
    assert flags(properties=["gradient"], profile="dev", examples=3, seed=7) == (
        "--property gradient --profile dev --examples 3 --seed 7"
    )
    assert flags(profile="ci", seed=None) == "--profile ci"
    with pytest.raises(TypeError):
        flags(speed=1)


def test_each_front_end_names_its_own_flag(tmp_path):
    """The same bad value: `--examples` on the command line, `--opzoo-examples` under pytest."""
    cli = run_opzoo("mutate", "myrelu", "--examples", "0")
    assert cli.returncode == 2
    assert cli.stderr.strip() == "opzoo: error: --examples must be a positive integer, at most 100000, got 0"
    out = run_pytest("--opzoo=myrelu", "--opzoo-examples", "0", env={}, cwd=tmp_path)
    assert out.returncode == 4 and "--opzoo-examples must be a positive integer" in out.stderr


def test_pytest_checks_only_the_devices_asked_for(tmp_path):
    out = run_pytest(
        "--opzoo=myrelu",
        "--opzoo-property=kinks",
        "--opzoo-device=cpu",
        "--collect-only",
        "-q",
        env={},
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "kinks[myrelu]" in out.stdout and "kinks[myrelu-cuda]" not in out.stdout


def test_the_shards_split_every_check_once_and_the_same_way_everywhere():
    """Shards 1/N..N/N of every op and property: each check in exactly one, none empty for a few N,
    decided by the names alone (a CRC; Python's hash of a str changes with every process)."""
    import zlib

    import opzoo
    from opzoo.testing import PROPERTIES

    pairs = [(op, prop) for op in opzoo.names() for prop in PROPERTIES]
    for n in (1, 2, 3, 7):
        parts = [[p for p in pairs if in_shard((k, n), *p)] for k in range(1, n + 1)]
        assert sorted(sum(parts, [])) == sorted(pairs) and all(parts)
    assert in_shard(RunOptions(shard="2/3").shard, "myrelu", "gradient") == (
        zlib.crc32(b"myrelu\0gradient") % 3 == 1
    )
    assert RunOptions(shard="2/3").shard == (2, 3) and RunOptions().shard is None


def test_opzoo_check_runs_only_its_shard():
    """Two shards of one command line check the checks of the whole, each once."""
    argv = ["check", "myrelu", "softsign", "-p", "accepts,hygiene,layout,subsets", "--examples", "2"]
    argv += ["--profile", "ci", "--device", "cpu", "--json"]
    runs = [run_opzoo(*argv, "--shard", f"{k}/2") for k in (1, 2)]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    import json

    got = [{(r["op"], r["prop"]) for r in json.loads(run.stdout)["results"]} for run in runs]
    assert not got[0] & got[1]
    assert got[0] | got[1] == {(op, p) for op in ("myrelu", "softsign") for p in argv[4].split(",")}
    bad = run_opzoo("check", "myrelu", "--shard", "3/2")
    assert bad.returncode == 2
    assert bad.stderr.strip() == "opzoo: error: --shard must be K/N with 1 <= K <= N, got 3/2"


def test_opzoo_mutate_runs_the_ops_of_its_shard():
    """A shard of mutate is a share of the ops (each op's control checked once, in its shard)."""
    import json

    argv = ["mutate", "myrelu", "elu", "--mutant", "sign", "-p", "gradient", "--examples", "2", "--json"]
    runs = [run_opzoo(*argv, "--shard", f"{k}/2") for k in (1, 2)]
    ops = [{v["op"] for v in json.loads(run.stdout)["verdicts"]} for run in runs]
    assert sorted(map(sorted, ops)) == [["elu"], ["myrelu"]], [r.stderr for r in runs]
