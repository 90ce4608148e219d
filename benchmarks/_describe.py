"""How an op was declared, in one line for the records' tables (benchmarks/real_world.py,
benchmarks/native_ops.py): the contract's fields that differ from the defaults."""

from __future__ import annotations

import math
from typing import Any

from opzoo import Contract, Param


def param_text(p: Param) -> str:
    """``Dim()``, a flag, choices, an optional number or a range, as declared."""
    if p.axis:
        return f"Dim({p.default})" if p.default != -1 else "Dim()"
    if isinstance(p.default, bool) and not p.choices:
        return "flag"
    if p.kind == "choice":
        return "one of " + ", ".join(_name(v) if callable(v) else _num(v) for v in p.values())
    span = f"[{_num(p.low)}, {_num(p.high)}]" if p.low != p.high else _num(p.low)
    kind = "int " if p.integer else ""
    text = f"None or {kind}{span}" if p.kind == "optional" else f"{kind}{span}"
    return text + (" as a 0-d tensor" if p.tensor else "")


def declared(contract: Contract) -> str:
    """The contract's fields that say something, joined by ``; ``."""
    c = contract
    parts = []
    if c.signature != "()->()":
        parts.append(f"`{c.signature}`")
    parts += [f"{name}: {param_text(p)}" for name, p in c.params.items()]
    for key, kind in c.inputs.items():
        parts.append(f"{key if isinstance(key, str) else f'input {key}'}: {input_text(kind)}")
    if not c.broadcast:
        parts.append("broadcast=False")
    if c.min_rank:
        parts.append(f"min_rank={c.min_rank}")
    if c.loop_dims is not None:
        parts.append(f"loop_dims={c.loop_dims}")
    if c.min_sizes:
        parts.append("min_sizes " + ", ".join(f"{d} ≥ {n}" for d, n in c.min_sizes.items()))
    if c.output_sizes:
        parts.append("output_sizes " + ", ".join(c.output_sizes))
    if tuple(c.domain) != (-math.inf, math.inf):
        parts.append(f"domain ({_num(c.domain[0])}, {_num(c.domain[1])})")
    if callable(c.kinks) or c.kinks:
        parts.append("kinks" + ("(params)" if callable(c.kinks) else " " + ", ".join(map(_num, c.kinks))))
    if c.surrogate is not None:
        parts.append(f"surrogate `{_name(c.surrogate)}`")
    if c.reference is not None:
        parts.append(f"reference `{_name(c.reference)}`")
    if c.double_backward:
        parts.append("double_backward=True")
    if c.gradient != "derivative":
        parts.append(f'gradient "{c.gradient}"' + ("" if c.linear_in_grad else ", linear_in_grad=False"))
    if c.random:
        parts.append("random=True")
    return "; ".join(parts) or "nothing (an elementwise op)"


def input_text(kind: Any) -> str:
    """An input's declaration as written, its defaults left out: ``Index(high='c')``, ``Symmetric()``,
    ``Floats(1.2, 2.5)``, ``Positive(grad=False)``, ``Mask(optional=True)``."""
    name = type(kind).__name__
    if name == "Index":
        return f"Index(high={kind.high!r})" + (", optional" if kind.optional else "")
    if name == "Mask":
        return "Mask(optional=True)" if kind.optional else "Mask()"
    args = []
    if name == "Floats" and (kind.low, kind.high) != (-math.inf, math.inf):
        args.append(f"{_num(kind.low)}, {_num(kind.high)}")
    if name == "Permutation":
        args.append(repr(kind.along))
        if kind.inverse_of is not None:
            args.append(f"inverse_of={kind.inverse_of!r}")
    if name == "Drawn":
        args.append(f"{_name(kind.map or kind.strategy)}" + (", project=..." if kind.projects else ""))
    if not kind.grad and name != "Permutation":
        args.append("grad=False")
    return f"{name}({', '.join(args)})"


def _num(v: Any) -> str:
    if isinstance(v, float):
        return "inf" if v == math.inf else "-inf" if v == -math.inf else f"{v:g}"
    return repr(v)


def _name(fn: Any) -> str:
    qual = getattr(fn, "__qualname__", None) or repr(fn)
    if qual.startswith("_VariableFunctionsClass."):  # torch.log and the like
        return f"torch.{fn.__name__}"
    return "lambda" if "<lambda>" in qual else qual
