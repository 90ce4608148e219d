"""Classic forward(ctx, ...) Functions run outside apply: the recording context, and the autograd
oracle that it opens to them."""

from __future__ import annotations

import pytest
import torch
from correct_ops import DECLARED, Square, TanhClassmethod

import opzoo
from opzoo.core import _recording
from opzoo.testing import PROPERTIES, check_property


class EveryCall(torch.autograd.Function):
    """A classic forward that does with its context everything a forward may."""

    @staticmethod
    def forward(ctx, x, scale):
        ctx.scale = scale
        ctx.asked = ctx.needs_input_grad
        y = x * scale
        sign = (x > 0).to(x.dtype)
        ctx.save_for_backward(x, None)
        ctx.save_for_forward(x)
        ctx.mark_non_differentiable(sign)
        ctx.set_materialize_grads(False)
        return y, sign

    @staticmethod
    def backward(ctx, grad, grad_sign):
        return grad * ctx.scale, None


def test_a_recorder_keeps_what_forward_did():
    """Run with a Recorder, a classic forward's saves, marks, flags and attributes are recorded,
    and it reads needs_input_grad as apply would give it."""
    x = torch.tensor([-1.0, 2.0], requires_grad=True)
    (y, sign), record = _recording.run(EveryCall.forward, (x, 3.0))
    assert torch.equal(y, x.detach() * 3) and y.requires_grad  # grad mode on: differentiable
    assert record.saved[0] is x and record.saved[1] is None
    assert record.for_forward == (x,) and record.non_differentiable == (sign,)
    assert record.materialize_grads is False and record.dirty == ()
    assert record.attributes == {"scale": 3.0, "asked": (True, False)}
    with torch.no_grad():
        assert _recording.run(EveryCall.forward, (x, 3.0))[1].attributes["asked"] == (False, False)


def test_a_recorder_reads_like_a_context_and_keeps_its_own_names():
    """saved_tensors and attributes read back; what a context has already cannot be set, as on
    torch's own context; an attribute never set is an AttributeError."""
    ctx = _recording.Recorder((True,))
    t = torch.ones(1)
    ctx.save_for_backward(t)
    ctx.dim = -1
    assert ctx.saved_tensors == (t,) and ctx.dim == -1 and ctx.needs_input_grad == (True,)
    for name in ("saved_tensors", "needs_input_grad", "save_for_backward", "record"):
        with pytest.raises(AttributeError):
            setattr(ctx, name, 1)
    with pytest.raises(AttributeError, match="'missing'"):
        ctx.missing  # noqa: B018
    assert not hasattr(ctx, "missing")


def test_classic_is_the_form_without_setup_context():
    """Staticmethod and classmethod forward(ctx, ...) are classic; the setup_context form is not."""
    from wrong_ops import Float32Backward

    assert _recording.classic(Square) and _recording.classic(TanhClassmethod)
    assert not _recording.classic(Float32Backward)


# -- the autograd oracle on classic forwards -----------------------------------------------------


class Softmax(torch.autograd.Function):
    """softmax over the last dim that subtracts the row maximum from its input in place (a forward
    that writes into its input, as tabnet's sparsemax does); its backward is right."""

    opzoo_contract = opzoo.Contract(signature="(n)->(n)")

    @staticmethod
    def forward(ctx, x):
        x -= x.max(-1, keepdim=True).values if x.shape[-1] else 0
        y = x.exp() / x.exp().sum(-1, keepdim=True)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return y * (grad - (grad * y).sum(-1, keepdim=True))


class InPlaceSoftplus(torch.autograd.Function):
    """log(1 + exp(x)) with the 1 added in place: right through apply, which runs forward without
    grad; with grad, exp's saved result has been overwritten, and autograd refuses to go back."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        y = x.exp()
        y += 1
        return y.log()

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x)  # d/dx log(1 + exp(x)) = sigmoid(x)


class NumpyForward(torch.autograd.Function):
    """A forward that goes through numpy: apply runs it without grad, autograd cannot run it."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.from_numpy(x.numpy() * 2)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class DataForward(NumpyForward):
    """A forward built on .data: nothing for autograd to differentiate."""

    @staticmethod
    def forward(ctx, x):
        return x.data * 2


@pytest.mark.parametrize("cls", [Square, TanhClassmethod, Softmax])
def test_the_autograd_oracle_runs_a_classic_forward(cls):
    """A classic forward (staticmethod or classmethod, one that writes into its input too) is
    differentiated by autograd: autograd applies, and passes with no note of a missing oracle (in
    float32, tanh's 1 - y² may note its own rounding)."""
    reg = opzoo.Registry()
    reg.register(cls, name="op")
    result = check_property(reg.info("op"), "autograd", profile="ci")
    assert result.status == "pass" and not [n for n in result.notes if "oracle" in n], result.report()


@pytest.mark.parametrize(
    "cls, note",
    [
        (NumpyForward, "forward raises with grad enabled (RuntimeError: Can't call numpy()"),
        (DataForward, "forward is not built of differentiable torch operations"),
        (InPlaceSoftplus, "autograd cannot differentiate forward (RuntimeError: one of the variables"),
    ],
)
def test_a_classic_forward_autograd_cannot_differentiate_is_a_note(cls, note):
    """A classic forward that autograd cannot run (numpy), that detaches its work (.data), or that
    overwrites what autograd saved is no failure: autograd passes with one note saying why there
    was no oracle, whatever the shapes in torch's error."""
    reg = opzoo.Registry()
    reg.register(cls, name="op")
    result = check_property(reg.info("op"), "autograd", profile="ci")
    assert result.status == "pass", result.report()
    assert len(result.notes) == 1 and result.notes[0].startswith(note), result.notes


def test_a_classmethod_function_gets_the_oracles():
    """entmax's form, classmethod forward and backward, saving its output: autograd, double
    backward, forward_mode and library pass. (compile fails: torch 2.13's Dynamo passes cls
    twice to a classmethod forward, a graph break that is torch's, not opzoo's to hide.)"""
    reg = opzoo.Registry()
    reg.register(TanhClassmethod, name="tanh_classmethod")
    for prop in ("gradient", "double_backward", "autograd", "forward_mode", "library"):
        result = check_property(reg.info("tanh_classmethod"), prop, profile="ci")
        assert result.status == "pass", result.report()


@pytest.mark.parametrize("prop", list(PROPERTIES))
def test_a_declared_classic_loss_with_an_integer_target_passes_every_property(prop):
    """A classic cross-entropy, forward(ctx, X, target, eps=0.0), declared from outside with an
    Index target and its trailing default undeclared, passes every property: none is skipped but
    those with nothing declared to check (reference, kinks)."""
    reg = opzoo.Registry()
    reg.register(DECLARED["cross_entropy"], name="cross_entropy")
    result = check_property(reg.info("cross_entropy"), prop, profile="ci")
    assert result.status == ("skip" if prop in ("reference", "kinks") else "pass"), result.report()
