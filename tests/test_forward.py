"""Forward mode and vmap: every built-in's jvp matches its backward, jacfwd and hessian work, and
the forward_mode property catches a wrong jvp or a backward that is wrong only when batched."""

from __future__ import annotations

import pytest
import torch
from conftest import FUNCTIONS, GENERAL, LEARNABLE, SURROGATE
from correct_ops import DeclaredSquare, Softplus
from correct_ops import Square as ClassicSquare
from torch.autograd import forward_ad

import opzoo
from opzoo.ops._base import _FAST
from opzoo.ops._base import forward_mode as forward_level_open
from opzoo.testing import PROPERTIES, bind, check_property
from opzoo.testing.checks._forward import defines_jvp, defines_vmap, forward_mode

BUILTIN = opzoo.load(autoload=False)
# float64 against float64: both sides compute the same derivative with other roundings
TOL = dict(rtol=1e-9, atol=1e-12)
# torch's own kernels are looser: hardsigmoid's backward multiplies by 1/6 rounded to float32 (3e-8)
REF_TOL = dict(rtol=1e-7, atol=1e-9)
#: References that torch cannot differentiate twice, and why (ours can: that is the point).
NO_REFERENCE_HESSIAN = {"hardsigmoid": "torch implements no derivative of hardsigmoid_backward"}


def _x(n: int = 9) -> torch.Tensor:
    """Points over [-4.5, 4.5] that keep 0.05 or more from every kink of the built-ins."""
    return torch.linspace(-4.5, 4.5, n, dtype=torch.float64) + 0.0567


# -- deliberately wrong ops -----------------------------------------------------------------------


class WrongJvpSign(Softplus):
    """A correct backward, and a jvp with the wrong sign."""

    @staticmethod
    def jvp(ctx, tangent):
        (x,) = ctx.saved_tensors
        return -tangent * torch.sigmoid(x)


class JvpIgnoresTangent(Softplus):
    """A jvp that returns the derivative alone, forgetting to multiply by the tangent."""

    @staticmethod
    def jvp(ctx, tangent):
        (x,) = ctx.saved_tensors
        return torch.sigmoid(x)


def _batched(grad: torch.Tensor) -> bool:
    if torch.compiler.is_compiling():  # Dynamo cannot trace the tests below (pybind functions)
        return False
    functorch = torch._C._functorch
    return functorch.is_batchedtensor(grad) or functorch.is_legacy_batchedtensor(grad)


class WrongWhenBatched(Softplus):
    """A backward with a shortcut for batched grad_outputs (per-sample gradients) that sums them:
    every single grad_output, and so every older property, sees the correct branch."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        if _batched(grad):
            return grad.sum() * torch.sigmoid(x)
        return grad * torch.sigmoid(x)


# op name -> (class, a phrase the forward_mode report must contain)
WRONG = {
    "wrong_jvp_sign": (WrongJvpSign, "torch.func.jvp differs from the backward's J v"),
    "jvp_ignores_tangent": (JvpIgnoresTangent, "torch.func.jvp differs from the backward's J v"),
    "wrong_when_batched": (WrongWhenBatched, "batched grad_outputs (is_grads_batched) differs from a loop"),
}


@pytest.fixture(scope="module")
def wrong_registry():
    reg = opzoo.Registry()
    for name, (cls, _) in WRONG.items():
        reg.register(cls, name=name)
    return reg


@pytest.mark.parametrize("name", list(WRONG))
def test_each_wrong_op_is_caught_by_forward_mode(wrong_registry, name):
    """Each deliberately wrong op fails forward_mode, with the part that failed and the values."""
    result = check_property(wrong_registry.info(name), "forward_mode", profile="ci")
    assert result.status == "fail", result
    report = result.report()
    assert WRONG[name][1] in report, report
    assert "got" in report and "expected" in report and "example:" in report and "values:" in report


@pytest.mark.parametrize("name", list(WRONG))
def test_each_wrong_op_passes_the_older_properties(wrong_registry, name):
    """Only forward_mode can catch them: every other property passes."""
    for prop in PROPERTIES:
        if prop == "forward_mode":
            continue
        result = check_property(wrong_registry.info(name), prop, profile="ci")
        assert result.status in ("pass", "skip"), result.report()


# -- the built-ins --------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FUNCTIONS + GENERAL + SURROGATE)
def test_every_builtin_function_defines_jvp_and_a_vmap_rule(name):
    """The property's forward-mode and vmap branches, not its 'must raise' ones, run for built-ins."""
    target = BUILTIN.info(name).target
    assert defines_jvp(target) and defines_vmap(target)


@pytest.mark.parametrize("name", FUNCTIONS + LEARNABLE)
def test_jacfwd_and_hessian_match_jacrev_and_the_reference(name):
    """torch.func.jacfwd equals jacrev and the reference's Jacobian; hessian (forward over reverse)
    equals reverse over reverse and the reference's hessian."""
    spec = BUILTIN.info(name)
    op = bind(spec, spec.contract.defaults())

    def ref(t):
        return spec.contract.reference(t, **spec.contract.defaults())

    x = _x()
    jac = torch.func.jacfwd(op)(x)
    torch.testing.assert_close(jac, torch.func.jacrev(op)(x), **TOL)
    torch.testing.assert_close(jac, torch.func.jacrev(ref)(x), **REF_TOL)
    hess = torch.func.hessian(lambda t: op(t).sum())(x)
    torch.testing.assert_close(hess, torch.func.jacrev(torch.func.jacrev(lambda t: op(t).sum()))(x), **TOL)
    if name not in NO_REFERENCE_HESSIAN:
        torch.testing.assert_close(hess, torch.func.hessian(lambda t: ref(t).sum())(x), **REF_TOL)


#: Inputs of the general built-ins, as their signatures shape them (with a loop dimension).
GENERAL_INPUTS = {
    "linear": ((3, 4), (4, 2)),
    "sse": ((2, 3, 4), (3, 4)),
    "softmax": ((3, 5),),
    "logsumexp": ((3, 5),),
    "layer_norm": ((3, 5),),
}


def _inputs(name: str) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(7)
    return tuple(torch.randn(s, generator=gen, dtype=torch.float64) for s in GENERAL_INPUTS[name])


@pytest.mark.parametrize("name", GENERAL)
def test_jacfwd_and_hessian_work_on_the_general_builtins(name):
    """torch.func.jacfwd equals jacrev and the reference's Jacobian, for every input; hessian
    (forward over reverse) equals reverse over reverse and the reference's hessian."""
    spec = BUILTIN.info(name)
    op = bind(spec, spec.contract.defaults())
    xs = _inputs(name)
    argnums = tuple(range(len(xs)))

    def ref(*ts):
        return spec.contract.reference(*ts, **spec.contract.defaults())

    jac = torch.func.jacfwd(op, argnums=argnums)(*xs)
    torch.testing.assert_close(jac, torch.func.jacrev(op, argnums=argnums)(*xs), **TOL)
    torch.testing.assert_close(jac, torch.func.jacrev(ref, argnums=argnums)(*xs), **REF_TOL)
    weights = torch.linspace(-1.0, 2.0, op(*xs).numel(), dtype=torch.float64).reshape(op(*xs).shape)

    def total(f):
        return lambda *ts: (f(*ts) * weights).sum()

    hess = torch.func.hessian(total(op), argnums=argnums)(*xs)
    rev = torch.func.jacrev(torch.func.jacrev(total(op), argnums=argnums), argnums=argnums)(*xs)
    torch.testing.assert_close(hess, rev, **TOL)
    torch.testing.assert_close(hess, torch.func.hessian(total(ref), argnums=argnums)(*xs), **REF_TOL)


@pytest.mark.parametrize("name", SURROGATE)
def test_jacfwd_of_a_surrogate_op_is_its_surrogates(name):
    """A surrogate op's forward mode agrees with its backward: jacfwd equals jacrev and the
    declared surrogate's Jacobian (not the forward's own derivative), and hessian works."""
    spec = BUILTIN.info(name)
    params = spec.contract.defaults()
    op = bind(spec, params)
    x = _x()
    jac = torch.func.jacfwd(op)(x)
    torch.testing.assert_close(jac, torch.func.jacrev(op)(x), **TOL)
    torch.testing.assert_close(
        jac, torch.func.jacrev(lambda t: spec.contract.surrogate(t, **params))(x), **TOL
    )
    hess = torch.func.hessian(lambda t: op(t).sum())(x)
    torch.testing.assert_close(hess, torch.func.jacrev(torch.func.jacrev(lambda t: op(t).sum()))(x), **TOL)


@pytest.mark.parametrize("name", FUNCTIONS)
def test_dual_tensors_go_through_the_fast_apply(name):
    """forward_ad dual tensors through Op.apply's fast path give torch.func.jvp's tangent, and the
    output keeps its backward."""
    spec = BUILTIN.info(name)
    x, v = _x(), torch.linspace(-1.0, 2.0, 9, dtype=torch.float64)
    _, want = torch.func.jvp(spec.apply, (x,), (v,))
    xr = x.clone().requires_grad_()
    with forward_ad.dual_level():
        assert _FAST and not torch._C._are_functorch_transforms_active()  # so Op.apply's fast path
        y = spec.apply(forward_ad.make_dual(xr, v))
        primal, tangent = forward_ad.unpack_dual(y)
    torch.testing.assert_close(tangent, want, **TOL)
    (gx,) = torch.autograd.grad(primal.sum(), xr)
    torch.testing.assert_close(gx, torch.func.grad(lambda t: spec.apply(t).sum())(x), **TOL)


def test_tensors_are_saved_for_jvp_only_under_forward_mode():
    """A backward-only call saves nothing for jvp: the level is open only inside forward mode."""
    assert not forward_level_open()
    with forward_ad.dual_level():
        assert forward_level_open()
    seen = []
    torch.func.jvp(lambda t: seen.append(forward_level_open()) or t, (_x(),), (_x(),))
    assert seen == [True] and not forward_level_open()


# -- the property's own branches ------------------------------------------------------------------


def test_an_op_without_jvp_or_vmap_rule_passes_when_asking_raises():
    """Without jvp and vmap rule, torch.func.jvp, dual tensors and vmap raise: forward_mode passes."""
    reg = opzoo.Registry()
    reg.register(DeclaredSquare, name="square")
    assert check_property(reg.info("square"), "forward_mode", profile="ci").status == "pass"


def test_an_answer_without_jvp_or_vmap_rule_fails():
    """Where forward mode or vmap answers although the Function defines neither, the property fails."""
    reg = opzoo.Registry()
    reg.register(DeclaredSquare, name="square")
    op = bind(reg.info("square"), {})
    op.fn = lambda t, *_: t * t  # answers under every transform: not the Function's apply
    with pytest.raises(AssertionError, match="forward mode returned a value although the op defines no jvp"):
        forward_mode(op, _x())


def test_a_vmap_without_rule_that_answers_fails(monkeypatch):
    """vmap answering for a Function without a vmap rule is a failure too."""
    reg = opzoo.Registry()
    reg.register(DeclaredSquare, name="square")
    op = bind(reg.info("square"), {})
    monkeypatch.setattr("opzoo.testing.checks._forward.defines_jvp", lambda target: True)
    op.fn = lambda t, *_: t * t
    with pytest.raises(AssertionError, match="vmap returned a value although the op defines no vmap rule"):
        forward_mode(op, _x())


@pytest.mark.parametrize("name", ["myrelu", "softplus"])
def test_an_op_with_jvp_compiles_for_training_without_graph_break(name):
    """Dynamo breaks the graph at a Function that defines jvp; the built-ins keep theirs on a twin
    that only eager apply runs, so a compiled training step stays one graph (fullgraph=True raises
    at any break)."""
    spec = BUILTIN.info(name)
    step = torch.compile(lambda t: spec.apply(t), backend="aot_eager", fullgraph=True)
    xr = _x().requires_grad_()
    (got,) = torch.autograd.grad(step(xr).sum(), xr)
    (want,) = torch.autograd.grad(spec.apply(xr).sum(), xr)
    torch.testing.assert_close(got, want, **TOL)


def test_a_correct_multi_output_jvp_passes_forward_mode():
    """A two-output op whose jvp returns both tangents right passes forward_mode (the wrong one in
    wrong_ops, jvp_wrong_on_output_1, fails it at output 1)."""
    from wrong_ops import _SinCos

    class SinCos(_SinCos):
        @staticmethod
        def jvp(ctx, dx):
            (x,) = ctx.saved_tensors
            return dx * torch.cos(x), -dx * torch.sin(x)  # d sin = cos dx, d cos = -sin dx

    reg = opzoo.Registry()
    reg.register(SinCos, name="sincos")
    result = check_property(reg.info("sincos"), "forward_mode", profile="ci")
    assert result.status == "pass", result.report()
    # torch.compile breaks the graph at any Function with a jvp (torch 2.13): not the op's fault,
    # so compile says so in a note and checks the values across the break, rather than failing.
    result = check_property(reg.info("sincos"), "compile", profile="ci")
    assert result.status == "pass", result.report()
    assert any("defines jvp" in note for note in result.notes)


# -- classic forward(ctx, ...) Functions ----------------------------------------------------------


class _ClassicMatmul(torch.autograd.Function):
    """x @ w in the classic form, with a jvp: torch.func refuses it, dual tensors do not."""

    opzoo_contract = opzoo.Contract(signature="(n,k),(k,m)->(n,m)", reference=torch.matmul)

    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        ctx.save_for_forward(x, w)
        return x @ w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return (grad @ w.mT).sum_to_size(x.shape), (x.mT @ grad).sum_to_size(w.shape)

    @staticmethod
    def jvp(ctx, dx, dw):
        x, w = ctx.saved_tensors
        return dx @ w + x @ dw  # d(x @ w) = dx @ w + x @ dw


class ClassicJvpDropsATerm(_ClassicMatmul):
    """A classic jvp that skips the work for a zero tangent, keeping one term: right for each
    input's tangent alone (dual tensors give the other zeros), wrong when both inputs carry one,
    which dual tensors must ask too where torch.func.jvp cannot."""

    @staticmethod
    def jvp(ctx, dx, dw):
        x, w = ctx.saved_tensors
        return dx @ w if dx.abs().sum() > 0 else x @ dw


class ClassicWrongWhenBatched(ClassicSquare):
    """A classic backward with a shortcut for batched grad_outputs that sums them."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad.sum() * 2 * x if _batched(grad) else grad * 2 * x


@pytest.fixture(scope="module")
def classic_registry():
    reg = opzoo.Registry()
    for cls, name in (
        (_ClassicMatmul, "classic_matmul"),
        (ClassicJvpDropsATerm, "classic_jvp_drops_a_term"),
        (ClassicSquare, "classic_square"),
        (ClassicWrongWhenBatched, "classic_wrong_when_batched"),
    ):
        reg.register(cls, name=name)
    return reg


@pytest.mark.parametrize("name", ["classic_matmul", "classic_square"])
def test_a_classic_function_passes_forward_mode_with_a_note(classic_registry, name):
    """A correct classic Function passes forward_mode (dual tensors give J v where it defines jvp,
    and raise where it does not), and a note says torch.func.jvp and vmap were not checked."""
    result = check_property(classic_registry.info(name), "forward_mode", profile="ci")
    assert result.status == "pass", result.report()
    assert any("torch.func.jvp and vmap refuse it" in note for note in result.notes), result.notes


@pytest.mark.parametrize(
    "name, phrase",
    [
        (
            "classic_jvp_drops_a_term",
            "forward_ad dual tensors differ from the backward's J v with respect to every input at once",
        ),
        ("classic_wrong_when_batched", "batched grad_outputs (is_grads_batched) differs from a loop"),
    ],
)
def test_forward_mode_catches_a_wrong_classic_function(classic_registry, name, phrase):
    """A classic jvp that drops a term when both inputs carry a tangent, and a classic backward
    wrong on batched grad_outputs, fail forward_mode."""
    result = check_property(classic_registry.info(name), "forward_mode", profile="ci")
    assert result.status == "fail", result
    assert phrase in result.report(), result.report()


def test_a_classic_answer_without_jvp_fails(classic_registry):
    """Where dual tensors answer although the classic Function defines no jvp, forward_mode fails."""
    op = bind(classic_registry.info("classic_square"), {})
    op.fn = lambda t, *_: t * t  # answers under dual tensors: not the Function's apply
    with pytest.raises(AssertionError, match=r"defines no jvp \(forward_ad dual tensors\)"):
        forward_mode(op, _x())


class SpikeATan(torch.autograd.Function):
    """snntorch 1.0.0's ATan surrogate, verbatim: its forward returns float32 for float64 input
    (hygiene fails it for that), so its backward computes in float32."""

    opzoo_contract = opzoo.Contract(
        params={"alpha": opzoo.Param(2.0, 0.5, 5.0)},
        surrogate=lambda x, alpha: torch.atan(torch.pi / 2 * alpha * x) / torch.pi,
    )

    @staticmethod
    def forward(ctx, input_, alpha):
        ctx.save_for_backward(input_)
        ctx.alpha = alpha
        out = (input_ > 0).float()
        return out

    @staticmethod
    def backward(ctx, grad_output):
        (input_,) = ctx.saved_tensors
        grad_input = grad_output.clone()
        grad = ctx.alpha / 2 / (1 + (torch.pi / 2 * ctx.alpha * input_).pow_(2)) * grad_input
        return grad, None


def test_a_batched_backward_in_float32_is_held_to_float32():
    """A backward that computes in float32 (its output's dtype) is compared batched against a loop
    within float32's rounding, not float64's: forward_mode passes what hygiene alone should fail."""
    reg = opzoo.Registry()
    reg.register(SpikeATan, name="spike_atan")
    assert check_property(reg.info("spike_atan"), "forward_mode", profile="ci").status == "pass"
    assert check_property(reg.info("spike_atan"), "hygiene", profile="ci").status == "fail"
