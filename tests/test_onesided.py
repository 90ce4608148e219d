"""Where a function is not differentiable, found numerically (opzoo/testing/checks/_onesided.py): each
output element classified, and a Jacobian row held to the valid generalised gradients there."""

from __future__ import annotations

import pytest
import torch

from opzoo.testing.checks import _nearby
from opzoo.testing.checks._backward_rows import jacobian_rows
from opzoo.testing.checks._onesided import KINDS, Probe


def _t(*values: float) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.float64)


def _kinds(fn, *xs, diagonal=False):
    return [KINDS[k] for k in Probe(fn, xs, diagonal=diagonal).kind.tolist()]


# fn, inputs, whether elementwise over inputs of one shape, the kind of each output element
CASES = {
    "a tie of two (max)": (lambda x, y: (torch.maximum(x, y),), (_t(0.0), _t(0.0)), True, ["convex"]),
    "a tie of three in a max": (lambda x: (x.amax(-1),), (_t(1.0, 1.0, 1.0, 0.5),), False, ["convex"]),
    "a tie in a min": (lambda x: (x.amin(-1),), (_t(0.0, 0.0, 1.0),), False, ["concave"]),
    "a norm at 0": (lambda x: (torch.linalg.vector_norm(x),), (_t(0.0, 0.0, 0.0),), False, ["convex"]),
    "|x - y| at x = y": (lambda x, y: ((x - y).abs(),), (_t(0.3), _t(0.3)), True, ["convex"]),
    "std of a constant": (lambda x: (x.std(),), (_t(2.0, 2.0, 2.0),), False, ["convex"]),
    "clamp at one bound": (
        lambda x, lo, hi: (torch.clamp(x, lo, hi),),
        (_t(0.0), _t(0.0), _t(1.0)),
        True,
        ["convex"],
    ),
    "clamp at x = lo = hi": (
        lambda x, lo, hi: (torch.clamp(x, lo, hi),),
        (_t(0.0), _t(0.0), _t(0.0)),
        True,
        ["mixed"],
    ),
    "the median of three equal": (lambda x: (x.median(),), (_t(0.0, 0.0, 0.0),), False, ["mixed"]),
    "sort of three equal": (
        lambda x: (x.sort().values,),
        (_t(0.0, 0.0, 0.0),),
        False,
        ["concave", "mixed", "convex"],
    ),
    "top 2 of three equal": (
        lambda x: (x.topk(2).values,),
        (_t(1.0, 1.0, 1.0, 0.0),),
        False,
        ["convex", "mixed"],
    ),
    "atan2 at the origin": (lambda y, x: (torch.atan2(y, x),), (_t(0.0), _t(0.0)), True, ["jump"]),
    "xlogy at the origin": (lambda x, y: (torch.xlogy(x, y),), (_t(0.0), _t(0.0)), True, ["unbounded"]),
    "x ** 0.5 at 0": (lambda x, y: (torch.pow(x, y),), (_t(0.0), _t(0.5)), True, ["unbounded"]),
    "the variance of one element": (
        lambda x: (((x - x.mean()) ** 2).sum() / 0,),
        (_t(1.0),),
        False,
        ["undefined"],
    ),
    "ReLU at, above and below 0": (
        lambda x: (torch.relu(x),),
        (_t(0.0, 1.0, -1.0),),
        True,
        ["convex", "smooth", "smooth"],
    ),
    "a steep smooth function": (lambda x: (1000 * x + x**3,), (_t(0.5),), True, ["smooth"]),
    "a matrix product": (lambda x, w: (x @ w,), (_t(1.0, -2.0), _t(0.5, 3.0)), False, ["smooth"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_each_kind_of_point_is_found(case):
    """Ties (convex, concave), cones, more than two pieces (mixed), jumps, not finite nearby or at
    all, and smooth points are told apart from one-sided differences alone."""
    fn, xs, diagonal, want = CASES[case]
    assert _kinds(fn, *xs, diagonal=diagonal) == want


def test_every_clamp_at_x_lo_hi_is_mixed():
    """A kink where three pieces meet, neither convex nor concave, is never taken for convex or
    concave (where a valid gradient need not lie between one-sided derivatives), element by element."""
    v = torch.linspace(-3, 3, 500, dtype=torch.float64)
    probe = Probe(lambda x, lo, hi: (torch.clamp(x, lo, hi),), (v, v.clone(), v.clone()), diagonal=True)
    assert set(probe.kind.tolist()) == {KINDS.index("mixed")}


def test_a_sort_of_ties_is_classified_row_by_row():
    """Sorting ties of several sizes: the lowest of a tie is concave (a min), the highest convex (a
    max), those between mixed; untied values smooth."""
    x = _t(0.5, 2.0, 0.5, -1.0, 0.5, 2.0, 3.0)
    probe = Probe(lambda x: (x.sort().values,), (x,))
    assert [KINDS[k] for k in probe.kind.tolist()] == [
        "smooth",
        "concave",
        "mixed",
        "convex",
        "concave",
        "convex",
        "smooth",
    ]


def _violation(fn, xs, backward_rows, diagonal=False):
    probe = Probe(fn, xs, diagonal=diagonal)
    rows = (~probe.smooth).nonzero().reshape(-1)
    return probe.violations(rows, backward_rows(probe, rows))


def test_a_valid_generalised_gradient_passes_and_others_fail():
    """At a tie of max(x1, x2): (1, 0), (0, 1) and (0.5, 0.5) are valid; (1, 1) passes each
    coordinate but not the all-ones direction; (5, 0) fails its coordinate."""
    fn = lambda x: (x.amax(-1),)  # noqa: E731
    xs = (_t(0.0, 0.0),)
    for grad, valid in (((1, 0), True), ((0, 1), True), ((0.5, 0.5), True), ((1, 1), False), ((5, 0), False)):
        bad = _violation(fn, xs, lambda probe, rows: _t(*grad)[None])
        assert (bad is None) == valid, grad
    bad = _violation(fn, xs, lambda probe, rows: _t(1.0, 1.0)[None])
    assert bad.direction is not None and bad.got == pytest.approx(2.0) and bad.left == pytest.approx(1.0)


def test_the_backward_of_torch_max_is_valid_at_a_tie():
    """torch's own max (a gradient to one index) and amax (split evenly) are both valid at a tie."""
    x = _t(0.0, 0.0, 0.0, -1.0)
    for fn in (lambda x: (x.max(),), lambda x: (x.amax(),), lambda x: (x.max(-1).values,)):
        probe = Probe(fn, (x,))
        rows = (~probe.smooth).nonzero().reshape(-1)
        assert probe.violations(rows, jacobian_rows(fn, (x,), rows, probe)) is None


def test_a_function_that_is_nan_everywhere_is_not_differenced():
    """Where every output element is nan (the first derivative of a variance of one element), there
    is nothing to check: gradcheck is not run at all (its finite differences of a large such input
    took the double_backward check of torch.var past its time limit), and a note says why."""
    from opzoo.testing.checks import _kinks

    def never(fn):
        raise AssertionError("gradcheck ran on a function with no finite output")

    notes: list[str] = []
    x = torch.ones(991, 1, dtype=torch.float64)
    _kinks.gradcheck_rows(lambda t: torch.var(t, dim=-1), (x,), never, notes, diagonal=False)
    assert notes and "not finite" in notes[0]


def test_a_large_smooth_sum_is_smooth_and_a_large_kink_is_not():
    """A sum of squares over 100,489 elements has one-sided differences that differ by h dᵀHd
    (0.28 at h = 1e-6 along a random direction): curvature, which halves with the step, not a kink.
    It was taken for one, and every check excused sse's large input (opzoo mutate found it). A sum
    of |x| at 0, whose gap does not shrink, is still a kink."""
    gen = torch.Generator().manual_seed(0)
    x, y = (torch.randn(317, 317, generator=gen, dtype=torch.float64) for _ in range(2))
    assert _kinds(lambda a, b: (((a - b) ** 2).sum(),), x, y) == ["smooth"]
    assert _kinds(lambda a: (a.abs().sum(),), torch.zeros(5000, dtype=torch.float64)) == ["convex"]


def test_rounding_is_that_of_the_dtype_the_op_returned():
    """A float32 output for float64 inputs rounds at 1e-7: its one-sided differences over 1e-6 move
    by a few percent of the values, which is rounding, not a kink (one-sided derivatives 0.95 and
    1.07) nor a derivative that is not bounded. The noise estimate is the returned dtype's (float64's
    unchanged), so that the op whose forward returns float32 (tests/wrong_ops.py's WrongDtype, a
    ReLU) fails `gradient` at small inputs with the mismatch, as gradcheck does, and a hint, instead
    of passing with a note that it has kinks or a derivative that is not bounded there."""
    from wrong_ops import WrongDtype

    from opzoo.testing import replay, spec_of
    from opzoo.testing.checks._nearby import _eps

    x = torch.linspace(0.3, 2.9, 7, dtype=torch.float64)
    rounded = Probe(lambda t: (3 * t.float(),), (x,))
    assert bool(rounded.smooth.all()) and not rounded.unstable().any()
    # a float32 ReLU's kink at 0 is still one (the rounding there is of values near 0)
    assert _kinds(lambda t: (torch.relu(t).float(),), _t(0.0, 1.0), diagonal=True) == ["convex", "smooth"]
    # float64 rows keep float64's rounding: a cube root is still not bounded next to 0
    assert Probe(lambda t: (torch.sign(t) * t.abs() ** (1 / 3),), (_t(1e-300, 1.0),)).unstable()[0, 0]
    eps = _eps((torch.zeros(2), torch.zeros(1, dtype=torch.float64), torch.zeros(1, dtype=torch.long)))
    assert eps.tolist() == [torch.finfo(torch.float32).eps] * 2 + [torch.finfo(torch.float64).eps] * 2
    for at in (x, _t(0.0, 1.0, -1.0), _t(7.0)):
        with pytest.raises(AssertionError, match="Jacobian mismatch") as caught:
            replay(spec_of(WrongDtype), "gradient", {}, at, fast=False)
        assert "output 0 is torch.float32 for torch.float64 inputs" in str(caught.value)


# -- steps stacked into one call -----------------------------------------------------------------


def _one_call_per_step(monkeypatch, fn, xs, diagonal=False):
    with monkeypatch.context() as m:
        m.setattr(_nearby, "STACKED_AT_LEAST", 10**9)  # nothing fits: a call per step
        return Probe(fn, xs, diagonal=diagonal)


def _same_probe(stacked: Probe, single: Probe) -> None:
    assert stacked.kind.tolist() == single.kind.tolist()
    for a, b in ((stacked.up, single.up), (stacked.down, single.down)):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-6, equal_nan=True)


def _calls(fn):
    calls = [0]

    def counted(*xs):
        calls[0] += 1
        return fn(*xs)

    return counted, calls


@pytest.mark.parametrize("case", list(CASES))
def test_stacked_steps_measure_what_one_call_per_step_does(monkeypatch, case):
    """Every kind of point: the Probe that stacks its steps along a new leading dimension (or falls
    back where the function does not take that: a median of all, a matrix product of vectors)
    classifies each row as the one that calls the function once per step, with the same one-sided
    derivatives (within rounding: an elementwise kernel may round otherwise on a longer tensor)."""
    fn, xs, diagonal, _ = CASES[case]
    _same_probe(Probe(fn, xs, diagonal=diagonal), _one_call_per_step(monkeypatch, fn, xs, diagonal))


def test_an_elementwise_op_of_broadcast_inputs_takes_its_steps_in_a_few_calls(monkeypatch):
    """Inputs of different numbers of dimensions (a scalar against a vector) stacked so that
    broadcasting still pairs them row by row: a few calls, not hundreds, and the same Probe."""
    fn, calls = _calls(lambda x, y: (torch.maximum(x, y),))
    xs = (_t(0.0, 1.0, 0.0), torch.tensor(0.0, dtype=torch.float64))
    stacked = Probe(fn, xs)
    assert calls[0] <= 10, calls[0]
    single = _one_call_per_step(monkeypatch, fn, xs)
    assert calls[0] > 100
    _same_probe(stacked, single)
    assert "convex" in [KINDS[k] for k in stacked.kind.tolist()]


# Functions that are not elementwise along a new leading dimension, each at a kink: a stacked call
# gives them something else, which the point stacked first and last (and a stack as long as no
# dimension of theirs) shows, and each is then called once per step.
NOT_STACKABLE = {
    "a mean over the first dimension": (lambda x: ((x - x.mean(0)).abs(),), (_t(0.0, 1.0),)),
    "a cumulative sum over the first dimension": (lambda x: (x.cumsum(0).abs(),), (_t(0.0, 1.0),)),
    "the same, from the end": (lambda x: (x.flip(0).cumsum(0).flip(0).abs(),), (_t(0.0, 1.0),)),
    "a size read from the input": (lambda x: (x.abs() * x.numel(),), (_t(0.0, 1.0),)),
    "a random draw": (
        lambda x: ((x + torch.rand(x.shape, generator=torch.Generator().manual_seed(0))).relu(),),
        (_t(-0.5, 0.0),),
    ),
    "every dimension reversed (a square input)": (
        lambda x: (x.permute(*reversed(range(x.dim()))).relu(),),
        (torch.zeros(3, 3, dtype=torch.float64),),
    ),
}


@pytest.mark.parametrize("case", list(NOT_STACKABLE))
def test_a_function_that_is_not_elementwise_along_a_stack_is_called_per_step(monkeypatch, case):
    fn, xs = NOT_STACKABLE[case]
    stacked = Probe(fn, xs)
    assert not stacked.steps.batched
    _same_probe(stacked, _one_call_per_step(monkeypatch, fn, xs))
