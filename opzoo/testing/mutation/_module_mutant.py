"""A learnable Module with its derivative mutated (:mod:`opzoo.testing.mutation._mutant_ops`): a Module
holding the op's instance and calling it between two identity Functions, one on the inputs and
learnable tensors, whose backward (and jvp) transforms their gradients (tangents), and one on the
outputs, whose backward transforms the grad_outputs (and adds a term to the inputs' gradients) and
whose jvp transforms the output tangents. The op's forward and its own autograd run untouched
between them.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from opzoo.core._registry import OpSpec
from opzoo.ops._base import Op
from opzoo.testing.mutation._mutant_calls import differ, keep, kinks_of, quiet, site_of, versions
from opzoo.testing.mutation._mutant_hooks import Grads
from opzoo.testing.mutation._mutants import Mutant

__all__ = ["module_mutant"]

Kinks = list[dict[float, float]]  # one cell: the kinks at the params of the instance last built


def module_mutant(spec: OpSpec, m: Mutant, changed: Callable[[], None]) -> type:
    """A Module class built as the op's is (``Class(**params)``), calling the op's instance between
    the two taps."""
    target, sig = spec.target, spec.contract.sig
    n = len(sig.inputs)
    cores = tuple(len(core) for core in sig.inputs)
    kinks_at = kinks_of(spec, m)
    ctx_kinks: Kinks = [{}]
    tap_in = _tap_in(m, n, cores, ctx_kinks, changed)
    tap_out = _tap_out(m, n, len(sig.outputs), cores, ctx_kinks, changed)

    class Mutated(torch.nn.Module):
        def __init__(self, **values: Any) -> None:
            super().__init__()
            self.inner = target(**values)
            ctx_kinks[0] = kinks_at(values)

        def forward(self, *xs: torch.Tensor) -> Any:
            named = list(self.inner.named_parameters())
            tapped = tap_in.apply(*xs, *(p for _, p in named))
            tapped = tapped if isinstance(tapped, tuple) else (tapped,)
            out = torch.func.functional_call(
                self.inner, {name: t for (name, _), t in zip(named, tapped[n:])}, tuple(tapped[:n])
            )
            outs = out if isinstance(out, tuple) else (out,)
            return tap_out.apply(*outs, *tapped[:n])

    Mutated.__name__ = f"{target.__name__}~{m.name}"
    Mutated.__qualname__ = f"{target.__qualname__}~{m.name}"
    Mutated.__module__ = target.__module__
    Mutated.__doc__ = f"{target.__qualname__} with the mutant {m.name!r}: {m.summary}."
    return Mutated


def _tap_in(m: Mutant, n: int, cores: tuple[int, ...], ctx_kinks: Kinks, changed: Callable[[], None]) -> type:
    """The Function on the inputs' side, a class of its own per mutated Module (its closures hold the
    mutant's hooks)."""
    # The hooks as plain closures: torch.compile traces functions it is handed, not a record of ours.
    on_grads, on_tangents = m.grads, m.tangents

    class TapIn(Op):
        """The identity on the inputs and learnable tensors; its backward mutates their gradients, its
        jvp their tangents."""

        @staticmethod
        def forward(*ts: torch.Tensor) -> Any:
            return tuple(t.view_as(t) for t in ts) if len(ts) > 1 else ts[0].view_as(ts[0])

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            keep(ctx, tuple(inputs), ctx_kinks[0])

        @staticmethod
        def backward(ctx: Any, *gs: Any) -> Any:
            ctx._opzoo_calls += 1
            site = site_of(ctx, n, cores, tuple(bool(r) for r in ctx.needs_input_grad))
            new = on_grads(site, tuple(gs)) if on_grads is not None else tuple(gs)
            if not quiet(tuple(gs)) and differ(tuple(gs), new):
                changed()
            return new if len(new) > 1 else new[0]

        @staticmethod
        def jvp(ctx: Any, *ts: Any) -> Any:
            site = site_of(ctx, n, cores)
            new = on_tangents(site, tuple(ts)) if on_tangents is not None else tuple(ts)
            if not quiet(tuple(ts)) and differ(tuple(ts), new):
                changed()
            return new if len(new) > 1 else new[0]

    return TapIn


def _tap_out(
    m: Mutant, n: int, outputs: int, cores: tuple[int, ...], ctx_kinks: Kinks, changed: Callable[[], None]
) -> type:
    """The Function on the outputs' side, a class of its own per mutated Module."""
    on_grad_outputs, on_extra, on_out_tangents = m.grad_outputs, m.extra, m.out_tangents

    class TapOut(Op):
        """The identity on the outputs (the inputs ride along, for a term added to their
        gradients); its backward mutates the grad_outputs, its jvp the output tangents."""

        @staticmethod
        def forward(*ts: torch.Tensor) -> Any:
            outs = ts[:outputs]
            return tuple(t.view_as(t) for t in outs) if outputs > 1 else outs[0].view_as(outs[0])

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            keep(ctx, tuple(inputs[outputs:]), ctx_kinks[0])

        @staticmethod
        def backward(ctx: Any, *gs: Any) -> Any:
            site = site_of(ctx, n, cores)
            given = tuple(gs)
            new = given
            silent = quiet(given)
            moved = False
            if on_grad_outputs is not None:
                before_write = versions(given)
                new = on_grad_outputs(site, given)
                moved = not silent and (differ(given, new) or before_write != versions(given))
            extra: Grads = (None,) * n
            if on_extra is not None:
                extra = on_extra(site, given)
                moved = moved or (not silent and differ((None,) * n, extra))
            if moved:
                changed()
            return (*new, *extra)

        @staticmethod
        def jvp(ctx: Any, *ts: Any) -> Any:
            site = site_of(ctx, n, cores)
            outs, ins = tuple(ts[:outputs]), tuple(ts[outputs:])
            result = on_out_tangents(site, outs, ins) if on_out_tangents is not None else outs
            if not quiet(outs) and differ(outs, result):
                changed()
            return result if outputs > 1 else result[0]

    return TapOut
