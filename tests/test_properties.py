"""The property tests: they pass correct ops and catch each deliberately wrong one."""

from __future__ import annotations

import functools
import math
import re
import subprocess
import sys

import pytest
import torch
from conftest import EXAMPLE_OPS, FUNCTIONS, GENERAL, LEARNABLE, ROOT, SURROGATE, SWEEP, run_opzoo, run_pytest
from correct_ops import AT_KINKS, CORRECT, THRESHOLD, DeclaredSquare, OneUlpApart, RoundsByPath
from hypothesis import given, settings
from hypothesis import strategies as st
from wrong_ops import ONLY, WRONG

import opzoo
from opzoo.testing import PROPERTIES, bind, check_property, noncontiguous, tensors
from opzoo.testing.checks._compare import agree
from opzoo.testing.checks._surrogate import HINT
from opzoo.testing.strategies import KINK_MARGIN, cases


@pytest.fixture(scope="module")
def wrong_registry():
    reg = opzoo.Registry()
    for name, (cls, _, _) in WRONG.items():
        reg.register(cls, name=name)
    return reg


@functools.cache
def caught(name: str):
    """Wrong op ``name`` checked by the property that must catch it under ci (once per worker)."""
    cls, prop, _ = WRONG[name]
    reg = opzoo.Registry()
    reg.register(cls, name=name)
    return check_property(reg.info(name), prop, profile="ci")


# The wrong ops whose failure more than one test reads: on one worker, checked once (a failure
# shrinks for seconds: flat_where_wrong's for 10-20).
READ_TWICE = [
    "flat_where_wrong",
    "tie_to_every_max",
    "wrong_in_one_input",
    "wrong_both_inputs",
    "wrong_part",
    "wrong_sign",
]
ON_ONE_WORKER = pytest.mark.xdist_group("wrong_ops_read_twice")


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=ON_ONE_WORKER) if n in READ_TWICE else n for n in WRONG]
)
def test_each_wrong_op_is_caught_by_the_right_property(name):
    """Each deliberately wrong op fails its property, and the report shows a counterexample."""
    phrase = WRONG[name][2]
    result = caught(name)
    assert result.status == "fail", result
    report = result.report()
    assert phrase in report
    assert "example:" in report and "values:" in report and "reproduce:" in report


@pytest.mark.parametrize("examples", SWEEP)
@pytest.mark.parametrize("name", ONLY)
def test_each_blind_spot_is_caught_only_by_its_new_check(wrong_registry, name, examples):
    """A wrong op that finite differences cannot see passes every other property: only the check
    built for its blind spot catches it."""
    _, caught_by, _ = WRONG[name]
    for prop in PROPERTIES:
        if prop == caught_by:
            continue
        result = check_property(wrong_registry.info(name), prop, profile="ci", examples=examples)
        assert result.status in ("pass", "skip"), result.report()


def test_every_property_has_a_wrong_op_that_only_it_catches():
    """For each property there is a wrong op that every other property passes: without it the
    property would catch nothing the others miss (or its test would be missing)."""
    assert sorted({WRONG[name][1] for name in ONLY}) == sorted(PROPERTIES)


@pytest.mark.parametrize("examples", SWEEP)
@pytest.mark.parametrize("name", list(CORRECT))
def test_correct_ops_without_a_contract_pass(name, examples):
    """A correct op written as tutorials write it, with no contract, passes every property."""
    reg = opzoo.Registry()
    reg.register(CORRECT[name], name=name)
    for prop in PROPERTIES:
        result = check_property(reg.info(name), prop, profile="ci", examples=examples)
        assert result.status in ("pass", "skip"), result.report()


@pytest.mark.parametrize("examples", SWEEP)
@pytest.mark.parametrize("name", [*AT_KINKS, "rounds_by_path", "one_ulp_apart"])
def test_correct_ops_where_they_are_not_differentiable_pass(name, examples):
    """A correct op with ties, cones, jumps, points where it is not finite nearby, an output that is
    nan by definition, a surrogate with kinks, a float32 threshold, or a backward that rounds by
    path passes every property (each was a false alarm)."""
    reg = opzoo.Registry()
    reg.register({**AT_KINKS, "rounds_by_path": RoundsByPath, "one_ulp_apart": OneUlpApart}[name], name=name)
    for prop in PROPERTIES:
        result = check_property(reg.info(name), prop, profile="ci", examples=examples)
        assert result.status in ("pass", "skip"), result.report()


def _t(*values):
    return (
        torch.tensor(values, dtype=torch.float64)
        if len(values) != 1
        else torch.tensor(values[0], dtype=torch.float64)
    )


#: the points where each op of AT_KINKS is not differentiable (or not finite, or nan), whatever
#: hypothesis draws: a tie, an origin, a threshold
POINTS = {
    "tie_split_max": [(_t(0.0), _t(0.0)), (_t(1.0, 2.0, 2.0), _t(1.0, 0.0, 2.0)), (_t(0.5, 0.5), _t(0.5))],
    "max_reduction": [
        (_t(0.0, 0.0, 0.0),),
        (torch.tensor([[1.0, 2.0, 2.0], [0.0, 0.0, -1.0]], dtype=torch.float64),),
    ],
    "vector_norm": [(_t(0.0, 0.0, 0.0),), (torch.tensor([[0.0, 0.0], [3.0, 4.0]], dtype=torch.float64),)],
    "abs_diff": [(_t(0.3), _t(0.3)), (_t(0.0, 1.0), _t(0.0, 2.0))],
    "clamp_between": [
        (_t(0.0), _t(0.0), _t(0.0)),
        (_t(0.0), _t(0.0), _t(1.0)),
        (_t(1.0), _t(0.0), _t(1.0)),
        (_t(0.5, 0.0, 2.0), _t(1.0, 0.0, 2.0), _t(0.0, 0.0, 2.0)),
    ],
    "atan2": [(_t(0.0), _t(0.0)), (_t(0.0, 1.0), _t(0.0, 0.0)), (_t(0.0), _t(-1.0))],
    "xlogy": [
        (_t(0.0), _t(0.0)),
        (_t(0.0), _t(2.0)),
        (_t(1.0), _t(0.0)),
        (_t(0.0, 1.0, -1.0), _t(0.0, 0.0, 2.0)),
    ],
    "pow": [
        (_t(0.0), _t(0.0)),
        (_t(0.0), _t(0.5)),
        (_t(0.0), _t(-1.0)),
        (_t(-2.0), _t(-1.7)),
        (_t(0.0, 1.0), _t(0.0)),
    ],
    "variance": [(_t(1.0).reshape(1),), (torch.ones(2, 1, dtype=torch.float64),), (_t(2.0, 2.0, 2.0),)],
    "triangle_spike": [(_t(-1.0, 0.0, 1.0, 0.5),), (_t(0.0),)],
    "float32_threshold": [(_t(0.1, THRESHOLD, 0.2),)],
}


@pytest.mark.parametrize("name", list(POINTS))
def test_correct_ops_pass_at_the_points_in_question(name):
    """At a tie, an origin, a threshold, a constant input: every drawn-input property passes, on
    those very points (hypothesis may or may not draw them)."""
    reg = opzoo.Registry()
    reg.register(AT_KINKS[name], name=name)
    spec = reg.info(name)
    for xs in POINTS[name]:
        for prop, p in PROPERTIES.items():
            if p.applies(spec) or not p.drawn:
                continue
            p(bind(spec, {}), *xs)  # raises PropertyFailed on a failure


@ON_ONE_WORKER
def test_a_tie_reports_the_direction_along_which_it_stays_tied():
    """A max whose gradient at a tie is (1, 1): each coordinate lies between its one-sided
    derivatives (0 and 1), the all-ones direction does not (slope 1, the gradient says 2)."""
    result = caught("tie_to_every_max")
    assert result.status == "fail"
    assert "along the all-ones direction" in result.reason and "directional derivative 2" in result.reason


@ON_ONE_WORKER
def test_the_worst_line_agrees_with_the_headline():
    """An op wrong in input 1 only, whose counterexample puts input 0 on a kink: the headline and
    the worst line both name input 1, with its own values."""
    result = caught("wrong_in_one_input")
    assert (
        result.status == "fail" and "Jacobian mismatch for output 0 with respect to input 1" in result.reason
    )
    assert result.worst["input"] == 1 and result.worst["output"] == 0
    assert result.worst["analytic"] == pytest.approx(3 * result.worst["x"])
    assert "worst:     input 1, output 0" in result.report()


@ON_ONE_WORKER
def test_a_gradcheck_failure_and_its_worst_line_name_the_same_input():
    """Where gradcheck's own message is the headline (input 0, the first it meets), the worst line is
    the largest mismatch of that output and input, not of input 1, which differs more."""
    result = caught("wrong_both_inputs")
    assert result.status == "fail" and "with respect to input 0" in result.reason, result.report()
    assert result.worst["input"] == 0 and result.worst["output"] == 0, result.report()


@ON_ONE_WORKER
def test_no_surrogate_hint_for_an_op_that_is_only_flat_where_it_fails():
    """A sum of ReLUs whose backward is wrong below 0: the counterexample sits where the forward is
    flat, but the forward is not piecewise constant, so no hint to declare a surrogate."""
    assert WRONG["flat_where_wrong"][1] == "gradient"
    result = caught("flat_where_wrong")
    assert result.status == "fail" and HINT not in result.reason
    assert all(v <= 0 for v in result.example["inputs"][0]["values"])  # it did shrink onto the flat part


def test_subsets_accepts_a_gradient_one_ulp_apart():
    """The Intel Xeon failure of built-in linear, by construction: with only x requiring grad its
    gradient is 1 ulp larger; subsets passes, and the two paths do differ bit for bit."""
    x, w = _t(1.3, -0.7, 2.2), _t(1.8, 0.9, -1.1)
    g = torch.ones(3, dtype=torch.float64)
    all_grad = torch.autograd.grad(OneUlpApart.apply(x.requires_grad_(), w.requires_grad_()), x, g)[0]
    only_x = torch.autograd.grad(OneUlpApart.apply(x, w.detach()), x, g)[0]
    assert not torch.equal(all_grad, only_x) and torch.equal(torch.nextafter(all_grad, only_x + 1), only_x)
    reg = opzoo.Registry()
    reg.register(OneUlpApart, name="one_ulp_apart")
    assert check_property(reg.info("one_ulp_apart"), "subsets", profile="ci").status == "pass"


def test_agree_is_a_few_ulps_and_nan_poisons_nothing():
    """agree(): nan matches nan, equal infinities match, a few ulps of the scale pass, 1e-6 relative
    does not, and one nan (or inf) element widens no other's tolerance."""
    one = _t(2.34, 1e-3, 5.0)
    assert agree(torch.nextafter(one, one + 1), one).all()
    assert not agree(one * (1 + 1e-6), one).any()
    with_nan = _t(math.nan, 1e-3, math.inf)
    assert agree(with_nan, with_nan.clone()).all()
    assert agree(_t(math.nan, 1e-3, math.inf), _t(math.nan, 1e-3 * (1 + 1e-9), math.inf)).tolist() == [
        True,
        False,
        True,
    ]
    assert agree(_t(1.0), _t(math.nan)).item() is False
    for dtype in (torch.float32, torch.bfloat16):  # dtype-aware: the same relative 1e-6 passes in bfloat16
        a = one.to(dtype)
        assert agree(torch.nextafter(a, a + 1), a).all()


def test_a_kink_declared_in_float64_is_not_excused_as_a_float32_one():
    """The float32 rounding is looked at only where the declared point is not the op's kink: a ReLU
    at 0.1 (float64) declaring 1 there and giving 0 still fails kinks, though at float32(0.1) it
    gives 1; the float32 threshold passes, with a note saying where it was checked."""

    class WrongAt01(torch.autograd.Function):
        opzoo_contract = opzoo.Contract(kinks={0.1: 1.0})

        @staticmethod
        def forward(x):
            return torch.relu(x - 0.1)

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * (x > 0.1)

    reg = opzoo.Registry()
    reg.register(WrongAt01, name="wrong_at_0_1")
    reg.register(AT_KINKS["float32_threshold"], name="float32_threshold")
    wrong = check_property(reg.info("wrong_at_0_1"), "kinks", profile="ci")
    assert wrong.status == "fail" and "at the kink x = 0.1 the gradient is 0" in wrong.reason
    right = check_property(reg.info("float32_threshold"), "kinks", profile="ci")
    assert right.status == "pass" and any("in float32 (0.10000000149011612)" in n for n in right.notes)


def test_once_differentiable_is_a_skip_with_the_reason():
    """A backward marked once_differentiable skips double_backward, saying why."""
    reg = opzoo.Registry()
    reg.register(CORRECT["once"], name="once")
    result = check_property(reg.info("once"), "double_backward", profile="ci")
    assert result.status == "skip" and "no second derivative" in result.reason, result


@pytest.mark.parametrize("name", ["square", "softplus", "relu", "sincos", "matmul", "product", "nan_hessian"])
def test_double_backward_on_a_large_input_is_checked_along_a_direction(name):
    """Above LARGE elements, double_backward checks the first derivative's derivative along one
    random direction: a nan second derivative there alone is red (the peer's gradgradcheck in fast
    mode fails it), correct ops are green, a ReLU's jumps at exact zeros are left out with a note."""
    from correct_ops import DeclaredSquare, MatMul, Product, ReLU, SinCos, Softplus
    from wrong_ops import NanHessianAbove4096

    from opzoo.testing import spec_of
    from opzoo.testing.checks._bound import PropertyFailed
    from opzoo.testing.checks._gradient import double_backward

    x = torch.randn(5000, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    x[::7] = 0
    g = torch.Generator().manual_seed(1)
    pair = (torch.randn(70, 80, dtype=torch.float64, generator=g), torch.randn(80, 60, dtype=torch.float64))
    cls, xs = {
        "square": (DeclaredSquare, (x,)),
        "softplus": (Softplus, (x,)),
        "relu": (ReLU, (x,)),
        "sincos": (SinCos, (x,)),
        "matmul": (MatMul, pair),
        "product": (Product, (x, x.flip(0))),
        "nan_hessian": (NanHessianAbove4096, (x,)),
    }[name]
    op = bind(spec_of(cls), {})
    if name != "nan_hessian":
        double_backward(op, *xs)
        assert name != "relu" or any("jumps" in n for n in op.notes), op.notes
        return
    with pytest.raises(PropertyFailed, match="second derivative mismatch on a large input .* analytical nan"):
        double_backward(op, *xs)


@ON_ONE_WORKER
def test_gradient_failure_shows_numerical_vs_analytic():
    """A wrong gradient is reported where numerical and analytic differ most."""
    result = caught("wrong_part")
    assert result.worst is not None and result.worst["x"] > 2  # the bug lives on x > 2 only
    assert not math.isclose(result.worst["numerical"], result.worst["analytic"], rel_tol=1e-3)
    assert "numerical" in result.report() and "analytic" in result.report()


@ON_ONE_WORKER
def test_minimal_example_is_shrunk():
    """Hypothesis shrinks the counterexample: a wrong sign shows up on a single element."""
    result = caught("wrong_sign")
    assert math.prod(result.example["inputs"][0]["shape"]) == 1


#: The reasons an op of the zoo may skip a property, each given by what kind of op it is.
SKIPS = {
    "subsets": "^one input: no subset to ask for$",
    "kinks": "^no kinks declared$",
    "autograd": "^(a learnable op's backward is autograd's already|the backward is the declared surrogate's)",
    "library": "is a learnable nn.Module",
}


@pytest.mark.parametrize("examples", SWEEP)
@pytest.mark.parametrize("prop", list(PROPERTIES))
@pytest.mark.parametrize("name", FUNCTIONS + GENERAL + LEARNABLE + SURROGATE + EXAMPLE_OPS)
def test_every_registered_op_passes(name, prop, examples):
    """Every built-in and installed example-plugin op has every property: each check runs and
    passes, or skips for a reason the op's kind gives (SKIPS), never another. So a built-in's
    forward_mode runs (its jvp, or a Module's autograd, agrees with its backward, and vmap with a
    loop), and so does every Function's library."""
    reg = opzoo.registry()
    result = check_property(reg.info(name), prop, profile="ci", registry=reg, examples=examples)
    skip_ok = result.status == "skip" and re.search(SKIPS.get(prop, "^$"), result.reason)
    assert result.status == "pass" or skip_ok, result.report()


def test_an_op_with_a_restricted_domain_is_checked_inside_it():
    """An op declared on (0, inf) gets inputs from (0, inf) only, and passes every property."""
    import fakeops

    reg = opzoo.Registry()
    reg.register(fakeops.Log, name="log")
    for prop in PROPERTIES:
        result = check_property(reg.info("log"), prop, profile="ci")
        assert result.status in ("pass", "skip"), result.report()


def test_a_plugins_input_strategy_reaches_what_the_default_does_not():
    """opzoo-smooth's strategy for logcosh (magnitudes up to 1e3) catches a naive log(cosh(x)),
    which the default strategy (|x| <= 6) cannot: that is what the hook is for."""
    import fakeops

    reg = opzoo.Registry()
    reg.register(fakeops.NaiveLogCosh, name="logcosh")  # the name the plugin's hook answers for
    spec = reg.info("logcosh")
    assert check_property(spec, "reference", profile="ci").status == "pass"
    caught = check_property(spec, "reference", profile="ci", registry=opzoo.registry())
    assert caught.status == "fail" and "differs from the reference" in caught.reason
    assert max(abs(v) for v in _flat(caught.example["inputs"][0]["values"])) > 80


def _flat(values):
    return [y for v in values for y in _flat(v)] if isinstance(values, list) else [values]


def test_cuda_is_skipped_not_failed_without_it():
    """Without CUDA, the GPU variant of a property is skipped with the reason."""
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    result = check_property(opzoo.info("myrelu"), "gradient", device="cuda")
    assert (result.status, result.reason) == ("skip", "CUDA is not available")


@settings(max_examples=60, deadline=None)
@given(x=tensors(domain=(0.0, math.inf), kinks=(1.0, 2.0)))
def test_tensors_respect_domain_kinks_and_layout(x):
    """Drawn inputs are contiguous float64, 0-5 dims with sides 0-5, in the domain, off the kinks."""
    assert x.dtype == torch.float64 and x.is_contiguous() and x.dim() <= 5
    assert all(0 <= s <= 5 for s in x.shape)
    if x.numel():
        assert (x > 0).all()
        assert ((x - 1).abs() >= KINK_MARGIN * 0.999).all() and ((x - 2).abs() >= KINK_MARGIN * 0.999).all()
    else:
        # contiguous strides, which gradcheck accepts (numpy's empties have zero strides)
        assert x.stride() == torch.empty(x.shape).stride()


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_params_are_drawn_from_declared_ranges(data):
    """Op parameters are drawn inside their declared ranges."""
    import fakeops

    reg = opzoo.Registry()
    reg.register(fakeops.Scale, name="scale")
    params, _ = data.draw(cases(reg.info("scale")))
    assert 0.0 <= params["factor"] <= 10.0


def test_noncontiguous_keeps_values():
    """noncontiguous() returns equal values in a non-contiguous layout."""
    for t in (torch.arange(6.0).reshape(2, 3), torch.arange(4.0), torch.zeros(3, 1)):
        nc = noncontiguous(t)
        assert torch.equal(nc, t) and not nc.is_contiguous()


def test_check_command_passes_builtin_ops():
    """`opzoo check myrelu` prints the op x property table and exits 0."""
    out = run_opzoo("check", "myrelu", "--profile", "ci")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "OP" in out.stdout and "gradient" in out.stdout and "passed, 0 failed" in out.stdout


def test_check_command_fails_a_wrong_plugin_op_readably(broken_plugin_path):
    """`opzoo check` on a plugin op with a wrong backward exits 1 with the counterexample."""
    out = run_opzoo(
        "check",
        "wrongsign",
        "-p",
        "gradient,kinks",
        "--profile",
        "ci",
        env={"PYTHONPATH": broken_plugin_path},
    )
    assert out.returncode == 1
    assert "FAIL gradient[wrongsign]: Jacobian mismatch" in out.stdout
    assert "example:" in out.stdout and "reproduce: opzoo check wrongsign --property gradient" in out.stdout


def test_check_command_json_and_bad_input():
    """--json gives machine-readable results; bad properties and counts are one-line errors."""
    import json

    out = run_opzoo("check", "myrelu", "-p", "kinks", "--json", "--device", "cpu")
    data = json.loads(out.stdout)
    assert [r["id"] for r in data["results"]] == ["kinks[myrelu]"] and out.returncode == 0
    bad = run_opzoo("check", "myrelu", "--examples", "0")
    assert bad.returncode == 2 and bad.stderr.startswith("opzoo: error: --examples")


def test_pytest_plugin_from_a_plugins_own_directory():
    """`pytest` inside plugins/opzoo-smooth runs its tests plus one opzoo test per op x property (two
    properties here: every property of its ops is test_every_registered_op_passes's)."""
    props = "--opzoo-property=gradient,double_backward"
    out = run_pytest("-v", props, env={"CI": "1"}, cwd=ROOT / "plugins" / "opzoo-smooth")
    assert out.returncode == 0, out.stdout[-3000:]
    for item in ("gradient[logcosh]", "double_backward[logcosh]", "gradient[isru]", "double_backward[isru]"):
        assert f"{item} PASSED" in out.stdout, out.stdout[-3000:]
    assert "test_ops.py::test_ops_come_from_this_distribution PASSED" in out.stdout


def test_pytest_plugin_fails_a_wrong_op(broken_plugin_path, tmp_path):
    """`pytest --opzoo=NAME` fails the wrong property with the report, and -k selects by id."""
    env = {"PYTHONPATH": broken_plugin_path}
    out = run_pytest("--opzoo=wrongsign", "-k", "gradient", "--opzoo-profile", "ci", env=env, cwd=tmp_path)
    assert out.returncode == 1
    assert "gradient[wrongsign]" in out.stdout and "Jacobian mismatch" in out.stdout
    assert "1 failed" in out.stdout and "kinks[wrongsign]" not in out.stdout


def test_pytest_plugin_is_inert_without_the_flag(tmp_path):
    """Installed everywhere, the plugin adds nothing (and imports no torch) unless asked."""
    (tmp_path / "test_x.py").write_text("import sys\ndef test_x():\n    assert 'torch' not in sys.modules\n")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0 and "1 passed" in out.stdout, out.stdout


def _verdicts(junit: str) -> dict[str, str]:
    import xml.etree.ElementTree as ET

    out = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        kinds = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
        out[case.get("name")] = kinds[0] if kinds else "passed"
    return out


# Two pytest sessions, one of them on two worker processes (20 s): a comparison of run modes, in the
# long tier. The default run keeps the xdist path itself (its loadgroup case):
# test_an_ops_tests_are_checked_together_at_the_first_in_one_worker.
@pytest.mark.long
def test_pytest_plugin_on_two_workers_gives_the_serial_verdicts(broken_plugin_path, tmp_path):
    """`pytest --opzoo -n 2` (pytest-xdist) gives every test id the verdict of a serial run: passes,
    a wrong op's failures, and skips (the learnable op's library check, the cuda ids without CUDA)."""
    env = {"PYTHONPATH": broken_plugin_path}
    verdicts = []
    for workers in ("0", "2"):
        junit = str(tmp_path / f"n{workers}.xml")
        out = run_pytest(
            *("-n", workers, "--opzoo=gelu,prelu,wrongsign", "--opzoo-property=gradient,library"),
            # 10 examples: the verdicts of 50 (what is compared is serial against parallel)
            *("--opzoo-profile", "ci", "--opzoo-examples", "10", "--junitxml", junit),
            env=env,
            cwd=tmp_path,
        )
        assert out.returncode == 1, out.stdout[-3000:]  # wrongsign fails
        verdicts.append(_verdicts(junit))
    serial, parallel = verdicts
    assert len(serial) == 12 and parallel == serial
    assert serial["gradient[wrongsign]"] == "failure" and serial["gradient[gelu]"] == "passed"
    assert serial["library[prelu]"] == "skipped"


@pytest.mark.parametrize("profile", ["ci", "dev", "thorough"])
def test_no_profile_keeps_an_examples_database(profile, monkeypatch, tmp_path):
    """No check reads or writes hypothesis's example database, under any profile: a failure is
    repeated by its seed, and parallel workers (pytest -n) share no files."""
    from opzoo.testing.running import _profiles

    assert _profiles.get(profile).database is None
    monkeypatch.chdir(tmp_path)  # where hypothesis's default database would appear
    spec = opzoo.registry().info("gelu")
    assert check_property(spec, "hygiene", profile=profile, examples=2).status == "pass"
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("profile", ["ci", "dev", "thorough"])
def test_a_failing_check_stops_searching_at_its_first_failure(profile):
    """A red check reports one counterexample, the first failure met, shrunk: hypothesis does not
    go on drawing for others (report_multiple_bugs, on by default, spent 5-7 s of a red check of
    flat_where_wrong drawing and shrinking failures nobody sees), whatever the profile."""
    from opzoo.testing.running import _profiles

    assert _profiles.get(profile).report_multiple_bugs is False


class _NoSecondWhenSmall(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, g):
        ctx.save_for_backward(x, g)
        return 2 * x * g

    @staticmethod
    def backward(ctx, gg):
        x, g = ctx.saved_tensors
        if x.numel() < 4:
            raise RuntimeError("no second derivative for a small input")
        return 3 * gg * g, 2 * x * gg  # d/dx of 2 x g is 2 g: wrong


class SquareSkipsThenFails(DeclaredSquare):
    """x * x, whose second derivative raises on inputs of under 4 elements and is wrong on others."""

    opzoo_contract = opzoo.Contract(reference=torch.square)  # double_backward not declared

    @staticmethod
    def backward(ctx, g):
        return _NoSecondWhenSmall.apply(ctx.saved_tensors[0], g)


def test_a_skip_on_some_inputs_does_not_hide_a_failure_on_others():
    """An input where the property says skip (no second derivative there) does not end the check:
    a wrong second derivative on another input fails it, shrunk to the smallest that fails. (Before,
    the skip, met first, ended the search and the op passed as "no second derivative".)"""
    reg = opzoo.Registry()
    reg.register(SquareSkipsThenFails, name="skips_then_fails")
    result = check_property(reg.info("skips_then_fails"), "double_backward", profile="ci")
    assert result.status == "fail", result
    assert "second derivative is wrong" in result.reason
    assert "shape (4,)" in result.report()  # the smallest input that fails


def test_compile_checks_every_op_however_many_ran_before(wrong_registry):
    """Dynamo caches compiled code per code object, up to a limit of 8, and the compile property's
    wrapper has one code object for every op: past the limit it ran ops eagerly, blind to a graph
    break. The property catches a graph break after more than 8 other compile checks."""
    for name in FUNCTIONS[:9]:
        assert check_property(opzoo.info(name), "compile", profile="ci").status == "pass"
    # checked here, after the nine (not caught()'s answer, which may come from before them)
    result = check_property(wrong_registry.info("branches_on_values"), "compile", profile="ci")
    assert result.status == "fail" and "graph break" in result.reason


def test_a_graph_break_names_the_line_of_the_op_that_broke_it():
    """The compile property's failure says where in the op Dynamo broke the graph (the last frame
    of the user's code its message names), not only Dynamo's first line."""
    import inspect

    from wrong_ops import BranchesOnValues

    source, first = inspect.getsourcelines(BranchesOnValues.forward)
    branch = first + next(i for i, line in enumerate(source) if "if bool(" in line)
    result = caught("branches_on_values")
    assert result.status == "fail" and f"(wrong_ops.py:{branch}, in forward)" in result.reason, result


@pytest.mark.parametrize("name", ["wrong_on_0d", "noisy_backward"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_random_misses_under_dev_are_caught_whatever_the_seed(wrong_registry, name, seed):
    """Under the dev profile (15 random examples) a backward wrong only on 0-d inputs, and one with
    1e-6 relative noise, were sometimes missed. Now each is caught under any seed, by construction:
    0-d inputs at several values are edge inputs of every profile, and hygiene runs the backward
    twice on every example."""
    _, prop, phrase = WRONG[name]
    result = check_property(wrong_registry.info(name), prop, profile="dev", seed=seed)
    assert result.status == "fail" and phrase in result.reason, result.report()
