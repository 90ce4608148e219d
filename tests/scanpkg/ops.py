"""Correct Functions, one of each kind `opzoo scan` meets. Declared by hand, SoftPlus and Softmax
are green: scan must never make them red."""

import torch

import opzoo


class SoftPlus(torch.autograd.Function):
    """Elementwise, setup_context form: d/dx log(1 + e^x) = sigmoid(x)."""

    @staticmethod
    def forward(x):
        return torch.nn.functional.softplus(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * torch.sigmoid(x)


class Softmax(torch.autograd.Function):
    """Along `dim`, classic form: d softmax = y * (g - sum(g * y))."""

    @staticmethod
    def forward(ctx, x, dim=-1):
        y = torch.softmax(x, dim)
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * (g - (g * y).sum(ctx.dim, keepdim=True)), None


class Heaviside(torch.autograd.Function):
    """A flat forward with a surrogate backward (a spiking neuron's): by design, not a derivative."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return (x > 0).to(x.dtype)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(4 * x)
        return g * 4 * s * (1 - s)


class Scaled(torch.autograd.Function):
    """`alpha` is taken as a tensor or as a number: scan cannot tell which, nor choose its values."""

    @staticmethod
    def forward(ctx, x, alpha):
        ctx.alpha = alpha
        return x * alpha

    @staticmethod
    def backward(ctx, g):
        return g * ctx.alpha, None


class Gram(torch.autograd.Function):
    """A matrix op, (m,n)->(m,m): its signature must be declared."""

    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return a @ a.mT

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return (g + g.mT) @ a


class DeclaredGram(Gram):
    """The same matrix op with its signature declared in the class, as a plugin's op is: scan checks
    it under that and infers nothing."""

    opzoo_contract = opzoo.Contract(signature="(m,n)->(m,m)")


class Log(torch.autograd.Function):
    """Defined on (0, inf) only (nan below): its domain is inferred."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return torch.log(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g / x


class GuidedReLU(torch.autograd.Function):
    """Guided backprop: g * [x > 0] * [g > 0], not linear in grad_output, by design."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x > 0) * (g > 0)


class Dropout(torch.autograd.Function):
    """A random forward: the same under the same seed."""

    @staticmethod
    def forward(ctx, x):
        mask = (torch.rand_like(x) > 0.5).to(x.dtype) * 2
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask


class Neuron:
    """A class whose body defines a Function (wrapped in staticmethod, as snntorch's neurons do): an
    import path reaches it (scanpkg.ops:Neuron.Tanh)."""

    @staticmethod
    class Tanh(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = torch.tanh(x)
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * (1 - y * y)
