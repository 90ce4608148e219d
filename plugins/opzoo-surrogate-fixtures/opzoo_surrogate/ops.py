"""A spike with spikingjelly's sigmoid surrogate, as a plugin author would write it.

spikingjelly.activation_based.surrogate.Sigmoid: forward heaviside(x), primitive sigmoid(alpha x),
backward grad * alpha * sigmoid(alpha x) * (1 - sigmoid(alpha x)), alpha = 4 by default.
"""

import torch

import opzoo


def _spike(x):
    return (x >= 0).to(x.dtype)


class SigmoidSpike(torch.autograd.Function):
    """Heaviside step with spikingjelly's sigmoid surrogate gradient."""

    opzoo_contract = opzoo.Contract(
        reference=lambda x, alpha: _spike(x),
        surrogate=lambda x, alpha: torch.sigmoid(alpha * x),
        params={"alpha": opzoo.Param(4.0, 0.5, 20.0, "sharpness of the surrogate")},
        double_backward=True,
    )

    @staticmethod
    def forward(x, alpha):
        return _spike(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.alpha = inputs[1]
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        # d/dx sigmoid(a x) = a s(ax) (1 - s(ax)) = a s(ax) s(-ax): 1 - s cancels in low precision
        return grad * ctx.alpha * torch.sigmoid(ctx.alpha * x) * torch.sigmoid(-ctx.alpha * x), None


class WrongSigmoidSpike(SigmoidSpike):
    """The same spike whose backward forgets the factor alpha: right only for alpha = 1."""

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad * torch.sigmoid(ctx.alpha * x) * torch.sigmoid(-ctx.alpha * x), None
