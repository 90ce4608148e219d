"""General operators end to end: a real plugin distribution (plugins/opzoo-general-fixtures) declares
an n-ary op, a reduction, a multi-output op and an op with an integer parameter by entry point; opzoo
check tests each with no test code from its author, and catches the wrong twin of each."""

from __future__ import annotations

import json

import pytest
from conftest import SWEEP, run_opzoo

import opzoo

# One worker runs this module, so that its `results` (one `opzoo check` of every op) is computed once.
pytestmark = pytest.mark.xdist_group("general_ops")

RIGHT = ["matmul", "rowsum", "sincos", "roll"]
# wrong op -> (the property that must catch it, what its report must say)
WRONG = {
    "wrong_matmul_w": ("gradient", "with respect to input 1"),
    "wrong_sincos_cos": ("gradient", "for output 1 with respect to input 0"),
    "wrong_rowsum_shape": ("hygiene", "output 0 has shape"),
    "wrong_roll": ("gradient", "Jacobian mismatch"),
}


def check(general_plugin_path, *args: str) -> dict:
    """opzoo check --json ARGS under ci, in a subprocess that imports the fixture plugin."""
    out = run_opzoo(
        "check", *args, "--profile", "ci", "--device", "cpu", "--json",
        env={"PYTHONPATH": general_plugin_path}, timeout=900,
    )  # fmt: skip
    assert out.returncode in (0, 1), out.stderr
    return {(r["op"], r["prop"]): r for r in json.loads(out.stdout)["results"]}


@pytest.fixture(scope="module")
def results(general_plugin_path):
    """Every property of each right op (on SWEEP's ten examples: the long tier checks them on the
    profile's); each wrong twin under the properties that must catch it, on the profile's."""
    caught_by = sorted({prop for prop, _ in WRONG.values()})
    return {
        **check(general_plugin_path, *RIGHT, "--examples", str(SWEEP[0])),
        **check(general_plugin_path, *WRONG, "-p", ",".join(caught_by)),
    }


def test_the_plugin_lists_each_op_with_its_signature(general_plugin_path):
    """opzoo list shows each op of the plugin as ok, with its signature."""
    out = run_opzoo("list", "--json", env={"PYTHONPATH": general_plugin_path})
    rows = {r["name"]: r for r in json.loads(out.stdout)}
    assert rows["matmul"]["signature"] == "(n,k),(k,m)->(n,m)"
    assert rows["sincos"]["signature"] == "()->(),()"
    assert rows["roll"]["signature"] == "(n)->(n)"
    assert all(rows[n]["status"] == "ok" for n in [*RIGHT, *WRONG])


def _assert_passes(results, name):
    mine = {prop: r for (op, prop), r in results.items() if op == name}
    assert mine and all(r["status"] in ("pass", "skip") for r in mine.values()), {
        p: r["reason"] for p, r in mine.items() if r["status"] == "fail"
    }
    assert mine["kinks"]["status"] == "skip"


@pytest.mark.parametrize("name", RIGHT)
def test_each_kind_passes_every_property(results, name):
    """A correct n-ary, reduction, multi-output and integer-parameter op passes (kinks: skipped)."""
    _assert_passes(results, name)


# The default run checks them on ten examples: test_each_kind_passes_every_property.
@pytest.mark.long
def test_each_kind_passes_every_property_on_the_profiles_examples(general_plugin_path):
    """The same, on the ci profile's fifty examples (the default run takes ten)."""
    results = check(general_plugin_path, *RIGHT)
    for name in RIGHT:
        _assert_passes(results, name)


@pytest.mark.parametrize("name", list(WRONG))
def test_each_wrong_twin_is_caught_with_a_shrunk_counterexample(results, name):
    """A backward wrong in one input or output (or an output of the wrong shape) fails the right
    property, naming the input and output, with a small counterexample and its shapes."""
    prop, phrase = WRONG[name]
    r = results[(name, prop)]
    assert r["status"] == "fail" and phrase in r["reason"], r["reason"]
    shapes = [t["shape"] for t in r["example"]["inputs"]]
    assert all(len(s) <= 3 and all(d <= 3 for d in s) for s in shapes), shapes  # shrunk
    assert "reproduce: " not in r["reason"] and r["repro"].startswith(f"opzoo check {name}")


def test_a_failure_points_at_the_worst_element_by_index(results):
    """The report of a wrong n-ary op names input and output and indexes the worst element."""
    r = results[("wrong_matmul_w", "gradient")]
    assert r["worst"]["input"] == 1 and r["worst"]["output"] == 0
    assert len(r["worst"]["index"]) == 2  # an index into w, not a flat offset


def test_the_printed_python_snippet_reproduces_the_failure(results, general_plugin_path):
    """The repro snippet of an n-ary op's failure runs and raises the same failure."""
    import os
    import subprocess
    import sys

    snippet = results[("wrong_matmul_w", "gradient")]["repro"].split("or in Python:\n", 1)[1]
    code = "\n".join(line[2:] for line in snippet.splitlines())
    run = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": general_plugin_path},
    )
    assert run.returncode != 0 and "PropertyFailed" in run.stderr and "input 1" in run.stderr


def test_integer_params_arrive_as_ints_and_are_drawn_as_ints(general_plugin_path):
    """roll's shift is an int everywhere: validated, drawn by the property tests, passed to forward."""
    import sys

    sys.path.insert(0, general_plugin_path)
    try:
        from opzoo_general.ops import Roll
    finally:
        sys.path.remove(general_plugin_path)
    reg = opzoo.Registry()
    reg.register(Roll, name="roll")
    spec = reg.info("roll")
    assert spec.contract.params["shift"].integer
    with pytest.raises(opzoo.ParamError, match="must be an integer"):
        spec.apply(__import__("torch").zeros(3), shift=1.5)
