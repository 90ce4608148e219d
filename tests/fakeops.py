"""Ops that tests name through fake entry points (importable as ``fakeops:...``)."""

import math

import torch

import opzoo


class Double(torch.autograd.Function):
    """Multiply by two."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class Scale(torch.autograd.Function):
    """Multiply by a factor."""

    opzoo_contract = opzoo.Contract(
        summary="scale by factor",
        params={"factor": opzoo.Param(1.0, 0.0, 10.0)},
        domain=(-math.inf, math.inf),
    )

    @staticmethod
    def forward(ctx, x, factor):
        ctx.factor = factor
        return x * factor

    @staticmethod
    def backward(ctx, grad):
        return grad * ctx.factor, None


class WrongSignature(torch.autograd.Function):
    """Declares a param that forward does not take."""

    opzoo_contract = opzoo.Contract(params={"alpha": opzoo.Param(1.0)})

    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, grad):
        return grad


class NotAnOp:
    """Neither a Function nor a Module."""


def hook_module_ops():
    return {"double": Double}
