"""A module whose import changes torch's default dtype, which every other op's verdicts depend on;
the Function it defines is not used."""

import torch

torch.set_default_dtype(torch.float64)


class Doubled(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return 2 * x

    @staticmethod
    def backward(ctx, g):
        return 2 * g
