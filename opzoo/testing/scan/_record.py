"""What ``opzoo scan`` inferred of one Function, as a plain record, and the declaration it makes.

:class:`Inferred` holds what the probes found; :func:`declaration` turns it into ``declare()``'s
keyword arguments (per-input domains and undifferentiated inputs as :class:`opzoo.Floats`, a backward
that is no derivative as ``gradient="by design: ..."``), :func:`declaration_text` into Python to paste.
No torch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from opzoo.core._contract import BY_DESIGN, DEFAULT_DTYPES
from opzoo.core._inputs import Floats
from opzoo.core._params import Dim, Param
from opzoo.core._signature import ELEMENTWISE

__all__ = ["Inferred", "declaration", "declaration_text", "signature_hint", "status_of"]

INFERRED, NOT_CHECKED, CANNOT = "inferred", "inferred, gradient not checked", "cannot infer"
#: A Function whose class carries its own ``opzoo_contract``: checked under it, nothing inferred.
OWN = "declared by its class"


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
    own: bool = False  # the class declares its own opzoo_contract: nothing inferred


def _wanted(rec: Inferred) -> dict[str, Any]:
    """Every field the record asks a declaration for, by its name in ``declare()``; ``inputs`` as
    name -> (low, high, grad), what :class:`opzoo.Floats` takes."""
    unary = rec.signature == ELEMENTWISE
    out: dict[str, Any] = {}
    if rec.signature != ELEMENTWISE:
        out["signature"] = rec.signature
    if rec.domain and unary and not rec.no_grad:
        out["domain"] = next(iter(rec.domain.values()))
    inputs = {} if "domain" in out else {n: (*rec.domain[n], True) for n in rec.domain}
    for name in rec.no_grad:
        low, high, _ = inputs.get(name, (-math.inf, math.inf, True))
        inputs[name] = (low, high, False)
    if inputs:
        out["inputs"] = {n: inputs[n] for n in rec.tensors if n in inputs}
    if rec.params:
        out["params"] = dict(rec.params)
    if rec.min_sizes:
        out["min_sizes"] = dict(rec.min_sizes)
    if tuple(rec.dtypes) != DEFAULT_DTYPES:
        out["dtypes"] = tuple(rec.dtypes)
    if not rec.broadcast:
        out["broadcast"] = False
    if rec.min_rank:
        out["min_rank"] = rec.min_rank
    if rec.by_design:
        out["gradient"] = f"{BY_DESIGN} {rec.by_design}"
    if not rec.linear_in_grad:
        out["linear_in_grad"] = False
    if rec.random:
        out["random"] = True
    return out


def declaration(rec: Inferred) -> tuple[dict[str, Any] | None, str]:
    """``declare()``'s keyword arguments for ``rec`` (Params and input sets made), or None and why not;
    none for a Function that declares its own contract (it is checked under that)."""
    if rec.why:
        return None, rec.why
    if rec.own:
        return {}, ""
    kwargs = _wanted(rec)
    if "params" in kwargs:
        kwargs["params"] = {name: _param(kind, d) for name, (kind, d) in kwargs["params"].items()}
    if "inputs" in kwargs:
        kwargs["inputs"] = {n: Floats(lo, hi, grad=grad) for n, (lo, hi, grad) in kwargs["inputs"].items()}
    return kwargs, ""


def _param(kind: str, default: Any) -> Param:
    if kind == "dim":
        return Dim(default)
    if kind == "flag":
        return Param(default, choices=(default,))
    return Param(default, default, default)


def status_of(rec: Inferred) -> str:
    """``inferred``, ``inferred, gradient not checked``, ``cannot infer`` or ``declared by its class``."""
    if rec.own and not rec.why:
        return OWN
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


def _floats_text(low: float, high: float, grad: bool) -> str:
    bounds = [] if (low, high) == (-math.inf, math.inf) else [_number(low), _number(high)]
    return f"opzoo.Floats({', '.join(bounds + ([] if grad else ['grad=False']))})"


def declaration_text(rec: Inferred) -> str:
    """The declaration as Python to paste; empty where nothing was inferred."""
    if rec.why or rec.own:
        return ""
    parts = []
    for key, value in _wanted(rec).items():
        if key == "params":
            shown = ", ".join(f"{n!r}: {_param_text(k, d)}" for n, (k, d) in value.items())
            pinned = any(kind != "dim" for kind, _ in value.values())
            parts.append(f"params={{{shown}}}," + ("  # pinned at upstream's defaults: widen" * pinned))
        elif key == "domain":
            parts.append(f"domain=({_number(value[0])}, {_number(value[1])})")
        elif key == "inputs":
            sets = [f"{n!r}: {_floats_text(*v)}" for n, v in value.items()]
            parts.append("inputs={" + ", ".join(sets) + "}")
        else:
            parts.append(f"{key}={value!r}")
    module, _, qualname = rec.path.partition(":")
    lines = [p if p.startswith("params=") else p + "," for p in parts]
    return f"opzoo.declare(\n    {module}.{qualname},\n" + "".join(f"    {line}\n" for line in lines) + ")"


def signature_hint(outs: Any, rec: Inferred, shape: tuple[int, int]) -> str:
    """Why scan stops at outputs of another shape than its 2-d inputs of ``shape``, and what to
    declare: the signature a reduction over the last dimension (``shape[:1]``), one that keeps it
    (``(shape[0], 1)``) or one of every element (``()``) would have, as a question (scan does not
    check a guess)."""
    shapes = sorted({tuple(o.shape) for o in outs})
    why = f"outputs of shape {shapes} from inputs of shape {shape}: declare its signature"
    cores = {shape[:1]: ("(n)", "()"), (shape[0], 1): ("(n)", "(1)"), (): ("(n,m)", "()")}
    found = {cores.get(shape) for shape in shapes}
    if len(found) != 1 or None in found:
        return why
    ((inputs, output),) = found
    guess = f"{','.join([inputs] * len(rec.tensors))}->{','.join([output] * len(outs))}"
    if inputs == "(n,m)":
        return f"{why} (a reduction of every element? signature={guess!r}, loop_dims=0)"
    dim = next(
        (f", params={{{n!r}: opzoo.Dim()}}" for n, (kind, _) in rec.params.items() if kind == "dim"), ""
    )
    return f"{why} (a reduction along the last dimension? signature={guess!r}{dim})"
