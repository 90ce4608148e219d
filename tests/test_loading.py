"""Loading from (fake) entry points and pluggy hooks: isolation, blocking, strict mode."""

from __future__ import annotations

import fakeops
import pytest

import opzoo
from opzoo.core._loading import EntryPoint, installed
from opzoo.exceptions import PluginError


def ops(name, value, dist="plug", version="1.0"):
    return EntryPoint("opzoo.ops", name, value, dist, version)


def hooks(name, value, dist="plug", version="1.0"):
    return EntryPoint("opzoo", name, value, dist, version)


def test_entry_point_ops_registered_lazily():
    """Ops from entry points are listed by name and resolved on use."""
    reg = opzoo.load([ops("double", "fakeops:Double"), ops("scale", "fakeops:Scale")])
    assert reg.names() == ["double", "scale"]
    spec = reg.info("double")
    assert spec.source.dist == "plug" and spec.source.via == "entry point"
    assert spec.source.entry_point == "opzoo.ops: double = fakeops:Double"


def test_input_strategy_hooks_are_guarded_per_plugin_and_asked_once():
    """A plugin's strategy hook that raises or returns junk is that plugin's failure, not another
    op's red check; the answer is asked once per op and dtype in a run, then kept with the run."""
    import fakehooks
    import torch

    from opzoo.testing import check_property
    from opzoo.testing.running._hooks import RunHooks

    reg = opzoo.load(
        [
            ops("double", "fakeops:Double"),
            ops("scale", "fakeops:Scale"),
            hooks("good", "fakehooks:strategies", dist="good"),
            hooks("raising", "fakehooks:raising_strategy", dist="bad"),
            hooks("junk", "fakehooks:junk_strategy", dist="worse"),
        ]
    )
    run = RunHooks(reg)
    fakehooks.Strategies.calls = 0
    for name in ("double", "scale"):
        result = check_property(reg.info(name), "gradient", profile="ci", examples=5, registry=run)
        assert result.status == "pass", result.report()
    assert fakehooks.Strategies.calls == 2  # once per op (float64), not once per example
    assert run.input_strategy(reg.info("double"), torch.float64) is not None
    assert fakehooks.Strategies.calls == 2
    reasons = sorted(f"{f.source.dist}: {f.reason}" for f in run.failures)
    assert reasons == [
        "bad: hook opzoo_input_strategy raised for op 'double': RuntimeError: strategy boom",
        "bad: hook opzoo_input_strategy raised for op 'scale': RuntimeError: strategy boom",
        "worse: hook opzoo_input_strategy returned a list for op 'double'",
        "worse: hook opzoo_input_strategy returned a list for op 'scale'",
    ]
    assert reg.failures() == []  # the registry is only read: what a run met is the run's


def test_a_registry_is_only_read_once_loaded():
    """Its plugins and guard are given when it is made: nothing assigns them afterwards, and the
    checks keep nothing on it."""
    import dataclasses

    reg = opzoo.load([ops("double", "fakeops:Double"), hooks("good", "fakehooks:strategies", dist="good")])
    assert reg.plugins is not None and reg.guard is not None
    with pytest.raises(dataclasses.FrozenInstanceError):
        reg.plugins = None
    assert not hasattr(reg, "input_strategy")


def test_a_hook_failure_met_through_a_bare_registry_is_a_note():
    """check_property asked through a Registry, not a run's RunHooks: the failure is the result's
    note, not lost."""
    from opzoo.testing import check_property

    reg = opzoo.load(
        [ops("double", "fakeops:Double"), hooks("raising", "fakehooks:raising_strategy", dist="bad")]
    )
    result = check_property(reg.info("double"), "gradient", profile="ci", examples=3, registry=reg)
    assert result.status == "pass", result.report()
    assert any("hook opzoo_input_strategy raised for op 'double'" in note for note in result.notes)


def test_hook_plugins_contribute_many_ops():
    """A hook plugin can offer several ops, by class or import path."""
    reg = opzoo.load([hooks("good", "fakehooks:good")])
    assert reg.names() == ["hooked", "scaled"]
    assert reg.get("scaled") is fakeops.Scale
    assert reg.info("hooked").source.via == "hook"


def test_faulty_hook_plugins_are_isolated():
    """A hook that raises, returns junk, does not import or names an unknown hook harms no other."""
    reg = opzoo.load(
        [
            hooks("raising", "fakehooks:raising"),
            hooks("junk", "fakehooks:junk"),
            hooks("gone", "no_such_module"),
            hooks("unknown", "fakehooks:unknown"),
            hooks("good", "fakehooks:good"),
            ops("double", "fakeops:Double"),
        ]
    )
    assert reg.get("double") is fakeops.Double and reg.get("hooked") is fakeops.Double
    reasons = sorted(f.reason for f in reg.failures())
    assert len(reasons) == 4
    assert any("hook opzoo_ops raised RuntimeError: boom" in r for r in reasons)
    assert any("must return a mapping" in r for r in reasons)
    assert any("ModuleNotFoundError" in r for r in reasons)
    assert any("opzoo_not_a_hook" in r for r in reasons)


def test_duplicate_between_entry_point_and_hook():
    """The same name from an entry point and from a hook is a duplicate naming both."""
    reg = opzoo.load([ops("hooked", "fakeops:Scale", dist="other"), hooks("good", "fakehooks:good")])
    with pytest.raises(opzoo.DuplicateOpError, match="'other' and 'plug'"):
        reg.get("hooked")
    assert reg.get("plug:hooked") is fakeops.Double


def test_autoload_disabled_keeps_builtin_ops(monkeypatch):
    """OPZOO_DISABLE_PLUGIN_AUTOLOAD skips third-party plugins, not opzoo's own ops."""
    declared = [ops("myrelu", "opzoo.ops.relu:MyReLU", dist="opzoo"), ops("double", "fakeops:Double")]
    monkeypatch.setenv("OPZOO_DISABLE_PLUGIN_AUTOLOAD", "1")
    assert opzoo.load(declared).names() == ["myrelu"]
    assert opzoo.load(declared, autoload=True).names() == ["double", "myrelu"]


@pytest.mark.parametrize("block", ["plug", "PLUG", "double", "plug:double"])
def test_block_by_dist_or_entry(block):
    """--block / OPZOO_BLOCK skip a plugin by distribution, entry name or dist:entry."""
    declared = [ops("double", "fakeops:Double"), ops("scale", "fakeops:Scale", dist="keep")]
    assert opzoo.load(declared, block=[block]).names() == ["scale"]


def test_block_from_environment(monkeypatch):
    """OPZOO_BLOCK takes a comma-separated list."""
    monkeypatch.setenv("OPZOO_BLOCK", "keep, plug")
    assert opzoo.load([ops("double", "fakeops:Double"), ops("s", "fakeops:Scale", dist="keep")]).names() == []


def test_strict_mode_raises_on_first_failure(monkeypatch):
    """Strict mode resolves every op and turns any failure into a PluginError."""
    declared = [ops("double", "fakeops:Double"), ops("bad", "fakeops:NotAnOp")]
    assert opzoo.load(declared).names() == ["bad", "double"]
    with pytest.raises(PluginError, match="op 'bad' from plug 1.0"):
        opzoo.load(declared, strict=True)
    monkeypatch.setenv("OPZOO_STRICT", "1")
    with pytest.raises(PluginError):
        opzoo.load(declared)
    assert opzoo.load(declared[:1], strict=True).names() == ["double"]


def test_installed_finds_myrelu_in_opzoos_own_metadata():
    """opzoo declares myrelu in its own pyproject, exactly as a plugin would."""
    mine = [d for d in installed() if d.dist == "opzoo"]
    assert EntryPoint("opzoo.ops", "myrelu", "opzoo.ops.relu:MyReLU", "opzoo", opzoo.__version__) in mine


def test_default_registry_gets_myrelu_via_entry_point():
    """The process-wide registry finds myrelu through the entry point, not an import."""
    spec = opzoo.info("myrelu")
    assert spec.source.via == "entry point" and spec.source.dist == "opzoo"
    assert spec.target.__name__ == "MyReLU"
