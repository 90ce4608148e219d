"""The torch.library bridge: schema, opcheck, bit-for-bit gradients, export, save/load, compile."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from conftest import EXAMPLE_OPS, FUNCTIONS, run_opzoo
from correct_ops import DECLARED, ReLU, SavesOutput, SinCos, Square, TanhClassmethod
from upstream_ops import PairMean

import opzoo
from opzoo import library
from opzoo.testing import bind, check_property
from opzoo.testing.checks._library import check_library

# -- fixture ops: an n-ary op and a multi-output op, in the setup_context form --------------------


class MatMul(torch.autograd.Function):
    """x @ w with a hand-written backward."""

    opzoo_contract = opzoo.Contract(signature="(n,k),(k,m)->(n,m)", reference=torch.matmul)

    @staticmethod
    def forward(x, w):
        return x @ w

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        # d/dx (x @ w) = grad @ w^T, d/dw = x^T @ grad (summed over the loop dims)
        gx = grad @ w.mT if ctx.needs_input_grad[0] else None
        gw = (x.mT @ grad).sum_to_size(w.shape) if ctx.needs_input_grad[1] else None
        return gx, gw


class Scaled(torch.autograd.Function):
    """x * factor ** power: a float and an int param."""

    opzoo_contract = opzoo.Contract(
        params={"factor": opzoo.Param(0.5, 0.0, 4.0), "power": opzoo.Param(2, 0, 5)},
    )

    @staticmethod
    def forward(x, factor, power):
        return x * factor**power

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.scale = inputs[1] ** inputs[2]

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.scale, None, None


class ReturnsWrongShape(torch.autograd.Function):
    """Declares an elementwise op but returns the sum: a scalar."""

    opzoo_contract = opzoo.Contract(reference=lambda x: x.sum())

    @staticmethod
    def forward(x):
        return x.sum()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.shape = inputs[0].shape

    @staticmethod
    def backward(ctx, grad):
        return grad.expand(ctx.shape)


class MutatesItsInput(SavesOutput):
    """ReLU computed in place on its input."""

    opzoo_contract = opzoo.Contract(reference=torch.relu, kinks={0.0: 1.0})

    @staticmethod
    def forward(x):
        return x.clamp_(min=0).clone()

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (y > 0)


# -- classic forward(ctx, ...) fixture ops --------------------------------------------------------


class ScaledMatMul(torch.autograd.Function):
    """alpha * x @ w, classic, its param between its tensors: backward reads needs_input_grad by
    forward's positions (x at 0, w at 2), which are not the schema's (x, w, alpha)."""

    opzoo_contract = opzoo.Contract(signature="(n,k),(k,m)->(n,m)", params={"alpha": opzoo.Param(2.0)})

    @staticmethod
    def forward(ctx, x, alpha, w):
        ctx.save_for_backward(x, w)
        ctx.alpha = alpha
        return alpha * (x @ w)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        gx = ctx.alpha * grad @ w.mT if ctx.needs_input_grad[0] else None
        gw = ctx.alpha * (x.mT @ grad).sum_to_size(w.shape) if ctx.needs_input_grad[2] else None
        return gx, None, gw


class MarksDirty(torch.autograd.Function):
    """Doubles its input in place and says so (ctx.mark_dirty)."""

    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def _mark_dirty(ctx, x):
    ctx.mark_dirty(x)


class MarksDirtyInAHelper(MarksDirty):
    """MarksDirty, but its helper calls mark_dirty: no reading forward's code finds it."""

    @staticmethod
    def forward(ctx, x):
        _mark_dirty(ctx, x)
        return x.mul_(2)


class SplitsSign(torch.autograd.Function):
    """(relu(x), x > 0): the second output marked non-differentiable; materialize_grads off, so
    backward gets None for it."""

    opzoo_contract = opzoo.Contract(signature="()->(),()")

    @staticmethod
    def forward(ctx, x):
        positive = (x > 0).to(x.dtype)
        ctx.mark_non_differentiable(positive)
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(positive)
        return x.clamp(min=0), positive

    @staticmethod
    def backward(ctx, grad, grad_sign):
        assert grad_sign is None  # materialize_grads off, and no gradient flows into a marked output
        (positive,) = ctx.saved_tensors
        return grad * positive


class LogSumExpAlong(torch.autograd.Function):
    """logsumexp along dim, classic: a reduction whose core dim the dim param places."""

    @staticmethod
    def forward(ctx, x, dim=-1):
        y = x.logsumexp(dim)
        ctx.save_for_backward(x, y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        # d/dx_i logsumexp(x) = softmax(x)_i
        return grad.unsqueeze(ctx.dim) * (x - y.unsqueeze(ctx.dim)).exp(), None


class DoubleGrad(torch.autograd.Function):
    """geomloss's DoubleGrad, verbatim: forward returns its input itself, backward doubles."""

    @staticmethod
    def forward(ctx, input):
        return input

    @staticmethod
    def backward(ctx, grad_output):
        return 2 * grad_output


class SoftmaxAlong(torch.autograd.Function):
    """softmax along dim, classic, refusing an empty dim as entmax's sparsemax does (declared)."""

    @staticmethod
    def forward(ctx, x, dim=-1):
        x.max(dim=dim)  # raises on an empty dim, as entmax's X.max(dim=dim, keepdim=True) does
        y = torch.softmax(x, dim)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return y * (grad - (grad * y).sum(ctx.dim, keepdim=True)), None


class AsIs(torch.autograd.Function):
    """A straight-through identity, x.view_as(x): its output is a view of its input, as an STE's
    forward often is (apply keeps them apart; torch.library forbids it)."""

    @staticmethod
    def forward(x):
        return x.view_as(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad


class AsIsTwice(AsIs):
    """AsIs with a gradient twice too large: wrong, and the aliasing does not hide it."""

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad


class SameTwice(torch.autograd.Function):
    """(2x, 2x) returned as one tensor twice: two outputs aliasing each other."""

    opzoo_contract = opzoo.Contract(signature="()->(),()")

    @staticmethod
    def forward(x):
        y = 2 * x
        return y, y

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad0, grad1):
        return 2 * (grad0 + grad1)


class ColumnMajor(ReLU):
    """ReLU that lays a matrix out column-major (as a transpose and a reshape do, sparsemax's):
    legal eager torch, other strides than the fake kernel's (empty_like of its input)."""

    @staticmethod
    def forward(x):
        y = x.clamp(min=0)
        return y.mT.contiguous().mT if y.dim() >= 2 else y


class ColumnMajorClassic(torch.autograd.Function):
    """ColumnMajor in the classic form."""

    opzoo_contract = opzoo.Contract(reference=torch.relu, kinks={0.0: 1.0})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        y = x.clamp(min=0)
        return y.mT.contiguous().mT if y.dim() >= 2 else y

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x >= 0)


class ColumnMajorMatMul(MatMul):
    """x @ w computed as (w^T @ x^T)^T: a column-major result where the fake kernel's is contiguous."""

    @staticmethod
    def forward(x, w):
        return (w.mT @ x.mT).mT


class ClampBy(torch.autograd.Function):
    """brevitas's TensorClampSteFn, classic: x clamped between tensors lo and hi, a straight-through
    gradient. ``hi.type_as(x)`` returns hi itself when the dtypes agree."""

    @staticmethod
    def forward(ctx, x, lo, hi):
        y = torch.where(x > hi, hi.type_as(x), x)
        return torch.where(y < lo, lo.type_as(y), y)

    @staticmethod
    def backward(ctx, grad):
        return grad, None, None


class ClampByTwice(ClampBy):
    """ClampBy with a gradient twice too large: wrong."""

    @staticmethod
    def backward(ctx, grad):
        return 2 * grad, None, None


class CastsToItsDtype(torch.autograd.Function):
    """x * x, classic, cast to the dtype it has (rockpool's StepPWL's ``.float()`` of a float32)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x * x).to(x.dtype)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return 2 * x * grad  # d/dx x^2 = 2x


class ReadsAList(CastsToItsDtype):
    """x * x + 1, classic, its constants read with ``.tolist()`` (gpytorch's LogNormalCDF)."""

    @staticmethod
    def forward(ctx, x):
        one, two = torch.tensor([1.0, 2.0], dtype=x.dtype).tolist()
        ctx.save_for_backward(x)
        return x * x * (two - one) + one


class AppliesFn(torch.autograd.Function):
    """2 fn(x) for fn a callable param (sin or tanh): right, and no torch.library schema holds it."""

    opzoo_contract = opzoo.Contract(params={"fn": opzoo.Param(torch.sin, choices=(torch.sin, torch.tanh))})

    @staticmethod
    def forward(x, fn):
        return 2 * fn(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.fn = inputs[1]

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        with torch.enable_grad():
            x = x.detach().requires_grad_()
            (slope,) = torch.autograd.grad(ctx.fn(x).sum(), x)
        return 2 * grad * slope, None


class Dropout(torch.autograd.Function):
    """A classic dropout (p = 1/2): the mask it draws is saved for backward."""

    @staticmethod
    def forward(ctx, x):
        mask = (torch.rand_like(x) > 0.5).to(x.dtype)
        ctx.save_for_backward(mask)
        return x * mask * 2

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad * mask * 2


class BranchesOnValues(CastsToItsDtype):
    """x * x, classic, with a shortcut taken on its values (as gpytorch's LogNormalCDF branches on
    whether any input is near 0): right, and its kernel runs; traced, the bridge's rerun cannot."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        if bool((x != 0).any()):
            return x * x
        return torch.zeros_like(x)


def _passes_x(x, lo, hi):
    return x + 0 * (lo + hi)  # a straight-through estimator's surrogate: x itself


@pytest.fixture(scope="module")
def reg():
    """A registry of the fixture ops under names private to this module (one torch namespace)."""
    reg = opzoo.Registry()
    for cls, name in (
        (MatMul, "lib_matmul"),
        (SinCos, "lib.sin-cos"),
        (Scaled, "lib_scaled"),
        (ReturnsWrongShape, "lib_wrong_shape"),
        (MutatesItsInput, "lib_mutates"),
        (ColumnMajor, "lib_column_major"),
        (ColumnMajorClassic, "lib_column_major_classic"),
        (ColumnMajorMatMul, "lib_column_major_matmul"),
        (Square, "lib_classic_square"),
        (TanhClassmethod, "lib_classmethod_tanh"),
        (DECLARED["cross_entropy"], "lib_classic_cross_entropy"),
        (ScaledMatMul, "lib_classic_scaled_matmul"),
        (SplitsSign, "lib_classic_splits_sign"),
        (opzoo.declare(DoubleGrad, surrogate=lambda x: 2 * x), "lib_classic_double_grad"),
        (
            opzoo.declare(LogSumExpAlong, signature="(n)->()", params={"dim": opzoo.Dim()}),
            "lib_classic_lse_along",
        ),
        (
            opzoo.declare(PairMean, signature="(n)->(m)", output_sizes={"m": lambda n: (n + 1) // 2}),
            "lib_classic_pair_mean",
        ),
        (
            opzoo.declare(
                SoftmaxAlong, signature="(n)->(n)", params={"dim": opzoo.Dim()}, min_sizes={"n": 1}
            ),
            "lib_classic_softmax_along",
        ),
        (opzoo.declare(AsIs, reference=lambda x: x), "lib_as_is"),
        (opzoo.declare(AsIsTwice, reference=lambda x: x), "lib_as_is_twice"),
        (SameTwice, "lib_same_twice"),
        (opzoo.declare(ClampBy, signature="(),(),()->()", surrogate=_passes_x), "lib_classic_clamp_by"),
        (
            opzoo.declare(ClampByTwice, signature="(),(),()->()", surrogate=_passes_x),
            "lib_classic_clamp_by_twice",
        ),
        (CastsToItsDtype, "lib_classic_casts_to_its_dtype"),
        (ReadsAList, "lib_classic_reads_a_list"),
        (opzoo.declare(Dropout, surrogate=lambda x: x), "lib_classic_dropout"),
        (BranchesOnValues, "lib_classic_branches_on_values"),
        (MarksDirty, "lib_marks_dirty"),
        (MarksDirtyInAHelper, "lib_marks_dirty_helper"),
    ):
        reg.register(cls, name=name)
    return reg


def leaves(*shapes, seed=0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(s, generator=gen, dtype=dtype).requires_grad_() for s in shapes)


# -- registration ---------------------------------------------------------------------------------


def test_op_resolves_under_torch_ops_and_is_idempotent():
    """op(name) returns torch.ops.opzoo.<name>, and the same object when asked again."""
    op = library.op("myrelu")
    assert op is torch.ops.opzoo.myrelu is library.op("myrelu")
    assert library.op(opzoo.info("myrelu")) is op


def test_schema_follows_signature_and_params(reg):
    """One Tensor per input, each param with its declared default, one Tensor per output."""
    assert library.schema(opzoo.info("myrelu")) == "(Tensor x) -> Tensor"
    softplus = "(Tensor x, float beta=1.0, float threshold=20.0) -> Tensor"
    assert library.schema(opzoo.info("softplus")) == softplus
    assert library.schema(reg.info("lib_matmul")) == "(Tensor x, Tensor w) -> Tensor"
    assert library.schema(reg.info("lib.sin-cos")) == "(Tensor x) -> (Tensor, Tensor)"
    assert library.schema(reg.info("lib_scaled")) == "(Tensor x, float factor=0.5, int power=2) -> Tensor"


def test_defaults_and_keywords_reach_forward(reg):
    """Params left out take their declared defaults; keywords are taken by name."""
    op = library.op("lib_scaled", registry=reg)
    x = torch.arange(3.0)
    assert torch.equal(op(x), x * 0.25)
    assert torch.equal(op(x, power=1), x * 0.5)
    assert torch.equal(op(x, 2.0, 3), x * 8)
    elu = library.op("elu")
    assert torch.equal(elu(-x, alpha=0.5), torch.nn.functional.elu(-x, 0.5))


def test_names_map_deterministically():
    """Plain names are their own torch name; others get '_' and a hash, so none collide."""
    assert library.torch_name("leaky_relu") == "leaky_relu"
    names = {library.torch_name(n) for n in ("my-op", "my.op", "my_op", "My-Op")}
    assert len(names) == 3  # "My-Op" is "my-op": opzoo names are case-insensitive
    assert library.torch_name("my-op") == library.torch_name("my-op")
    assert all(n.isidentifier() for n in names)


def test_a_dotted_name_resolves(reg):
    """'lib.sin-cos' is bridged under its mapped name."""
    op = library.op("lib.sin-cos", registry=reg)
    assert op is getattr(torch.ops.opzoo, library.torch_name("lib.sin-cos"))


def test_learnable_module_is_refused_in_one_line():
    """A learnable Module is not bridged: a one-line LibraryError says why."""
    with pytest.raises(opzoo.LibraryError, match="'prelu' is a learnable nn.Module") as info:
        library.op("prelu")
    assert "\n" not in str(info.value) and isinstance(info.value, opzoo.OpZooError)


def test_a_classic_forward_is_bridged(reg):
    """A classic forward(ctx, ...) Function (staticmethod or classmethod) is bridged, and load()
    bridges it with the others: its schema is the signature's, ctx left out."""
    import fakeops

    reg2 = opzoo.Registry()
    reg2.register(fakeops.Scale, name="lib_classic_scale")
    assert library.why_not(reg2.info("lib_classic_scale")) is None
    assert "lib_classic_scale" in library.load(reg2)
    assert library.schema(reg2.info("lib_classic_scale")) == "(Tensor x, float factor=1.0) -> Tensor"
    x = torch.arange(3.0, requires_grad=True)
    (g,) = torch.autograd.grad(torch.ops.opzoo.lib_classic_scale(x, 2.5).sum(), x)
    assert torch.equal(g, torch.full((3,), 2.5))
    assert library.schema(reg.info("lib_classic_cross_entropy")) == "(Tensor x0, Tensor x1) -> Tensor"


def test_a_forward_that_marks_its_input_dirty_is_refused_in_one_line(reg):
    """A forward that writes into its input (ctx.mark_dirty) is not bridged: a one-line LibraryError
    says why, before bridging where forward's code calls it, at the call where a helper does."""
    with pytest.raises(opzoo.LibraryError, match=r"writes into its input.*mutates_args") as info:
        library.op("lib_marks_dirty", registry=reg)
    assert "\n" not in str(info.value)
    assert "lib_marks_dirty" not in library.load(reg)
    op = library.op("lib_marks_dirty_helper", registry=reg)  # nothing in forward's code says so
    with pytest.raises(opzoo.LibraryError, match=r"writes into its input"):
        op(torch.ones(2))
    result = check_property(reg.info("lib_marks_dirty"), "library", profile="ci")
    assert result.status == "skip" and "mutates_args" in result.reason


def test_a_classic_backward_reads_needs_input_grad_in_forwards_order(reg):
    """The bridged backward sees needs_input_grad by forward's positions (x, alpha, w), not the
    schema's (x, w, alpha): with only w requiring grad, w gets its gradient."""
    op = library.op("lib_classic_scaled_matmul", registry=reg)
    x = torch.randn(2, 3, dtype=torch.float64)
    w = torch.randn(3, 4, dtype=torch.float64, requires_grad=True)
    (got,) = torch.autograd.grad(op(x, w, alpha=1.5).sum(), w)
    (want,) = torch.autograd.grad(ScaledMatMul.apply(x, 1.5, w).sum(), w)
    assert torch.equal(got, want)


def test_a_classic_second_derivative_through_the_bridge_is_the_functions(reg):
    """A classic forward that saves its output (tanh): the bridged op's second derivative equals
    apply's bit for bit, so the saved output keeps its history, as inside apply."""
    op = library.op("lib_classmethod_tanh", registry=reg)
    x = torch.linspace(-2, 2, 7, dtype=torch.float64, requires_grad=True)

    def second(f):
        (g,) = torch.autograd.grad(f(x).sum(), x, create_graph=True)
        return torch.autograd.grad(g.sum(), x)[0]

    want = second(TanhClassmethod.apply)
    assert torch.equal(second(op), want)
    torch.testing.assert_close(want, -2 * torch.tanh(x) * (1 - torch.tanh(x) ** 2))


def test_a_classic_forwards_other_context_calls_reach_the_bridge(reg):
    """mark_non_differentiable and set_materialize_grads, called in a classic forward, hold for
    the bridged op as for apply, and it passes opcheck."""
    op = library.op("lib_classic_splits_sign", registry=reg)
    x = torch.tensor([-1.0, 0.5, 2.0], requires_grad=True)
    for y, sign in (op(x), SplitsSign.apply(x)):
        assert y.requires_grad and not sign.requires_grad
        (g,) = torch.autograd.grad(y.sum(), x)  # backward asserts it got None for sign
        assert torch.equal(g, torch.tensor([0.0, 1.0, 1.0]))
    results = torch.library.opcheck(op.default, (x,), raise_exception=False)
    assert set(results.values()) == {"SUCCESS"}, results


def test_a_bridged_name_is_not_taken_by_another_class():
    """torch.ops.opzoo is one namespace: another class under a bridged name is refused."""
    library.op("myrelu")
    reg = opzoo.Registry()
    reg.register(MatMul, name="myrelu")
    with pytest.raises(opzoo.LibraryError, match="already opzoo.ops.relu.MyReLU"):
        library.op("myrelu", registry=reg)


def test_importing_opzoo_registers_nothing():
    """import opzoo (and opzoo.library) bridges no op and imports no plugin."""
    code = (
        "import sys, opzoo, opzoo.library, torch\n"
        "assert not hasattr(torch.ops.opzoo, 'myrelu')\n"
        "print(sorted(m for m in sys.modules if m.startswith(('opzoo_', 'opzoo.ops'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


# -- opcheck and gradients ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, inputs, params",
    [
        ("myrelu", [(3, 4)], {}),
        ("leaky_relu", [(5,)], {"negative_slope": 0.2}),
        ("lib_matmul", [(2, 3, 4), (4, 5)], {}),
        ("lib.sin-cos", [(2, 3)], {}),
        ("lib_scaled", [(4,)], {"factor": 1.5, "power": 3}),
        ("lib_classic_square", [(3, 4)], {}),
        ("lib_classmethod_tanh", [(5,)], {}),
        ("lib_classic_scaled_matmul", [(2, 3), (3, 4)], {"alpha": 0.5}),
    ],
)
def test_opcheck_and_bit_for_bit_gradients(reg, name, inputs, params):
    """n-ary, multi-output, parametrised and classic forward(ctx, ...) ops pass opcheck (all four
    tests) in every declared dtype, and their outputs and gradients through torch.ops.opzoo equal
    Function.apply's exactly."""
    spec = reg.info(name) if name.startswith("lib") else opzoo.info(name)
    check_library(bind(spec, params), leaves(*inputs), full=True)


def test_opcheck_and_bit_for_bit_gradients_with_an_integer_target(reg):
    """A classic loss with an integer target (Index) and a trailing default nobody declares passes
    opcheck and equals apply bit for bit; the target gets no gradient."""
    spec = reg.info("lib_classic_cross_entropy")
    target = torch.tensor([2, 0, 1, 2])
    check_library(bind(spec, {}, constants={1: target}), leaves((4, 3)), full=True)


def test_a_dim_op_is_bridged_with_its_core_dim_where_dim_says(reg):
    """The library check hands the bridged op its inputs in the op's own layout (Bound.arranged:
    the core dim where dim says), so an op that refuses an empty core dim never gets an empty loop
    dim there, and passes."""
    spec = reg.info("lib_classic_softmax_along")
    assert bind(spec, {"dim": 0}).arranged(torch.zeros(2, 3))[0].shape == (3, 2)
    result = check_property(spec, "library", profile="ci")
    assert result.status == "pass", result.report()


@pytest.mark.parametrize("name", ["lib_classic_lse_along", "lib_classic_pair_mean"])
def test_the_fake_kernel_follows_dim_and_computed_sizes(reg, name):
    """The fake kernel puts a reduction's core dim where dim says, and computes an output size the
    signature names from the declared output_sizes (symbolic sizes, under AOT dispatch too):
    library passes."""
    result = check_property(reg.info(name), "library", profile="ci")
    assert result.status == "pass", result.report()
    op = library.op(name, registry=reg)
    x = torch.randn(4, 5, dtype=torch.float64)
    want = x.logsumexp(0) if name == "lib_classic_lse_along" else PairMean.apply(x)
    args = (x, 0) if name == "lib_classic_lse_along" else (x,)
    assert torch.equal(op(*args), want)
    results = torch.library.opcheck(op.default, args, raise_exception=False)
    assert set(results.values()) == {"SUCCESS"}, results


def test_gradient_equals_the_functions_bit_for_bit():
    """The registered backward is the Function's own: elu's gradient is identical, bit for bit."""
    (x,) = leaves((1000,))
    g = torch.randn(1000, dtype=torch.float64)
    (want,) = torch.autograd.grad(opzoo.get("elu").apply(x, 0.7), x, g)
    (got,) = torch.autograd.grad(library.op("elu")(x, 0.7), x, g)
    assert torch.equal(got, want)


@pytest.mark.parametrize(
    "name, phrase",
    [
        ("lib_wrong_shape", "output 0 has shape (), but the signature ()->() gives"),
        ("lib_mutates", "not defined as mutable but was mutated"),
    ],
)
def test_library_property_catches_a_wrong_op(reg, name, phrase):
    """An op whose forward breaks its signature or mutates its input fails 'library'."""
    result = check_property(reg.info(name), "library", profile="ci")
    assert result.status == "fail", result
    assert phrase in result.reason and "example:" in result.report()


@pytest.mark.parametrize(
    "name", ["lib_classmethod_tanh", "lib_classic_cross_entropy", "lib_classic_double_grad"]
)
def test_library_property_passes_a_classic_op(reg, name):
    """Classic forward(ctx, ...) ops, a classmethod one, a loss with an integer target and one that
    returns its input (empty ones too: torch.library refuses an output that is an input), pass
    'library' on drawn inputs (the staticmethod Square: tests/test_properties.py's correct ops)."""
    result = check_property(reg.info(name), "library", profile="ci")
    assert result.status == "pass", result.report()


@pytest.mark.parametrize("name", ["lib_as_is", "lib_same_twice"])
def test_an_output_that_aliases_is_handed_back_as_a_copy(reg, name):
    """A forward whose output is a view of its input, or whose outputs are one tensor, is correct:
    the bridge hands back a copy where apply keeps them apart, and 'library' passes."""
    result = check_property(reg.info(name), "library", profile="ci")
    assert result.status == "pass", result.report()
    x = torch.arange(3.0)
    outs = library.op(name, registry=reg)(x)
    outs = outs if isinstance(outs, tuple) else (outs,)
    ptrs = {x.untyped_storage().data_ptr(), *(o.untyped_storage().data_ptr() for o in outs)}
    assert len(ptrs) == 1 + len(outs)


def test_an_aliasing_forward_wrongly_differentiated_is_still_caught(reg):
    """The copy changes no value: an aliasing forward with a wrong backward passes 'library' (its
    gradients are the Function's) and fails 'gradient'."""
    spec = reg.info("lib_as_is_twice")
    assert check_property(spec, "library", profile="ci").status == "pass"
    result = check_property(spec, "gradient", profile="ci")
    assert result.status == "fail", result.report()


@pytest.mark.parametrize("name", ["lib_column_major", "lib_column_major_classic", "lib_column_major_matmul"])
def test_an_output_in_another_layout_is_handed_back_in_the_promised_one(reg, name):
    """A forward whose output is column-major is correct: the bridge hands back its values in the
    layout the fake kernel promises (contiguous; an elementwise op's input's, as empty_like), and
    'library' passes, in the classic form too."""
    result = check_property(reg.info(name), "library", profile="ci")
    assert result.status == "pass", result.report()
    op = library.op(name, registry=reg)
    x, w = leaves((3, 4), (4, 4))
    if name == "lib_column_major_matmul":
        out, want = op(x, w), x @ w
        assert out.is_contiguous() and torch.equal(out, want)
        return
    for t in (x, x.mT):  # a row-major input, then a column-major one
        out = op(t)
        assert out.stride() == torch.empty_like(t).stride() and torch.equal(out, t.clamp(min=0))


@pytest.mark.parametrize(
    "name", ["lib_classic_clamp_by", "lib_classic_casts_to_its_dtype", "lib_classic_reads_a_list"]
)
def test_a_classic_forwards_no_op_casts_pass(reg, name):
    """A classic forward whose no-op casts return their input (type_as, .to(its dtype), .tolist()'s
    resolve_conj) passes 'library': the bridge re-runs it for its context unseen by opcheck's
    SchemaCheckMode, as the kernel's own run is."""
    result = check_property(reg.info(name), "library", profile="ci")
    assert result.status == "pass", result.report()


def test_a_classic_aliasing_forward_wrongly_differentiated_is_still_caught(reg):
    """ClampBy with a wrong backward passes 'library' (its gradients are the Function's) and fails
    'gradient'."""
    spec = reg.info("lib_classic_clamp_by_twice")
    assert check_property(spec, "library", profile="ci").status == "pass"
    assert check_property(spec, "gradient", profile="ci").status == "fail"


def test_a_random_classic_forward_gets_the_gradient_of_its_own_draw(reg):
    """A classic dropout through torch.ops.opzoo: the rerun that fills its context draws the mask
    the kernel drew, so the gradient's mask is the output's; 'library' (both runs seeded alike)
    passes, and notes that AOT dispatch is not checked; traced, the op is refused, not given
    another draw's gradient."""
    op = library.op("lib_classic_dropout", registry=reg)
    x = torch.ones(64, dtype=torch.float64, requires_grad=True)
    y = op(x)
    (g,) = torch.autograd.grad(y.sum(), x)
    assert 0 < int(y.count_nonzero()) < 64 and torch.equal(g, y.detach())
    result = check_property(reg.info("lib_classic_dropout"), "library", profile="ci")
    assert result.status == "pass", result.report()
    assert any("draws random numbers" in note for note in result.notes)
    compiled = torch.compile(lambda t: op(t).sum(), backend="aot_eager")
    with pytest.raises(Exception, match="draws random numbers"):
        compiled(x).backward()


def test_a_classic_forward_the_rerun_cannot_trace_is_a_note_not_a_failure(reg):
    """A classic forward that branches on its values passes 'library': traced, the bridge's rerun
    for its context cannot follow it (a limit of the bridge: the setup_context form's forward is
    never traced), which a note says; an untraceable backward is still the op's failure
    (untraceable_backward in tests/wrong_ops.py)."""
    result = check_property(reg.info("lib_classic_branches_on_values"), "library", profile="ci")
    assert result.status == "pass", result.report()
    assert any("rerun of the classic forward" in note for note in result.notes), result.notes


def test_library_property_skips_a_learnable_op():
    """A learnable Module is skipped with the reason, not failed."""
    result = check_property(opzoo.info("prelu"), "library", profile="ci")
    assert result.status == "skip" and "learnable" in result.reason


def test_a_param_no_schema_can_hold_is_a_skip_that_says_why():
    """An op with a callable param is not bridged: 'library' skips it with the reason (not FAIL),
    load() passes it over, and op() refuses it in one line."""
    reg = opzoo.Registry()
    reg.register(AppliesFn, name="lib_applies_fn")
    spec = reg.info("lib_applies_fn")
    result = check_property(spec, "library", profile="ci")
    assert result.status == "skip", result.report()
    assert "parameter 'fn' takes (sin, tanh), which a torch.library schema cannot hold" in result.reason
    assert "lib_applies_fn" not in library.load(reg)
    with pytest.raises(opzoo.LibraryError, match="cannot hold; it is not bridged") as info:
        library.op(spec)
    assert "\n" not in str(info.value)


def test_load_bridges_every_function_op():
    """load() bridges every built-in and example-plugin Function op and no learnable one."""
    bridged = library.load()
    assert set(FUNCTIONS + EXAMPLE_OPS) <= set(bridged)
    assert "prelu" not in bridged and "swish_beta" not in bridged
    assert bridged["myrelu"] is torch.ops.opzoo.myrelu


# -- export and compile ---------------------------------------------------------------------------


class Net(torch.nn.Module):
    """Uses a built-in op, one with params, an n-ary op and a multi-output op."""

    def __init__(self, w):
        super().__init__()
        self.w = torch.nn.Parameter(w)
        self.sincos = getattr(torch.ops.opzoo, library.torch_name("lib.sin-cos"))

    def forward(self, x):
        h = torch.ops.opzoo.lib_matmul(torch.ops.opzoo.myrelu(x), self.w)
        s, c = self.sincos(h)
        return torch.ops.opzoo.elu(s - c, 0.5)


@pytest.fixture(scope="module")
def net(reg):
    for name in ("lib_matmul", "lib.sin-cos"):
        library.op(name, registry=reg)
    for name in ("myrelu", "elu"):
        library.op(name)
    (w,) = leaves((4, 3), seed=1, dtype=torch.float32)
    return Net(w.detach())


def test_export_keeps_each_op_as_one_node_and_saves_and_loads(net, tmp_path):
    """torch.export keeps every opzoo op as one node; the program runs equal to eager, and
    round-trips through torch.export.save/load."""
    x = torch.randn(5, 4)
    program = torch.export.export(net, (x,))
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    opzoo_nodes = sorted(t for t in targets if t.startswith("opzoo."))
    assert opzoo_nodes == sorted(
        f"opzoo.{library.torch_name(n)}.default" for n in ("myrelu", "lib_matmul", "lib.sin-cos", "elu")
    )
    assert not any(t.startswith("aten.") and "relu" in t for t in targets)  # nothing decomposed
    assert torch.equal(program.module()(x), net(x))
    path = tmp_path / "net.pt2"
    torch.export.save(program, path)
    loaded = torch.export.load(path)
    assert torch.equal(loaded.module()(x), net(x))


class ClassicNet(torch.nn.Module):
    """A loss built of bridged classic forward(ctx, ...) ops: the square of a linear map, then
    cross-entropy against an integer target."""

    def __init__(self, w):
        super().__init__()
        self.w = torch.nn.Parameter(w)

    def forward(self, x, target):
        h = torch.ops.opzoo.lib_classic_square(x @ self.w)
        return torch.ops.opzoo.lib_classic_cross_entropy(h, target).sum()


def test_export_and_compile_keep_bridged_classic_ops(reg, tmp_path):
    """torch.export keeps each bridged classic op as one node and the program saves, loads and runs
    equal to eager; torch.compile(fullgraph=True) gives eager's loss and gradient."""
    for name in ("lib_classic_square", "lib_classic_cross_entropy"):
        library.op(name, registry=reg)
    (w,) = leaves((4, 3), seed=2, dtype=torch.float32)
    net = ClassicNet(w.detach())
    x, target = torch.randn(5, 4), torch.tensor([0, 2, 1, 1, 0])
    program = torch.export.export(net, (x, target))
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert sorted(t for t in targets if t.startswith("opzoo.")) == [
        "opzoo.lib_classic_cross_entropy.default",
        "opzoo.lib_classic_square.default",
    ]
    torch.export.save(program, tmp_path / "classic.pt2")
    assert torch.equal(torch.export.load(tmp_path / "classic.pt2").module()(x, target), net(x, target))
    torch._dynamo.reset()
    compiled = torch.compile(net, fullgraph=True, backend="aot_eager")
    (got,) = torch.autograd.grad(compiled(x, target), net.w)
    (want,) = torch.autograd.grad(net(x, target), net.w)
    torch.testing.assert_close(got, want)


@pytest.mark.slow  # two fresh processes importing torch
def test_a_saved_program_loads_in_a_fresh_process_after_load(tmp_path):
    """torch.export.load of a program using opzoo ops works in a new process after
    opzoo.library.load(), and fails without it."""

    class Small(torch.nn.Module):
        def forward(self, x):
            return torch.ops.opzoo.leaky_relu(torch.ops.opzoo.myrelu(x) - 1.0, 0.1)

    library.op("myrelu"), library.op("leaky_relu")
    x = torch.linspace(-3, 3, 12).reshape(3, 4)
    path = tmp_path / "small.pt2"
    torch.export.save(torch.export.export(Small(), (x,)), path)
    torch.save(Small()(x), tmp_path / "want.pt")
    code = (
        "import sys, torch, opzoo\n"
        "if sys.argv[2] == 'load': opzoo.library.load()\n"
        "ep = torch.export.load(sys.argv[1] + '/small.pt2')\n"
        "x = torch.linspace(-3, 3, 12).reshape(3, 4)\n"
        "assert torch.equal(ep.module()(x), torch.load(sys.argv[1] + '/want.pt'))\n"
    )
    ok = subprocess.run([sys.executable, "-c", code, str(tmp_path), "load"], capture_output=True, text=True)
    assert ok.returncode == 0, ok.stderr
    bare = subprocess.run([sys.executable, "-c", code, str(tmp_path), "bare"], capture_output=True, text=True)
    assert bare.returncode != 0 and "opzoo" in bare.stderr


def test_fullgraph_compile_forward_and_backward(net):
    """torch.compile(fullgraph=True) over the bridged ops compiles with no graph break, and its
    outputs and gradients match eager (aot_eager: no C compiler needed)."""
    torch._dynamo.reset()
    x = torch.randn(5, 4)
    explanation = torch._dynamo.explain(net)(x)
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1
    compiled = torch.compile(net, fullgraph=True, backend="aot_eager")
    xc, xe = x.clone().requires_grad_(), x.clone().requires_grad_()
    yc, ye = compiled(xc), net(xe)
    torch.testing.assert_close(yc, ye)
    gc = torch.autograd.grad(yc.sum(), (xc, net.w))
    ge = torch.autograd.grad(ye.sum(), (xe, net.w))
    for a, b in zip(gc, ge):
        torch.testing.assert_close(a, b)


def test_activation_compile_option():
    """nn.Activation(name, compile=...) and create(..., compile=...) run the op compiled, with the
    Function's values and gradients."""
    x = torch.randn(64, dtype=torch.float64)
    for act in (
        opzoo.nn.Activation("leaky_relu", negative_slope=0.2, compile="aot_eager"),
        opzoo.nn.create("leaky_relu", negative_slope=0.2, compile="aot_eager"),
    ):
        assert act.compiled == "aot_eager" and "compile='aot_eager'" in repr(act)
        xr = x.clone().requires_grad_()
        y = act(xr)
        (g,) = torch.autograd.grad(y.sum(), xr)
        assert torch.equal(y, torch.nn.functional.leaky_relu(x, 0.2))
        assert torch.equal(g, torch.where(x > 0, torch.ones_like(x), torch.full_like(x, 0.2)))
    # More compiled activations than dynamo's recompile limit (8): each keeps its own cache.
    many = [opzoo.nn.Activation("elu", alpha=0.1 * k, compile="aot_eager") for k in range(1, 11)]
    for k, act in enumerate(many, start=1):
        assert torch.equal(act(x), torch.nn.functional.elu(x, 0.1 * k))
    import fakeops

    reg = opzoo.Registry()
    reg.register(fakeops.Double, name="lib_double2")  # classic forward(ctx, x): bridged too
    act = opzoo.nn.Activation("lib_double2", registry=reg, compile="aot_eager")
    xr = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(act(xr).sum(), xr)
    assert torch.equal(act(x), 2 * x) and torch.equal(g, torch.full_like(x, 2.0))


# Inductor with its caches off compiles C++ with gcc (15 s here): in the long tier. The default run
# keeps the bridged ops under torch.compile (aot_eager, fullgraph):
# test_fullgraph_compile_forward_and_backward; and inductor over a Function's training step:
# test_trainer's test_compiled_step_matches_eager.
@pytest.mark.long
def test_inductor_fuses_the_bridged_forward():
    """Under inductor the bridged op's forward is traced (fused), not called as an opaque kernel."""
    from torch._inductor.utils import run_and_get_code

    torch.compile(torch.neg)(torch.ones(2))  # inductor caches its table at a process's first compile
    reg = opzoo.Registry()
    reg.register(Scaled, name="lib_fused")  # bridged only after that
    op = library.op("lib_fused", registry=reg)
    f = torch.compile(lambda t: op(t, 2.0, 1) * 2, fullgraph=True)
    x = torch.randn(64, requires_grad=True)
    # Inductor's caches key on the graph before decomposition: a cached artifact would hide the table.
    with torch._inductor.config.patch(force_disable_caches=True):
        (y, gx), code = run_and_get_code(lambda t: (f(t), torch.autograd.grad(f(t).sum(), t)[0]), x)
    assert torch.equal(y, x * 4) and torch.equal(gx, torch.full_like(x, 4.0))
    assert code and not any("opzoo" in c for c in code)  # forward fused, not an opaque call


# -- bench and export from the trainer ------------------------------------------------------------


def test_bench_compiled_rows():
    """bench_compiled measures each elementwise Function op: vs compiled native, vs eager native,
    and the compile time; learnable ops are passed over."""
    from opzoo.bench import _compiled

    specs = [opzoo.info("myrelu"), opzoo.info("prelu")]
    rows = _compiled.bench_compiled(specs, [64], repeat=1, devices=["cpu"], backend="aot_eager")
    assert [(r.section, r.name, r.detail) for r in rows] == [
        ("compiled", "myrelu", "64 cpu vs compiled native"),
        ("compiled", "myrelu", "64 cpu vs eager native"),
        ("compile time", "myrelu", "64 cpu, first forward+backward"),
    ]
    assert all(r.ours > 0 and r.baseline > 0 for r in rows)


@pytest.mark.slow  # trains in a fresh process
def test_train_export_writes_a_loadable_program(tmp_path):
    """opzoo train --export writes the trained network; loaded after opzoo.library.load(), it
    computes act(x.mm(w1)).mm(w2) with the trained weights, its activation the bridged op."""
    path = tmp_path / "net.pt2"
    args = (
        "train",
        "-a",
        "elu",
        "--act-arg",
        "alpha=0.5",
        "--seed",
        "0",
        "--steps",
        "5",
        "--d-in",
        "10",
        "--hidden",
        "4",
        "--device",
        "cpu",
    )
    out = run_opzoo(*args, "--export", str(path), "--quiet")
    assert out.returncode == 0, out.stderr
    library.load()
    program = torch.export.load(path)
    nodes = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert "opzoo.elu.default" in nodes
    result = opzoo.train(
        activation="elu", act_args={"alpha": 0.5}, seed=0, steps=5, d_in=10, hidden=4, device="cpu"
    )
    w1, w2 = result.weights["w1"], result.weights["w2"]
    x = torch.randn(3, 10)  # another batch size than trained with: the batch dim is dynamic
    assert torch.equal(program.module()(x), torch.nn.functional.elu(x.mm(w1), 0.5).mm(w2))


@pytest.mark.parametrize(
    "extra, message",
    [
        (("-a", "myrelu,elu"), "--export writes one network"),
        (("-a", "myrelu", "--export", "/nonexistent/dir/n.pt2"), "folder '/nonexistent/dir' does not exist"),
    ],
)
def test_train_export_mistakes_are_one_line(tmp_path, extra, message):
    """A comparison or an unwritable path is refused before training: one line, exit 2."""
    args = ["train", "--steps", "2", "--d-in", "4", "--hidden", "2", *extra]
    if "--export" not in args:
        args += ["--export", str(tmp_path / "n.pt2")]
    out = run_opzoo(*args)
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
    assert message in out.stderr and out.stderr.startswith("opzoo: error:")


def test_export_of_a_learnable_activation_keeps_its_trained_parameter(tmp_path):
    """A learnable activation, which the bridge does not take, is exported as plain aten ops with
    its trained parameter; a torch:NAME baseline as the native op."""
    from opzoo.trainer import _export

    for name in ("prelu", "torch:relu"):
        result = opzoo.train(activation=name, seed=0, steps=3, d_in=6, hidden=4, device="cpu")
        program = _export.export_network(result, str(tmp_path / "n.pt2"))
        w1, w2 = result.weights["w1"], result.weights["w2"]
        x = torch.randn(2, 6)
        h = x.mm(w1)
        if name == "prelu":
            slope = result.weights["act.inner.slope"]
            assert slope != 0.25  # trained away from its initial value
            want = torch.where(h >= 0, h, slope * h).mm(w2)
        else:
            want = torch.relu(h).mm(w2)
        assert torch.equal(torch.export.load(tmp_path / "n.pt2").module()(x), want)
        assert not any(str(n.target).startswith("opzoo.") for n in program.graph.nodes)


def test_an_optional_input_is_bridged_as_an_optional_tensor():
    """A loss's ``weight=None`` (Floats(grad=False, optional=True)) is ``Tensor? weight`` in the
    schema: the bridged op equals apply with and without it, gradients too, and torch.export keeps
    the None (it was not bridged: 'takes an optional input')."""
    import shape_ops as so
    from test_shapes import WEIGHTED_NLL

    spec = opzoo.testing.spec_of(opzoo.declare(so.WeightedNLL, **WEIGHTED_NLL), name="lib_weighted_nll")
    assert library.why_not(spec) is None
    assert (
        library.schema(spec) == "(Tensor logp, Tensor target, Tensor? weight, str reduction='mean') -> Tensor"
    )
    op = library.op(spec)
    logp = torch.randn(4, 3, dtype=torch.float64).log_softmax(-1).requires_grad_()
    target, weight = torch.tensor([0, 2, 1, 2]), torch.tensor([0.5, 1.0, 2.0], dtype=torch.float64)
    for w in (None, weight):
        got, want = op(logp, target, w), so.WeightedNLL.apply(logp, target, w)
        assert torch.equal(got, want)
        assert torch.equal(torch.autograd.grad(got, logp)[0], torch.autograd.grad(want, logp)[0])

    class Loss(torch.nn.Module):
        def forward(self, logp, target):
            return op(logp, target, None, "sum")

    program = torch.export.export(Loss(), (logp.detach(), target))
    assert torch.equal(
        program.module()(logp.detach(), target), so.WeightedNLL.apply(logp.detach(), target, None, "sum")
    )


def test_two_classes_of_one_name_are_both_checked_in_one_process():
    """Two test files' ``MaskedScale``s checked by assert_correct in one process: the library check
    bridges the second under a name of its own (it failed: 'torch.ops.opzoo.maskedscale is already
    shape_ops.MaskedScale', a red from opzoo's one namespace), and opzoo.library.op still refuses."""
    import shape_ops as so
    import upstream_ops as up

    from opzoo.testing import check_property

    specs = [
        opzoo.testing.spec_of(opzoo.declare(cls, signature="(),()->()", inputs={"valid": opzoo.Mask()}))
        for cls in (so.MaskedScale, up.MaskedScale)
    ]
    assert specs[0].name == specs[1].name == "maskedscale"
    assert [check_property(s, "library", profile="ci", examples=5).status for s in specs] == ["pass", "pass"]
    # whichever holds the name (an earlier test in this process may have bridged either), the other
    # is refused by opzoo.library.op
    (refused,) = [s for s in specs if library.taken(s)]
    with pytest.raises(opzoo.LibraryError, match=f"already {library.taken(refused)}"):
        library.op(refused)
