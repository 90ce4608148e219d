"""Shape declarations: inputs of one shape (``broadcast=False``), a minimum rank, a float input that
is not differentiated (``Floats(grad=False)``), an optional mask: a correct upstream-style op red
without its declaration and green with it, a wrong twin red with it."""

from __future__ import annotations

import pytest
import shape_ops as so
import torch
from hypothesis import given, settings

import opzoo
from opzoo import Floats, Mask, Positive
from opzoo.testing import assert_correct, check, spec_of
from opzoo.testing.strategies import cases, edge_inputs, fixed_inputs

STITCH = {"inputs": {"out": Floats(grad=False)}, "surrogate": lambda x1, out: x1}
RBF = {"signature": "(n,d),(m,d),(1,1)->(n,m)", "loop_dims": 0}
RBF_INPUTS = {"x1": Floats(grad=False), "x2": Floats(grad=False), "lengthscale": Positive()}


def _failed(declared, props=None):
    return {
        r.prop for r in check(spec_of(declared), props, devices=["cpu"], profile="ci") if r.status == "fail"
    }


@pytest.mark.parametrize(
    "cls, fields, without, red",
    [
        (so.StitchGradient, {"signature": "(),()->()", **STITCH}, {}, {"gradient", "hygiene", "library"}),
        (so.RowSquare, {}, {}, {"accepts"}),
        (so.RBFCovariance, RBF, {"inputs": {"lengthscale": Positive()}}, {"gradient"}),
    ],
    ids=["broadcast", "min_rank", "grad"],
)
def test_a_correct_op_is_red_without_its_shape_declaration_and_green_with_it(cls, fields, without, red):
    """torchdiffeq's _StitchGradient (returns ``out``, its gradient to ``x1``: of one shape, as
    torchdiffeq calls it) with broadcast=False; an op that works along the first dimension with
    min_rank=1; gpytorch's RBFCovariance (raises if x1 or x2 requires grad) with both declared
    Floats(grad=False): red without, green on every property with."""
    declaration = {
        "broadcast": {"broadcast": False},
        "min_rank": {"min_rank": 1},
        "grad": {"inputs": RBF_INPUTS},
    }
    key = "broadcast" if cls is so.StitchGradient else "min_rank" if cls is so.RowSquare else "grad"
    assert red <= _failed(opzoo.declare(cls, **{**fields, **without}), sorted(red))  # only those red
    assert_correct(opzoo.declare(cls, **{**fields, **declaration[key]}), devices=["cpu"])


@pytest.mark.parametrize(
    "declared",
    [
        opzoo.declare(so.WrongStitchGradient, signature="(),()->()", broadcast=False, **STITCH),
        opzoo.declare(so.WrongRowSquare, min_rank=1),
        opzoo.declare(so.WrongRBFCovariance, inputs=RBF_INPUTS, **RBF),
    ],
    ids=["broadcast", "min_rank", "grad"],
)
def test_a_wrong_twin_is_red_with_the_declaration(declared):
    """Each op's twin with its backward off is red on gradient, declared as the correct one is."""
    assert "gradient" in _failed(declared, ["gradient"])


def test_declared_shapes_hold_for_drawn_fixed_and_edge_inputs():
    """broadcast=False: every input of one shape; min_rank: no input of fewer dimensions; a float
    input not differentiated is drawn as floats and held as a constant."""
    same = spec_of(opzoo.declare(so.SameShapeProduct, signature="(),()->()", broadcast=False, min_rank=2))
    rbf = spec_of(opzoo.declare(so.RBFCovariance, inputs=RBF_INPUTS, **RBF))
    assert set(rbf.arguments.constants) == {0, 1} and rbf.arguments.differentiable == (2,)

    @settings(max_examples=60, derandomize=True, database=None, deadline=None)
    @given(case=cases(same), other=cases(rbf))
    def run(case, other):
        x, y = case[1]
        assert x.shape == y.shape and x.dim() >= 2
        assert all(t.is_floating_point() for t in other[1]) and (other[1][2] > 0).all()

    run()
    for x, y in [*fixed_inputs(same, "cpu"), *edge_inputs(same, "cpu")]:
        assert x.shape == y.shape and x.dim() >= 2


@pytest.mark.parametrize(
    "signature, large, small",
    [
        # a pairwise kernel: x1 large, m (x2's own) small; was n = m = d = 317 (a 317^3 intermediate)
        ("(n,d),(m,d),(1,1)->(n,m)", 0, {"m"}),
        # a rotation of points: the first input has no named dimension, the points are the large one
        # (n at the side of rank 2, 317: a fixed dimension is not made up for)
        ("(3,3),(n,3)->(n,3)", 1, set()),
        ("(n,k),(k,m)->(n,m)", 0, {"m"}),
    ],
)
def test_the_large_edge_input_is_one_input_large_not_every_dimension(signature, large, small):
    """Of an op over several inputs, the large edge input makes one input large (the first with the
    most named dimensions) and the dimensions it does not share small: each call's cost follows
    the large input's 100,000 elements, not the product of every named dimension."""
    n_in = signature.split("->")[0].count("(")

    class Pass(torch.autograd.Function):
        @staticmethod
        def forward(ctx, *xs):
            return xs[0].clone()

        @staticmethod
        def backward(ctx, g):
            return (g, *[None] * (n_in - 1))

    spec = spec_of(opzoo.declare(Pass, signature=signature, loop_dims=0))
    biggest = max(edge_inputs(spec, "cpu"), key=lambda xs: max(x.numel() for x in xs))
    sizes = [x.numel() for x in biggest]
    dims = spec.contract.sig.inputs
    assert max(sizes) == sizes[large] and all(n == 317 for n in biggest[large].shape[:1]), sizes
    assert sizes[large] >= (100_000 if all(not d.isdigit() for d in dims[large]) else 317), sizes
    for name in small:
        i = next(i for i, core in enumerate(dims) if name in core and name not in dims[large])
        assert biggest[i].shape[dims[i].index(name)] == 2, [tuple(x.shape) for x in biggest]


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"broadcast": "no"}, "broadcast must be True or False, got 'no'"),
        ({"min_rank": 6}, "min_rank must be an int from 0 to 5, got 6"),
        (
            {"signature": "(n)->(n)", "min_rank": 3, "loop_dims": 1},
            "min_rank=3 needs 2 loop dimension(s), but loop_dims=1",
        ),
    ],
)
def test_a_shape_declaration_that_cannot_hold_is_one_error(fields, message):
    """A bad broadcast or min_rank is a ContractError naming it."""
    with pytest.raises(opzoo.ContractError, match=message.replace("(", r"\(").replace(")", r"\)")):
        spec_of(opzoo.declare(so.RowSquare, **fields))


def test_a_float_constant_follows_the_checks_dtype():
    """A Floats(grad=False) input is cast with the op (Bound.cast): the op never sees float64 beside
    a bfloat16 input."""
    from opzoo.testing import bind

    spec = spec_of(opzoo.declare(so.RBFCovariance, inputs=RBF_INPUTS, **RBF))
    x1 = torch.ones(2, 3, dtype=torch.float64)
    op = bind(spec, {}, constants={0: x1, 1: x1})
    cast = op.cast(torch.bfloat16)
    assert all(c.dtype == torch.bfloat16 for c in cast.constants.values()) and cast.notes is op.notes


def _drawn_given_and_not(spec, i):
    """Whether the draws give input ``i`` as None and as a tensor."""
    seen = set()

    @settings(max_examples=40, derandomize=True, database=None, deadline=None)
    @given(case=cases(spec))
    def run(case):
        seen.add(case[1][i] is None)

    run()
    return seen == {True, False}


def test_an_optional_mask_is_checked_given_and_not():
    """Mask(optional=True): drawn None (where shrinking goes) and a mask; the first fixed input and
    the even edge inputs give None. A correct op green; one whose backward ignores a given mask red;
    one wrong only without a mask red with optional=True, green without (None was never tried)."""
    optional = {"signature": "(),()->()", "inputs": {"valid": Mask(optional=True)}}
    spec = spec_of(opzoo.declare(so.MaskedScale, **optional))
    assert fixed_inputs(spec, "cpu")[0][1] is None and fixed_inputs(spec, "cpu")[1][1] is not None
    assert edge_inputs(spec, "cpu")[0][1] is None and edge_inputs(spec, "cpu")[1][1] is not None
    assert _drawn_given_and_not(spec, 1)
    results = assert_correct(opzoo.declare(so.MaskedScale, **optional), devices=["cpu"])
    assert {r.prop: r.status for r in results}["library"] == "pass"  # bridged with a Tensor? input
    assert "gradient" in _failed(opzoo.declare(so.IgnoresTheMask, **optional), ["gradient"])
    assert "gradient" in _failed(opzoo.declare(so.WrongWithoutAMask, **optional), ["gradient"])
    given_only = opzoo.declare(so.WrongWithoutAMask, signature="(),()->()", inputs={"valid": Mask()})
    assert not _failed(given_only, ["gradient"])


WEIGHTED_NLL = {
    "signature": "(n,c),(n),(c)->()",
    "loop_dims": 0,
    "min_sizes": {"n": 1, "c": 1},
    "inputs": {"target": opzoo.Index(high="c"), "weight": Floats(0.1, 2.0, grad=False, optional=True)},
    "params": {"reduction": opzoo.Param("mean", choices=("mean", "sum"))},
    "reference": lambda logp, target, weight, reduction: torch.nn.functional.nll_loss(
        logp, target, weight=weight, reduction=reduction
    ),
}


def test_an_optional_float_input_is_checked_given_and_not():
    """Floats(grad=False, optional=True): a loss's ``weight=None`` drawn None and as a tensor; the
    correct loss green in every property (its reference, torch's nll_loss, refuses a float64 weight
    beside float32 input: the constant follows the dtype for the reference as for the op), the one
    whose backward forgets the weight red. Differentiated, an optional input is refused."""
    spec = spec_of(opzoo.declare(so.WeightedNLL, **WEIGHTED_NLL))
    assert _drawn_given_and_not(spec, 2)
    results = assert_correct(opzoo.declare(so.WeightedNLL, **WEIGHTED_NLL), devices=["cpu"])
    verdicts = {r.prop: r.status for r in results}
    assert verdicts["reference"] == verdicts["library"] == "pass"
    assert "gradient" in _failed(opzoo.declare(so.WeightIgnored, **WEIGHTED_NLL), ["gradient"])
    with pytest.raises(opzoo.ContractError, match="optional=True is for an input that is not differentiated"):
        spec_of(
            opzoo.declare(so.WeightedNLL, **{**WEIGHTED_NLL, "inputs": {"weight": Floats(optional=True)}})
        )


def test_a_failure_on_a_missing_input_repeats_with_none():
    """A failure's example shows the optional input as None, and its reproduce line passes None."""
    optional = {"signature": "(),()->()", "inputs": {"valid": Mask(optional=True)}}
    (result,) = check(
        spec_of(opzoo.declare(so.WrongWithoutAMask, **optional)), ["gradient"], devices=["cpu"], profile="ci"
    )
    assert result.status == "fail" and result.example["inputs"][1] is None
    assert "None (an optional input, not given)" in result.report() and "      None,\n" in result.repro
