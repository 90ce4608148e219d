"""A backward that is no derivative by design (``gradient="by design: <reason>"``, ``linear_in_grad``):
its validation, the properties that skip with the reason, those that still run, each shown failing
on a wrong op, and the mutants that do not apply (issue 29 point 3)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch

import opzoo
from opzoo.testing import PROPERTIES, check_property
from opzoo.testing.mutation._mutants import MUTANTS

_NUMBERS = itertools.count()
GUIDED = "by design: guided backprop keeps g where x > 0 and g > 0"
CAPPED = "by design: the gradient is capped at 1/finfo(dtype).eps"


class GuidedReLU(torch.autograd.Function):
    """monai's _AutoGradReLU (monai/visualize/gradient_based.py), as published."""

    @staticmethod
    def forward(ctx, x):
        pos_mask = (x > 0).type_as(x)
        output = torch.mul(x, pos_mask)
        ctx.save_for_backward(x, output)
        return output

    @staticmethod
    def backward(ctx, grad_output):
        x, _ = ctx.saved_tensors
        pos_mask_1 = (x > 0).type_as(grad_output)
        pos_mask_2 = (grad_output > 0).type_as(grad_output)
        y = torch.mul(grad_output, pos_mask_1)
        grad_input = torch.mul(y, pos_mask_2)
        return grad_input


class GuidedOffForward(GuidedReLU):
    """Wrong: the forward leaks 1% of the negative inputs."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x, x)
        return torch.where(x > 0, x, 0.01 * x)


class GuidedNoisy(GuidedReLU):
    """Wrong: the backward differs from call to call."""

    @staticmethod
    def backward(ctx, grad_output):
        x, _ = ctx.saved_tensors
        g = grad_output * (x > 0) * (grad_output > 0)
        return g * (1 + 1e-6 * torch.rand_like(g))


class GuidedFlat(GuidedReLU):
    """Wrong: the backward's gradient has the wrong shape (flattened)."""

    @staticmethod
    def backward(ctx, grad_output):
        x, _ = ctx.saved_tensors
        return (grad_output * (x > 0) * (grad_output > 0)).reshape(-1, 1)


class SafeLog(torch.autograd.Function):
    """pyro's _SafeLog (pyro/ops/special.py): log, its gradient capped at 1/finfo.eps."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.log()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / x.clamp(min=torch.finfo(x.dtype).eps)


class SafeLogSquared(SafeLog):
    """Wrong, declared linear: the backward squares grad_output (keeping its sign)."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * grad.abs() / x.clamp(min=torch.finfo(x.dtype).eps)


class SafeLogDetached(SafeLog):
    """Wrong, declared linear: the backward's result detached (a gradient penalty silently 0)."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (grad / x.clamp(min=torch.finfo(x.dtype).eps)).detach()


class Identity(torch.autograd.Function):
    """The identity's forward, for the by-design backwards below."""

    @staticmethod
    def forward(x):
        return x.clone()

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass


class Doubled(Identity):
    """The identity, a backward of 2 g by design and a jvp of the derivative (roma's
    _ProcrustesRegularization also has a jvp that is not its backward's transpose)."""

    @staticmethod
    def backward(ctx, g):
        return 2 * g

    @staticmethod
    def jvp(ctx, t):
        return t.clone()


def _spec(target, **contract):
    # a name of its own: library bridges each op as torch.ops.opzoo.<name>, once per process
    name = f"{target.__name__.lower()}_{next(_NUMBERS)}"
    reg = opzoo.Registry()
    reg.register(opzoo.declare(target, **contract), name=name)
    return reg.info(name)


def _results(spec, props=PROPERTIES):
    return {p: check_property(spec, p, profile="ci") for p in props}


def _relu(x):
    return torch.relu(x)


# -- validation -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"gradient": "by design"}, 'gradient must be "derivative" or "by design: <reason>"'),
        ({"gradient": "by design:  "}, "a reason that says what the backward computes instead"),
        ({"gradient": "guided"}, "got 'guided'"),
        ({"linear_in_grad": False}, "linear_in_grad=False is declared with a by-design gradient only"),
        ({"gradient": GUIDED, "surrogate": _relu}, "a by-design gradient declares no surrogate"),
        ({"gradient": GUIDED, "kinks": {0.0: 0.0}}, "a by-design gradient declares no kinks"),
        ({"gradient": GUIDED, "linear_in_grad": 0}, "linear_in_grad must be True or False, got 0"),
        ({"random": "yes"}, "random must be True or False"),
    ],
)
def test_a_by_design_declaration_is_validated(fields, message):
    """The prefix and a reason; no surrogate or kinks with it; linear_in_grad=False only with it."""
    with pytest.raises(opzoo.ContractError, match=message.replace("(", r"\(")):
        _spec(GuidedReLU, **fields)


def test_the_reason_is_read_from_the_declaration():
    """``Contract.by_design`` is the reason, stripped; None for a derivative."""
    assert opzoo.Contract(gradient="by design:  a natural gradient ").by_design == "a natural gradient"
    assert opzoo.Contract().by_design is None


# -- guided backprop: not linear in grad_output ------------------------------------------------------


def test_guided_backprop_is_red_on_the_derivative_checks_undeclared():
    """monai's guided ReLU, declared as a plain op with relu as its reference: gradient, autograd and
    reference fail (its backward is not relu's derivative), as the issue found."""
    results = _results(_spec(GuidedReLU, reference=_relu), ["gradient", "autograd", "reference"])
    assert {p: r.status for p, r in results.items()} == dict.fromkeys(results, "fail"), results


def test_guided_backprop_declared_by_design_is_green_on_the_rest():
    """Declared by design and not linear: gradient and autograd skip with the reason, reference
    checks the forward, every other property runs and passes."""
    results = _results(_spec(GuidedReLU, reference=_relu, gradient=GUIDED, linear_in_grad=False))
    skipped = {p for p, r in results.items() if r.status == "skip"}
    assert skipped == {"gradient", "autograd", "kinks", "subsets"}, {p: r.reason for p, r in results.items()}
    assert all(r.status == "pass" for p, r in results.items() if p not in skipped), results
    reason = GUIDED.removeprefix("by design: ")
    for name in ("gradient", "autograd"):
        assert reason in results[name].reason, results[name].reason


@pytest.mark.parametrize(
    "wrong, prop",
    [(GuidedOffForward, "reference"), (GuidedNoisy, "hygiene"), (GuidedFlat, "hygiene")],
)
def test_a_wrong_guided_backprop_is_still_red(wrong, prop):
    """By design is no licence: a forward that is off fails reference, a backward that differs from
    call to call or has the wrong shape fails hygiene."""
    spec = _spec(wrong, reference=_relu, gradient=GUIDED, linear_in_grad=False)
    result = check_property(spec, prop, profile="ci")
    assert result.status == "fail", result.report()


# -- a by-design backward linear in grad_output ------------------------------------------------------


def test_safe_log_declared_by_design_is_green():
    """pyro's safe_log (its bfloat16 cap is off torch.log's gradient: red on reference undeclared)
    passes every property declared by design; gradient passes on linearity, with a note."""
    spec = _spec(SafeLog, domain=(0, math.inf), reference=torch.log)
    undeclared = check_property(spec, "reference", profile="ci")
    assert undeclared.status == "fail" and "bfloat16" in undeclared.reason, undeclared.report()
    results = _results(_spec(SafeLog, domain=(0, math.inf), reference=torch.log, gradient=CAPPED))
    red = [r.report() for r in results.values() if r.status not in ("pass", "skip")]
    assert not red, red
    assert results["gradient"].status == "pass"
    assert any("linear in grad_output checked" in note for note in results["gradient"].notes)


def test_a_backward_not_linear_in_grad_output_is_red_on_gradient():
    """Declared linear (the default), a backward that squares grad_output fails gradient."""
    spec = _spec(SafeLogSquared, domain=(0, math.inf), gradient=CAPPED)
    result = check_property(spec, "gradient", profile="ci")
    assert result.status == "fail" and "not linear in grad_output" in result.reason, result.report()


#: The backward's round trip through a solve with M = I + C 11' (condition number about C n): its
#: result is g in exact arithmetic, and g up to rounding of about C n eps |g| here.
C = 1e8


class SolveRoundTrip(Identity):
    """A backward that solves with an ill-conditioned matrix and multiplies back, as implicit-function
    backwards do: linear in grad_output, exactly; its rounding far above an element's ulps."""

    @staticmethod
    def backward(ctx, g):
        n = g.shape[-1]
        x = g - C * g.sum(-1, keepdim=True) / (1 + C * n)  # M^-1 g
        return x + C * x.sum(-1, keepdim=True)  # M x


class SolveRoundTripAbs(SolveRoundTrip):
    """Wrong: 0.1 % of |g| added, a backward not linear in grad_output."""

    @staticmethod
    def backward(ctx, g):
        return SolveRoundTrip.backward(ctx, g) + 1e-3 * g.abs()


ROUND_TRIP = "by design: the implicit-function backward of a solve"


def test_a_linear_backward_that_rounds_far_above_an_ulp_is_linear():
    """The linearity check allows the backward's own rounding, measured by nudging the grad_outputs
    one ulp (a 317 x 317 Cholesky backward's rounding was read as not linear: gpytorch's
    _NaturalToMuVarSqrt in the real-world record); a backward 0.1 % off linear is still red."""
    right = check_property(
        _spec(SolveRoundTrip, signature="(n)->(n)", gradient=ROUND_TRIP), "gradient", profile="ci"
    )
    assert right.status == "pass", right.report()
    wrong = _spec(SolveRoundTripAbs, signature="(n)->(n)", gradient=ROUND_TRIP)
    result = check_property(wrong, "gradient", profile="ci")
    assert result.status == "fail" and "not linear in grad_output" in result.reason, result.report()


def test_a_detached_linear_backward_is_red_on_double_backward():
    """Declared linear, the derivative along the grad_outputs is still checked: a detached result fails."""
    spec = _spec(SafeLogDetached, domain=(0, math.inf), gradient=CAPPED)
    result = check_property(spec, "double_backward", profile="ci")
    assert result.status == "fail" and "with respect to grad_output" in result.reason, result.report()


def test_a_jvp_is_not_compared_with_a_by_design_backward():
    """A jvp is a derivative: against a by-design backward it is not compared (a note says so);
    undeclared, forward_mode finds them apart."""
    undeclared = check_property(_spec(Doubled), "forward_mode", profile="ci")
    assert undeclared.status == "fail", undeclared.report()
    spec = _spec(Doubled, gradient="by design: twice the step")
    result = check_property(spec, "forward_mode", profile="ci")
    assert result.status == "pass", result.report()
    assert any("jvp is not compared" in note for note in result.notes), result.notes


class GuidedScaled(torch.nn.Module):
    """A learnable Module around monai's guided ReLU (monai's _GradReLU wraps _AutoGradReLU so), with
    a learned scale: its backward is guided backprop's, by design, and autograd's for the scale."""

    def __init__(self, init_scale: float = 1.5) -> None:
        super().__init__()
        self.scale = torch.nn.Parameter(torch.tensor(float(init_scale)))

    def forward(self, x):
        return GuidedReLU.apply(x) * self.scale


def _scaled_relu(x, init_scale):
    return init_scale * torch.relu(x)


def test_a_learnable_module_is_declared_by_design():
    """A Module whose forward calls a by-design Function is taken at load like a Function is, and
    its checks honour it: gradient skips with the reason, reference checks the forward only (red on
    the gradient undeclared)."""
    params = {"init_scale": opzoo.Param(1.5, 0.5, 2.0)}
    undeclared = _spec(GuidedScaled, reference=_scaled_relu, params=params)
    result = check_property(undeclared, "reference", profile="ci")
    assert result.status == "fail" and "gradient" in result.reason, result.report()
    spec = _spec(GuidedScaled, reference=_scaled_relu, params=params, gradient=GUIDED, linear_in_grad=False)
    assert spec.kind == "module" and spec.contract.by_design == GUIDED.removeprefix("by design: ")
    results = _results(spec, ["gradient", "reference"])
    assert results["gradient"].status == "skip", results["gradient"].report()
    assert spec.contract.by_design in results["gradient"].reason
    assert results["reference"].status == "pass", results["reference"].report()


def test_the_error_samples_of_a_by_design_op_hold_the_reference_to_the_forward():
    """pyro's safe_log caps its gradient per dtype by design: against torch.log's derivative its
    bfloat16 gradient is far over budget (the report's and the error-budget record's "over"). Declared
    by design, the reference is worded as the forward's oracle, the backward is measured against its
    own float64 one and held to no budget (no excess), and a note says why."""
    from opzoo.testing.checks._budget import BUDGETS
    from opzoo.testing.running._errors import BY_DESIGN, error_samples

    plain = error_samples(_spec(SafeLog, domain=(0, math.inf), reference=torch.log), examples=5)
    assert plain.excess("bfloat16") > BUDGETS[torch.bfloat16] and "differentiated" in plain.oracle
    spec = _spec(SafeLog, domain=(0, math.inf), reference=torch.log, gradient=CAPPED)
    errors = error_samples(spec, examples=5)
    assert errors.oracle.startswith("the declared reference for the forward only"), errors.oracle
    assert spec.contract.by_design in errors.oracle and "differentiated" not in errors.oracle
    assert errors.excess("bfloat16") is None and errors.worst("bfloat16") is not None
    assert errors.excess("bfloat16", "forward") is not None and BY_DESIGN in errors.notes


# -- mutation ----------------------------------------------------------------------------------------


def test_mutants_of_the_derivative_alone_do_not_apply_by_design():
    """A mutant that changes only the derivative is n/a on a by-design op, so it counts as no
    survivor; one linearity sees applies where the backward is declared linear."""
    guided = _spec(GuidedReLU, gradient=GUIDED, linear_in_grad=False)
    linear = _spec(SafeLog, domain=(0, math.inf), gradient=CAPPED)
    plain = _spec(SafeLog, domain=(0, math.inf))
    for name in ("sign", "factor_1e-3", "roll", "wrong_on_negatives"):
        assert "by design" in MUTANTS[name].applies(guided), name
        assert "by design" in MUTANTS[name].applies(linear), name
        assert MUTANTS[name].applies(plain) is None, name
    for name in ("ones_grad_output", "detached"):
        assert "not linear in grad_output" in MUTANTS[name].applies(guided), name
        assert MUTANTS[name].applies(linear) is None, name
    for name in ("noise", "grad_output_in_place", "not_repeatable"):
        assert MUTANTS[name].applies(guided) is None, name
