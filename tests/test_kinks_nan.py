"""A nan or infinite derivative (opzoo/testing/checks/_kinks.py, _oracles.py, _reference.py): the op's
is red wherever finite differences are finite, first and second order, fast and slow, with the element
named; excused only where the derivative is not bounded (central differences do not settle as the
step shrinks); an oracle's own overflow is left out with a note, never blamed on the op."""

from __future__ import annotations

import pytest
import torch
from correct_ops import SoftUnitStep
from wrong_ops import NanGradientAtSmall, NanHessianWhereZero, NanSecondDerivative

import opzoo
from opzoo.testing import PROPERTIES, bind, replay, spec_of
from opzoo.testing.checks._kinks import UNBOUNDED_NOTE
from opzoo.testing.checks._oracles import OVERFLOW
from opzoo.testing.checks._reference import OVERFLOW as REFERENCE_OVERFLOW

#: the issue's input: entmax15's Hessian is nan at [1.5, 0.2, -2.0], where one output is 0
X = torch.tensor([1.5, 0.2, -2.0], dtype=torch.float64)


def _notes(cls, prop, *xs):
    """The notes of property ``prop`` of ``cls`` at ``xs`` (raises what the property raises)."""
    op = bind(spec_of(cls), {})
    PROPERTIES[prop](op, *xs)
    return op.notes


@pytest.mark.parametrize("fast", [True, False])
@pytest.mark.parametrize(
    "cls, prop, index",
    [
        (NanGradientAtSmall, "gradient", "at index [1]"),
        (NanSecondDerivative, "double_backward", "at index ["),
        (NanHessianWhereZero, "double_backward", "at index [2]"),
    ],
)
def test_a_nan_derivative_is_red_at_small_inputs(cls, prop, index, fast):
    """A nan where finite differences are finite fails at the issue's three-element input, fast and
    slow: the nan is not excused as 0 * inf (it does not depend on the grad_output), and the element
    is named (for the Hessian nan only where the output is 0, that element)."""
    with pytest.raises(AssertionError) as caught:
        replay(spec_of(cls), prop, {}, X, fast=fast)
    assert "analytical nan" in str(caught.value) and index in str(caught.value)


class CubeRoot(torch.autograd.Function):
    """sign(x) |x|^(1/3), its backward from the saved output: right, and unbounded at 0."""

    @staticmethod
    def forward(x):
        return torch.sign(x) * x.abs() ** (1 / 3)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad / (3 * y * y)  # d/dx x^(1/3) = 1 / (3 x^(2/3))


class OffCubeRoot(CubeRoot):
    """The cube root whose gradient is 1 % off."""

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return 1.01 * grad / (3 * y * y)


@pytest.mark.parametrize("values", [[1e-322, 1.0], [0.0, 1.0, -2.0]])
def test_an_unbounded_derivative_is_not_held_to_finite_differences(values):
    """A cube root next to 0, where its derivative is 1e215 and central differences say 1e4 (and
    2.5e4 at a quarter of the step): nothing to check, noted; 1 % off elsewhere is still red."""
    x = torch.tensor(values, dtype=torch.float64)
    notes = _notes(CubeRoot, "gradient", x)
    assert values[0] == 0.0 or UNBOUNDED_NOTE.format(subject="the op") in notes
    with pytest.raises(AssertionError, match="Jacobian mismatch"):
        replay(spec_of(OffCubeRoot), "gradient", {}, x)


class UnderflowingSoftUnitStep(SoftUnitStep):
    """e3nn's _SoftUnitStep as upstream writes it: exp(-1/x) / x.pow(2), nan where x^2 underflows
    (x < 1e-162), where the derivative is 0."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        dx = torch.zeros_like(x)
        m = x > 0.0
        xm = x[m]
        dx[m] = (-1 / xm).exp() / xm.pow(2)
        return dx * grad


def test_the_oracles_own_overflow_is_left_out_with_a_note():
    """At x = 8.5e-162 the forward's autograd derivative of exp(-1/x) is nan (0 * inf) and the
    backward's 0 is right: autograd passes with a note, as reference does against a reference that
    overflows the same way; the backward's own nan where x^2 underflows is red."""
    x = torch.tensor([8.5e-162, 1e-200, 0.5, -1.0], dtype=torch.float64)
    assert OVERFLOW in _notes(SoftUnitStep, "autograd", x)
    declared = opzoo.declare(SoftUnitStep, reference=lambda t: torch.where(t > 0, torch.exp(-1 / t), 0.0))
    assert REFERENCE_OVERFLOW in _notes(declared, "reference", x)
    with pytest.raises(AssertionError, match="analytical nan"):
        replay(spec_of(UnderflowingSoftUnitStep), "gradient", {}, x)
