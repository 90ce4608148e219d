"""An op with its derivative mutated (:mod:`opzoo.testing.mutation._mutants`), its source untouched: a spec
the properties check through their normal path.

- A Function becomes a generated subclass whose ``backward`` (or ``vjp``) and ``jvp`` call the op's
  own and transform what goes in and what comes out; its ``forward`` and ``setup_context`` are the
  op's, so the forward stays bit for bit the same, the autograd oracle differentiates the op's own
  forward, the vmap rule is the op's, and the torch.library bridge bridges the mutant (its backward
  is the class's). Built-ins keep ``jvp`` where Dynamo does not see it, and so does the subclass.
- A learnable Module becomes a Module holding the op's instance and calling it between two
  identity Functions: one on the inputs and learnable tensors, whose backward transforms their
  gradients, and one on the outputs, whose backward transforms the grad_outputs.

Either way the mutant's spec is the op's with another name (``op~mutant``) and that class, so that
``bind``, ``Bound.cast`` and every property reach the mutant. The Function form is built here, the
Module form in :mod:`opzoo.testing.mutation._module_mutant`; what one call keeps for the hooks, and
whether the mutant changed anything in it (a callback counts such calls, so that a survivor that
never did can be told from a blind spot), in :mod:`opzoo.testing.mutation._mutant_calls`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from opzoo.core._arguments import PARAM, TENSOR
from opzoo.core._path_op import PathSpec
from opzoo.core._registry import OpSpec
from opzoo.testing.checks._forward import defines_jvp
from opzoo.testing.mutation._module_mutant import module_mutant
from opzoo.testing.mutation._mutant_calls import (
    add,
    as_tuple,
    differ,
    keep,
    kinks_of,
    pick,
    plain,
    quiet,
    site_of,
    versions,
)
from opzoo.testing.mutation._mutants import MUTANTS, Mutant

__all__ = ["mutant_spec"]


def _nothing() -> None:
    return None


def mutant_spec(spec: OpSpec, mutant: str | Mutant, *, changed: Callable[[], None] = _nothing) -> OpSpec:
    """``spec`` with its derivative mutated by ``mutant`` (a name in :data:`MUTANTS`, or a record),
    named ``spec.name~mutant``; ``changed()`` is called for each backward or jvp in which the mutant
    changed a gradient (or a tangent, or wrote into a grad_output). An import path's op is not
    imported here: its mutant is made where it is resolved (a worker)."""
    m = MUTANTS[mutant] if isinstance(mutant, str) else mutant
    if isinstance(spec, PathSpec):
        return spec.derived(f"{spec.name}~{m.name}", lambda op: mutant_spec(op, m, changed=changed))
    if spec.kind == "module":
        target: type = module_mutant(spec, m, changed)
    else:
        target = _function_mutant(spec, m, changed)
    return dataclasses.replace(spec, name=f"{spec.name}~{m.name}", target=target)


# -- a Function ---------------------------------------------------------------------------------------


def _function_mutant(spec: OpSpec, m: Mutant, changed: Callable[[], None]) -> type:
    """The op's Function subclassed: its forward (or setup_context) keeps the call's site, its
    backward (or vjp) and jvp call the op's own through the mutant's hooks."""
    target, plan, sig = spec.target, spec.arguments, spec.contract.sig
    assert plan is not None
    # the differentiable tensors among the forward's arguments, in the signature's order
    order = sorted(
        (what, k)
        for k, (kind, what) in enumerate(plan.slots)
        if kind == TENSOR and what not in plan.constants
    )
    positions = [k for _, k in order]
    cores = tuple(len(sig.inputs[what]) for what, _ in order)
    params = [(k, what) for k, (kind, what) in enumerate(plan.slots) if kind == PARAM]
    kinks = kinks_of(spec, m)

    def keep_site(ctx: Any, args: tuple[Any, ...]) -> None:
        values = {name: plain(args[k]) for k, name in params if k < len(args)}
        keep(ctx, tuple(args[k] for k in positions), kinks(values))

    members: dict[str, Any] = {
        "__module__": target.__module__,
        "__qualname__": f"{target.__qualname__}~{m.name}",
        "__doc__": f"{target.__qualname__} with the mutant {m.name!r}: {m.summary}.",
        **_keeping(target, keep_site),
        **_backward(target, m, positions, cores, changed),
    }
    if defines_jvp(target) and (m.tangents is not None or m.out_tangents is not None):
        members["jvp"] = staticmethod(_jvp(target, m, positions, cores, changed))
    # Created as the op's subclass: opzoo's Op moves a jvp out of Dynamo's sight as it does for the
    # op; an Elementwise op derives nothing again (no slope is written here).
    mutated = type(target)(f"{target.__name__}~{m.name}", (target,), members)
    if m.outputs is not None:
        mutated.apply = _outputs_changed(mutated.apply, m.outputs, changed)
    return mutated


def _outputs_changed(
    apply: Callable[..., Any], hook: Callable[[Any], Any], changed: Callable[[], None]
) -> Any:
    """``apply`` with the mutant's ``outputs`` hook on each output it returns, differentiably (a
    dtype cast: autograd casts the grad_outputs back to the op's dtype for its own backward)."""

    def outputs_changed(*args: Any) -> Any:
        out = apply(*args)
        outs = out if isinstance(out, tuple) else (out,)
        new = tuple(hook(o) for o in outs)
        if any(a.dtype != b.dtype for a, b in zip(outs, new) if hasattr(a, "dtype")):
            changed()
        return new if isinstance(out, tuple) else new[0]

    return staticmethod(outputs_changed)


def _keeping(target: type, keep_site: Callable[[Any, tuple[Any, ...]], None]) -> dict[str, Any]:
    """The op's own forward (the classic form) or setup_context, keeping the call's site first."""
    if target.setup_context is torch.autograd.Function.setup_context:

        def forward(ctx: Any, *args: Any) -> Any:
            keep_site(ctx, args)
            return target.forward(ctx, *args)

        return {"forward": staticmethod(forward)}

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> Any:
        keep_site(ctx, tuple(inputs))
        return target.setup_context(ctx, inputs, output)

    return {"setup_context": staticmethod(setup_context)}


def _backward(
    target: type, m: Mutant, positions: list[int], cores: tuple[int, ...], changed: Callable[[], None]
) -> dict[str, Any]:
    """The op's own backward (or vjp, where it defines that alone) with the mutant's hooks on its
    grad_outputs and on the gradients it returns, under the same name."""
    own_vjp = getattr(target, "vjp", None) is not getattr(torch.autograd.Function, "vjp", None)
    name = "vjp" if own_vjp and target.backward is torch.autograd.Function.backward else "backward"
    original = getattr(target, name)
    # The hooks as plain closures: torch.compile traces functions it is handed, not a record of ours.
    on_grads, on_grad_outputs, on_extra, graph_only = m.grads, m.grad_outputs, m.extra, m.graph_only

    def backward(ctx: Any, *gs: Any) -> Any:
        ctx._opzoo_calls += 1
        site = site_of(ctx, len(positions), cores, tuple(bool(ctx.needs_input_grad[k]) for k in positions))
        given = tuple(gs)
        silent = quiet(given)
        moved = False
        if on_grad_outputs is not None:
            before_write = versions(given)
            gs = on_grad_outputs(site, given)
            moved = not silent and before_write != versions(given)  # written into, even if written back
        out = original(ctx, *gs)
        single = not isinstance(out, tuple)
        outs = [out] if single else list(out)
        grads = pick(out, positions)
        new = grads
        if on_extra is not None:
            new = tuple(add(g, e) for g, e in zip(new, on_extra(site, given)))
        if on_grads is not None:
            new = on_grads(site, new)
        if not silent:
            # changed: the gradients that come out, against the op's own for the grad_outputs given
            before = grads if on_grad_outputs is None else pick(original(ctx, *given), positions)
            grown = graph_only and any(g is not None and g.requires_grad for g in new)
            if moved or grown or differ(before, new):
                changed()
        for k, g in zip(positions, new):
            if k < len(outs):
                outs[k] = g
        return outs[0] if single else tuple(outs)

    return {name: staticmethod(backward)}


def _jvp(
    target: type, m: Mutant, positions: list[int], cores: tuple[int, ...], changed: Callable[[], None]
) -> Callable[..., Any]:
    """The op's own jvp with the mutant's hooks on the input tangents and on what it returns."""
    original = getattr(target, "_with_jvp", target).jvp
    on_tangents, on_out_tangents = m.tangents, m.out_tangents

    def jvp(ctx: Any, *ts: Any) -> Any:
        site = site_of(ctx, len(positions), cores)
        given = tuple(ts[k] if k < len(ts) else None for k in positions)
        new = on_tangents(site, given) if on_tangents is not None else given
        moved = list(ts)
        for k, t in zip(positions, new):
            if k < len(moved):
                moved[k] = t
        out = original(ctx, *moved)
        single = not isinstance(out, tuple)
        outs = (out,) if single else tuple(out)
        result = on_out_tangents(site, outs, new) if on_out_tangents is not None else outs
        if not quiet(given, outs):
            # changed: what comes out, not what goes in (a tangent scaled where the jvp is zero)
            before = outs if new is given else as_tuple(original(ctx, *ts))
            if differ(before, result):
                changed()
        return result[0] if single else tuple(result)

    return jvp
