"""A function evaluated at a point moved by many small steps, in a few calls where it takes that.

:class:`~opzoo.testing.checks._onesided.Probe` differences a function along hundreds of directions.
Each step is a call, which for a small input costs the op's Python and dispatch, not its arithmetic:
so the steps go through the function together, stacked along a new leading dimension, where the
function treats that dimension as one more loop dimension (checked at the point itself, stacked
first and last in every call); otherwise one call per step.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

Tensors = tuple[torch.Tensor, ...]
Fn = Callable[..., Tensors]

#: Steps go through the function together, stacked along a new leading dimension, this many
#: elements (steps times the inputs' elements) per call at most, and only where as many as
#: STACKED_AT_LEAST steps fit in one call.
BATCH = 1 << 18
STACKED_AT_LEAST = 16
#: Ulps within which the point itself, evaluated in a stacked call, must come back as f0 (an
#: elementwise kernel may round a few ulps otherwise on a longer tensor: its vectorised path).
BATCH_ULPS = 8


def _eps(outs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per output element, the machine epsilon of the dtype its output came back in (float64's for
    one that is not floating: integers and booleans are exact)."""
    floats = [o.dtype if o.is_floating_point() else torch.float64 for o in outs]
    eps = [torch.full((o.numel(),), torch.finfo(d).eps, dtype=torch.float64) for o, d in zip(outs, floats)]
    return torch.cat(eps) if eps else torch.zeros(0, dtype=torch.float64)


def flat(ts: Sequence[torch.Tensor]) -> torch.Tensor:
    """The tensors' elements in one float64 vector, one after the other."""
    if not ts:
        return torch.zeros(0, dtype=torch.float64)
    return torch.cat([t.detach().reshape(-1).to(device="cpu", dtype=torch.float64) for t in ts])


def _stacked_shape(got: torch.Size, b: int, shape: torch.Size) -> bool:
    """Whether ``got`` is ``shape`` stacked ``b`` times in front, with dimensions of 1 between (an
    output shaped as an input that broadcasting lengthened is)."""
    k = len(got) - len(shape)
    return k >= 1 and got[0] == b and all(d == 1 for d in got[1:k]) and tuple(got[k:]) == tuple(shape)


class Nearby:
    """``fn`` at ``xs`` moved by a step (n: the inputs' elements, all together) or by each of a stack
    of steps (k, n). ``f0``: the outputs at ``xs`` itself, flat (m elements); ``ulp``: the machine
    epsilon each of them came back in."""

    def __init__(self, fn: Fn, xs: Sequence[torch.Tensor]) -> None:
        self.fn = fn
        self.xs = tuple(x.detach() for x in xs)
        self.in_shapes = [x.shape for x in self.xs]
        self.n = sum(x.numel() for x in self.xs)
        outs = self.outputs(torch.zeros(self.n, dtype=torch.float64))
        self.out_shapes = [o.shape for o in outs]
        self.f0 = flat(outs)
        self.ulp = _eps(outs)
        self.m = self.f0.numel()
        # steps stacked along a new leading dimension (see _stacked), until a call does not give f0
        # (an input so large that few steps fit in a call costs its arithmetic, not its calls)
        self.batched = 0 < self.n <= BATCH // STACKED_AT_LEAST

    def outputs(self, step: torch.Tensor) -> Tensors:
        """``fn`` at x moved by ``step`` (n), or by each row of a stack of steps (b, n) at once, each
        input stacked along a new leading dimension (see :meth:`_stacked`)."""
        lead = tuple(step.shape[:-1])
        most = max(x.dim() for x in self.xs) if lead else 0
        moved = []
        at = 0
        for x in self.xs:
            k = x.numel()
            piece = step[..., at : at + k].reshape((*lead, *x.shape)).to(device=x.device, dtype=x.dtype)
            # broadcasting aligns the inputs' last dimensions: a shorter input's stack goes in front of
            # as many as the longest has (a core dimension of another length puts it elsewhere)
            pad = [1] * (most - x.dim())
            moved.append((x + piece).reshape((*lead, *pad, *x.shape)))
            at += k
        with torch.no_grad():
            out = self.fn(*moved)
        return tuple(o.detach() for o in (out if isinstance(out, tuple) else (out,)))

    def at(self, step: torch.Tensor) -> torch.Tensor:
        return flat(self.outputs(step))

    def many(self, steps: torch.Tensor) -> torch.Tensor:
        """f at x moved by each row of ``steps`` (k, n), flat: (k, m): in a few calls, stacked (see
        :meth:`_stacked`), where ``fn`` takes that; else one call each."""
        if not steps.shape[0]:
            return torch.zeros(0, self.m, dtype=torch.float64)
        if self.batched:
            try:
                got = self._stacked(steps)
            except Exception:  # noqa: BLE001 - the op may raise anything: each row on its own then
                got = None
            if got is not None:
                return got
            self.batched = False
        return torch.stack([self.at(s) for s in steps])

    def _stacked(self, steps: torch.Tensor) -> torch.Tensor | None:
        """:meth:`many` where ``fn`` treats a new leading dimension of its inputs as one more
        loop dimension, as an op's signature says it does: each input stacked along it, and put
        in front of as many dimensions as the longest input has, so that broadcasting pairs the
        stacks' rows (where core dimensions differ in number, two stacks meet in two places: the
        output's shape shows it). Each call stacks the point itself first and last. None unless
        each call returns outputs of the stacked shape that give back f0 at both ends (within a
        few ulps): a function that is not elementwise along that dimension (a mean over it, a
        cumulative sum, a size read from the input, a random draw) does not, and is then called
        once per row. Not seen: a forward that branches on its whole input (``if (x > t).any()``)
        between branches that agree at the point but not at every step: a stacked call takes one
        branch for all its rows."""
        per = max(1, BATCH // self.n)
        zero = torch.zeros(1, self.n, dtype=torch.float64)
        rows = []
        for start in range(0, steps.shape[0], per):
            part = steps[start : start + per]
            block = torch.cat([zero, part, zero])
            outs = self.outputs(block)
            b = block.shape[0]
            if len(outs) != len(self.out_shapes) or not all(
                _stacked_shape(o.shape, b, shape) for o, shape in zip(outs, self.out_shapes)
            ):
                return None
            got = torch.cat([o.reshape(b, -1).to(device="cpu", dtype=torch.float64) for o in outs], 1)
            if not (self._gives_f0(got[0]) and self._gives_f0(got[-1])):
                return None
            rows.append(got[1 : 1 + part.shape[0]])
        return torch.cat(rows)

    def _gives_f0(self, row: torch.Tensor) -> bool:
        """Whether ``row`` is f0: nan and infinite where it is (the same infinities), within a few
        ulps elsewhere."""
        f0 = self.f0
        inf, finite = f0.isinf(), f0.isfinite()
        if not torch.equal(row.isnan(), f0.isnan()) or not torch.equal(row[inf], f0[inf]):
            return False
        a, b = row[finite], f0[finite]
        return bool(((a - b).abs() <= BATCH_ULPS * self.ulp[finite] * (a.abs() + b.abs())).all())
