"""A random forward (``Contract(random=True)``): every call under one seed, what is skipped and why,
the hint for an op that draws undeclared, and the checks that still fail a wrong one (issue 29 point 3)."""

from __future__ import annotations

import itertools

import pytest
import torch

import opzoo
from opzoo.testing import PROPERTIES, bind, check_property

_NUMBERS = itertools.count()
COMPARED = ("layout", "compile", "library", "hygiene")


class StochasticRounding(torch.autograd.Function):
    """sinabs' StochasticRounding (sinabs/activation/quantize.py), as published: rounds up with
    probability x - floor(x); the backward passes grad_output through."""

    @staticmethod
    def forward(ctx, inp):
        int_val = inp.floor()
        frac = inp - int_val
        output = int_val + (torch.rand_like(inp) < frac).float()
        return output

    @staticmethod
    def backward(ctx, grad_output):
        grad_input = grad_output.clone()
        return grad_input


class RoundingTwice(StochasticRounding):
    """Wrong: the backward doubles grad_output (the surrogate is the identity)."""

    @staticmethod
    def backward(ctx, grad_output):
        return 2 * grad_output


class RoundingAsIfContiguous(StochasticRounding):
    """Wrong: the backward reads a non-contiguous grad_output as if it were contiguous."""

    @staticmethod
    def backward(ctx, grad_output):
        strides = torch.empty(grad_output.shape).stride()
        return torch.as_strided(grad_output, grad_output.shape, strides).clone()


class Dropout(torch.autograd.Function):
    """An inverted dropout in the setup_context form, with a generated vmap rule: the mask is drawn in
    the forward, saved, and applied in the backward."""

    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        mask = (torch.rand_like(x) > 0.5).to(x.dtype)
        return x * mask * 2, mask

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output[1])
        ctx.mark_non_differentiable(output[1])

    @staticmethod
    def backward(ctx, g, _):
        (mask,) = ctx.saved_tensors
        return g * mask * 2


def _spec(target, **contract):
    # a name of its own: library bridges each op as torch.ops.opzoo.<name>, once per process
    name = f"{target.__name__.lower()}_{next(_NUMBERS)}"
    reg = opzoo.Registry()
    reg.register(opzoo.declare(target, **contract), name=name)
    return reg.info(name)


def _rounding(target=StochasticRounding, **contract):
    """The surrogate is the identity (a straight-through estimator); float64 and float32: in
    bfloat16 its output comes back float32, a defect of its own (see the last test)."""
    return _spec(target, surrogate=lambda inp: inp, dtypes=("float64", "float32"), **contract)


def test_random_must_be_a_bool():
    with pytest.raises(opzoo.ContractError, match="random must be True or False, got 'yes'"):
        _spec(StochasticRounding, random="yes")


def test_each_call_of_a_random_op_runs_under_one_seed_and_leaves_the_generator_alone():
    """Bound reseeds every call: two calls draw alike; the caller's generator does not move."""
    op = bind(_rounding(random=True), {})
    x = torch.linspace(-2, 2, 101, dtype=torch.float64)
    state = torch.get_rng_state()
    first, second = op(x), op(x)
    assert torch.equal(first, second)
    assert torch.equal(torch.get_rng_state(), state)
    undeclared = bind(_rounding(), {})
    assert not torch.equal(undeclared(x), undeclared(x))  # 101 coins: alike with probability 2**-75


def test_undeclared_stochastic_rounding_is_red_with_the_hint():
    """Undeclared, layout and compile compare runs that draw differently, and say what it looks like."""
    spec = _rounding()
    for prop in ("layout", "compile"):
        result = check_property(spec, prop, profile="ci")
        assert result.status == "fail", result.report()
        assert "a random forward? declare random=True" in result.reason, result.reason


def test_declared_random_stochastic_rounding_is_green():
    """Declared random, every property passes or skips; layout says what it did not compare,
    compile and library what they did."""
    results = {p: check_property(_rounding(random=True), p, profile="ci") for p in PROPERTIES}
    red = [r.report() for r in results.values() if r.status not in ("pass", "skip")]
    assert not red, red
    assert all(results[p].status == "pass" for p in COMPARED)
    assert any("inputs in another memory layout are not compared" in n for n in results["layout"].notes)
    assert any("run under one seed" in n for n in results["compile"].notes)
    assert any("AOT-dispatch test not run: a random forward" in n for n in results["library"].notes)


@pytest.mark.parametrize(
    "wrong, prop, words",
    [
        (RoundingTwice, "gradient", "surrogate"),
        (RoundingAsIfContiguous, "layout", "non-contiguous grad_output"),
    ],
)
def test_a_wrong_random_op_is_still_red(wrong, prop, words):
    """Declared random, the checks still see a backward off its surrogate, and one that misreads a
    non-contiguous grad_output (layout's grad_output variants run)."""
    result = check_property(_rounding(wrong, random=True), prop, profile="ci")
    assert result.status == "fail", result.report()
    assert words in result.reason, result.reason
    assert "declare random=True" not in result.reason


def test_stochastic_roundings_bfloat16_output_stays_red():
    """Its real defect: a bfloat16 input gives a float32 output (`.float()`), random or not."""
    spec = _spec(StochasticRounding, surrogate=lambda inp: inp, random=True)
    result = check_property(spec, "hygiene", profile="ci")
    assert result.status == "fail" and "float32" in result.reason, result.report()


def test_vmap_of_a_random_op_draws_once_for_the_batch():
    """forward_mode vmaps a random op with randomness="same", which equals a loop of reseeded
    calls; undeclared, vmap refuses to draw (randomness="error") and forward_mode fails."""
    declared = check_property(
        _spec(Dropout, signature="()->(),()", random=True), "forward_mode", profile="ci"
    )
    assert declared.status == "pass", declared.report()
    undeclared = check_property(_spec(Dropout, signature="()->(),()"), "forward_mode", profile="ci")
    assert undeclared.status == "fail" and "random" in undeclared.reason, undeclared.report()


def _drawn_alike(inp):
    """StochasticRounding's forward in torch: the same draws under the same seed."""
    return inp.floor() + (torch.rand_like(inp) < inp - inp.floor()).to(inp.dtype)


def test_a_reference_that_draws_is_called_under_the_ops_seed():
    """Declared random, the reference is called under the op's seed: a reference drawing alike
    matches (in float64: rand_like draws other numbers in another dtype); undeclared, it does not."""
    contract = {"reference": _drawn_alike, "surrogate": lambda inp: inp, "dtypes": ("float64",)}
    declared = check_property(_spec(StochasticRounding, random=True, **contract), "reference", profile="ci")
    assert declared.status == "pass", declared.report()
    undeclared = check_property(_spec(StochasticRounding, **contract), "reference", profile="ci")
    assert undeclared.status == "fail", undeclared.report()
