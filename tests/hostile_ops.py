"""Ops whose own code ends, hangs or escapes the process that runs it: a backward that raises
SystemExit, a BaseException of its own or KeyboardInterrupt, calls os._exit, never returns, or
leaves a background process behind. Every command must call each of them a FAIL (or a note), as
``opzoo check`` does, and never end or hang itself. Loaded by import path (``hostile_ops:Name``)
with tests/ on PYTHONPATH."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import torch

#: The environment of an opzoo subprocess that loads these ops by their import paths.
ON_PATH = {"PYTHONPATH": str(Path(__file__).resolve().parent)}


class _Doubles(torch.autograd.Function):
    """x times 2: the forward is fine, the backward is each class's own."""

    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


class ExitBackward(_Doubles):
    @staticmethod
    def backward(ctx, grad):
        raise SystemExit(0)


class OsExitBackward(_Doubles):
    @staticmethod
    def backward(ctx, grad):
        os._exit(0)


class HangBackward(_Doubles):
    @staticmethod
    def backward(ctx, grad):
        while True:  # sleeps, not spins (see opzoo_hostile.hang): the limit ends it either way
            time.sleep(0.05)


class Weird(BaseException):
    """Neither an Exception nor an interrupt."""


class BaseExcBackward(_Doubles):
    @staticmethod
    def backward(ctx, grad):
        raise Weird("odd")


class KeyboardBackward(_Doubles):
    @staticmethod
    def backward(ctx, grad):
        raise KeyboardInterrupt("from the op")


class Spawner(_Doubles):
    """Correct, but its backward starts a process that outlives it, once, its pid in the file
    $OPZOO_TEST_SPAWNED names."""

    @staticmethod
    def backward(ctx, grad):
        path = os.environ["OPZOO_TEST_SPAWNED"]
        if not os.path.exists(path):
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
            with open(path, "w") as f:
                f.write(str(child.pid))
        return grad * 2


class CheckerPatcher(_Doubles):
    """Correct, but its backward makes opzoo's gradient check find nothing, for every op checked
    after it in the same process: it replaces the check's code (a reference held anywhere sees it)."""

    @staticmethod
    def backward(ctx, grad):
        from opzoo.testing.checks import _gradient

        _gradient.gradient.__code__ = (lambda *args, **kwargs: None).__code__
        return grad * 2
