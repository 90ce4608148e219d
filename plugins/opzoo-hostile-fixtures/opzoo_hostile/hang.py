"""An op whose backward never returns."""

import torch


class Hang(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        while True:  # never returns: opzoo check must give up on it, not wait forever
            pass
