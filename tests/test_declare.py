"""Existing Functions register unchanged: opzoo.declare, params of every kind, forwards in their own
order, a Dim, integer targets, fixed ranks and computed sizes; assert_correct and import paths."""

from __future__ import annotations

import pytest
import torch
import upstream_ops as up
from conftest import ROOT, SWEEP, run_opzoo, run_pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import opzoo
from opzoo import Dim, Index, Mask, Param, declare
from opzoo.testing import PROPERTIES, assert_correct, bind, check_property, spec_of
from opzoo.testing.strategies import cases, edge_inputs

SPARSEMAX = declare(
    up.Sparsemax,
    signature="(n)->(n)",
    params={"dim": Dim(), "k": Param(None, 1, 4), "ensure_sum_one": Param(True)},
    min_sizes={"n": 1},  # max() of an empty dimension raises: a limit, declared
    reference=lambda X, dim, k, ensure_sum_one: up.Sparsemax.apply(X, dim),
)
NLL = declare(
    up.NLLLoss,
    signature="(n,c),(n)->(n)",
    loop_dims=0,
    inputs={"target": Index(high="c")},
)
PAIRMEAN = declare(up.PairMean, signature="(l)->(m)", output_sizes={"m": lambda l: (l + 1) // 2})  # noqa: E741 (named as the dim)
SCALE = declare(
    up.Scale,
    params={"alpha": Param(1.5, 0.1, 3.0, tensor=True), "mode": Param("plain", choices=("plain", "double"))},
)
GRAM = declare(up.Gram, signature="(b,n,k)->(b,n,n)", loop_dims=0)
SIGMOID_SPIKE = declare(
    up.SigmoidSpike, params={"alpha": Param(4.0, 0.5, 10.0)}, surrogate=up.SigmoidSpike.primitive_function
)
PIECEWISE_SPIKE = declare(
    up.PiecewiseLeakySpike,
    params={"w": Param(1.0, 0.1, 3.0), "c": Param(0.01, 0.0, 0.5)},
    surrogate=up.PiecewiseLeakySpike.primitive_function,
)
SPARSEMAX_BISECT = declare(up.SparsemaxBisect, signature="(n)->(n)", min_sizes={"n": 1})
MASKED = declare(up.MaskedScale, signature="(),()->()", inputs={"valid": Mask()})
WITH_SIGN = declare(up.ScaledWithSign, signature="()->(),()")
WITH_CUBE = declare(up.DoubledWithCube, signature="()->(),()")
SINE_SPIKE = declare(up.SineSpike, surrogate=up.SineSpike.primitive_function)
TOP1 = declare(
    up.Top1,
    signature="(n)->(),()",
    min_sizes={"n": 1},
    output_dtypes={1: "int64"},  # the index, as torch.max's
    reference=lambda x: torch.max(x, -1),
)


def test_declare_leaves_the_class_alone():
    """declare() attaches a contract from outside: the upstream class gains no attribute."""
    assert not hasattr(up.Sparsemax, "opzoo_contract")
    spec = spec_of(SPARSEMAX)
    assert spec.target is up.Sparsemax and spec.contract.axis == "dim"
    assert not hasattr(up.Sparsemax, "opzoo_contract")


def test_spec_of_a_registered_ops_spec_is_that_spec():
    """spec_of(opzoo.info(name)) is the spec itself (it raised "OpSpec(...) is not a class", the
    whole spec printed); with a contract or a name it is one clear error."""
    spec = opzoo.info("myrelu")
    assert spec_of(spec) is spec
    with pytest.raises(opzoo.ContractError, match="^op 'myrelu' is a spec already: declare its class"):
        spec_of(spec, name="other")


def test_register_takes_a_contract_or_a_declaration():
    """register(cls, contract=...) and register(declare(...)) both work, and return the class."""
    reg = opzoo.Registry()
    assert reg.register(up.NLLLoss, name="nll", contract=NLL.contract) is up.NLLLoss
    reg.register(SPARSEMAX, name="smax")
    assert reg.info("nll").contract.inputs and reg.info("smax").contract.axis == "dim"


def test_the_forward_is_called_in_its_own_order():
    """Tensors and params go where the forward takes them, by name; trailing defaults stay."""
    spec = spec_of(SPARSEMAX)
    plan = spec.arguments
    assert plan.names == ("X",) and [kind for kind, _ in plan.slots] == ["tensor", "param", "param", "param"]
    x = torch.tensor([[0.1, 1.2, -0.3], [2.0, 0.0, 0.5]], dtype=torch.float64)
    y = spec.bound(dim=0, k=2, ensure_sum_one=False)(x)
    torch.testing.assert_close(y, up.Sparsemax.apply(x, 0, 2, False))
    assert spec_of(NLL).arguments.slots == (("tensor", 0), ("tensor", 1))  # eps: its default


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"params": {"alpha": Param(1.0)}}, "parameter 'alpha' is not an argument of forward"),
        ({"signature": "(n),(n),(n),(n),(n)->(n)"}, "forward takes 4 tensor(s)"),
        ({"inputs": {"nope": Index(high=3)}}, "inputs names 'nope'"),
        ({"signature": "(n)->(n)", "inputs": {"X": Index(high="q")}}, "'q' is not a dimension"),
        ({"signature": "(n)->(n)", "params": {"dim": Dim(), "k": Dim()}}, "one Dim parameter at most"),
        ({"signature": "(n,k)->(n)", "params": {"dim": Dim()}}, "places one core dimension"),
        ({"signature": "(n)->(n)", "min_sizes": {"q": 1}}, "min_sizes names 'q'"),
        ({"signature": "(l)->(m)"}, "output_sizes="),
        ({"params": {"dim": Param("a", choices=("b", "c"))}}, "not among its choices"),
        ({"signature": "(n)->(),()", "output_dtypes": {2: "int64"}}, "has outputs 0 to 1"),
        ({"signature": "(n)->(),()", "output_dtypes": {1: "float32"}}, "not differentiated), got 'float32'"),
        ({"output_dtypes": [0]}, "output_dtypes must map output positions"),
    ],
)
def test_declarations_that_do_not_fit_are_one_clear_error(fields, message):
    """A contract that does not fit the forward (or itself) is refused, in one line."""
    with pytest.raises(opzoo.ContractError, match=message.replace("(", r"\(").replace(")", r"\)")):
        spec_of(declare(up.Sparsemax, **fields))


def test_param_kinds_validate_what_a_user_passes():
    """Choices, flags, optional numbers: the values they take, and one clear error otherwise."""
    spec = spec_of(SPARSEMAX)
    assert spec.contract.bind({"k": "none", "ensure_sum_one": "false"}) == {
        "dim": -1,
        "k": None,
        "ensure_sum_one": False,
    }
    assert spec.contract.bind({"k": 3})["k"] == 3
    with pytest.raises(opzoo.ParamError, match="must be an integer or None"):
        spec.contract.bind({"k": "x"})
    with pytest.raises(opzoo.ParamError, match="one of True, False"):
        spec.contract.bind({"ensure_sum_one": 1})
    scale = spec_of(SCALE).contract
    with pytest.raises(opzoo.ParamError, match="one of 'plain', 'double'"):
        scale.bind({"mode": "triple"})


@settings(max_examples=60, deadline=None)
@given(data=st.data())
def test_a_dim_is_drawn_everywhere_and_the_op_sees_it_there(data):
    """The Dim is drawn from -rank to rank - 1, and the op gets its core dimension at that position
    (checks see it last: the same values, permuted)."""
    spec = spec_of(SPARSEMAX)
    params, (x,) = data.draw(cases(spec))
    dim = params["dim"]
    assert -max(x.dim(), 1) <= dim < max(x.dim(), 1)
    seen = []
    op = bind(spec, params)
    op.calling(lambda t: seen.append(t.shape) or t)(x)
    assert seen == [x.movedim(-1, dim).shape]


def test_dims_of_both_signs_and_sides_of_one_are_drawn():
    """Under the ci profile a check meets negative and positive dims, and a size-1 dimension between
    others (where a squeeze() without a dim goes wrong)."""
    spec = spec_of(SPARSEMAX)
    seen = {"neg": False, "pos": False, "middle_one": False, "rank5": False}

    @settings(max_examples=50, derandomize=True, database=None, deadline=None)
    @given(case=cases(spec))
    def run(case):
        params, (x,) = case
        seen["neg"] |= params["dim"] < -1
        seen["pos"] |= params["dim"] > 0
        seen["middle_one"] |= 1 in x.shape[1:-1] and x.numel() > x.shape[-1]
        seen["rank5"] |= x.dim() == 5

    run()
    assert all(seen.values()), seen


def test_the_matrices_of_the_edge_inputs_are_well_conditioned():
    """Every square matrix in an edge input is as well conditioned as a random one. Filled from a
    linear sequence, the large edge's (47, 47) matrices were of rank about two, singular to rounding:
    a point where a polar factor (roma's Procrustes) or an inverse has no derivative, and a correct op
    went red there."""
    for inputs in edge_inputs(spec_of(GRAM), "cpu"):  # (b, n, k): every named dimension one size
        (a,) = inputs
        if a.shape[-1] == a.shape[-2] >= 2:
            assert torch.linalg.cond(a).max() < 1e5, a.shape


def test_integer_targets_are_drawn_in_range_and_held_as_constants():
    """An Index input is drawn in [0, c) (c >= 1 then), held out of the differentiated inputs, and
    its gradient is None, rightly."""
    spec = spec_of(NLL)

    @settings(max_examples=40, derandomize=True, database=None, deadline=None)
    @given(case=cases(spec))
    def run(case):
        _, (logp, target) = case
        assert target.dtype == torch.int64 and logp.dim() == 2  # loop_dims=0: exactly (n, c)
        assert target.shape == logp.shape[:1]
        if target.numel():
            assert 0 <= target.min() and target.max() < logp.shape[1]

    run()
    for inputs in edge_inputs(spec, "cpu"):
        assert inputs[1].dtype == torch.int64 and inputs[0].dim() == 2


@pytest.mark.parametrize(
    "declared",
    [
        SPARSEMAX,
        NLL,
        PAIRMEAN,
        SCALE,
        GRAM,
        SIGMOID_SPIKE,
        PIECEWISE_SPIKE,
        SPARSEMAX_BISECT,
        MASKED,
        WITH_SIGN,
        WITH_CUBE,
        TOP1,
    ],
    ids=lambda d: d.target.__name__,
)
@pytest.mark.parametrize("examples", SWEEP)
def test_correct_upstream_functions_pass_every_property(declared, examples):
    """Correct Functions written as packages write them pass every property, declared unchanged."""
    results = assert_correct(declared, devices=["cpu"], examples=examples)
    assert {r.prop for r in results} == set(PROPERTIES)


@pytest.mark.parametrize("declared", [WITH_SIGN, WITH_CUBE], ids=lambda d: d.target.__name__)
def test_an_output_marked_non_differentiable_is_left_out_and_the_rest_checked(declared):
    """A marked output (roma's U and V) takes no part in any derivative check, and the checks of
    the others run: a skip would pass assert_correct as silently as a pass. double_backward once
    asked autograd for a derivative through the marked output too, torch refused, and the refusal
    read as 'no second derivative': roma's wrong second derivative went unseen."""
    results = assert_correct(
        declared, devices=["cpu"], properties=["gradient", "double_backward", "autograd"]
    )
    assert {r.prop: r.status for r in results} == dict.fromkeys(
        ["gradient", "double_backward", "autograd"], "pass"
    )


def _t(values):
    return torch.tensor(values, dtype=torch.float64)


#: Where each of these correct upstream-style Functions was a false alarm: (declared, property,
#: params, inputs). Hypothesis may or may not draw these points; here they are checked whatever it
#: draws.
FORMER_FALSE_ALARMS = {
    # the edge of sparsemax's support: an output at 0 that is positive on one side, where the first
    # derivative jumps (no second derivative: nothing to check there)
    "support_boundary": (SPARSEMAX, "double_backward", {"dim": -1}, (_t([0.0, 1.0]),)),
    # in bfloat16 1 - sigmoid(6.25) cancels to 0, in the op and in its surrogate run in bfloat16
    "surrogate_in_bfloat16": (SIGMOID_SPIKE, "gradient", {"alpha": 4.0}, (_t([1.5625, -1.5625, 0.3]),)),
    # |x| = w: the primitive's one-sided derivatives are 1/(2w) and c; the backward gives c
    "surrogate_threshold": (PIECEWISE_SPIKE, "gradient", {"w": 1.0, "c": 0.01}, (_t([1.0, -1.0, 0.5]),)),
    # w = 0.955078125 compares as 0.953125 in bfloat16: x = 0.953125 is at the op's threshold there
    "threshold_rounded_in_bfloat16": (
        PIECEWISE_SPIKE,
        "gradient",
        {"w": 0.955078125, "c": 0.01},
        (_t(0.953125),),
    ),
    # at x scaled to float32's largest value, cos(2x) is nan in the op and in its surrogate in float32
    "surrogate_nan_in_float32": (SINE_SPIKE, "gradient", {}, (_t(1.0),)),
    # autograd of a bisection differentiates the algorithm, not the function: the backward is right
    "bisection_forward": (SPARSEMAX_BISECT, "autograd", {}, (_t([0.0, 0.2]),)),
}


@pytest.mark.parametrize("case", list(FORMER_FALSE_ALARMS))
def test_correct_upstream_functions_pass_where_they_were_false_alarms(case):
    """At the point where each was once failed (a support boundary, a surrogate in bfloat16, a
    surrogate's threshold, a threshold rounded in bfloat16, a bisecting forward), the property
    passes."""
    declared, prop, params, xs = FORMER_FALSE_ALARMS[case]
    spec = spec_of(declared)
    op = bind(spec, spec.contract.bind(params))
    PROPERTIES[prop](op, *xs)  # raises PropertyFailed on a failure


def test_an_integer_output_is_declared_by_its_dtype():
    """A max's int64 index beside its values: declared (``output_dtypes``), it passes hygiene and
    library; undeclared, each says how to declare it (the bridge's fake kernel, guessing the input's
    dtype, failed opcheck) — in that order, in one process: the bridge made for one contract is not
    reused for another of the same class. A wrong index is caught by the reference."""
    declared, undeclared = (
        spec_of(TOP1),
        spec_of(declare(up.Top1, signature="(n)->(),()", min_sizes={"n": 1})),
    )
    assert declared.to_dict()["output_dtypes"] == {"1": "int64"}  # what opzoo info shows
    assert {p: check_property(declared, p, profile="ci").status for p in ("hygiene", "library")} == {
        "hygiene": "pass",
        "library": "pass",
    }
    hygiene, library = (check_property(undeclared, p, profile="ci") for p in ("hygiene", "library"))
    assert hygiene.status == library.status == "fail"
    assert "output 1 dtype is torch.int64" in hygiene.reason
    assert "declare output_dtypes={1: 'int64'}" in hygiene.reason
    assert "unless the op declares output_dtypes={1: 'int64'}" in library.reason
    fields = {k: getattr(TOP1.contract, k) for k in ("signature", "min_sizes", "reference")}
    wrong = spec_of(declare(up.Top1WrongIndex, **fields, output_dtypes={1: torch.int64}))
    assert wrong.contract.output_dtypes == {1: "int64"}  # a torch dtype is taken by its name
    verdicts = {p: check_property(wrong, p, profile="ci").status for p in ("reference", "hygiene")}
    assert verdicts == {"reference": "fail", "hygiene": "pass"}


def test_an_undeclared_multi_output_op_is_told_once():
    """Undeclared, an op is elementwise with one output: one that returns two fails every property
    alike, and the report says it once, the others named on one line (ten reports of the same
    mismatch once; library's read "opcheck test_schema: Unable to cast (tensor, tensor)")."""
    with pytest.raises(AssertionError) as raised:
        assert_correct(up.Top1, properties="gradient,hygiene,library", devices=["cpu"])
    text = str(raised.value)
    assert text.count("the op returned 2 output(s), but its signature ()->() declares 1") == 1, text
    assert "(the default: declare the op's)" in text
    assert "FAIL hygiene[top1], library[top1]: the same failure as gradient[top1]" in text


def test_a_squeeze_without_a_dim_is_caught_under_ci():
    """The (k, 1, n) bug of a published sparsemax: wrong only where another dimension has size 1,
    caught under the ci profile."""
    wrong = declare(up.SparsemaxSqueezed, SPARSEMAX.contract)
    result = check_property(spec_of(wrong), "gradient", profile="ci")
    assert result.status == "fail", result
    shape = result.example["inputs"][0]["shape"]
    assert 1 in shape and len(shape) >= 2, shape


class LogSoftmaxLastDim(torch.autograd.Function):
    """log-softmax along ``dim``, a backward that sums over the last dimension whatever ``dim`` is:
    wrong wherever ``dim`` is another (a new user's first wrong op)."""

    @staticmethod
    def forward(ctx, x, dim=-1):
        y = x - x.amax(dim, keepdim=True)  # raises on an empty dimension, as the new user's did
        y = y - y.exp().sum(dim, keepdim=True).log()
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g - y.exp() * g.sum(-1, keepdim=True), None


def test_a_failure_at_a_moved_dim_shows_what_the_forward_got():
    """An example is shown and replayed with the core dimension last; where the Dim put it elsewhere,
    the report also gives the input as the forward got it, so that calling the Function by hand on
    it repeats the failure (a new user re-ran `apply` on the shape shown and saw it pass)."""
    spec = spec_of(
        declare(LogSoftmaxLastDim, signature="(n)->(n)", params={"dim": Dim()}, min_sizes={"n": 1})
    )
    result = check_property(spec, "gradient", profile="ci")
    assert result.status == "fail", result
    shown = torch.tensor(result.example["inputs"][0]["values"], dtype=torch.float64)
    dim = result.example["params"]["dim"]
    got = shown.movedim(-1, dim)
    line = f"  as called: shape {tuple(got.shape)}, dim={dim}, values {got.tolist()!r} (the example above has"
    assert line in result.report(), result.report()
    # by hand, on what the forward got: gradcheck fails there too
    x = got.clone().requires_grad_()
    assert not torch.autograd.gradcheck(
        lambda t: LogSoftmaxLastDim.apply(t, dim), (x,), raise_exception=False
    )
    # where the forward got what is shown (the core dimension last, or moved among equal values),
    # nothing more is said
    from opzoo.testing.running._runner import _called

    x = torch.arange(6.0, dtype=torch.float64).reshape(2, 3)
    assert _called(bind(spec, {"dim": -1}), (x,)) is None and _called(bind(spec, {"dim": 1}), (x,)) is None
    assert _called(bind(spec, {"dim": 0}), (torch.zeros(2, 2, dtype=torch.float64),)) is None
    assert _called(bind(spec, {"dim": 0}), (x,)).startswith("shape (3, 2), dim=0, values [[0.0, 3.0], ")


class CumsumAlong(torch.autograd.Function):
    """A cumulative sum along ``dim``; ``scale``: its gradient that many times too large where the
    input came in non-contiguous (a backward that reads strides wrong)."""

    scale = 1.0

    @staticmethod
    def forward(ctx, x, dim=-1):
        ctx.dim, ctx.strided = dim, not x.is_contiguous()
        return x.cumsum(dim)

    @classmethod
    def backward(cls, ctx, g):
        grad = g.flip(ctx.dim).cumsum(ctx.dim).flip(ctx.dim)
        return grad * (cls.scale if ctx.strided else 1.0), None


class CumsumWrongWhenStrided(CumsumAlong):
    scale = 1.5


def test_a_dim_op_gets_the_layout_checks_strided_inputs():
    """The layout property's non-contiguous inputs reach an op with a Dim non-contiguous: moving the
    core dimension into place made every one contiguous, and a backward wrong for a transposed
    input passed every property (a new user's L2 norm; plain gradcheck on a transposed input fails
    it). The correct op stays green."""
    contract = opzoo.Contract(signature="(n)->(n)", params={"dim": Dim()})
    wrong = check_property(spec_of(CumsumWrongWhenStrided, contract), "layout", profile="ci")
    assert wrong.status == "fail" and "non-contiguous input" in wrong.reason, wrong.report()
    right = check_property(spec_of(CumsumAlong, contract), "layout", profile="ci")
    assert right.status == "pass", right.report()


def test_assert_correct_raises_with_the_report():
    """assert_correct raises AssertionError carrying each failure's report and reproduce lines."""
    wrong = declare(up.SparsemaxSqueezed, SPARSEMAX.contract)
    with pytest.raises(AssertionError) as info:
        assert_correct(wrong, properties="gradient", devices=["cpu"])
    text = str(info.value)
    assert "1 of 1 opzoo check(s) of sparsemaxsqueezed failed" in text
    assert "FAIL gradient[sparsemaxsqueezed]" in text and "replay(spec," in text


def test_an_import_path_is_checked_from_the_command_line(tmp_path):
    """`opzoo check pkg.mod:Class` checks a class no plugin publishes; its reproduce line names the
    path; a path that does not import is one line, exit 2."""
    (tmp_path / "mine.py").write_text(
        "import torch\n"
        "class Cube(torch.autograd.Function):\n"
        "    @staticmethod\n"
        "    def forward(ctx, x):\n"
        "        ctx.save_for_backward(x)\n"
        "        return x ** 3\n"
        "    @staticmethod\n"
        "    def backward(ctx, g):\n"
        "        (x,) = ctx.saved_tensors\n"
        "        return g * 2 * x * x\n"  # wrong: 3 x^2
    )
    env = {"PYTHONPATH": str(tmp_path)}
    out = run_opzoo("check", "mine:Cube", "-p", "gradient", "--profile", "ci", "-j", "1", env=env)
    assert out.returncode == 1, out.stderr
    assert "FAIL gradient[mine:Cube]" in out.stdout
    assert "reproduce: opzoo check mine:Cube --property gradient" in out.stdout
    assert "replay(spec_of('mine:Cube'), 'gradient'" in out.stdout
    bad = run_opzoo("check", "nosuch.module:Cube", env=env)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "opzoo: error: cannot import 'nosuch.module:Cube': ModuleNotFoundError: No module named 'nosuch'"
    ]


#: A correct Function, as a module's text: written into a module an import path names.
TWICE = (
    "class Twice(torch.autograd.Function):\n"
    "    @staticmethod\n"
    "    def forward(ctx, x):\n"
    "        return 2 * x\n"
    "    @staticmethod\n"
    "    def backward(ctx, g):\n"
    "        return 2 * g\n"
)


@pytest.mark.parametrize(
    "text, why",
    [
        ("import os\nos._exit(0)\n", "ended the process with exit status 0 (os._exit? a crash?)"),
        ("import time\ntime.sleep(3600)\n", "did not finish within 2 s (OPZOO_IMPORT_TIMEOUT)"),
    ],
    ids=["exits", "hangs"],
)
def test_an_import_path_that_ends_or_hangs_its_import_is_one_line(tmp_path, text, why):
    """The child that tries the module is ended or outlasted, not the command: one line, exit 2
    (before: an os._exit(0) at import ended `opzoo check` itself, which its supervisor made 70)."""
    (tmp_path / "rude.py").write_text(text)
    env = {"PYTHONPATH": str(tmp_path), "OPZOO_IMPORT_TIMEOUT": "2"}
    out = run_opzoo("check", "rude:Op", "-p", "accepts", "--device", "cpu", env=env)
    assert out.returncode == 2 and out.stderr.splitlines() == [
        f"opzoo: error: cannot import 'rude:Op': importing it {why}"
    ], out.stderr


def test_an_import_path_is_checked_by_the_pytest_plugin(tmp_path):
    """`pytest --opzoo=pkg.mod:Class` makes one test per property of that class."""
    (tmp_path / "mine.py").write_text("import torch\n" + TWICE)
    out = run_pytest(
        "-q",
        "--opzoo=mine:Twice",
        "--opzoo-property=gradient,hygiene",
        "--opzoo-profile=ci",
        str(tmp_path),
        env={"PYTHONPATH": f"{tmp_path}:{ROOT / 'tests'}"},
        cwd=tmp_path,
    )
    assert "2 passed, 2 skipped" in out.stdout, out.stdout + out.stderr


class _RejectsZero(torch.autograd.Function):
    """2 x for x != 0: its forward refuses a zero, as torch.linalg.inv refuses a singular matrix."""

    @staticmethod
    def forward(x):
        if bool((x == 0).any()):
            raise ValueError("x must be non-zero")
        return 2 * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


def test_extremes_leaves_out_a_scaled_input_the_forward_rejects():
    """`extremes` casts its scaled inputs to float32, where 1e-50 is 0: the forward rejecting that is a
    limit of the forward, left out (as every property leaves out an input the forward rejects), not
    a failure; a correct matrix inverse failed so on a tiny 1x1 input."""
    from opzoo.testing import replay

    spec = spec_of(declare(_RejectsZero))
    replay(spec, "extremes", {}, torch.tensor([1e-50, 1.5], dtype=torch.float64))
