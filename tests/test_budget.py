"""Error budgets: the backward's error in a lower dtype, in units of that dtype's epsilon."""

from __future__ import annotations

import math

import correct_ops
import torch
import torch.nn.functional as F

import opzoo
from opzoo.testing import check_property
from opzoo.testing.checks._budget import BUDGETS, FLOOR, in_eps
from opzoo.testing.running._errors import error_samples

EPS32 = torch.finfo(torch.float32).eps


def _softplus(off_in_float32: float) -> type:
    """softplus whose float32 backward is off by ``off_in_float32`` float32 eps (relative); exact in
    float64, so that only the float32 budget can tell."""

    class Softplus(correct_ops.Softplus):
        opzoo_contract = opzoo.Contract(reference=F.softplus, dtypes=("float64", "float32"))

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            factor = 1 + off_in_float32 * EPS32 if x.dtype == torch.float32 else 1.0
            return grad * torch.sigmoid(x) * factor

    return Softplus


def _checked(off: float) -> opzoo.testing.Result:
    reg = opzoo.Registry()
    reg.register(_softplus(off), name="softplus_off")
    return check_property(reg.info("softplus_off"), "reference", profile="ci", examples=10)


def test_a_float32_backward_64_eps_off_fails_reference():
    """A backward 64 float32 eps off (relative), right in float64, fails `reference` on the float32
    budget, with how far off it is in eps."""
    result = _checked(64)
    assert result.status == "fail", result.reason
    assert "over the float32 budget of 8 eps" in result.reason, result.reason
    assert "eps off" in result.reason


def test_an_exact_float32_backward_passes_reference():
    """The same op without the error passes, and so does one 4 eps off: the budget is 8 eps."""
    assert _checked(0).status == "pass"
    assert _checked(4).status == "pass"


def test_k_counts_eps_of_the_element_or_of_the_floor():
    """k is the relative error in eps for an element near its tensor's largest, and is measured
    against FLOOR times the largest for a much smaller element."""
    want = torch.tensor([1.0, 1e-6], dtype=torch.float64)
    got = (want * (1 + 64 * EPS32)).float()
    k = in_eps(got, want, torch.float32)
    assert abs(k[0].item() - 64) < 1
    assert k[1].item() < 64 * 1e-6 / FLOOR * 1.1
    nan = torch.tensor([float("nan"), 1.0], dtype=torch.float64)
    assert in_eps(nan.float(), nan, torch.float32)[0].item() == 0  # nan matches nan


def test_every_lower_dtype_has_a_budget():
    """Each dtype an op may declare besides float64 has a budget (in eps), the float32 one 8."""
    from opzoo.core._contract import KNOWN_DTYPES

    for name in KNOWN_DTYPES:
        if name != "float64":
            assert getattr(torch, name) in BUDGETS
    assert BUDGETS[torch.float32] == 8


def test_error_samples_measure_each_declared_dtype():
    """error_samples gives k values per declared dtype, measured against the declared reference;
    a correct op stays within each budget."""
    spec = opzoo.info("softplus")
    errors = error_samples(spec, examples=5)
    assert "reference" in errors.oracle
    assert set(errors.backward) == set(spec.contract.dtypes)
    for name in spec.contract.dtypes:
        assert errors.backward[name].numel() > 100
        if name != "float64":
            assert errors.excess(name) <= BUDGETS[getattr(torch, name)]


class LogNdtr(torch.autograd.Function):
    """log Phi(x), computed in float64 inside as gpytorch's LogNormalCDF may, declared against
    torch.special.log_ndtr, which has no bfloat16 kernel, in float64, float32 and bfloat16."""

    opzoo_contract = opzoo.Contract(
        reference=torch.special.log_ndtr, dtypes=("float64", "float32", "bfloat16")
    )

    @staticmethod
    def forward(x):
        return torch.special.log_ndtr(x.double()).to(x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        x64 = x.double()
        # d/dx log Phi(x) = phi(x) / Phi(x) = exp(log phi(x) - log Phi(x))
        slope = torch.exp(-x64 * x64 / 2 - 0.5 * math.log(2 * math.pi) - torch.special.log_ndtr(x64))
        return (grad.double() * slope).to(grad.dtype)


def test_a_reference_with_no_kernel_in_a_dtype_runs_in_float64_rounded():
    """A reference torch cannot run in bfloat16 is no failure of the op: it runs in float64 at the
    rounded inputs, its results rounded to bfloat16, with a note; the op is green."""
    reg = opzoo.Registry()
    reg.register(LogNdtr, name="log_ndtr")
    result = check_property(reg.info("log_ndtr"), "reference", profile="ci", examples=10)
    assert result.status == "pass", result.report()
    assert any("the reference has no bfloat16 kernel" in note for note in result.notes), result.notes
