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
``bind``, ``Bound.cast`` and every property reach the mutant. A callback counts the calls in which
the mutant changed anything, so that a survivor that never did can be told from a blind spot.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import torch

from opzoo.core._arguments import PARAM, TENSOR
from opzoo.core._registry import OpSpec
from opzoo.ops._base import Op
from opzoo.testing.checks._forward import defines_jvp
from opzoo.testing.mutation._mutant_facts import found_kinks
from opzoo.testing.mutation._mutants import MUTANTS, Grads, Mutant, Site

__all__ = ["mutant_spec"]


def _nothing() -> None:
    return None


def mutant_spec(spec: OpSpec, mutant: str | Mutant, *, changed: Callable[[], None] = _nothing) -> OpSpec:
    """``spec`` with its derivative mutated by ``mutant`` (a name in :data:`MUTANTS`, or a record),
    named ``spec.name~mutant``; ``changed()`` is called for each backward or jvp in which the mutant
    changed a gradient (or a tangent, or wrote into a grad_output)."""
    m = MUTANTS[mutant] if isinstance(mutant, str) else mutant
    if spec.kind == "module":
        target: type = _module_mutant(spec, m, changed)
    else:
        target = _function_mutant(spec, m, changed)
    return dataclasses.replace(spec, name=f"{spec.name}~{m.name}", target=target)


# -- what changed -----------------------------------------------------------------------------------


def _quiet(*groups: Grads) -> bool:
    """Whether to leave the bookkeeping out: under torch.compile it would be traced (a graph break
    the op does not have), and under vmap (torch.func's, or the legacy one of a batched
    ``autograd.grad``, whose tensors in ``groups`` say so) or functionalization tensors hold no
    values to compare. Under torch.func.jvp or grad they do, and forward mode is counted."""
    if torch.compiler.is_compiling():
        return True
    from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

    if any(
        str(i.key()) != "TransformType.Jvp" and str(i.key()) != "TransformType.Grad"
        for i in retrieve_all_functorch_interpreters()
    ):
        return True
    return any(t is not None and not _plain_tensor(t) for g in groups for t in g)


def _plain_tensor(t: Any) -> bool:
    """Whether ``t`` holds values here and now: not batched (vmap, legacy or not), not a fake or
    functional tensor of a trace (opcheck's aot_dispatch), whose values cannot be read."""
    if type(t) not in (torch.Tensor, torch.nn.Parameter):
        return False
    keys = str(torch._C._dispatch_keys(t)).replace("FuncTorchGradWrapper", "")
    return not any(k in keys for k in ("Batched", "Functionalize", "Python"))


def _differ(before: Grads, after: Grads) -> bool:
    for a, b in zip(before, after):
        if a is b:
            continue
        if a is None or b is None:
            t = b if a is None else a
            if bool(t.ne(0).any()):
                return True
            continue
        if a.shape != b.shape or a.dtype != b.dtype or a.requires_grad != b.requires_grad:
            return True  # requires_grad: a detached gradient has the same values, not the same graph
        with torch.no_grad():
            if not bool(((a == b) | (a.isnan() & b.isnan())).all()):
                return True
    return False


def _pick(out: Any, positions: list[int]) -> Grads:
    """The gradients of the differentiable inputs among what a backward returned."""
    outs = [out] if not isinstance(out, tuple) else list(out)
    return tuple(outs[k] if k < len(outs) else None for k in positions)


def _as_tuple(out: Any) -> Grads:
    return out if isinstance(out, tuple) else (out,)


def _versions(gs: Grads) -> list[int | None]:
    return [None if g is None else g._version for g in gs]


# -- a Function ---------------------------------------------------------------------------------------


def _function_mutant(spec: OpSpec, m: Mutant, changed: Callable[[], None]) -> type:
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
    kinks = _kinks_of(spec, m)
    # The hooks as plain closures: torch.compile traces functions it is handed, not a record of ours.
    on_grads, on_grad_outputs, on_extra = m.grads, m.grad_outputs, m.extra
    on_tangents, on_out_tangents = m.tangents, m.out_tangents

    def keep_site(ctx: Any, args: tuple[Any, ...]) -> None:
        values = {name: _plain(args[k]) for k, name in params if k < len(args)}
        _keep(ctx, tuple(args[k] for k in positions), kinks(values))

    classic = target.setup_context is torch.autograd.Function.setup_context
    own_vjp = getattr(target, "vjp", None) is not getattr(torch.autograd.Function, "vjp", None)
    backward_name = "vjp" if own_vjp and target.backward is torch.autograd.Function.backward else "backward"
    original_backward = getattr(target, backward_name)
    members: dict[str, Any] = {
        "__module__": target.__module__,
        "__qualname__": f"{target.__qualname__}~{m.name}",
        "__doc__": f"{target.__qualname__} with the mutant {m.name!r}: {m.summary}.",
    }

    if classic:

        def forward(ctx: Any, *args: Any) -> Any:
            keep_site(ctx, args)
            return target.forward(ctx, *args)

        members["forward"] = staticmethod(forward)
    else:

        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> Any:
            keep_site(ctx, tuple(inputs))
            return target.setup_context(ctx, inputs, output)

        members["setup_context"] = staticmethod(setup_context)

    def backward(ctx: Any, *gs: Any) -> Any:
        ctx._opzoo_calls += 1
        site = _site(ctx, len(positions), cores, tuple(bool(ctx.needs_input_grad[k]) for k in positions))
        given = tuple(gs)
        quiet = _quiet(given)
        moved = False
        if on_grad_outputs is not None:
            versions = _versions(given)
            gs = on_grad_outputs(site, given)
            moved = not quiet and versions != _versions(given)  # written into, even if written back
        out = original_backward(ctx, *gs)
        single = not isinstance(out, tuple)
        outs = [out] if single else list(out)
        grads = tuple(outs[k] if k < len(outs) else None for k in positions)
        new = grads
        if on_extra is not None:
            new = tuple(_add(g, e) for g, e in zip(new, on_extra(site, given)))
        if on_grads is not None:
            new = on_grads(site, new)
        if not quiet:
            # changed: the gradients that come out, against the op's own for the grad_outputs given
            before = grads if on_grad_outputs is None else _pick(original_backward(ctx, *given), positions)
            if moved or _differ(before, new):
                changed()
        for k, g in zip(positions, new):
            if k < len(outs):
                outs[k] = g
        return outs[0] if single else tuple(outs)

    members[backward_name] = staticmethod(backward)

    if defines_jvp(target) and (on_tangents is not None or on_out_tangents is not None):
        original_jvp = getattr(target, "_with_jvp", target).jvp

        def jvp(ctx: Any, *ts: Any) -> Any:
            site = _site(ctx, len(positions), cores)
            given = tuple(ts[k] if k < len(ts) else None for k in positions)
            new = on_tangents(site, given) if on_tangents is not None else given
            moved = list(ts)
            for k, t in zip(positions, new):
                if k < len(moved):
                    moved[k] = t
            out = original_jvp(ctx, *moved)
            single = not isinstance(out, tuple)
            outs = (out,) if single else tuple(out)
            result = on_out_tangents(site, outs, new) if on_out_tangents is not None else outs
            if not _quiet(given, outs):
                # changed: what comes out, not what goes in (a tangent scaled where the jvp is zero)
                before = outs if new is given else _as_tuple(original_jvp(ctx, *ts))
                if _differ(before, result):
                    changed()
            return result[0] if single else tuple(result)

        members["jvp"] = staticmethod(jvp)
    # Created as the op's subclass: opzoo's Op moves a jvp out of Dynamo's sight as it does for the
    # op; an Elementwise op derives nothing again (no slope is written here).
    return type(target)(f"{target.__name__}~{m.name}", (target,), members)


def _keep(ctx: Any, xs: tuple[Any, ...], kinks: dict[float, float]) -> None:
    """Keep on ``ctx`` what the mutant's hooks need of this call. Plain tuples, a dict and a count,
    not a Site: torch.compile traces a context's attributes of those kinds, not of a class of ours."""
    ctx._opzoo_xs = tuple(x.detach() for x in xs)
    ctx._opzoo_contiguous = tuple(x.is_contiguous() for x in xs)
    ctx._opzoo_kinks = kinks
    ctx._opzoo_calls = 0


def _site(ctx: Any, signature: int, cores: tuple[int, ...], requires: tuple[bool, ...] = ()) -> Site:
    return Site(
        ctx._opzoo_xs, signature, cores, ctx._opzoo_contiguous, ctx._opzoo_kinks, requires, ctx._opzoo_calls
    )


def _plain(value: Any) -> Any:
    """A param as the contract knows it: a 0-d tensor (``Param(tensor=True)``) as its number."""
    return value.item() if isinstance(value, torch.Tensor) and value.dim() == 0 else value


def _add(g: Any, e: Any) -> Any:
    if e is None:
        return g
    return e if g is None else g + e


def _kinks_of(spec: OpSpec, m: Mutant) -> Callable[[dict[str, Any]], dict[float, float]]:
    """params -> the op's kinks there, each with how far off the mutant ``at_kinks`` puts its
    gradient: 1 at a declared kink (the kinks property pins its exact value), more than the gap
    between the one-sided derivatives at a found one (any value between them is a valid
    subgradient). Elementwise ops only, and only for a mutant that reads them: the function is
    traced under torch.compile, so it calls the contract's own kinks function, nothing of ours."""
    contract = spec.contract
    if not m.reads_kinks or not contract.sig.elementwise or contract.surrogate is not None:
        return lambda values: {}
    if contract.kinks_at():
        if not callable(contract.kinks):
            fixed = {k: 1.0 for k in contract.kinks_at()}
            return lambda values: fixed
        raw, defaults = contract.kinks, contract.defaults()
        return lambda values: {float(k): 1.0 for k in raw(**{**defaults, **values})}
    found = found_kinks(spec)
    return lambda values: found


# -- a learnable Module ---------------------------------------------------------------------------------


def _module_mutant(spec: OpSpec, m: Mutant, changed: Callable[[], None]) -> type:
    target, sig = spec.target, spec.contract.sig
    on_grads, on_grad_outputs, on_extra = m.grads, m.grad_outputs, m.extra
    on_tangents, on_out_tangents = m.tangents, m.out_tangents
    n = len(sig.inputs)
    outputs = len(sig.outputs)
    cores = tuple(len(core) for core in sig.inputs)
    kinks_of = _kinks_of(spec, m)

    class TapIn(Op):
        """The identity on the inputs and learnable tensors; its backward mutates their gradients."""

        @staticmethod
        def forward(*ts: torch.Tensor) -> Any:
            return tuple(t.view_as(t) for t in ts) if len(ts) > 1 else ts[0].view_as(ts[0])

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            _keep(ctx, tuple(inputs), ctx_kinks[0])

        @staticmethod
        def backward(ctx: Any, *gs: Any) -> Any:
            ctx._opzoo_calls += 1
            site = _site(ctx, n, cores, tuple(bool(r) for r in ctx.needs_input_grad))
            new = on_grads(site, tuple(gs)) if on_grads is not None else tuple(gs)
            if not _quiet(tuple(gs)) and _differ(tuple(gs), new):
                changed()
            return new if len(new) > 1 else new[0]

        @staticmethod
        def jvp(ctx: Any, *ts: Any) -> Any:
            site = _site(ctx, n, cores)
            new = on_tangents(site, tuple(ts)) if on_tangents is not None else tuple(ts)
            if not _quiet(tuple(ts)) and _differ(tuple(ts), new):
                changed()
            return new if len(new) > 1 else new[0]

    class TapOut(Op):
        """The identity on the outputs (the inputs ride along, for a term added to their
        gradients); its backward mutates the grad_outputs."""

        @staticmethod
        def forward(*ts: torch.Tensor) -> Any:
            outs = ts[:outputs]
            return tuple(t.view_as(t) for t in outs) if outputs > 1 else outs[0].view_as(outs[0])

        @staticmethod
        def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
            _keep(ctx, tuple(inputs[outputs:]), ctx_kinks[0])

        @staticmethod
        def backward(ctx: Any, *gs: Any) -> Any:
            site = _site(ctx, n, cores)
            given = tuple(gs)
            new = given
            quiet = _quiet(given)
            moved = False
            if on_grad_outputs is not None:
                versions = _versions(given)
                new = on_grad_outputs(site, given)
                moved = not quiet and (_differ(given, new) or versions != _versions(given))
            extra: Grads = (None,) * n
            if on_extra is not None:
                extra = on_extra(site, given)
                moved = moved or (not quiet and _differ((None,) * n, extra))
            if moved:
                changed()
            return (*new, *extra)

        @staticmethod
        def jvp(ctx: Any, *ts: Any) -> Any:
            site = _site(ctx, n, cores)
            outs, ins = tuple(ts[:outputs]), tuple(ts[outputs:])
            result = on_out_tangents(site, outs, ins) if on_out_tangents is not None else outs
            if not _quiet(outs) and _differ(outs, result):
                changed()
            return result if outputs > 1 else result[0]

    ctx_kinks: list[dict[float, float]] = [{}]

    class Mutated(torch.nn.Module):
        def __init__(self, **values: Any) -> None:
            super().__init__()
            self.inner = target(**values)
            ctx_kinks[0] = kinks_of(values)

        def forward(self, *xs: torch.Tensor) -> Any:
            named = list(self.inner.named_parameters())
            tapped = TapIn.apply(*xs, *(p for _, p in named))
            tapped = tapped if isinstance(tapped, tuple) else (tapped,)
            out = torch.func.functional_call(
                self.inner, {name: t for (name, _), t in zip(named, tapped[n:])}, tuple(tapped[:n])
            )
            outs = out if isinstance(out, tuple) else (out,)
            return TapOut.apply(*outs, *tapped[:n])

    Mutated.__name__ = f"{target.__name__}~{m.name}"
    Mutated.__qualname__ = f"{target.__qualname__}~{m.name}"
    Mutated.__module__ = target.__module__
    Mutated.__doc__ = f"{target.__qualname__} with the mutant {m.name!r}: {m.summary}."
    return Mutated
