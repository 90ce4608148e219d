"""The torch.library bridge: any registered Function op as ``torch.ops.opzoo.<name>``.

PyTorch's own form of a custom operator is a ``torch.library`` custom op: a schema, a kernel, a fake
(meta) kernel and an autograd formula. It is the form that ``torch.export`` keeps as one node and that
``torch.compile`` traces without a graph break. opzoo knows everything that form needs from an op's
contract, so it builds it for any registered Function, built-in or plugin, with no code from the author:

- the schema from the signature and params: one ``Tensor`` per input, then each param with its
  declared default (``float``, or ``int`` for an integer param), returning one ``Tensor`` per output;
- the kernel is the Function's own ``forward``;
- the fake kernel from the gufunc signature: broadcast loop dims plus core dims (``empty_like`` for
  an elementwise op);
- the autograd formula is the Function's own ``setup_context`` and ``backward``, so gradients through
  the bridged op are the Function's, bit for bit.

Name mapping (``torch.ops.opzoo`` is one namespace per process): an op name made of ``[a-z0-9_]``
is its own torch name; any other (``.`` and ``-`` are valid in opzoo names, not in torch.library's)
has each of those characters replaced by ``_`` and the first 8 hex digits of the name's sha1
appended, so distinct opzoo names never share a torch name (``my-op`` -> ``my_op_<hash>``).
"""

from __future__ import annotations

import hashlib
import inspect
import math
import re
import threading
from dataclasses import dataclass
from typing import Any, Sequence

import torch

from opzoo._registry import OpSpec, Registry
from opzoo.exceptions import LibraryError, one_line

__all__ = ["NAMESPACE", "load", "op", "schema", "torch_name", "why_not"]

NAMESPACE = "opzoo"
_PLAIN = re.compile(r"^[a-z_][a-z0-9_]*$")


@dataclass(frozen=True)
class _Bridged:
    target: type
    packet: Any  # torch._ops.OpOverloadPacket
    definition: Any  # torch._library.custom_ops.CustomOpDef: keeps the registrations alive


# torch name -> what was bridged under it; one torch.ops.opzoo namespace per process.
_BRIDGED: dict[str, _Bridged] = {}
_LOCK = threading.Lock()


def torch_name(name: str) -> str:
    """The name op ``name`` has under ``torch.ops.opzoo`` (see the module docstring)."""
    name = name.lower()
    if _PLAIN.match(name):
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    return re.sub(r"[^a-z0-9_]", "_", name) + "_" + digest


def op(name: str | OpSpec, *, registry: Registry | None = None) -> Any:
    """Register op ``name`` as a torch.library custom op and return ``torch.ops.opzoo.<name>``.

    Idempotent: asking again returns the same object. ``registry`` defaults to ``opzoo.registry()``.
    Raises :class:`~opzoo.LibraryError` for an op that cannot be bridged (a learnable Module, a
    classic ``forward(ctx, ...)`` Function), or for a name already bridged to another class.
    """
    spec = name if isinstance(name, OpSpec) else _registry(registry).info(name)
    tname = torch_name(spec.name)
    with _LOCK:
        done = _BRIDGED.get(tname)
        if done is not None and done.target is spec.target:
            return done.packet
        # A class defined again under the same name (a re-run notebook cell) replaces its old self,
        # as in Registry.register; any other class may not take a bridged name.
        if done is not None and _qualname(done.target) != _qualname(spec.target):
            raise LibraryError(
                f"torch.ops.{NAMESPACE}.{tname} is already {_qualname(done.target)}; cannot bridge "
                f"{_qualname(spec.target)} as op {spec.name!r} too (one namespace per process)"
            )
        _refuse_unbridgeable(spec)
        try:
            definition = _define(spec, tname)
        except (RuntimeError, ValueError) as exc:  # torch.library refusing what opzoo let through
            raise LibraryError(f"op {spec.name!r} cannot be bridged: {one_line(exc)}") from exc
        packet = getattr(getattr(torch.ops, NAMESPACE), tname)
        _BRIDGED[tname] = _Bridged(spec.target, packet, definition)
        return packet


def load(registry: Registry | None = None) -> dict[str, Any]:
    """Bridge every registered op that can be (as :func:`op`); return ``{name: torch op}``.

    Call it before ``torch.export.load`` of a program that uses ``torch.ops.opzoo`` ops. Learnable
    Modules and classic-form Functions are passed over, as are plugins that fail to load (see
    ``opzoo.failures()``).
    """
    out = {}
    for spec in _registry(registry).load_all():
        if why_not(spec) is None:
            out[spec.name] = op(spec)
    return out


def schema(spec: OpSpec) -> str:
    """The torch.library schema of ``spec``: ``(Tensor x, float alpha=1.0) -> Tensor``."""
    names = _tensor_names(spec)
    args = [f"Tensor {n}" for n in names]
    for pname, p in spec.contract.params.items():
        if p.integer:
            args.append(f"int {pname}={int(p.default)}")
        else:
            default = float(p.default)
            if not math.isfinite(default):
                raise LibraryError(
                    f"op {spec.name!r}: parameter {pname!r} has the default {default!r}, which a "
                    "torch.library schema cannot hold"
                )
            args.append(f"float {pname}={default!r}")
    outs = len(spec.contract.sig.outputs)
    returns = "Tensor" if outs == 1 else "(" + ", ".join(["Tensor"] * outs) + ")"
    return f"({', '.join(args)}) -> {returns}"


# -- building one op ------------------------------------------------------------------------------


def _define(spec: OpSpec, tname: str) -> Any:
    target, sig = spec.target, spec.contract.sig
    tensors = len(sig.inputs)
    forward = target.forward
    defaults = spec.contract.defaults()

    def full(args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, ...]:
        # The dispatcher drops trailing args equal to their defaults (so that saved programs stay
        # loadable when a param is added): forward takes them all, in order.
        given = dict(zip(defaults, args[tensors:])) | kwargs
        return (*args[:tensors], *(given.get(k, v) for k, v in defaults.items()))

    def kernel(*args: Any, **kwargs: Any) -> Any:
        out = forward(*full(args, kwargs))
        # torch.library forbids an output that aliases an input (an op returning x itself, or a
        # view of it): hand back a copy then, as the Function's apply would have kept it apart.
        if isinstance(out, tuple):
            return tuple(_unaliased(o, args[:tensors]) for o in out)
        return _unaliased(out, args[:tensors])

    definition = torch.library.custom_op(
        f"{NAMESPACE}::{tname}", kernel, mutates_args=(), schema=schema(spec)
    )

    def fake(*args: Any, **kwargs: Any) -> Any:
        return _fake_outputs(spec, args[:tensors])

    definition.register_fake(fake)
    definition.register_autograd(target.backward, setup_context=target.setup_context)
    _fuse_under_inductor(tname, lambda *args, **kwargs: forward(*full(args, kwargs)))
    return definition


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


def _unaliased(out: torch.Tensor, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
    if isinstance(out, torch.Tensor) and out.numel():
        ptr = out.untyped_storage().data_ptr()
        if any(isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() == ptr for t in inputs):
            return out.clone()
    return out


def _fake_outputs(spec: OpSpec, tensors: Sequence[torch.Tensor]) -> Any:
    """Empty outputs of the shapes the signature gives for ``tensors`` (symbolic sizes welcome)."""
    sig = spec.contract.sig
    if sig.elementwise:
        return torch.empty_like(tensors[0])
    sizes: dict[str, Any] = {}
    loops = []
    for i, (t, core) in enumerate(zip(tensors, sig.inputs)):
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
    loop = tuple(torch.broadcast_shapes(*loops)) if loops else ()
    dtype = tensors[0].dtype
    for t in tensors[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    outs = [
        tensors[0].new_empty(loop + tuple(int(d) if d.isdigit() else sizes[d] for d in core), dtype=dtype)
        for core in sig.outputs
    ]
    return outs[0] if len(outs) == 1 else tuple(outs)


# -- what cannot be bridged -----------------------------------------------------------------------


def why_not(spec: OpSpec) -> str | None:
    """Return why ``spec`` cannot be bridged (one line, with the fix), or None if it can."""
    if spec.kind == "module":
        return (
            f"op {spec.name!r} is a learnable nn.Module: its parameters are module state, which a "
            "torch.library op (a pure function of its arguments) cannot hold; it is not bridged — "
            "export the module that uses it instead"
        )
    if spec.target.setup_context is torch.autograd.Function.setup_context:
        return (
            f"op {spec.name!r} uses the classic forward(ctx, ...) form: its context is filled inside "
            "forward, where torch.library never hands one; move that into "
            "setup_context(ctx, inputs, output) and forward(...) without ctx to bridge it"
        )
    if getattr(spec.target, "backward", None) is torch.autograd.Function.backward:
        return f"op {spec.name!r} defines vjp, not backward; name it backward to bridge it"
    return None


def _refuse_unbridgeable(spec: OpSpec) -> None:
    why = why_not(spec)
    if why is not None:
        raise LibraryError(why)


# -- helpers --------------------------------------------------------------------------------------


def _tensor_names(spec: OpSpec) -> list[str]:
    """The forward's own names for its tensor inputs where they read well, else x, or x0, x1, ..."""
    n = len(spec.contract.sig.inputs)
    fallback = ["x"] if n == 1 else [f"x{i}" for i in range(n)]
    try:
        params = list(inspect.signature(spec.target.forward).parameters.values())
    except (TypeError, ValueError):
        return fallback
    names = [p.name for p in params[:n] if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    taken = set(spec.contract.params)
    if len(names) != n or len(set(names)) != n or any(not _PLAIN.match(x) or x in taken for x in names):
        return fallback
    return names


def _qualname(target: type) -> str:
    return f"{target.__module__}.{target.__qualname__}"


def _registry(registry: Registry | None) -> Registry:
    if registry is not None:
        return registry
    import opzoo

    return opzoo.registry()
