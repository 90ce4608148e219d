"""Surrogate-gradient ops: the contract's validation, the checks against the surrogate, the hint for
ops that should declare one, the built-ins in training, and a third-party plugin end to end."""

from __future__ import annotations

import json
import math

import pytest
import torch
from conftest import ROOT, run_opzoo
from correct_ops import Spike as _Spike
from wrong_ops import WRONG

import opzoo
from opzoo.testing import check_property, spec_of
from opzoo.testing.checks._surrogate import HINT


def _spike(**contract):
    return type("Spike", (_Spike,), {"opzoo_contract": opzoo.Contract(**contract)})


def test_a_surrogate_must_be_callable():
    """A surrogate that is not callable is refused at load, in one line."""
    with pytest.raises(opzoo.ContractError, match="surrogate must be callable, got 1.0"):
        opzoo.Registry().register(_spike(surrogate=1.0), name="spike")


def test_a_surrogate_op_declares_no_kinks_and_is_told_why():
    """A surrogate with kinks is refused, saying that the surrogate defines the gradient at jumps."""
    for kinks in ({0.0: 1.0}, lambda: {0.0: 1.0}):
        with pytest.raises(opzoo.ContractError) as err:
            opzoo.Registry().register(_spike(surrogate=lambda x: x, kinks=kinks), name="spike")
        assert str(err.value) == (
            "a surrogate op declares no kinks: its backward is checked against the surrogate's gradient "
            "everywhere, so the surrogate (not kinks) says what the gradient is at the forward's jumps"
        )


def test_a_learnable_module_cannot_declare_a_surrogate():
    """A Module's backward is autograd's: a surrogate there is refused."""

    class Scaled(torch.nn.Module):
        opzoo_contract = opzoo.Contract(surrogate=lambda x: x)

        def forward(self, x):
            return x

    with pytest.raises(opzoo.ContractError, match="a surrogate applies to Functions only"):
        opzoo.Registry().register(Scaled, name="scaled")


def test_a_right_surrogate_op_passes_every_property():
    """The issue's arctan spike, declared with its surrogate, passes gradient, double_backward and
    the rest; the reference is compared on the forward only."""
    reg = opzoo.Registry()
    reg.register(
        _spike(
            surrogate=lambda x: torch.atan(math.pi * x) / math.pi,
            reference=lambda x: torch.heaviside(x, torch.ones((), dtype=x.dtype)),
            double_backward=True,
        ),
        name="spike",
    )
    for prop in opzoo.testing.PROPERTIES:
        result = check_property(reg.info("spike"), prop, profile="ci")
        assert result.status in ("pass", "skip"), result.report()


def test_without_its_surrogate_the_same_op_fails_gradient_with_the_hint():
    """Undeclared, the spike fails gradient (finite differences are 0) and is told to declare it."""
    reg = opzoo.Registry()
    reg.register(_spike(), name="spike")
    result = check_property(reg.info("spike"), "gradient", profile="ci")
    assert result.status == "fail" and "declare `surrogate=`" in result.reason, result.report()
    assert "the gradient is zero almost everywhere" in result.reason


class OneHotArgmax(torch.autograd.Function):
    """A row's one-hot argmax with a softmax's gradient as its backward (straight-through, as
    Gumbel-softmax's hard sample has it), undeclared: piecewise constant along its dimension."""

    @staticmethod
    def forward(ctx, x):
        y = torch.softmax(x, -1)
        ctx.save_for_backward(y)
        return torch.nn.functional.one_hot(x.argmax(-1), x.shape[-1]).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * (g - (g * y).sum(-1, keepdim=True))


def test_the_hint_looks_past_a_dimension_of_one_element():
    """A shrunk counterexample of one element along the op's dimension is flat for any op of it (a
    log-softmax over one element is 0): the hint is given where the forward is flat at the op's
    fixed inputs too, whose dimensions have several elements (the one-hot argmax), and not where it
    is not (a log-softmax whose backward sums over the wrong dimension, which a new user was told
    might be meant as a surrogate)."""
    from test_declare import LogSoftmaxLastDim

    onehot = spec_of(OneHotArgmax, opzoo.Contract(signature="(n)->(n)"))
    result = check_property(onehot, "gradient", profile="ci")
    assert result.status == "fail" and HINT in result.reason, result.report()
    wrong = spec_of(LogSoftmaxLastDim, opzoo.Contract(signature="(n)->(n)", params={"dim": opzoo.Dim()}))
    result = check_property(wrong, "gradient", profile="ci")
    assert result.status == "fail" and HINT not in result.reason, result.report()
    assert result.example["inputs"][0]["shape"][-1] == 1  # shrunk to one element along it


@pytest.mark.parametrize("name", ["wrong_sign", "wrong_part", "ignores_grad_output"])
def test_the_hint_is_not_given_to_ops_that_are_not_piecewise_constant(name):
    """A wrong ReLU or softplus backward fails gradient without the surrogate hint."""
    reg = opzoo.Registry()
    reg.register(WRONG[name][0], name=name)
    result = check_property(reg.info(name), "gradient", profile="ci")
    assert result.status == "fail" and "surrogate" not in result.reason, result.reason


@pytest.mark.parametrize("name", ["wrong_slope_surrogate", "ste_drops_grad_output", "overflowing_surrogate"])
def test_departures_from_the_surrogate_are_shrunk_to_one_element(name):
    """Each wrong surrogate op's counterexample is a single element, with the op's and the
    surrogate's values at the worst element."""
    reg = opzoo.Registry()
    reg.register(WRONG[name][0], name=name)
    result = check_property(reg.info(name), "gradient", profile="ci")
    assert result.status == "fail"
    assert math.prod(result.example["inputs"][0]["shape"]) == 1, result.report()
    assert {"surrogate", "analytic"} <= set(result.worst), result.worst
    assert "the op's gradient is" in result.reason and "the surrogate's is" in result.reason


def test_an_overflow_is_found_at_large_x_and_reproduces_from_the_example():
    """The overflowing sigmoid backward is caught at the drawn input scaled up, and the printed
    example, fed back to the property, fails the same way."""
    from opzoo.testing import PROPERTIES, PropertyFailed, bind

    reg = opzoo.Registry()
    reg.register(WRONG["overflowing_surrogate"][0], name="overflow")
    result = check_property(reg.info("overflow"), "gradient", profile="ci")
    assert "at large |x|" in result.reason and result.worst["analytic"] != result.worst["analytic"]  # nan
    (x,) = result.example["inputs"]
    with pytest.raises(PropertyFailed, match="at large"):
        PROPERTIES["gradient"](bind(reg.info("overflow"), {}), torch.tensor(x["values"], dtype=torch.float64))


def test_a_backward_without_second_derivative_is_a_skip_unless_declared():
    """A surrogate op whose backward is once_differentiable skips double_backward, saying why."""

    class Once(_Spike):
        opzoo_contract = opzoo.Contract(surrogate=lambda x: torch.atan(math.pi * x) / math.pi)

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad / (1 + (math.pi * x) ** 2)

    reg = opzoo.Registry()
    reg.register(Once, name="once")
    result = check_property(reg.info("once"), "double_backward", profile="ci")
    assert result.status == "skip" and "no second derivative" in result.reason, result


def test_heaviside_surrogate_follows_its_params():
    """heaviside's backward is arctan's or the fast sigmoid's, by the surrogate param, at any slope."""
    spec = opzoo.info("heaviside")
    x = torch.linspace(-3, 3, 13, dtype=torch.float64, requires_grad=True)
    for surrogate, slope, want in (
        (0, 2.0, 1 / (1 + (math.pi * x.detach()) ** 2)),
        (0, 5.0, 2.5 / (1 + (2.5 * math.pi * x.detach()) ** 2)),
        (1, 25.0, 1 / (1 + 25 * x.detach().abs()) ** 2),
    ):
        (got,) = torch.autograd.grad(spec.apply(x, surrogate=surrogate, slope=slope).sum(), x)
        torch.testing.assert_close(got, want)
        y = x.detach().requires_grad_()
        s = spec.contract.surrogate(y, surrogate=surrogate, slope=slope)
        torch.testing.assert_close(torch.autograd.grad(s.sum(), y)[0], want)
    with pytest.raises(opzoo.ParamError, match="must be an integer"):
        spec.apply(x, surrogate=0.5)


def test_grad_reverse_reverses_and_scales():
    """grad_reverse is the identity forward and -lambd * grad backward."""
    x = torch.randn(5, requires_grad=True)
    y = opzoo.info("grad_reverse").apply(x, lambd=0.3)
    assert torch.equal(y, x.detach())
    (g,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(g, torch.full_like(x, -0.3))


# -- training -------------------------------------------------------------------------------------


def test_heaviside_trains_with_the_documented_command():
    """docs/surrogates.md's command trains a binary hidden layer: 26640 to about 218 in 200 steps."""
    command = "opzoo train --activation heaviside --steps 200 --lr 3e-4 --seed 0"
    assert f"$ {command}" in (ROOT / "docs" / "surrogates.md").read_text()
    out = run_opzoo(*command.split()[1:])
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert [line.split()[0] for line in lines[:2]] == ["99", "199"]
    assert float(lines[1].split()[1]) < 1000  # from 26640 at step 0 (218 on the machine that wrote this)


def test_heaviside_is_compared_with_relu():
    """`opzoo train -a heaviside,torch:relu` trains both from the same start and tabulates them."""
    out = run_opzoo("train", "-a", "heaviside,torch:relu", "--steps", "200", "--seed", "0")
    assert out.returncode == 0, out.stderr
    assert "heaviside 199 " in out.stdout and "torch:relu 199 " in out.stdout
    assert "FINAL LOSS" in out.stdout


def test_the_fast_sigmoid_and_the_binarised_layer_train_too():
    """heaviside with the fast sigmoid, and ste_sign, learn at the documented rate."""
    for activation, args in (("heaviside", {"surrogate": 1, "slope": 25.0}), ("ste_sign", {})):
        result = opzoo.train(activation=activation, act_args=args, steps=200, lr=3e-4, seed=0)
        assert all(math.isfinite(v) for v in result.losses)
        assert result.final_loss < result.losses[0] / 10, (activation, result.final_loss)


# -- a third-party plugin, end to end --------------------------------------------------------------


@pytest.fixture(scope="module")
def plugin_results(surrogate_plugin_path):
    """opzoo check --json over the fixture plugin's surrogate ops, in a subprocess that imports it."""
    out = run_opzoo(
        "check",
        "sigmoid_spike",
        "wrong_sigmoid_spike",
        "--profile",
        "ci",
        "--device",
        "cpu",
        "--json",
        env={"PYTHONPATH": surrogate_plugin_path},
        timeout=900,
    )
    assert out.returncode == 1, out.stdout + out.stderr  # the wrong twin fails
    return {(r["op"], r["prop"]): r for r in json.loads(out.stdout)["results"]}


def test_a_plugins_surrogate_op_is_checked_against_its_surrogate(plugin_results):
    """A surrogate op declared by entry point passes every property with no test code of its own."""
    mine = {prop: r for (op, prop), r in plugin_results.items() if op == "sigmoid_spike"}
    assert mine and all(r["status"] in ("pass", "skip") for r in mine.values()), mine
    assert mine["gradient"]["status"] == "pass" and mine["double_backward"]["status"] == "pass"


def test_a_plugins_wrong_surrogate_op_is_caught_with_a_shrunk_counterexample(plugin_results):
    """Its wrong twin (the factor alpha forgotten) fails gradient against the declared surrogate,
    on a single element, with both values."""
    r = plugin_results[("wrong_sigmoid_spike", "gradient")]
    assert r["status"] == "fail" and "differs from the declared surrogate" in r["reason"], r["reason"]
    assert [math.prod(t["shape"]) for t in r["example"]["inputs"]] == [1]
    assert r["repro"].startswith("opzoo check wrong_sigmoid_spike --property gradient")
