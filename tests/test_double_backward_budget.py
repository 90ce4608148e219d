"""``double_backward``'s cost cap on a large input (opzoo/testing/checks/_second_directional.py): where
the directional check differs, telling a kink from an error takes a Probe of the first derivative
(about 400 calls of it on an op that is not elementwise). Above the budget, estimated from the calls
counted and what one call took, that input is noted, not checked: never a silent pass, never a red.
No sleeps: a slow op is one whose estimate crosses a budget injected small."""

from __future__ import annotations

import pytest
import torch

import opzoo
from opzoo.testing import PROPERTIES, bind, spec_of
from opzoo.testing.checks import _second_directional as sd
from opzoo.testing.checks._onesided import Probe

#: Above 4,096 elements: the directional check, not gradgradcheck.
LARGE_X = torch.linspace(-1, 1, 5000, dtype=torch.float64)


class CubeSum(torch.autograd.Function):
    """sum(x³) / 3 over the last dimension: not elementwise, smooth, its Hessian diag(2x)."""

    opzoo_contract = opzoo.Contract(signature="(n)->()", double_backward=True)

    @staticmethod
    def forward(x):
        return (x**3).sum(-1) / 3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad[..., None] * x * x


class DetachedAbove4096(CubeSum):
    """The same, its backward detaching x above 4,096 elements: the gradient is right, the second
    derivative 0 there (only the directional check sees it)."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        x = x.detach() if x.numel() > 4096 else x
        return grad[..., None] * x * x


def _double_backward(cls, x, *, fast=True):
    op = bind(spec_of(cls), {}, fast=fast)
    PROPERTIES["double_backward"](op, x)
    return op.notes


def test_a_wrong_op_below_the_cap_is_red():
    with pytest.raises(AssertionError, match="second derivative mismatch on a large input"):
        _double_backward(DetachedAbove4096, LARGE_X)


def test_over_the_cap_the_input_is_noted_not_passed_silently(monkeypatch):
    """A budget of 0 s: any probe is over it (as roma's Procrustes at 10 s a call is over 120 s)."""
    monkeypatch.setattr(sd, "BUDGET_S", 0.0)
    monkeypatch.delenv(sd.ENV_BUDGET, raising=False)
    notes = _double_backward(DetachedAbove4096, LARGE_X)
    calls = sd.probe_calls((LARGE_X,), diagonal=False)
    assert [n for n in notes if "its second derivative is not checked there" in n] == [
        f"a large input (5,000 elements) where the first derivative's directional derivative differs "
        f"from its finite differences, and telling a kink there from an error takes up to {calls} calls "
        "of it, more than the budget of 0 CPU s at what one call costs here: its second derivative is not "
        "checked there (OPZOO_PROBE_BUDGET=inf checks it in full)"
    ]


def test_the_note_s_way_to_run_it_in_full_runs_it(monkeypatch):
    """OPZOO_PROBE_BUDGET=inf, or fast=False (the thorough profile's drawn inputs), probe in full."""
    monkeypatch.setattr(sd, "BUDGET_S", 0.0)
    monkeypatch.setenv(sd.ENV_BUDGET, "inf")
    with pytest.raises(AssertionError, match="second derivative mismatch on a large input"):
        _double_backward(DetachedAbove4096, LARGE_X)
    monkeypatch.delenv(sd.ENV_BUDGET)
    with pytest.raises(AssertionError, match="second derivative mismatch on a large input"):
        _double_backward(DetachedAbove4096, LARGE_X, fast=False)


def test_the_cap_never_touches_an_input_that_agrees(monkeypatch):
    """The estimate is made only where the directional check differs: a right op, no note."""
    monkeypatch.setattr(sd, "BUDGET_S", 0.0)
    assert not [n for n in _double_backward(CubeSum, LARGE_X) if "budget" in n]


def test_a_budget_that_is_no_number_is_the_default(monkeypatch):
    for text in ("soon", "-1"):
        monkeypatch.setenv(sd.ENV_BUDGET, text)
        assert sd.budget() == sd.BUDGET_S


def _counted(fn, at):
    """``fn``, and how many points it has been evaluated at other than ``at`` itself: a call of
    inputs stacked along a new leading dimension (a Probe's steps) counts its rows."""
    calls = [0]

    def counted(*xs):
        if xs[0].dim() == at[0].dim():
            calls[0] += 1
        else:
            b = xs[0].shape[0]
            moved = torch.zeros(b, dtype=torch.bool)
            for x, x0 in zip(xs, at):
                moved |= (x.reshape(b, -1) != x0.reshape(1, -1)).any(1)
            calls[0] += int(moved.sum())
        return fn(*xs)

    return counted, calls


@pytest.mark.parametrize(
    "fn, xs, diagonal",
    [
        # not elementwise, large: only the random directions, and every pair's midpoints
        (lambda x: ((x**3).sum(-1, keepdim=True),), (LARGE_X,), False),
        (lambda x: (x.abs().sum(-1, keepdim=True),), (LARGE_X,), False),
        (lambda x: (torch.sign(x).sum(-1, keepdim=True),), (LARGE_X,), False),
        # not finite at the point (x ** -1 at 0, xlogy's nan): no midpoints
        (lambda x: ((1 / x).sum(-1, keepdim=True),), (LARGE_X.clamp(min=0),), False),
        # small: every coordinate
        (lambda x: (x.abs().amax(-1, keepdim=True),), (torch.zeros(6, dtype=torch.float64),), False),
        # elementwise, of one input and of two, at their kinks (where the probe does the most)
        (lambda x: (x.abs(),), (torch.zeros(5000, dtype=torch.float64),), True),
        (lambda x, y: (torch.maximum(x, y),), (LARGE_X, LARGE_X.clone()), True),
    ],
)
def test_the_calls_counted_bound_a_probe_s(fn, xs, diagonal):
    """:func:`probe_calls` bounds the evaluations a Probe makes (less the 4 an elementwise op's
    check makes after it; those at the point itself that check a stacked call come on top), so that
    the estimate is never below what the probe costs."""
    counted, calls = _counted(fn, xs)
    probe = Probe(counted, xs, diagonal=diagonal)
    finite = bool(probe.f0.isfinite().any())
    bound = sd.probe_calls(xs, diagonal, finite) - (4 if diagonal else 0)
    assert calls[0] <= bound
    if finite:  # and not far above it where the midpoints run: the cap is not reached for nothing
        assert calls[0] >= bound // 2
