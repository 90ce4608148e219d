import torch

import opzoo


class NotAFunction:
    """A plain class, not an autograd Function."""


class NoBackward(torch.autograd.Function):
    """Forward only."""

    @staticmethod
    def forward(ctx, x):
        return x * 2


class BadContract(torch.autograd.Function):
    """Declares an empty domain."""

    opzoo_contract = opzoo.Contract(domain=(1.0, 0.0))

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class Fine(torch.autograd.Function):
    """Identity, to show that the rest of this plugin still loads."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        return grad


Duplicate = Fine


class WrongSign(torch.autograd.Function):
    """ReLU whose backward has the wrong sign: opzoo check must fail it."""

    opzoo_contract = opzoo.Contract(reference=torch.relu, kinks={0.0: 1.0})

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x >= 0)
        return x.clamp(min=0)

    @staticmethod
    def backward(ctx, grad):
        (mask,) = ctx.saved_tensors
        return -grad * mask
