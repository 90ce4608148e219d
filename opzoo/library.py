"""The torch.library bridge: any registered Function op as ``torch.ops.opzoo.<name>``.

PyTorch's own form of a custom operator is a ``torch.library`` custom op: a schema, a kernel, a fake
(meta) kernel and an autograd formula. It is the form that ``torch.export`` keeps as one node and that
``torch.compile`` traces without a graph break. opzoo knows everything that form needs from an op's
contract, so it builds it for any registered Function, built-in or plugin, with no code from the author
(:mod:`opzoo._custom_op`): the schema from the signature and params, the Function's own ``forward``
as the kernel and its own ``setup_context`` and ``backward`` as the autograd formula (gradients
through the bridged op are the Function's, bit for bit), and a fake kernel from the gufunc signature.

Name mapping (``torch.ops.opzoo`` is one namespace per process): an op name made of ``[a-z0-9_]``
is its own torch name; any other (``.`` and ``-`` are valid in opzoo names, not in torch.library's)
has each of those characters replaced by ``_`` and the first 8 hex digits of the name's sha1
appended, so distinct opzoo names never share a torch name (``my-op`` -> ``my_op_<hash>``).
"""

from __future__ import annotations

import hashlib
import re
import threading
from dataclasses import dataclass
from typing import Any

import torch

from opzoo._custom_op import NAMESPACE, PLAIN, define, dirty, schema
from opzoo.core import _recording
from opzoo.core._registry import OpSpec, Registry
from opzoo.exceptions import LibraryError, one_line

__all__ = ["NAMESPACE", "load", "op", "schema", "taken", "torch_name", "why_not"]


@dataclass(frozen=True)
class _Bridged:
    target: type
    contract: Any  # what its fake kernel and schema were made from
    packet: Any  # torch._ops.OpOverloadPacket
    definition: Any  # torch._library.custom_ops.CustomOpDef: keeps the registrations alive


# torch name -> what was bridged under it; one torch.ops.opzoo namespace per process.
_BRIDGED: dict[str, _Bridged] = {}
_LOCK = threading.Lock()


def torch_name(name: str) -> str:
    """The name op ``name`` has under ``torch.ops.opzoo`` (see the module docstring)."""
    name = name.lower()
    if PLAIN.match(name):
        return name
    digest = hashlib.sha1(name.encode()).hexdigest()[:8]
    return re.sub(r"[^a-z0-9_]", "_", name) + "_" + digest


def op(name: str | OpSpec, *, registry: Registry | None = None) -> Any:
    """Register op ``name`` as a torch.library custom op and return ``torch.ops.opzoo.<name>``.

    Idempotent: asking again returns the same object. ``registry`` defaults to ``opzoo.registry()``.
    Raises :class:`~opzoo.LibraryError` for an op that cannot be bridged (a learnable Module, a
    forward that writes into its input), or for a name already bridged to another class.
    """
    spec = name if isinstance(name, OpSpec) else _registry(registry).info(name)
    tname = torch_name(spec.name)
    with _LOCK:
        done = _BRIDGED.get(tname)
        if done is not None and done.target is spec.target and done.contract == spec.contract:
            return done.packet
        # A class defined again under the same name (a re-run notebook cell), or declared again with
        # another contract (a test suite's second declare()), replaces its old self, as in
        # Registry.register; any other class may not take a bridged name.
        if (holder := taken(spec)) is not None:
            raise LibraryError(
                f"torch.ops.{NAMESPACE}.{tname} is already {holder}; cannot bridge "
                f"{_qualname(spec.target)} as op {spec.name!r} too (one namespace per process)"
            )
        _refuse_unbridgeable(spec)
        try:
            definition = define(spec, tname)
        except (RuntimeError, ValueError) as exc:  # torch.library refusing what opzoo let through
            raise LibraryError(f"op {spec.name!r} cannot be bridged: {one_line(exc)}") from exc
        packet = getattr(getattr(torch.ops, NAMESPACE), tname)
        _BRIDGED[tname] = _Bridged(spec.target, spec.contract, packet, definition)
        return packet


def load(registry: Registry | None = None) -> dict[str, Any]:
    """Bridge every registered op that can be (as :func:`op`); return ``{name: torch op}``.

    Call it before ``torch.export.load`` of a program that uses ``torch.ops.opzoo`` ops. Learnable
    Modules and forwards that write into their input are passed over, as are plugins that fail to
    load (see ``opzoo.failures()``).
    """
    out = {}
    for spec in _registry(registry).load_all():
        if why_not(spec) is None:
            out[spec.name] = op(spec)
    return out


# -- what cannot be bridged -----------------------------------------------------------------------


def why_not(spec: OpSpec) -> str | None:
    """Return why ``spec`` cannot be bridged (one line, with the fix), or None if it can."""
    if spec.kind == "module":
        return (
            f"op {spec.name!r} is a learnable nn.Module: its parameters are module state, which a "
            "torch.library op (a pure function of its arguments) cannot hold; it is not bridged — "
            "export the module that uses it instead"
        )
    if _recording.classic(spec.target) and _marks_dirty(spec.target.forward):
        return dirty(spec)
    if getattr(spec.target, "backward", None) is torch.autograd.Function.backward:
        return f"op {spec.name!r} defines vjp, not backward; name it backward to bridge it"
    try:
        schema(spec)
    except LibraryError as exc:  # a param no schema can hold (a callable), a default it cannot write
        return f"{exc}; it is not bridged"
    return None


def _marks_dirty(forward: Any) -> bool:
    """Whether a classic forward calls ``ctx.mark_dirty`` itself (read from its code, not run)."""
    code = getattr(getattr(forward, "__func__", forward), "__code__", None)
    return code is not None and "mark_dirty" in code.co_names


def _refuse_unbridgeable(spec: OpSpec) -> None:
    why = why_not(spec)
    if why is not None:
        raise LibraryError(why)


# -- helpers --------------------------------------------------------------------------------------


def taken(spec: OpSpec) -> str | None:
    """The class (``module.qualname``) that another class bridged in this process holds ``spec``'s
    torch name with, or None: :func:`op` refuses ``spec`` under that name then."""
    done = _BRIDGED.get(torch_name(spec.name))
    if done is None or _qualname(done.target) == _qualname(spec.target):
        return None
    return _qualname(done.target)


def _qualname(target: type) -> str:
    return f"{target.__module__}.{target.__qualname__}"


def _registry(registry: Registry | None) -> Registry:
    if registry is not None:
        return registry
    from opzoo.core._default import registry as default

    return default()
