"""One registered Function as a ``torch.library`` custom op (:mod:`opzoo.library` names and keeps
them): everything that form needs, read from the op's contract, with no code from its author:

- the schema from the signature and params: one ``Tensor`` per input, then each param with its
  declared default (``float``, or ``int`` for an integer param), returning one ``Tensor`` per output;
- the kernel is the Function's own ``forward``, each output apart from the inputs and from the
  other outputs and laid out as the fake kernel says (a copy where not);
- the fake kernel from the gufunc signature: broadcast loop dims plus core dims (``empty_like`` for
  an elementwise op);
- the autograd formula is the Function's own ``setup_context`` and ``backward``, so gradients through
  the bridged op are the Function's, bit for bit. A classic ``forward(ctx, ...)`` has no
  ``setup_context``: forward runs again there with a recording context (:mod:`opzoo.core._recording`),
  and what it saved goes into the real one.
"""

from __future__ import annotations

import math
import re
from typing import Any, Callable, Sequence

import torch

from opzoo import _rerun
from opzoo.core import _recording
from opzoo.core._arguments import TENSOR
from opzoo.core._contract import _call_with
from opzoo.core._registry import OpSpec
from opzoo.exceptions import LibraryError

__all__ = ["NAMESPACE", "PLAIN", "define", "dirty", "schema"]

NAMESPACE = "opzoo"
#: An op name that is its own torch name (and a forward's argument name a schema can use).
PLAIN = re.compile(r"^[a-z_][a-z0-9_]*$")


# -- the schema ------------------------------------------------------------------------------------


def schema(spec: OpSpec) -> str:
    """The torch.library schema of ``spec``: ``(Tensor x, float alpha=1.0) -> Tensor``. Every tensor
    input first (targets and masks too; ``Tensor?`` for an optional one), then each param with its
    declared default: ``float``, ``int``, ``bool``, ``str``, ``int[]``/``float[]`` for a tuple,
    ``float?``/``int?`` for an optional one."""
    names = _tensor_names(spec)
    kinds = spec.arguments.constants if spec.arguments is not None else {}
    args = [
        f"Tensor{'?' if getattr(kinds.get(i), 'optional', False) else ''} {n}" for i, n in enumerate(names)
    ]
    for pname, p in spec.contract.params.items():
        args.append(f"{_schema_type(spec, pname, p)} {pname}={_schema_default(spec, pname, p.default)}")
    outs = len(spec.contract.sig.outputs)
    returns = "Tensor" if outs == 1 else "(" + ", ".join(["Tensor"] * outs) + ")"
    return f"({', '.join(args)}) -> {returns}"


def _schema_type(spec: OpSpec, name: str, p: Any) -> str:
    if p.kind == "number":
        return "int" if p.integer else "float"
    if p.kind == "optional":
        return "int?" if p.integer else "float?"
    values = p.values()
    for kind, type_ in ((bool, "bool"), (str, "str"), (int, "int"), (float, "float")):
        if all(isinstance(v, kind) and (kind is bool or not isinstance(v, bool)) for v in values):
            return type_
    for kind, type_ in ((int, "int[]"), (float, "float[]")):
        if all(isinstance(v, tuple) and all(type(e) is kind for e in v) for v in values):
            return type_
    shown = ", ".join(getattr(v, "__name__", None) or repr(v) if callable(v) else repr(v) for v in values)
    raise LibraryError(
        f"op {spec.name!r}: parameter {name!r} takes ({shown}), which a torch.library schema cannot hold"
    )


def _schema_default(spec: OpSpec, name: str, value: Any) -> str:
    if value is None or isinstance(value, bool):
        return repr(value)
    if isinstance(value, str):
        return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"
    if isinstance(value, tuple):
        return "[" + ", ".join(_schema_default(spec, name, v) for v in value) + "]"
    if isinstance(value, float) and not math.isfinite(value):
        raise LibraryError(
            f"op {spec.name!r}: parameter {name!r} has the default {value!r}, which a "
            "torch.library schema cannot hold"
        )
    return repr(value)


def _tensor_names(spec: OpSpec) -> list[str]:
    """The forward's own names for its tensor inputs where they read well, else x, or x0, x1, ..."""
    n = len(spec.contract.sig.inputs)
    fallback = ["x"] if n == 1 else [f"x{i}" for i in range(n)]
    names = list(spec.arguments.names) if spec.arguments is not None else fallback
    taken = set(spec.contract.params)
    if len(names) != n or len(set(names)) != n or any(not PLAIN.match(x) or x in taken for x in names):
        return fallback
    return names


# -- building one op ------------------------------------------------------------------------------


def define(spec: OpSpec, tname: str) -> Any:
    """``torch.ops.opzoo.<tname>``: the Function's own forward as the kernel, a fake kernel from the
    signature, and the Function's own setup_context and backward as the autograd formula."""
    plan = spec.arguments
    assert plan is not None
    tensors = len(spec.contract.sig.inputs)
    defaults = spec.contract.defaults()

    def params(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        # The dispatcher drops trailing args equal to their defaults (so that saved programs stay
        # loadable when a param is added): every param, given or default.
        given = dict(zip(defaults, args[tensors:])) | kwargs
        return {k: _plain(given.get(k, v)) for k, v in defaults.items()}

    def full(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        # forward takes them all, in its own order
        return plan(args[:tensors], params(args, kwargs))

    run = _forward_of(spec)

    classic = _recording.classic(spec.target)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if classic:  # for setup_context's rerun to draw what this run draws
            _rerun.remember(tname, args[:tensors])
        out = run(full(args, kwargs))
        like = args[0] if spec.contract.sig.elementwise else None
        if isinstance(out, tuple):
            return _as_promised(out, args[:tensors], like)
        return _as_promised((out,), args[:tensors], like)[0]

    definition = torch.library.custom_op(
        f"{NAMESPACE}::{tname}", kernel, mutates_args=(), schema=schema(spec)
    )

    def fake(*args: Any, **kwargs: Any) -> Any:
        return _fake_outputs(spec, args[:tensors], params(args, kwargs))

    definition.register_fake(fake)
    backward, setup_context = _autograd_of(spec, tname)
    definition.register_autograd(backward, setup_context=setup_context)
    _fuse_under_inductor(tname, lambda *args, **kwargs: run(full(args, kwargs)))
    return definition


def _forward_of(spec: OpSpec) -> Callable[[tuple[Any, ...]], Any]:
    """The Function's forward as a function of its arguments (a classic one's with a recording
    context, refused where it turns out to write into its input)."""
    forward = spec.target.forward
    if not _recording.classic(spec.target):
        return lambda args: forward(*args)

    def run(args: tuple[Any, ...]) -> Any:
        out, record = _recording.run(forward, args)
        if record.dirty:  # a forward that hides it from the check in why_not (a helper marks it)
            raise LibraryError(dirty(spec))
        return out

    return run


def _autograd_of(spec: OpSpec, tname: str) -> tuple[Callable[..., Any], Callable[..., None]]:
    """The Function's own backward and setup_context, as the bridged op's: the schema takes the
    tensors, then the params; forward (and so setup_context and backward) takes them in its own
    order: each side sees its own, needs_input_grad included."""
    target, plan = spec.target, spec.arguments
    assert plan is not None
    tensors = len(spec.contract.sig.inputs)
    defaults = spec.contract.defaults()
    classic = _recording.classic(target)
    slots = plan.slots
    where = [slots.index((TENSOR, i)) for i in range(tensors)]

    def needs(flags: Sequence[bool]) -> tuple[bool, ...]:
        return tuple(bool(flags[what]) if kind == TENSOR else False for kind, what in slots)

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        given = dict(zip(defaults, inputs[tensors:]))
        args = plan(inputs[:tensors], {k: _plain(v) for k, v in given.items()})
        if classic:
            # The context is filled inside a classic forward, and torch.library hands one only
            # here: run forward again with a recording context and put what it did into the real
            # one. The kernel's own run cannot hand its record over: under torch.compile and
            # torch.export this runs on fake tensors, the kernel never (its fake runs instead).
            # Traced, the rerun keeps only what backward saves; eager, forward runs twice.
            again, record = _rerun.again(tname, target.forward, args, needs(ctx.needs_input_grad))
            _recording.fill(ctx, record, _outputs(again), _outputs(output))
            return
        saved = ctx.needs_input_grad
        ctx.needs_input_grad = needs(saved)
        try:
            target.setup_context(ctx, args, output)
        finally:
            ctx.needs_input_grad = saved

    def backward(ctx: Any, *grads: Any) -> Any:
        saved = ctx.needs_input_grad
        ctx.needs_input_grad = needs(saved)
        try:
            out = target.backward(ctx, *grads)
        finally:
            ctx.needs_input_grad = saved
        out = out if isinstance(out, tuple) else (out,)
        return (*(out[k] if k < len(out) else None for k in where), *(None for _ in defaults))

    return backward, setup_context


def _outputs(out: Any) -> tuple[Any, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _fuse_under_inductor(tname: str, forward: Any) -> None:
    """Let inductor trace into the op's forward instead of calling it as an opaque kernel.

    To inductor a custom op is a black box: it calls the kernel, and cannot fuse it with the
    backward's (traced, since it is plain torch code) or with neighbouring ops; that costs a pass over
    memory and a dispatch per call. A decomposition in inductor's table (the Function's own forward,
    traced below autograd, so the registered backward still applies) lets it fuse. The table is
    private to torch; where it is missing, the op stays opaque: correct, slower. ``torch.export``
    never consults this table, so the exported node stays one ``torch.ops.opzoo`` call.
    """
    try:
        from torch._inductor import decomposition as inductor
    except ImportError:  # pragma: no cover - a torch without inductor
        return
    overload = getattr(getattr(torch.ops, NAMESPACE), tname).default
    # Inductor reads `decompositions`, or (by default) a copy of it made and cached at the first
    # compile in the process: an op bridged after that must be added to the copy too.
    tables = [inductor.decompositions, getattr(inductor, "fast_random_decomps", dict)()]
    for table in tables:
        table[overload] = forward


def _plain(value: Any) -> Any:
    """A param as forward takes it: a schema's ``int[]`` arrives as a list, declared as a tuple."""
    return tuple(value) if isinstance(value, list) else value


def _as_promised(outs: Sequence[Any], inputs: Sequence[Any], like: Any) -> tuple[Any, ...]:
    """``outs`` as the fake kernel promises them: apart from the inputs and from each other, and
    laid out as ``empty_like(like)`` (an elementwise op) or contiguous. Each other one is copied.

    torch.library forbids an output that aliases an input (a forward returning x itself, a view of
    it, or an input it clamped nothing of) or another output (``return y, y``), and compiled code
    asserts the strides the fake kernel gave; ``apply`` allows any of these (a column-major result
    of a transpose and a reshape is legal eager torch), and a copy has the same values."""
    done: list[Any] = []
    for out in outs:
        if isinstance(out, torch.Tensor):
            if _aliases(out, (*inputs, *done)) or not _laid_out(out, like):
                out = _copy(out, like)
        done.append(out)
    return tuple(done)


def _laid_out(out: torch.Tensor, like: Any) -> bool:
    """Whether ``out`` has the strides the fake kernel promises, where a size above 1 makes them
    matter (opcheck compares those): ``like``'s, as empty_like gives them, else contiguous."""
    if like is None or out.shape != like.shape or like.is_contiguous():
        # contiguous: new_empty's layout, and empty_like's of a contiguous input (an output of
        # another shape than the input's is the fake-tensor test's to report)
        return out.is_contiguous()
    want = torch.empty_like(like, device="meta").stride()  # a meta tensor: nothing allocated
    return all(a == b for a, b, n in zip(out.stride(), want, out.shape) if n > 1)


def _copy(out: torch.Tensor, like: Any) -> torch.Tensor:
    if like is None or out.shape != like.shape:
        return out.clone(memory_format=torch.contiguous_format)
    return torch.empty_like(like, dtype=out.dtype).copy_(out)


def _aliases(out: torch.Tensor, others: Sequence[Any]) -> bool:
    # An empty tensor has no storage to compare (an identity forward returns its empty input
    # itself, which torch.library refuses): copying one costs nothing.
    if not out.numel():
        return True
    ptr = out.untyped_storage().data_ptr()
    return any(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == ptr for t in others)


def _fake_outputs(spec: OpSpec, tensors: Sequence[torch.Tensor], params: dict[str, Any]) -> Any:
    """Empty outputs of the shapes the signature gives for ``tensors`` at ``params`` (symbolic
    sizes welcome): the declared output sizes computed, the core dimension where a Dim puts it."""
    sig = spec.contract.sig
    fixed = {j: getattr(torch, name) for j, name in spec.contract.output_dtypes.items()}
    if sig.elementwise:
        return torch.empty_like(tensors[0], dtype=fixed.get(0))
    axis = spec.contract.axis
    at = params[axis] if axis is not None else None
    if at is not None:  # the op's layout: its last core dimension at `at` (Bound does the same)
        tensors = [t.movedim(at, -1) if core and t is not None else t for t, core in zip(tensors, sig.inputs)]
    sizes: dict[str, Any] = {}
    loops = []
    for i, (t, core) in enumerate(zip(tensors, sig.inputs)):
        if t is None:  # an optional input not given: the others give the sizes
            continue
        torch._check(
            t.dim() >= len(core),
            lambda i=i, t=t, core=core: (
                f"opzoo.{spec.name}: input {i} has {t.dim()} dims, its core "
                f"({','.join(core)}) needs {len(core)}"
            ),
        )
        split = t.dim() - len(core)
        loops.append(tuple(t.shape[:split]))
        for dim, size in zip(core, t.shape[split:]):
            want = int(dim) if dim.isdigit() else sizes.setdefault(dim, size)
            torch._check(
                size == want,
                lambda i=i, dim=dim: f"opzoo.{spec.name}: input {i}'s dimension {dim!r} does not match",
            )
    for dim, fn in spec.contract.output_sizes.items():  # SymInt arithmetic, not int(): no guard
        sizes[dim] = _call_with(fn, sizes | params)
    loop = tuple(torch.broadcast_shapes(*loops)) if loops else ()
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = dtype if t is None else torch.promote_types(dtype, t.dtype)
    outs = []
    for j, core in enumerate(sig.outputs):
        shape = list(loop + tuple(int(d) if d.isdigit() else sizes[d] for d in core))
        if at is not None and core:
            last = shape.pop()
            shape.insert(at if at >= 0 else len(shape) + 1 + at, last)
        outs.append(tensors[0].new_empty(shape, dtype=fixed.get(j, dtype)))
    return outs[0] if len(outs) == 1 else tuple(outs)


def dirty(spec: OpSpec) -> str:
    """Why an op whose forward writes into its input is not bridged."""
    return (
        f"op {spec.name!r} writes into its input (its forward calls ctx.mark_dirty): a torch.library "
        "op that mutates an argument must declare it (mutates_args), and the bridge makes pure "
        "functions; it is not bridged"
    )
