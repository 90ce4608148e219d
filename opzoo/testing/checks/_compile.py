"""The ``compile`` property: under torch.compile an op gives eager's values and gradients, in one
graph."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Callable

import torch

from opzoo.exceptions import one_line, printable
from opzoo.testing.checks import _random
from opzoo.testing.checks._bound import Bound, PropertyFailed, vjp
from opzoo.testing.checks._compare import TOLERANCES, close, where
from opzoo.testing.checks._forward import defines_jvp


def compile(op: Bound, *xs: torch.Tensor) -> None:
    """Under torch.compile (aot_eager: no C compiler needed) outputs and gradients match eager,
    without graph breaks (a random forward: both under one seed)."""
    import torch._dynamo

    if any(x.numel() == 0 for x in xs):
        return

    def step(*ts: torch.Tensor) -> object:
        # the op not reseeded: forking the generator breaks the graph. A random op's compiled call
        # is reseeded around (Bound.__call__): aot_eager draws eager's numbers under one seed.
        return op.raw(*ts)

    if op.random:
        op.notes.append(
            "a random forward: eager and compiled run under one seed (aot_eager draws as eager does; "
            "inductor does only with torch._inductor.config.fallback_random = True)"
        )

    outs0, grads0 = vjp(op, xs)
    try:
        outs, grads = vjp(_compiled(op, step, fullgraph=True), xs)
    except (torch._dynamo.exc.Unsupported, torch._dynamo.exc.UserError) as exc:
        # Unsupported: code dynamo cannot trace; UserError: a branch on a tensor's values.
        message = one_line(exc, with_type=False)
        if not (defines_jvp(op.spec.target) and "jvp" in message):
            raise PropertyFailed(f"graph break under torch.compile (fullgraph=True): {_why(exc)}") from None
        # Not the op's fault: torch.compile breaks the graph at any Function that defines jvp
        # (torch 2.13). Said, and the values checked across the break.
        op.notes.append(
            "torch.compile breaks the graph at a Function that defines jvp; values checked with "
            "the break (opzoo's ops keep jvp off the compiled path: see opzoo/ops/_base.py)"
        )
        outs, grads = vjp(_compiled(op, step, fullgraph=False), xs)
    tol = TOLERANCES[torch.float64]

    def compare() -> None:
        for j, (got, want) in enumerate(zip(outs, outs0)):
            close(got, want, tol, f"compiled forward{where(j, len(outs), 'output')} differs from eager")
        for i, (got, want) in enumerate(zip(grads, grads0)):
            close(got, want, tol, f"compiled gradient{where(i, len(xs), 'input')} differs from eager")

    _random.hinted(compare, op, xs)


#: Where Dynamo's message names the user's code that broke the graph: its last frame.
_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _why(exc: BaseException) -> str:
    """Dynamo's graph break in one line: its first line, its explanation and the last frame of the
    user's code it names (``Attempted to call function marked as skipped: Dynamo does not know how
    to trace the Python builtin `_warnings.warn` (warnop.py:7, in forward)``). A message without
    them (another torch release) is its first line."""
    text = str(exc)
    first = one_line(exc, with_type=False)
    lines = [line.strip() for line in text.splitlines()]
    explained = [
        line[len("Explanation:") :].strip().rstrip(".") for line in lines if line.startswith("Explanation:")
    ]
    why = f"{first}: {explained[0]}" if explained else first
    _, _, user = text.partition("from user code:")
    frames = _FRAME.findall(user)
    if frames:
        path, line, function = frames[-1]
        why += f" ({os.path.basename(path)}:{line}, in {function})"
    return printable(why)


def _compiled(op: Bound, step: Callable[..., object], *, fullgraph: bool) -> Bound:
    # Dynamo caches compiled code per code object, and `step` has one code object for every op:
    # past its recompile limit (8) it ran later ops eagerly, blind to their graph breaks. Each
    # check compiles afresh, so that its verdict does not depend on the checks before it.
    # fullgraph: a graph break is an error, found in the one trace that compiles the op (asking
    # torch._dynamo.explain first traced it twice, half the property's time).
    torch._dynamo.reset()
    fn = torch.compile(step, backend="aot_eager", fullgraph=fullgraph)
    return dataclasses.replace(op, fn=fn, notes=op.notes)
