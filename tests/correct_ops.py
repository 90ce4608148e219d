"""Correct ops written the ordinary way, tutorial style, with no contract: each must pass every
property (a false alarm on a correct op breaks the promise as badly as a missed bug). DECLARED holds
correct ops written as upstream packages write them, with the contract declared from outside.

Here too, each written once, the correct ops that the suite's wrong ops (tests/wrong_ops.py) and its
other tests start from: a wrong op is one of them with one thing broken."""

from __future__ import annotations

import importlib
import math
import sys
from pathlib import Path
from types import ModuleType

import torch
from seed_program import MyReLU as SeedMyReLU

import opzoo

ROOT = Path(__file__).resolve().parent.parent


def plugin_module(folder: str, module: str) -> ModuleType:
    """``module`` of the fixture plugin plugins/FOLDER, imported from its source, so that a test
    starts from the plugin's own op rather than a copy of it. (The suite installs the fixture
    plugins into private folders only, for the processes that load them by their entry points; the
    source has no metadata, so importing it declares no entry point.)"""
    if module not in sys.modules:
        source = str(ROOT / "plugins" / folder)
        sys.path.insert(0, source)
        try:
            importlib.import_module(module)
        finally:
            sys.path.remove(source)
    return sys.modules[module]


# -- the ops other tests start from ---------------------------------------------------------------

#: ReLU with no contract, as the hostile fixture plugins export it (they misbehave only at import).
PlainReLU = plugin_module("opzoo-hostile-fixtures", "opzoo_hostile._relu").ReLU
#: (sin x, cos x), ()->(),(), with its reference: the general fixture plugin's op of two outputs.
SinCos = plugin_module("opzoo-general-fixtures", "opzoo_general.ops").SinCos


class ReLU(PlainReLU):
    """ReLU declared as myrelu is: its gradient at the kink 0 is 1, and it has a second derivative."""

    opzoo_contract = opzoo.Contract(reference=torch.relu, kinks={0.0: 1.0}, double_backward=True)


class SavesOutput(torch.autograd.Function):
    """Not an op: the frame of an op whose backward needs its output alone, saved."""

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)


class Tanh(SavesOutput):
    """tanh, no contract, its output saved."""

    @staticmethod
    def forward(x):
        return torch.tanh(x)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)  # d/dx tanh(x) = 1 - tanh(x)^2


class DeclaredSquare(torch.autograd.Function):
    """x * x in the setup_context form, declared as the README's plugin is: no jvp, no vmap rule."""

    opzoo_contract = opzoo.Contract(reference=torch.square, double_backward=True)

    @staticmethod
    def forward(x):
        return x * x

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        return grad * 2 * ctx.saved_tensors[0]


class Softplus(torch.autograd.Function):
    """softplus with its reference, a second derivative and a vmap rule (no jvp)."""

    opzoo_contract = opzoo.Contract(reference=torch.nn.functional.softplus, double_backward=True)
    generate_vmap_rule = True

    @staticmethod
    def forward(x):
        return torch.nn.functional.softplus(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(x)  # d/dx softplus(x) = sigmoid(x)


class Spike(torch.autograd.Function):
    """A Heaviside step with the arctan surrogate atan(pi x) / pi, no contract: each test declares
    the surrogate (or gets it wrong) its own way."""

    @staticmethod
    def forward(x):
        return (x >= 0).to(x.dtype)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / (1 + (math.pi * x) ** 2)  # d/dx atan(pi x)/pi


class Binary(torch.autograd.Function):
    """Not an op: the frame of an elementwise op of two tensors, (),()->(), its inputs saved."""

    opzoo_contract = opzoo.Contract(signature="(),()->()")

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)


class Product(Binary):
    """x * w, elementwise."""

    @staticmethod
    def forward(x, w):
        return x * w

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return (grad * w).sum_to_size(x.shape), (grad * x).sum_to_size(w.shape)


class MatMul(torch.autograd.Function):
    """x @ w with a second derivative and a vmap rule, its inputs saved for a jvp too (it has none)."""

    opzoo_contract = opzoo.Contract(
        signature="(n,k),(k,m)->(n,m)", reference=torch.matmul, double_backward=True
    )
    generate_vmap_rule = True

    @staticmethod
    def forward(x, w):
        return torch.matmul(x, w)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        return torch.matmul(grad, w.mT).sum_to_size(x.shape), torch.matmul(x.mT, grad).sum_to_size(w.shape)


# -- correct ops written as tutorials write them --------------------------------------------------


class Cube(torch.autograd.Function):
    """x^3 built from differentiable ops, declaring nothing: its second derivative is checked, not
    forbidden."""

    @staticmethod
    def forward(x):
        return x**3

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 3 * x * x


class Square(torch.autograd.Function):
    """x * x in the classic form, forward(ctx, x)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * 2 * x


class OnceDifferentiable(Tanh):
    """tanh whose backward is marked once_differentiable: asking for a second derivative is an
    error, which is honest (a skip), not a failure."""

    backward = staticmethod(torch.autograd.function.once_differentiable(Tanh.backward))


class TanhClassmethod(torch.autograd.Function):
    """tanh with classmethod forward and backward, as entmax writes its Functions; it saves its
    output, so its second derivative runs through the Function itself. Not in CORRECT: torch
    2.13's Dynamo passes cls twice to a classmethod forward, so `compile` fails it, rightly (the
    graph does break), though nothing in the op is wrong (tests/test_recording.py)."""

    @classmethod
    def forward(cls, ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @classmethod
    def backward(cls, ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)  # d/dx tanh(x) = 1 - tanh(x)^2


class CrossEntropy(torch.autograd.Function):
    """Cross-entropy of each row of logits X (n, c) against an integer target (n,), in the classic
    form with a trailing argument nobody declares, and a backward that returns a gradient for each
    argument (None for the target and the trailing one), as upstream losses do."""

    @staticmethod
    def forward(ctx, X, target, eps=0.0):
        # X, not log softmax(X), is saved: recomputed in backward, its second derivative is right
        ctx.save_for_backward(X, target)
        ctx.eps = eps
        return eps - torch.log_softmax(X, dim=1).gather(1, target.unsqueeze(1)).squeeze(1)

    @staticmethod
    def backward(ctx, grad):
        X, target = ctx.saved_tensors
        onehot = torch.zeros_like(X).scatter(1, target.unsqueeze(1), 1.0)
        # d/dX_ij (-log softmax(X)_i,t_i) = softmax(X)_ij - [j = t_i]
        return grad.unsqueeze(1) * (torch.softmax(X, dim=1) - onehot), None, None


#: name -> class; "seed_myrelu" is the seed tutorial's MyReLU, verbatim (tests/seed_program.py)
CORRECT = {"cube": Cube, "square": Square, "once": OnceDifferentiable, "seed_myrelu": SeedMyReLU}


# -- correct ops where they are not differentiable ------------------------------------------------
# Each was a false alarm once: a tie, a cone, a jump, a point where the forward is not finite nearby,
# an output that is nan by definition, an oracle that overflows where the op does not. Each declares
# only its signature (or a surrogate), as an op of several tensors must; hypothesis draws the points
# in question (it favours equal values and 0).


def _empty_max(x):
    """max over the last dimension, -inf where it is empty (as logsumexp's is)."""
    if x.shape[-1] == 0:
        return x.sum(-1) - math.inf
    return x.amax(-1)


class TieSplitMax(Binary):
    """max(x, y) whose backward splits a tie evenly; its forward's autograd gives a tie to x."""

    @staticmethod
    def forward(x, y):
        return torch.where(x >= y, x, y)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        share = torch.where(x == y, 0.5, (x > y).to(grad.dtype))  # d max/dx: 1, 0, or half at a tie
        gx, gy = grad * share, grad * (1 - share)
        return gx.sum_to_size(x.shape), gy.sum_to_size(y.shape)


class MaxReduction(torch.autograd.Function):
    """max over the last dimension, the gradient to one index: the last of a tie (torch's own max
    gives it to another)."""

    opzoo_contract = opzoo.Contract(signature="(n)->()")

    @staticmethod
    def forward(x):
        return _empty_max(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        if x.shape[-1] == 0:
            return torch.zeros_like(x)
        last = x.shape[-1] - 1 - x.flip(-1).argmax(-1, keepdim=True)
        return torch.zeros_like(x).scatter(-1, last, grad.unsqueeze(-1).expand_as(last).to(x.dtype))


class VectorNorm(torch.autograd.Function):
    """The Euclidean norm over the last dimension; at 0 (a cone) the gradient 0."""

    opzoo_contract = opzoo.Contract(signature="(n)->()")

    @staticmethod
    def forward(x):
        return torch.linalg.vector_norm(x, dim=-1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], output)

    @staticmethod
    def backward(ctx, grad):
        x, norm = ctx.saved_tensors
        safe = torch.where(norm == 0, 1.0, norm).unsqueeze(-1)
        return grad.unsqueeze(-1) * x / safe  # x / |x|; 0 at 0, inside the unit ball


class AbsDiff(Binary):
    """|x - y|, the gradient 0 where x = y (a kink along x - y)."""

    @staticmethod
    def forward(x, y):
        return (x - y).abs()

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        s = torch.sign(x - y)
        return (grad * s).sum_to_size(x.shape), (-grad * s).sum_to_size(y.shape)


class ClampBetween(torch.autograd.Function):
    """x clamped between lo and hi (min(max(x, lo), hi)), a tie going to x, then to the max; at
    x = lo = hi three pieces meet. Its forward's autograd splits ties evenly. (Not torch.clamp with
    tensor bounds: its own backward raises for bounds that broadcast, a torch defect.)"""

    opzoo_contract = opzoo.Contract(signature="(),(),()->()")

    @staticmethod
    def forward(x, lo, hi):
        return torch.minimum(torch.maximum(x, lo), hi)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    @staticmethod
    def backward(ctx, grad):
        x, lo, hi = ctx.saved_tensors
        inner = torch.maximum(x, lo)
        below = (inner <= hi).to(grad.dtype)  # min(inner, hi) takes inner, a tie too
        gx = grad * (x >= lo) * below
        glo = grad * (x < lo) * below
        ghi = grad * (1 - below)
        return gx.sum_to_size(x.shape), glo.sum_to_size(lo.shape), ghi.sum_to_size(hi.shape)


class Atan2(Binary):
    """atan2(y, x): at the origin it jumps (nothing to check); its gradient there is nan."""

    @staticmethod
    def forward(y, x):
        return torch.atan2(y, x)

    @staticmethod
    def backward(ctx, grad):
        y, x = ctx.saved_tensors
        r2 = x * x + y * y
        return (grad * x / r2).sum_to_size(y.shape), (-grad * y / r2).sum_to_size(x.shape)


class XLogY(Binary):
    """x log y (0 where x = 0): not finite near y = 0, nan for y < 0. Its derivative in x is log y,
    at x = 0 too (torch.xlogy's own backward gives 0 there, so that it is not nan at y = 0)."""

    @staticmethod
    def forward(x, y):
        return torch.xlogy(x, y)

    @staticmethod
    def backward(ctx, grad):
        x, y = ctx.saved_tensors
        gx = grad * torch.log(y)  # d/dx x log y = log y
        return gx.sum_to_size(x.shape), (grad * x / y).sum_to_size(y.shape)


class Pow(torch.autograd.Function):
    """x ** y: at x = 0 not finite nearby (or not differentiable), nan for x < 0 and y not whole."""

    opzoo_contract = opzoo.Contract(signature="(),()->()")

    @staticmethod
    def forward(x, y):
        return torch.pow(x, y)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs, output)

    @staticmethod
    def backward(ctx, grad):
        x, y, out = ctx.saved_tensors
        gx = grad * y * torch.pow(x, y - 1)
        gx = torch.where((x == 0) & (y == 0), 0.0, gx)  # x ** 0 is constant in x at 0 too, not 0 * inf
        gy = grad * out * torch.log(x)
        gy = torch.where((x == 0) & (y >= 0), 0.0, gy)  # 0 ** y is constant in y there, as torch says
        return gx.sum_to_size(x.shape), gy.sum_to_size(y.shape)


class Variance(torch.autograd.Function):
    """The unbiased variance over the last dimension: nan, by definition, for one element."""

    opzoo_contract = opzoo.Contract(signature="(n)->()")

    @staticmethod
    def forward(x):
        n = x.shape[-1]
        return ((x - x.mean(-1, keepdim=True)) ** 2).sum(-1) / (n - 1)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        n = x.shape[-1]
        return grad.unsqueeze(-1) * 2 * (x - x.mean(-1, keepdim=True)) / (n - 1)


def _triangle_primitive(x: torch.Tensor) -> torch.Tensor:
    """The primitive of a triangular surrogate gradient max(0, 1 - |x|): smooth but for kinks of its
    derivative at -1, 0 and 1, where autograd takes one side."""
    left = (x + 1) ** 2 / 2
    right = 1 - (1 - x) ** 2 / 2
    return torch.where(x < -1, 0.0, torch.where(x < 0, left, torch.where(x < 1, right, 1.0)))


class TriangleSpike(Spike):
    """A spike at 0 with a triangular surrogate gradient, differentiable twice: its second
    derivative (-sign(x) inside) has jumps at -1, 0 and 1, its surrogate's autograd a side of each."""

    opzoo_contract = opzoo.Contract(surrogate=_triangle_primitive, double_backward=True)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.clamp(1 - x.abs(), min=0)


#: 0.1 as a float32 holds it: 0.100000001490116..., as a float64 shows
THRESHOLD = float(torch.tensor(0.1, dtype=torch.float32))


class Float32Threshold(torch.autograd.Function):
    """max(x - 0.1, 0) with its threshold rounded to float32, as a float32 parameter or buffer would
    keep it: the kink it declares at 0.1 sits at float32(0.1) when the checks run in float64, where its
    gradient takes the declared value (1, as x >= 0.1); at 0.1 itself it is 0."""

    opzoo_contract = opzoo.Contract(kinks={0.1: 1.0}, reference=lambda x: torch.relu(x - THRESHOLD))

    @staticmethod
    def forward(x):
        return torch.where(x >= THRESHOLD, x - THRESHOLD, 0.0)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * (x >= THRESHOLD)


class SoftUnitStep(torch.autograd.Function):
    """exp(-1/x) for x > 0, else 0, in the classic form, as e3nn writes its _SoftUnitStep (with
    torch.where for its masked writes, which torch.compile cannot trace): smooth everywhere. At tiny
    x (8.5e-162) its derivative exp(-1/x) / x^2 is 0, as the backward says; the forward's autograd
    there multiplies exp's 0 by the reciprocal's overflowing slope, nan: the oracle's own overflow,
    not the op's. Its backward is marked once_differentiable: autograd of it would overflow the same
    way (a nan second derivative where the truth is 0)."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        safe = torch.where(x > 0, x, 1.0)
        return torch.where(x > 0, torch.exp(-1 / safe), 0.0)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        safe = torch.where(x > 0, x, 1.0)
        # d/dx exp(-1/x) = exp(-1/x) / x^2 (divided twice: x^2 would underflow)
        return grad * torch.where(x > 0, torch.exp(-1 / safe) / safe / safe, 0.0)


#: name -> class: correct ops at the points where they are not differentiable (see above)
AT_KINKS = {
    "tie_split_max": TieSplitMax,
    "max_reduction": MaxReduction,
    "vector_norm": VectorNorm,
    "abs_diff": AbsDiff,
    "clamp_between": ClampBetween,
    "atan2": Atan2,
    "xlogy": XLogY,
    "pow": Pow,
    "variance": Variance,
    "triangle_spike": TriangleSpike,
    "float32_threshold": Float32Threshold,
    "soft_unit_step": SoftUnitStep,
}


# -- correct ops whose backward rounds differently on another path --------------------------------


class RoundsByPath(Product):
    """x * w whose backward computes x's gradient another way when w needs none (grad * 3 * w / 3):
    the same value but for rounding, as a BLAS kernel chosen by which gradients are needed may be."""

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        both = ctx.needs_input_grad[0] and ctx.needs_input_grad[1]
        gx = grad * w if both else grad * 3 * w / 3
        return gx.sum_to_size(x.shape), (grad * x).sum_to_size(w.shape)


class OneUlpApart(Product):
    """x * w whose gradient for x is one unit in the last place larger when w needs none: the
    Intel Xeon case of the issue (2.339999999999998 against 2.339999999999999), by construction."""

    @staticmethod
    def backward(ctx, grad):
        x, w = ctx.saved_tensors
        gx = grad * w
        if not ctx.needs_input_grad[1]:
            gx = torch.nextafter(gx, torch.full_like(gx, math.inf))
        return gx.sum_to_size(x.shape), (grad * x).sum_to_size(w.shape)


#: name -> a class from elsewhere with its contract declared (opzoo.declare), the class untouched.
DECLARED = {
    "cross_entropy": opzoo.declare(
        CrossEntropy,
        signature="(n,c),(n)->(n)",
        inputs={"target": opzoo.Index(high="c")},
        loop_dims=0,
        min_sizes={"c": 1},
    ),
}
