"""An op whose backward never returns."""

import time

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
        # Never returns: opzoo check must give up on it, not wait forever. It sleeps rather than
        # spins, as a backward waiting on a lock or a peer would: a time limit (SIGALRM) or a kill
        # ends it all the same, and the tests beside it keep the CPU.
        while True:
            time.sleep(0.05)
