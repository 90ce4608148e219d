"""Ops that tests name through fake entry points (importable as ``fakeops:...``)."""

import math

import torch
from opzoo_smooth.ops import LogCosh

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


class Log(torch.autograd.Function):
    """Natural logarithm, defined on (0, inf) only."""

    opzoo_contract = opzoo.Contract(reference=torch.log, domain=(0.0, math.inf), double_backward=True)

    @staticmethod
    def forward(x):
        return torch.log(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0])

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return grad / x  # d/dx log x = 1 / x

    generate_vmap_rule = True


class NaiveLogCosh(LogCosh):
    """opzoo-smooth's log cosh with its forward computed naively, log(cosh(x)): cosh overflows past
    |x| = 89 in float32."""

    @staticmethod
    def forward(x):
        return torch.log(torch.cosh(x))
