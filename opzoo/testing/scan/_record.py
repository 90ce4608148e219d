"""What ``opzoo scan`` inferred of one Function, as a plain record, and the declaration it makes.

:class:`Inferred` holds what the probes found, whether or not a declaration can say it today;
:func:`declaration` turns it into ``declare()``'s keyword arguments, or says which field it would
need. :data:`NOT_YET` is the one place that knows which fields the Contract lacks. No torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from opzoo.core._contract import DEFAULT_DTYPES
from opzoo.core._params import Dim, Param
from opzoo.core._signature import ELEMENTWISE

__all__ = ["NOT_YET", "Inferred", "declaration", "declaration_text", "status_of"]

INFERRED, NOT_CHECKED, CANNOT = "inferred", "inferred, gradient not checked", "cannot infer"

#: What the probes may find that a declaration cannot say yet, each with the field and the point of
#: issue 29 that adds it. Once a field lands, its entry goes and :func:`declaration` emits it.
NOT_YET: dict[str, str] = {
    "domain": "a domain per input (inputs={name: opzoo.Floats(lo, hi)}, issue 29 point 1)",
    "no_grad": "a float input that is not differentiated (opzoo.Floats(grad=False), issue 29 point 2)",
    "broadcast": "broadcast=False (issue 29 point 2)",
    "min_rank": "min_rank=1 (issue 29 point 2)",
    "by_design": 'gradient="by design: ..." (issue 29 point 3)',
    "linear_in_grad": "linear_in_grad=False (issue 29 point 3)",
    "random": "random=True (issue 29 point 3)",
}


@dataclass
class Inferred:
    """What the probes found of one Function (``why`` set: they could not infer it, because...).

    ``params``: name -> (kind, default), kind ``dim``, ``number`` or ``flag``, each pinned at
    upstream's default. ``domain``: by input name, the open interval it was probed in, where the
    forward refused or was not finite on any float. ``no_grad``: inputs the backward gives no
    gradient though the forward depends on them. ``by_design``: why the backward is not checked as
    the forward's derivative."""

    path: str
    form: str = ""
    why: str = ""
    signature: str = ""
    tensors: tuple[str, ...] = ()
    params: dict[str, tuple[str, Any]] = field(default_factory=dict)
    domain: dict[str, tuple[float, float]] = field(default_factory=dict)
    no_grad: tuple[str, ...] = ()
    by_design: str = ""
    linear_in_grad: bool = True
    random: bool = False
    broadcast: bool = True
    min_rank: int = 0
    min_sizes: dict[str, int] = field(default_factory=dict)
    dtypes: tuple[str, ...] = DEFAULT_DTYPES
    notes: list[str] = field(default_factory=list)
    timed_out: bool = False  # the probes ran past the time limit (run_pool's record)


def _wanted(rec: Inferred) -> dict[str, Any]:
    """Every field the record asks a declaration for, by its key in :data:`NOT_YET` or the Contract."""
    unary = rec.signature == ELEMENTWISE
    out: dict[str, Any] = {}
    if rec.signature != ELEMENTWISE:
        out["signature"] = rec.signature
    if rec.domain and unary:
        out["domain_unary"] = next(iter(rec.domain.values()))
    elif rec.domain:
        out["domain"] = dict(rec.domain)
    if rec.params:
        out["params"] = dict(rec.params)
    if rec.min_sizes:
        out["min_sizes"] = dict(rec.min_sizes)
    if tuple(rec.dtypes) != DEFAULT_DTYPES:
        out["dtypes"] = tuple(rec.dtypes)
    for key, unset in (("no_grad", ()), ("broadcast", True), ("min_rank", 0), ("by_design", "")):
        if getattr(rec, key) != unset:
            out[key] = getattr(rec, key)
    if not rec.linear_in_grad:
        out["linear_in_grad"] = False
    if rec.random:
        out["random"] = True
    return out


def declaration(rec: Inferred) -> tuple[dict[str, Any] | None, str]:
    """``declare()``'s keyword arguments for ``rec`` (Params made), or None and why not."""
    if rec.why:
        return None, rec.why
    wanted = _wanted(rec)
    missing = [NOT_YET[key] for key in wanted if key in NOT_YET]
    if missing:
        return None, "needs " + "; ".join(missing)
    kwargs: dict[str, Any] = {}
    for key, value in wanted.items():
        if key == "params":
            kwargs["params"] = {name: _param(kind, d) for name, (kind, d) in value.items()}
        elif key == "domain_unary":
            kwargs["domain"] = tuple(value)
        else:  # a field of NOT_YET, once it lands, is spelled here (by_design: gradient=...)
            kwargs[key] = value
    return kwargs, ""


def _param(kind: str, default: Any) -> Param:
    if kind == "dim":
        return Dim(default)
    if kind == "flag":
        return Param(default, choices=(default,))
    return Param(default, default, default)


def status_of(rec: Inferred) -> str:
    """``inferred``, ``inferred, gradient not checked`` or ``cannot infer``."""
    if declaration(rec)[0] is None:
        return CANNOT
    return NOT_CHECKED if rec.by_design else INFERRED


def _number(x: float) -> str:
    return ("-" if x < 0 else "") + "math.inf" if math.isinf(x) else repr(x)


def _param_text(kind: str, d: Any) -> str:
    if kind == "dim":
        return "opzoo.Dim()" if d == -1 else f"opzoo.Dim({d!r})"
    if kind == "flag":
        return f"opzoo.Param({d!r}, choices=({d!r},))"
    return f"opzoo.Param({d!r}, {d!r}, {d!r})"


def declaration_text(rec: Inferred) -> str:
    """The declaration as Python to paste (with the fields that need issue 29's later points, as they
    will be spelled); empty where nothing was inferred."""
    if rec.why:
        return ""
    parts = []
    for key, value in _wanted(rec).items():
        if key == "params":
            shown = ", ".join(f"{n!r}: {_param_text(k, d)}" for n, (k, d) in value.items())
            pinned = any(kind != "dim" for kind, _ in value.values())
            parts.append(f"params={{{shown}}}," + ("  # pinned at upstream's defaults: widen" * pinned))
        elif key == "domain_unary":
            parts.append(f"domain=({_number(value[0])}, {_number(value[1])})")
        elif key == "domain":
            sets = [f"{n!r}: opzoo.Floats({_number(a)}, {_number(b)})" for n, (a, b) in value.items()]
            parts.append("inputs={" + ", ".join(sets) + "}")
        elif key == "no_grad":
            parts.append("inputs={" + ", ".join(f"{n!r}: opzoo.Floats(grad=False)" for n in value) + "}")
        elif key == "by_design":
            parts.append(f'gradient="by design: {value}"')
        else:
            parts.append(f"{key}={value!r}")
    module, _, qualname = rec.path.partition(":")
    lines = [p if p.startswith("params=") else p + "," for p in parts]
    return f"opzoo.declare(\n    {module}.{qualname},\n" + "".join(f"    {line}\n" for line in lines) + ")"
