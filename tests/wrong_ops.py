"""Deliberately wrong ops: the property tests must catch each one with the right property. Most
are a correct op of tests/correct_ops.py with one thing broken."""

import dataclasses
import math

import numpy
import torch
from correct_ops import (
    Binary,
    DeclaredSquare,
    MatMul,
    PlainReLU,
    Product,
    ReLU,
    SavesOutput,
    SinCos,
    Softplus,
    Spike,
    Tanh,
)

import opzoo


class WrongSign(ReLU):
    """Backward with the wrong sign."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return -grad * (x >= 0)


class WrongOnPartOfDomain(Softplus):
    """softplus whose gradient is off by a factor only for x > 2."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        factor = torch.where(x > 2, 1.05, 1.0).to(x.dtype)
        return grad * torch.sigmoid(x) * factor


class IgnoresGradOutput(ReLU):
    """Returns the local derivative, forgetting to multiply by grad_output."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return (x >= 0).to(grad.dtype)


class WrongAtKink(ReLU):
    """Declares gradient 1 at 0 but zeroes it there."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x > 0)


class MutatesInput(torch.autograd.Function):
    """Computes ReLU in place on its input."""

    opzoo_contract = opzoo.Contract(reference=torch.relu, kinks={0.0: 1.0})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x >= 0)
        return x.clamp_(min=0).clone()

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return grad * mask


class ContiguousGradOnly(ReLU):
    """Reads grad_output's memory as if it were contiguous."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        raw = torch.as_strided(grad, x.shape, torch.empty(x.shape).stride())
        return raw * (x >= 0)


class WrongDtype(ReLU):
    """Always returns float32."""

    @staticmethod
    def forward(x):
        return x.clamp(min=0).float()


class Float32ForShortDtypes(ReLU):
    """ReLU that returns float32 for a bfloat16 or float16 input (a mask added as ``.float()``, as
    sinabs' StochasticRounding does); float64 and float32 keep theirs."""

    @staticmethod
    def forward(x):
        y = x.clamp(min=0)
        return y.float() if x.dtype in (torch.bfloat16, torch.float16) else y


class SilentlyWrongDoubleBackward(DeclaredSquare):
    """x^2 whose backward detaches x: the second derivative comes out zero, silently."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x.detach()


class HalfDetachedSmallCube(DeclaredSquare):
    """1e-4 x^3 whose backward detaches one of x's two factors: the gradient is right, the second
    derivative half of what it is (3e-4 x for 6e-4 x), an error small beside x itself, as gpytorch's
    RBF covariance's 0 where its second derivative is 2e-5: gradgradcheck fails both; double_backward
    passed them while its graph added x^3 (whose 6x widened gradcheck's rtol)."""

    opzoo_contract = opzoo.Contract(reference=lambda x: 1e-4 * x**3, double_backward=True)

    @staticmethod
    def forward(x):
        return 1e-4 * x**3

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3e-4 * x * x.detach()


class SilentlyDetachedUndeclared(SilentlyWrongDoubleBackward):
    """x^2, no contract at all, whose backward detaches x: asked for a Hessian, it answers 0."""

    opzoo_contract = None  # declares nothing


class NanSecondDerivative(DeclaredSquare):
    """x^2 whose backward multiplies by sqrt(0 * |x|) + 1: exactly 1, so the gradient is right, but
    its derivative is sqrt's infinite slope at 0 times 0, nan: the second derivative is nan
    everywhere (torch's gradgradcheck fails it)."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x * (torch.sqrt(0 * x.abs()) + 1)


class NanHessianAbove4096(DeclaredSquare):
    """NanSecondDerivative's nan second derivative in a 'fast path' above 4,096 elements alone (as
    WrongAboveFastPathSize is for the first derivative): right and twice differentiable below, where
    gradgradcheck looks; above, only a directional second-order check sees it."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x * ((torch.sqrt(0 * x.abs()) + 1) if x.numel() > 4096 else 1)


class NanHessianWhereZero(SavesOutput):
    """relu(x)^2 whose backward 2 sqrt(y) reads its saved output: right, but its derivative is nan
    (sqrt's infinite slope at 0 times 0) wherever the output is 0, and right (2) elsewhere: entmax15's
    ``Y.sqrt()`` in miniature."""

    opzoo_contract = opzoo.Contract(kinks={0.0: 0.0}, double_backward=True)

    @staticmethod
    def forward(x):
        return torch.relu(x) ** 2

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * 2 * y.sqrt()  # d/dx relu(x)^2 = 2 relu(x) = 2 sqrt(y)


class NanGradientAtSmall(DeclaredSquare):
    """x^2 whose gradient is nan wherever |x| < 0.5 (0 * inf inside the backward), right elsewhere."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x + 0 * torch.where(x.abs() < 0.5, math.inf, 0.0).to(x.dtype)


class WrongSlopeSurrogate(Spike):
    """A spike whose arctan backward uses slope 2 where its surrogate atan(pi x)/pi has slope pi."""

    opzoo_contract = opzoo.Contract(
        reference=lambda x: (x >= 0).to(x.dtype), surrogate=lambda x: torch.atan(math.pi * x) / math.pi
    )

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (1 + (2 * x) ** 2)  # should be 1 / (1 + (pi x)^2)


class WrongInLowerPrecision(WrongSlopeSurrogate):
    """The arctan spike, right in float64 and off by a quarter in every lower dtype: what a lower
    dtype may lose to rounding (the surrogate run in it, a threshold at its rounding) excuses
    nothing of the kind."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        right = grad / (1 + (math.pi * x) ** 2)
        return right if x.dtype == torch.float64 else right * 0.75


class SurrogateDetachedDoubleBackward(WrongSlopeSurrogate):
    """The arctan spike with the right slope, whose backward detaches x: declared double_backward,
    its second derivative comes out zero where the surrogate's is -2 pi^2 x / (1 + (pi x)^2)^2."""

    opzoo_contract = opzoo.Contract(
        reference=lambda x: (x >= 0).to(x.dtype),
        surrogate=lambda x: torch.atan(math.pi * x) / math.pi,
        double_backward=True,
    )

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (1 + (math.pi * x.detach()) ** 2)


class _STERoundBase(torch.autograd.Function):
    opzoo_contract = opzoo.Contract(reference=torch.round, surrogate=lambda x: x)

    @staticmethod
    def forward(x):
        return torch.round(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass


class STEDropsGradOutput(_STERoundBase):
    """A straight-through round that returns the surrogate's derivative, 1, not grad_output * 1."""

    @staticmethod
    def backward(ctx, grad):
        return torch.ones_like(grad)


class OverflowingSurrogate(Spike):
    """A spike with a sigmoid surrogate whose backward, k e^(-kx) / (1 + e^(-kx))^2, is inf / inf =
    nan once e^(-kx) overflows (x < -22 in float32, x < -178 in float64)."""

    opzoo_contract = opzoo.Contract(
        reference=lambda x: (x >= 0).to(x.dtype), surrogate=lambda x: torch.sigmoid(4 * x)
    )

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        e = torch.exp(-4 * x)
        return grad * 4 * e / (1 + e) ** 2


class UndeclaredSTE(_STERoundBase):
    """A straight-through round that does not declare its surrogate: gradient fails, with a hint."""

    opzoo_contract = opzoo.Contract(reference=torch.round)

    @staticmethod
    def backward(ctx, grad):
        return grad


class WrongOn0d(Tanh):
    """Right, except on a 0-d tensor (a shape special case gone wrong)."""

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        slope = 1 - y * y
        return grad * (2 * slope if y.dim() == 0 else slope)


class WrongAboveFastPathSize(Tanh):
    """Right up to 4,096 elements; a 'fast path' above that forgets the square."""

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        if y.numel() > 4096:
            return grad * (1 - y)
        return grad * (1 - y * y)


class Float32Backward(Tanh):
    """A float64 backward computed in float32: 1e-8 relative error, inside gradcheck's tolerance
    (once_differentiable, as many hand-written backwards are: no second derivative to give it away)."""

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return (grad.float() * (1 - y.float() * y.float())).to(grad.dtype)


class TanhGeluBelowFloat64(torch.autograd.Function):
    """The exact (erf) gelu, whose backward in float32 and bfloat16 is the tanh approximation's
    derivative, 1e-3 off: right in float64, where gradcheck and every float64 check look; with no
    reference declared, only the forward's own autograd in the lower dtypes sees it (a new user's)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.nn.functional.gelu(x)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        if x.dtype == torch.float64:
            cdf = 0.5 * (1 + torch.erf(x / math.sqrt(2)))
            return grad * (cdf + x * torch.exp(-0.5 * x * x) / math.sqrt(2 * math.pi))
        u = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
        t = torch.tanh(u)
        du = math.sqrt(2 / math.pi) * (1 + 3 * 0.044715 * x * x)
        return grad * (0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du)


class Float32BackwardClassic(torch.autograd.Function):
    """Float32Backward in the classic form, forward(ctx, x), as most Functions in the wild are
    written: the autograd oracle runs its forward with a recording context."""

    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return (grad.float() * (1 - y.float() * y.float())).to(grad.dtype)


class Float32SoftmaxBackward(SavesOutput):
    """softmax over the last dimension whose float64 backward is computed in float32: not
    elementwise, so the autograd oracle's third opinion (finite differences along where the two
    gradients differ) is asked, and must side with the forward's autograd."""

    opzoo_contract = opzoo.Contract(signature="(n)->(n)")

    @staticmethod
    def forward(x):
        return torch.softmax(x, dim=-1)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        g, y32 = grad.float(), y.float()
        return (y32 * (g - (g * y32).sum(-1, keepdim=True))).to(grad.dtype)


class BranchesOnValues(ReLU):
    """A right ReLU whose forward takes a shortcut when every input is positive: branching on a
    tensor's values is a graph break under torch.compile, and no op in a compiled model may have one."""

    @staticmethod
    def forward(x):
        if bool((x > 0).all()):
            return x.clone()
        return x.clamp(min=0)


class OverflowingBackward(torch.autograd.Function):
    """sigmoid whose backward, exp(-x) / (1 + exp(-x))^2, overflows to nan at x < -710 (the true
    gradient there is about 0)."""

    @staticmethod
    def forward(x):
        return torch.sigmoid(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        e = torch.exp(-x)
        return grad * e / (1 + e) ** 2


class NeedsInputGradSwapped(Product):
    """x * w (elementwise, two inputs) whose backward reads needs_input_grad at swapped indices:
    right when both inputs require grad, wrong when only one does."""

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        gx = grad * w if ctx.needs_input_grad[1] else None
        gw = grad * x if ctx.needs_input_grad[0] else None
        return gx, gw


class WrongValueAtUndeclaredKink(PlainReLU):
    """ReLU with no contract whose gradient at exactly 0 is 5: no valid subgradient."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.where(x == 0, 5.0, (x > 0).to(grad.dtype))


class JvpDropsATerm(MatMul):
    """A jvp that keeps only dx @ w when x has a tangent, and x @ dw when it has none: right for
    dual tensors on one input, wrong under torch.func.jvp, which gives every input a tangent
    (zeros where none is asked for). d(x @ w) = dx @ w + x @ dw needs both terms."""

    @staticmethod
    def jvp(ctx, dx, dw):
        x, w = ctx.saved_tensors
        return torch.matmul(dx, w) if dx is not None else torch.matmul(x, dw)


class _SinCos(SinCos):
    """(sin x, cos x) with a correct backward, a second derivative and a vmap rule: two outputs, its
    input saved for a jvp (the ones below, and test_forward's right one)."""

    opzoo_contract = dataclasses.replace(SinCos.opzoo_contract, double_backward=True)
    generate_vmap_rule = True

    @staticmethod
    def setup_context(ctx, inputs, output):
        SinCos.setup_context(ctx, inputs, output)
        ctx.save_for_forward(inputs[0])


class JvpWrongOnSecondOutput(_SinCos):
    """A jvp whose second output's tangent has the wrong sign: d cos x = -sin x dx."""

    @staticmethod
    def jvp(ctx, dx):
        (x,) = ctx.saved_tensors
        return dx * torch.cos(x), dx * torch.sin(x)


class OffReference(ReLU):
    """A ReLU shifted by 1e-3: backward consistent with its own forward, forward not the declared
    reference's."""

    @staticmethod
    def forward(x):
        return x.clamp(min=0) + 1e-3


class WrongForNoncontiguousInput(ReLU):
    """A ReLU whose backward takes a "fast path" for contiguous saved inputs and a wrong one (half
    again too large) for the rest."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x >= 0) * (1.0 if x.is_contiguous() else 1.5)


class GradOutputAsScratch(ReLU):
    """Uses grad_output as scratch space to save an allocation: scales it in place and back (the
    values come back, but the caller's tensor was written), where its memory allows and nobody
    differentiates through it."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        mask = x >= 0
        if not grad.requires_grad and grad.is_contiguous() and grad.dim() and min(grad.stride()) > 0:
            grad.mul_(2.0)
            out = grad * mask / 2
            grad.div_(2.0)
            return out
        return grad * mask


class UntraceableBackward(torch.autograd.Function):
    """sin whose backward leaves torch (its cosine from numpy): right in eager, and under dynamo,
    which traces numpy, but AOT autograd and torch.export cannot follow it, so the op bridged to
    torch.library cannot be compiled with its backward (opcheck's AOT-dispatch test)."""

    opzoo_contract = opzoo.Contract(reference=torch.sin, dtypes=("float64", "float32"))

    @staticmethod
    def forward(x):
        return torch.sin(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.from_numpy(numpy.asarray(numpy.cos(x.numpy())))  # d/dx sin(x) = cos(x)


class CrashesOn1d(SavesOutput):
    """A softmax over the last dimension that crashes on 1-D input (a batch dimension assumed, as
    one published sparsemax does)."""

    opzoo_contract = opzoo.Contract(signature="(n)->(n)", double_backward=True)

    @staticmethod
    def forward(x):
        if x.dim() == 1:
            raise RuntimeError(f"expand(torch.LongTensor{{[1, {x.shape[0]}]}}, size=[{x.shape[0]}])")
        return torch.softmax(x, -1)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return y * (grad - (grad * y).sum(-1, keepdim=True))


class RejectsTwoWays(CrashesOn1d):
    """A softmax over the last dimension that rejects an empty one (IndexError, as a max over it
    would) and, in another way, 1-D input (ValueError), as sparsemax 0.1.9 does: both ways are
    reported, whichever one hypothesis shrinks to."""

    @staticmethod
    def forward(x):
        if x.shape[-1] == 0:
            raise IndexError(f"max(): Expected reduction dim {x.dim() - 1} to have non-zero size.")
        if x.dim() == 1:
            raise ValueError(f"expected a batch of rows, got shape {tuple(x.shape)}")
        return torch.softmax(x, -1)


class ZeroesGradOutputRejectsEmpty(torch.autograd.Function):
    """A row sum that refuses an empty row (a limit, reported once by accepts), and whose backward
    zeroes grad_output in place when done with it (a bug, which the refusal must not hide)."""

    opzoo_contract = opzoo.Contract(signature="(n)->()")

    @staticmethod
    def forward(x):
        if x.shape[-1] == 0:
            raise ValueError("empty row")
        return x.sum(-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.shape = inputs[0].shape

    @staticmethod
    def backward(ctx, grad):
        out = grad.unsqueeze(-1).expand(ctx.shape).clone()
        if not grad.requires_grad:
            grad.zero_()
        return out


class TieToEveryMax(torch.autograd.Function):
    """max over the last dimension whose backward gives the whole gradient to every tied element:
    (1, 1) at a tie of two, which passes each coordinate's one-sided derivatives (0 and 1) but is no
    valid generalised gradient (along (1, 1) max rises with slope 1, not 2)."""

    opzoo_contract = opzoo.Contract(signature="(n)->()")

    @staticmethod
    def forward(x):
        return x.sum(-1) - math.inf if x.shape[-1] == 0 else x.amax(-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output)

    @staticmethod
    def backward(ctx, grad):
        x, out = ctx.saved_tensors
        return grad.unsqueeze(-1) * (x == out.unsqueeze(-1))


class FiveAtATie(Binary):
    """max(x, y) whose gradient at a tie is 5 for x: no valid subgradient (between 0 and 1)."""

    @staticmethod
    def forward(x, y):
        return torch.maximum(x, y)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        gx = torch.where(x == y, 5.0, (x > y).to(grad.dtype))
        gy = (y > x).to(grad.dtype)
        return (grad * gx).sum_to_size(x.shape), (grad * gy).sum_to_size(y.shape)


class WrongInOneInput(Binary):
    """relu(x) + y**2 whose gradient in y is 3y: wrong in input 1 only, and its counterexample
    shrinks to x = 0, where input 0 sits on a kink."""

    @staticmethod
    def forward(x, y):
        return torch.relu(x) + y**2

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return (grad * (x >= 0)).sum_to_size(x.shape), (grad * 3 * y).sum_to_size(y.shape)


class WrongBothInputs(Product):
    """x * y whose gradient is off by 0.01 for x and by 1 for y, everywhere: gradcheck names x
    (input 0) first, where the largest mismatch of all is y's."""

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        return (grad * (y + 0.01)).sum_to_size(x.shape), (grad * (x + 1)).sum_to_size(y.shape)


class NoisyBackward(Tanh):
    """tanh whose backward carries 1e-6 relative noise: inside finite differences' tolerance, not
    the same twice."""

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y) * (1 + 1e-6 * torch.randn_like(y))


class FlatWhereWrong(torch.autograd.Function):
    """sum of relu over the last dimension, whose backward gives 0.5 (not 0) below 0: wrong where
    the forward is flat, which is not piecewise constant (so no surrogate hint)."""

    opzoo_contract = opzoo.Contract(signature="(n)->()")

    @staticmethod
    def forward(x):
        return torch.relu(x).sum(-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad.unsqueeze(-1) * torch.where(x >= 0, 1.0, 0.5)


WRONG = {
    "wrong_sign": (WrongSign, "gradient", "Jacobian mismatch"),
    "wrong_part": (WrongOnPartOfDomain, "gradient", "Jacobian mismatch"),
    "ignores_grad_output": (IgnoresGradOutput, "gradient", "not multiplied by grad_output"),
    "wrong_at_kink": (WrongAtKink, "kinks", "at the kink x = 0"),
    "mutates_input": (MutatesInput, "hygiene", "forward mutated its input"),
    "contiguous_grad_only": (ContiguousGradOnly, "layout", "non-contiguous grad_output"),
    "wrong_dtype": (WrongDtype, "hygiene", "output dtype is torch.float32"),
    "bf16_in_float32_out": (
        Float32ForShortDtypes,
        "hygiene",
        "output dtype is torch.float32, expected torch.bfloat16 (the input's: the op declares bfloat16",
    ),
    "silent_double_backward": (
        SilentlyWrongDoubleBackward,
        "double_backward",
        "second derivative is wrong, with contiguous grad_output",
    ),
    "detached_undeclared": (SilentlyDetachedUndeclared, "double_backward", "once_differentiable"),
    "small_half_detached": (HalfDetachedSmallCube, "double_backward", "second derivative is wrong"),
    # a nan or infinite derivative where finite differences are finite: never excused as a kink
    "nan_second_derivative": (NanSecondDerivative, "double_backward", "analytical nan"),
    "nan_hessian_where_zero": (NanHessianWhereZero, "double_backward", "analytical nan"),
    "nan_hessian_above_4096": (NanHessianAbove4096, "double_backward", "analytical nan"),
    "nan_gradient_at_small": (NanGradientAtSmall, "gradient", "analytical nan"),
    "wrong_slope_surrogate": (WrongSlopeSurrogate, "gradient", "differs from the declared surrogate"),
    "wrong_in_lower_precision": (WrongInLowerPrecision, "gradient", "differs from the declared surrogate"),
    "ste_drops_grad_output": (STEDropsGradOutput, "gradient", "not multiplied by grad_output"),
    "overflowing_surrogate": (
        OverflowingSurrogate,
        "gradient",
        "differs from the declared surrogate at large |x|",
    ),
    "surrogate_double_backward": (
        SurrogateDetachedDoubleBackward,
        "double_backward",
        "second derivative with respect to the input differs from the declared surrogate's",
    ),
    "branches_on_values": (BranchesOnValues, "compile", "graph break under torch.compile"),
    # blind spots of finite differences, each caught only by the check named (test_properties)
    "wrong_on_0d": (WrongOn0d, "gradient", "Jacobian mismatch"),
    "wrong_above_4096": (WrongAboveFastPathSize, "gradient", "directional derivative mismatch"),
    "float32_backward": (Float32Backward, "autograd", "is part of the backward computed in a lower"),
    "float32_backward_classic": (
        Float32BackwardClassic,
        "autograd",
        "is part of the backward computed in a lower",
    ),
    "float32_softmax_backward": (
        Float32SoftmaxBackward,
        "autograd",
        "is part of the backward computed in a lower",
    ),
    "tanh_gelu_below_float64": (
        TanhGeluBelowFloat64,
        "autograd",
        "gradient in float32 differs from the forward's own autograd",
    ),
    "overflowing_backward": (OverflowingBackward, "extremes", "the forward is finite but the gradient"),
    "needs_input_grad_swapped": (NeedsInputGradSwapped, "subsets", "needs_input_grad at the right index"),
    "wrong_at_undeclared_kink": (WrongValueAtUndeclaredKink, "gradient", "no valid subgradient"),
    "jvp_drops_a_term": (
        JvpDropsATerm,
        "forward_mode",
        "torch.func.jvp differs from the backward's J v (with respect to input 1)",
    ),
    "jvp_wrong_on_output_1": (
        JvpWrongOnSecondOutput,
        "forward_mode",
        "torch.func.jvp differs from the backward's J v (for output 1)",
    ),
    "undeclared_ste": (
        UndeclaredSTE,
        "gradient",
        "if the backward is meant as a surrogate, declare `surrogate=`",
    ),
    "off_reference": (OffReference, "reference", "forward in float64 differs from the reference"),
    "wrong_for_noncontiguous_input": (
        WrongForNoncontiguousInput,
        "layout",
        "gradient differs for a non-contiguous input",
    ),
    "grad_output_as_scratch": (GradOutputAsScratch, "hygiene", "backward mutated grad_output"),
    "untraceable_backward": (UntraceableBackward, "library", "test_aot_dispatch_dynamic"),
    "crashes_on_1d": (CrashesOn1d, "accepts", "the forward raised RuntimeError: expand"),
    "rejects_two_ways": (
        RejectsTwoWays,
        "accepts",
        "and rejects its fixed and edge inputs in 1 other way(s)",
    ),
    "zeroes_grad_output_rejects_empty": (
        ZeroesGradOutputRejectsEmpty,
        "hygiene",
        "backward mutated grad_output",
    ),
    # where the op is not differentiable: held to the valid generalised gradients, not excused
    "tie_to_every_max": (TieToEveryMax, "gradient", "no valid subgradient"),
    "five_at_a_tie": (FiveAtATie, "gradient", "no valid subgradient"),
    "wrong_in_one_input": (WrongInOneInput, "gradient", "with respect to input 1"),
    "wrong_both_inputs": (WrongBothInputs, "gradient", "for output 0 with respect to input 0"),
    "noisy_backward": (NoisyBackward, "hygiene", "running backward twice gave different gradients"),
    "flat_where_wrong": (FlatWhereWrong, "gradient", "Jacobian mismatch"),
}


#: The blind spots: ops that every property but the one named in WRONG passes (or skips). Every
#: property has one (test_properties): a property no wrong op needs is dead weight, or untested.
ONLY = [
    "crashes_on_1d",
    "tanh_gelu_below_float64",
    "wrong_at_undeclared_kink",
    "silent_double_backward",
    "nan_second_derivative",
    "nan_hessian_where_zero",
    "nan_hessian_above_4096",
    "off_reference",
    "wrong_for_noncontiguous_input",
    "grad_output_as_scratch",
    "wrong_at_kink",
    "untraceable_backward",
    "branches_on_values",
    "jvp_drops_a_term",
    "jvp_wrong_on_output_1",
    "float32_backward",
    "float32_backward_classic",
    "overflowing_backward",
    "needs_input_grad_swapped",
]
