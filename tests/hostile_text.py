"""Ops whose words would drive a terminal: escape sequences in the summary, formula, derivative, a
param's doc, the text of an exception at import, in a hook and in the backward (issue 30, point 7).

The op's name is fine (entry points refuse any other): everything else a plugin or an exception
says is where the sequences hide. tests/test_escapes.py declares these in a fake distribution."""

from __future__ import annotations

import torch

import opzoo

#: Set the window's title, clear the screen, print a fake banner, reverse the rest of the line.
TITLE, CLEAR, BIDI = "\x1b]0;pwned\x07", "\x1b[2J\x1b[H", "\u202e"
BANNER = "\x1b[32mALL CHECKS PASSED\x1b[0m"
HOSTILE = TITLE + CLEAR + BANNER + "\r" + BIDI + "\x9b1m\x7f"


class Op(torch.autograd.Function):
    """x times 2, with a backward that raises."""

    opzoo_contract = opzoo.Contract(
        summary="fine" + HOSTILE,
        formula="2 x" + CLEAR,
        derivative="2" + BANNER,
        params={"scale": opzoo.Param(1.0, 0.5, 2.0, "unused" + TITLE)},
    )

    @staticmethod
    def forward(x, scale):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, grad):
        raise ValueError("bad" + HOSTILE + "\nsecond line" + CLEAR)


class _Hooks:
    """A hook plugin whose opzoo_ops raises with escapes in its message."""

    @opzoo.hookimpl
    def opzoo_ops(self):
        raise RuntimeError("hook" + HOSTILE)


hooks = _Hooks()


def __getattr__(name: str):
    # The entry point `unloadable` names an attribute whose lookup raises with escapes in its text.
    raise AttributeError(f"no {name}" + HOSTILE)
