"""The ``accepts``, ``layout`` and ``hygiene`` properties: what an op owes the graph around it (it
takes the inputs its contract allows; the same values in any memory layout; outputs of the
signature's shapes, dtype and device; nothing mutated; a backward that repeats)."""

from __future__ import annotations

import torch

from opzoo.core._spec import OpSpec
from opzoo.exceptions import one_line
from opzoo.testing._edges import edge_inputs, fixed_inputs
from opzoo.testing.checks import _random
from opzoo.testing.checks._bound import (
    Bound,
    PropertyFailed,
    as_drawn,
    bind,
    grad,
    grad_outputs,
    noncontiguous,
    rejects,
    vjp,
)
from opzoo.testing.checks._compare import EXACT, agree, close, same_bits, where
from opzoo.testing.checks._oracles import _gist


def layout(op: Bound, *xs: torch.Tensor) -> None:
    """Each input and each grad_output non-contiguous in turn (then all at once) gives the values
    and gradients of contiguous ones (a random forward: the grad_outputs only)."""
    outs0, grads0 = vjp(op, xs)
    gs = grad_outputs(outs0)
    n, m = len(xs), len(gs)
    variants = [
        ([noncontiguous(x) if k == i else x for k, x in enumerate(xs)], gs, f"input{where(i, n, '')}")
        for i in range(n)
    ]
    variants += [
        (xs, [noncontiguous(g) if k == j else g for k, g in enumerate(gs)], f"grad_output{where(j, m, '')}")
        for j in range(m)
    ]
    variants.append(([noncontiguous(x) for x in xs], [noncontiguous(g) for g in gs], "everything"))
    if op.random:  # rand_like draws in memory order: the grad_outputs' layouts alone
        variants = [v for v in variants if v[2].startswith("grad_output")]
        op.notes.append(_random.LAYOUT)
    _random.hinted(lambda: _same_in_layouts(op, variants, outs0, grads0), op, xs)


def _same_in_layouts(op: Bound, variants: list, outs0: tuple, grads0: tuple) -> None:
    """Each variant (inputs, grad_outputs, what) gives the values and gradients ``outs0``, ``grads0``."""
    n, m = len(grads0), len(outs0)
    for vxs, vgs, what in variants:
        if all(t.is_contiguous() for t in (*vxs, *vgs)):
            continue  # 0-d or empty: no other layout exists
        # strided: the op sees the layout asked for (a clone made a strided slice contiguous again)
        outs, grads = vjp(op, vxs, vgs, strided=True)
        for j, (got, want) in enumerate(zip(outs, outs0)):
            what_j = f"forward{where(j, m, 'output')} differs for a non-contiguous {what}"
            close(got, want, EXACT, what_j, scaled=True)
        for i, (got, want) in enumerate(zip(grads, grads0)):
            what_i = f"gradient{where(i, n, 'input')} differs for a non-contiguous {what}"
            close(got, want, EXACT, what_i, scaled=True)


def hygiene(op: Bound, *xs: torch.Tensor) -> None:
    """Outputs follow the signature's shapes and the inputs' dtype and device; nothing is
    mutated; backward repeats (to a few units in the last place)."""
    leaves = tuple(x.detach().clone().requires_grad_() for x in xs)
    before = [(x.detach().clone(), x._version) for x in leaves]

    def unchanged(when: str) -> None:
        for i, (x, (value, version)) in enumerate(zip(leaves, before)):
            if x._version != version or not same_bits(x.detach(), value):
                raise PropertyFailed(f"{when} mutated its input{where(i, len(leaves), '')}")

    outs = op.outputs(*leaves)  # checks the count and shapes against the signature
    _follows_the_input(op, outs, xs[0], "")
    unchanged("forward")
    if any(s is not None and s.projects for s in op.sets):
        # the op saw projections of the leaves (copies): given the inputs themselves, once more
        clones = tuple(x.detach().clone() for x in xs)
        with as_drawn(), torch.no_grad():
            op(*clones)
        for i, (x, c) in enumerate(zip(xs, clones)):
            if not same_bits(c, x.detach()):
                raise PropertyFailed(f"forward mutated its input{where(i, len(xs), '')}")
    _in_each_dtype(op, xs)
    gs = grad_outputs(outs)
    g_before = [(g.clone(), g._version) for g in gs]
    first = grad(outs, leaves, gs, retain_graph=True)
    for j, (g, (value, version)) in enumerate(zip(gs, g_before)):
        if g._version != version or not same_bits(g, value):
            raise PropertyFailed(f"backward mutated grad_output{where(j, len(gs), '')}")
    unchanged("backward")
    second = grad(outs, leaves, gs)
    for i, (x, g1, g2) in enumerate(zip(xs, first, second)):
        if g1 is None or g2 is None:
            continue
        if g1.dtype != x.dtype or tuple(g1.shape) != tuple(x.shape):
            raise PropertyFailed(
                f"gradient{where(i, len(xs), 'of input')} is {g1.dtype} {tuple(g1.shape)}, "
                f"expected {x.dtype} {tuple(x.shape)}"
            )
        # the same arithmetic on the same values: equal but for a few ulps (a kernel that splits a sum
        # by threads may, on another machine), so that a backward with noise of its own fails
        same = agree(g2, g1)
        if not bool(same.all()):
            e = int((~same).reshape(-1).nonzero()[0])
            raise PropertyFailed(
                f"running backward twice gave different gradients{where(i, len(xs), 'of input')} (at flat "
                f"index {e}: {g1.reshape(-1)[e].item()!r}, then {g2.reshape(-1)[e].item()!r})"
            )


def _follows_the_input(op: Bound, outs: tuple[torch.Tensor, ...], x: torch.Tensor, declared: str) -> None:
    """PropertyFailed unless every output has the device of the input ``x`` and its dtype, or the
    dtype the op declares for it (``output_dtypes``)."""
    fixed = op.spec.contract.output_dtypes
    for j, o in enumerate(outs):
        which = f" {j}" if len(outs) > 1 else ""
        if j in fixed:
            if o.dtype != getattr(torch, fixed[j]):
                raise PropertyFailed(
                    f"output{which} dtype is {o.dtype}, expected torch.{fixed[j]} (declared)"
                )
        elif o.dtype != x.dtype:
            hint = declaration_of(j, o.dtype)
            raise PropertyFailed(
                f"output{which} dtype is {o.dtype}, expected {x.dtype} (the input's{declared})"
                + (f"; if that is by design (indices, a mask), declare {hint}" if hint else "")
            )
        if o.device != x.device:
            raise PropertyFailed(
                f"output{which} device is {o.device}, expected {x.device} (the input's{declared})"
            )


def declaration_of(j: int, dtype: torch.dtype) -> str | None:
    """How output ``j`` of ``dtype`` is declared, if it is an integer or bool one (indices, counts,
    a mask: outputs by design): ``output_dtypes={1: 'int64'}``; None for a floating one."""
    if dtype.is_floating_point or dtype.is_complex:
        return None
    return f"output_dtypes={{{j}: {str(dtype).removeprefix('torch.')!r}}}"


def _in_each_dtype(op: Bound, xs: tuple[torch.Tensor, ...]) -> None:
    """The forward's outputs keep the dtype (and device) of inputs in each dtype the op declares, not
    only of the float64 ones the other checks draw: a bfloat16 input whose output comes back float32
    (a mask added as ``.float()``) is seen here, as nothing else compares dtypes there."""
    for name in op.spec.contract.dtypes:
        dtype = getattr(torch, name)
        if dtype == xs[0].dtype:
            continue
        lows = tuple(x.detach().to(dtype) for x in xs)
        with torch.no_grad():
            outs = op.cast(dtype).outputs(*lows)
        _follows_the_input(op, outs, lows[0], f": the op declares {name}, and float64 keeps its dtype")


def accepts(op: Bound, *xs: torch.Tensor) -> None:
    """The forward takes every input its signature and declared limits allow (edge inputs
    included). One it rejects (raises on) is reported here, once, with each other way the forward
    rejects the op's fixed and edge inputs (another exception, or another text), one line each;
    every other property leaves them out, so that one limit of the forward neither fails nor hides
    everything else."""
    try:
        with torch.no_grad():
            op(*xs)
    except Exception as exc:  # the op's own code: anything
        first = _way(exc)
        others = [line for way, line in _ways(op.spec, xs[0].device if xs else "cpu") if way != first]
        shown = f"{_shapes(op.full(*xs))}: "
        if others:
            listed = "".join(f"{line}\n" for line in others)
            ways = f"and rejects its fixed and edge inputs in {len(others)} other way(s)"
            shown = f"{shown[:-2]}, {ways}:\n{listed}"
        raise PropertyFailed(
            f"the forward raised {one_line(exc, with_type=True)} on input(s) of shape {shown}the other "
            f"properties leave out the inputs it rejects. If the op does not take such inputs, {_declare(op)}"
        ) from None


def _declare(op: Bound) -> str:
    """What to declare about the inputs an op rejects: limits on its signature's dimensions, or,
    where it declares none (an elementwise op, as an undeclared one is taken), the signature first."""
    limits = "min_sizes= for a dimension's smallest size, loop_dims= for a fixed rank"
    if op.spec.contract.sig.elementwise:
        return (
            "declare its signature, the dimensions it works along (signature='(n)->(n)' with "
            f"min_sizes={{'n': 1}}, say; `opzoo scan` infers one), then its limits ({limits})"
        )
    return f"declare it ({limits})"


Way = tuple[str, str]

#: What each op's forward does with its fixed and edge inputs, found once per op (hypothesis calls
#: accepts again at every step of shrinking a rejected input).
_FOUND: dict[int, tuple[OpSpec, list[tuple[Way, str]]]] = {}


def _ways(spec: OpSpec, device: str | torch.device) -> list[tuple[Way, str]]:
    """Each distinct way the forward rejects the op's fixed and edge inputs (with its default
    params), and a line saying so for the first input that shows it."""
    found = _FOUND.get(id(spec))
    if found is not None and found[0] is spec:
        return found[1]
    ways: list[tuple[Way, str]] = []
    kinds = spec.arguments.constants if spec.arguments is not None else {}
    for inputs in (*fixed_inputs(spec, str(device)), *edge_inputs(spec, str(device))):
        constants = {i: inputs[i] for i in kinds if i < len(inputs)}
        other = bind(spec, spec.contract.defaults(), constants=constants, device=device)
        exc = rejects(other, tuple(x for i, x in enumerate(inputs) if i not in kinds))
        if exc is not None and _way(exc) not in [w for w, _ in ways]:
            line = f"  - {one_line(exc, with_type=True)} on input(s) of shape {_shapes(inputs)}"
            ways.append((_way(exc), line))
    if len(_FOUND) > 64:
        _FOUND.clear()
    _FOUND[id(spec)] = (spec, ways)
    return ways


def _way(exc: BaseException) -> Way:
    """A rejection's class: the exception's type and its text without the sizes."""
    return type(exc).__name__, _gist(exc)


def _shapes(inputs: tuple[torch.Tensor, ...]) -> str:
    return ", ".join("None" if t is None else str(tuple(t.shape)) for t in inputs)
