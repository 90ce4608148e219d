"""Error budgets: the backward's error in a lower dtype, in units of that dtype's epsilon."""

from __future__ import annotations

import math

import correct_ops
import pytest
import torch
import torch.nn.functional as F

import opzoo
from opzoo.testing import check_property
from opzoo.testing.checks import _budget
from opzoo.testing.checks._bound import PropertyFailed
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


# A correct formula that rounds in a short dtype: green, with the figures told; an error the op makes
# in a lower dtype only: red, however its formula rounds (docs/testing.md, "Error budgets").

SHORT = ("float64", "float32", "bfloat16")


class TextbookSoftmax(torch.autograd.Function):
    """softmax over the last dimension with the textbook backward y * (g - sum(g * y)), which
    cancels: in bfloat16 (a (1,2,1,2,2) edge input) and in float32 (a (991, 101) one) it is further
    from the float64 truth than torch's own kernel, each step of it rounding as torch's would."""

    opzoo_contract = opzoo.Contract(
        signature="(n)->(n)", min_sizes={"n": 1}, reference=lambda x: torch.softmax(x, -1), dtypes=SHORT
    )

    @staticmethod
    def forward(x):
        return torch.softmax(x, -1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * (g - (g * y).sum(-1, keepdim=True))


def _entmax15(x: torch.Tensor) -> torch.Tensor:
    """1.5-entmax over the last dimension in closed form (sort, cumulative sums, threshold)."""
    x = x / 2
    x = x - x.max(-1, keepdim=True).values
    xs = torch.sort(x, -1, descending=True).values
    rho = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype)
    mean, mean_sq = xs.cumsum(-1) / rho, (xs**2).cumsum(-1) / rho
    tau = mean - torch.sqrt(((1 - rho * (mean_sq - mean**2)) / rho).clamp(min=0))
    tau_star = tau.gather(-1, (tau <= xs).sum(-1, keepdim=True) - 1)
    return torch.clamp(x - tau_star, min=0) ** 2


class Entmax15(torch.autograd.Function):
    """1.5-entmax with entmax's own backward (gppr = sqrt(y)), against autograd of the closed form."""

    opzoo_contract = opzoo.Contract(
        signature="(n)->(n)", min_sizes={"n": 1}, reference=_entmax15, dtypes=SHORT
    )

    @staticmethod
    def forward(x):
        return _entmax15(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        gppr = y.sqrt()
        dx = g * gppr
        return dx - (dx.sum(-1, keepdim=True) / gppr.sum(-1, keepdim=True)) * gppr


def _softmax_wrong_in_float32(wrong) -> type:
    """The textbook softmax whose float32 gradient is ``wrong(gradient, x)``: right in float64 and
    bfloat16, so that only the float32 budget can tell."""

    class Wrong(TextbookSoftmax):
        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(output, inputs[0])

        @staticmethod
        def backward(ctx, g):
            y, x = ctx.saved_tensors
            right = y * (g - (g * y).sum(-1, keepdim=True))
            return wrong(right, x) if right.dtype == torch.float32 else right

    return Wrong


def _edge(spec, shape):
    from opzoo.testing.strategies import edge_inputs

    (xs,) = [xs for xs in edge_inputs(spec, "cpu") if tuple(xs[0].shape) == shape]
    return xs


def _reference_on(cls_or_spec, *xs):
    """Run ``reference`` once on ``xs``; the op's notes (raises what it raised)."""
    from opzoo.testing import spec_of
    from opzoo.testing.checks._bound import bind
    from opzoo.testing.checks._reference import reference

    spec = spec_of(cls_or_spec) if isinstance(cls_or_spec, type) else cls_or_spec
    op = bind(spec, {})
    reference(op, *xs)
    return op.notes


@pytest.mark.parametrize("cls", [TextbookSoftmax, Entmax15], ids=["textbook_softmax", "entmax15"])
def test_a_correct_formula_that_rounds_in_a_short_dtype_passes_reference(cls):
    """The textbook softmax and entmax's backward, further from float64 than torch's kernels in
    float32 and bfloat16 but no further than their own formulas step by step, pass `reference`
    under ci on every input, the (991, 101) and (1,2,1,2,2) edge ones among them."""
    from opzoo.testing import spec_of

    result = check_property(spec_of(cls), "reference", profile="ci")
    assert result.status == "pass", result.report()
    told = [n.partition(":")[0] for n in result.notes if "its rounding, not an error" in n]
    assert told and len(told) == len(set(told)), result.notes  # one per dtype: the worst
    for shape in [(991, 101), (1, 2, 1, 2, 2)]:
        _reference_on(cls, *_edge(spec_of(cls), shape))


def test_the_textbook_softmax_is_told_where_it_loses_to_torchs_kernel():
    """On the (991, 101) edge input the float32 textbook softmax is green, with a note that gives
    its figure, torch's and its formula's step by step, and names the cancellation."""
    from opzoo.testing import spec_of

    notes = _reference_on(TextbookSoftmax, *_edge(spec_of(TextbookSoftmax), (991, 101)))
    said = [n for n in notes if n.startswith("gradient in float32: ")]
    assert said and "the reference in float32" in said[0] and "step by step" in said[0], notes
    assert "a cancellation" in said[0]


def test_gelu_in_its_float32_tail_passes_reference():
    """opzoo's gelu at x = -5.25, where torch's own float32 gelu (which its backward reads) is 18 %
    off and its vector path rounds otherwise than its scalar one, is green: the same steps round
    the same way in its own formula."""
    _reference_on(opzoo.info("gelu"), torch.tensor([-5.25, -5.25], dtype=torch.float64))


X = torch.linspace(-6, 6, 24, dtype=torch.float64).reshape(2, 12)


@pytest.mark.parametrize(
    "wrong",
    [
        lambda g, x: g * 1.05,
        lambda g, x: g.to(torch.bfloat16).to(torch.float32),
        lambda g, x: torch.where(x.abs() > 4, torch.inf, g),
    ],
    ids=["5_percent", "through_bfloat16", "inf_where_large"],
)
def test_an_error_in_float32_only_fails_reference_whatever_the_formula_rounds(wrong):
    """A gradient 5 % off, rounded through bfloat16, or inf where |x| > 4, in float32 only, fails
    `reference`: the formula step by step (in float64 code) does not make that error. The failure
    names the element and the allowance with its k_steps."""
    from opzoo.testing.checks._bound import PropertyFailed

    with pytest.raises(PropertyFailed) as failed:
        _reference_on(_softmax_wrong_in_float32(wrong), X)
    said = str(failed.value)
    assert "gradient in float32" in said and "first at index [" in said, said
    assert "k_steps" in said, said


def test_error_samples_measure_the_formula_step_by_step():
    """error_samples gives k_steps beside k and k_par, element for element, in each lower dtype; the
    textbook softmax, over budget + 2 k_par in float32, is within it with 2 k_steps (its excess)."""
    from opzoo.testing import spec_of

    errors = error_samples(spec_of(TextbookSoftmax), examples=5)
    for name in ("float32", "bfloat16"):
        assert errors.steps_backward[name].shape == errors.backward[name].shape
        assert errors.excess(name) <= BUDGETS[getattr(torch, name)]
    k, k_par = errors.backward["float32"], errors.par_backward["float32"]
    assert (k - 2 * k_par).max().item() > BUDGETS[torch.float32]


def test_steps_in_a_dtype_round_each_step_in_place_ones_and_those_without_a_kernel_too():
    """Under StepsIn(d) a float64 computation stays float64, each step rounded as torch's kernel in d
    rounds it: an out-of-place step, an in-place one (written back into the float64 tensor), and one
    with no kernel in d (log_ndtr in bfloat16: run in float64, rounded to d). Views are exact."""
    from opzoo.testing.checks._steps import StepsIn

    x = torch.tensor([1 / 3, 2 / 3], dtype=torch.float64)
    with StepsIn(torch.float32):
        y = x * 3 + 1e-9
        z = x.clone()
        z.mul_(3).add_(1e-9)
        w = x[1:]
    assert y.dtype == z.dtype == torch.float64
    want = ((x.float() * 3) + 1e-9).double()
    assert torch.equal(y, want) and torch.equal(z, want)  # the promise is float32's bits, held in float64
    assert w.dtype == torch.float64 and w.data_ptr() == x[1:].data_ptr()
    with StepsIn(torch.bfloat16):
        v = torch.special.log_ndtr(x)
    assert torch.equal(v, torch.special.log_ndtr(x).to(torch.bfloat16).double())


def test_one_rounding_note_per_dtype_the_worst():
    """Each failing element of each example tells its rounding; a result keeps, per dtype, the note
    of the gradient furthest off, where that dtype's first note was, and every other note."""
    from opzoo.testing.checks._steps import rounding_note, worst_rounding

    f32, bf16 = torch.float32, torch.bfloat16
    notes = [rounding_note(bf16, 18.3, 0, 18.3), "other", rounding_note(f32, 4.55e3, 673, 4.55e3)]
    notes += [rounding_note(bf16, 214, 36.5, 214), rounding_note(f32, 43.4, 13.2, 43.4)]
    assert worst_rounding(notes) == [notes[3], "other", notes[2]]
    assert worst_rounding([rounding_note(f32, math.inf, 1, math.inf), notes[2]]) == [
        rounding_note(f32, math.inf, 1, math.inf)
    ]


def test_an_infinity_the_dtype_rounds_to_or_the_oracle_in_the_dtype_gives_is_no_error():
    """In float32, x ** -2 at x = 5e-39 is 4e76: the inf the forward gives is that value correctly
    rounded. And a product whose partial products overflow in float32 as torch's own kernel's do
    (torch.prod: -inf where the float64 value is -1.2e38) is no worse than the oracle run in the
    dtype. Either was a false alarm of the autograd oracle in the lower dtypes; an infinity the
    oracle in the dtype does not give is still one."""
    from opzoo.testing.checks._compare import TOLERANCES, close

    inf32 = torch.tensor([math.inf], dtype=torch.float32)
    close(inf32, torch.tensor([4e76], dtype=torch.float64), TOLERANCES[torch.float32], "x ** -2")
    want = torch.tensor([-1.2e38], dtype=torch.float64)
    close(-inf32, want, TOLERANCES[torch.float32], "prod", par=-inf32)
    _budget.within(-inf32, want, torch.float32, "prod's gradient", par=-inf32)
    with pytest.raises(PropertyFailed):
        close(-inf32, want, TOLERANCES[torch.float32], "prod", par=torch.tensor([-1.1e38]))
    with pytest.raises(PropertyFailed):
        _budget.within(-inf32, want, torch.float32, "prod's gradient", par=torch.tensor([-1.1e38]))
