"""The properties every registered op must have: the table, one :class:`Property` record each.

A property's check takes a bound op and its float64 inputs, ``check(op, *inputs)`` (one tensor per
signature input), and raises :class:`~opzoo.testing.checks._bound.PropertyFailed` (or any error the op
itself raises) when the property does not hold. Each check lives in a sibling module and is imported
on first use, so that this table imports no torch: ``opzoo check --help`` lists the properties from
it in a fraction of a second.

To add a property, write its check and add one record to :data:`PROPERTIES`: ``opzoo check`` (its
help and its workers' scheduling), the pytest plugin and the docs read the record, and nothing keeps a
second list. Then add a deliberately wrong op that only it catches to ``tests/wrong_ops.py``.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Iterable

if TYPE_CHECKING:
    from opzoo.core._registry import OpSpec


def _always(spec: OpSpec) -> str | None:
    return None


@dataclass(frozen=True)
class Property:
    """One property: its check, when it applies to an op, which inputs it runs on, and what the
    scheduler of ``opzoo check --jobs`` should know of its cost.

    check:    the check, or where it lives: ``"module:function"`` in :mod:`opzoo.testing.checks`.
    summary:  what must hold, in a few words (``opzoo check --help`` lists it).
    applies:  why it does not apply to an op, or None.
    drawn:    run on hypothesis-drawn inputs (the profile sets how many).
    draws:    at most this many of them under a fast profile (ci, dev) where ``--examples`` does not
              say: a check whose verdict does not hang on the values drawn (opcheck's structure)
              sees no more in the fiftieth shape than in the tenth. The thorough profile runs all.
    fixed:    also run on this many small fixed inputs, with full Jacobians (``strategies``).
    edges:    also run on the edge inputs: 0-d, one element, empty and large
              (``strategies.edge_inputs``), in fast mode, so the cost stays linear in their size.
    slow:     its first check in a process is slow (it imports torch._dynamo: 1-2 s): workers start
              it early and the parent imports that once before forking. Speed only, not results.
    loads:    modules its first check in a process imports besides (torch's, never an op's): the
              pool imports them once, before it forks, rather than in each op's fresh worker.
              Speed only: a module missing from another torch release is skipped.
    screened: it runs only on inputs the forward accepts: one the forward rejects (raises on) is
              the ``accepts`` property's to report, once, not every property's.
    """

    name: str
    check: Callable[..., None] | str
    summary: str = ""
    applies: Callable[[OpSpec], str | None] = _always
    drawn: bool = True
    draws: int | None = None
    fixed: int = 0
    edges: bool = False
    slow: bool = False
    loads: tuple[str, ...] = ()
    screened: bool = True

    @property
    def run(self) -> Callable[..., None]:
        """The check itself (imported on first use)."""
        return _resolve(self.check) if isinstance(self.check, str) else self.check

    @property
    def doc(self) -> str:
        """The first line of the check's docstring."""
        return (self.run.__doc__ or "").strip().splitlines()[0]

    def __call__(self, op: Any, *xs: Any) -> None:
        self.run(op, *xs)


@functools.cache
def _resolve(where: str) -> Callable[..., None]:
    module, _, name = where.partition(":")
    return getattr(importlib.import_module(f"opzoo.testing.checks.{module}"), name)


# -- when a property does not apply --------------------------------------------------------------


def _needs_reference(spec: OpSpec) -> str | None:
    return None if spec.contract.reference is not None else "no reference declared"


def _needs_kinks(spec: OpSpec) -> str | None:
    return None if spec.contract.kinks_at() else "no kinks declared"


def _oracle_applies(spec: OpSpec) -> str | None:
    # Every Function's forward can be run outside apply: the classic form's with a recording context.
    if spec.kind != "function":
        return "a learnable op's backward is autograd's already"
    if spec.contract.surrogate is not None:
        return "the backward is the declared surrogate's, not the forward's derivative"
    if spec.contract.by_design is not None:
        return f"by design: {spec.contract.by_design}"
    return None


def _several_inputs(spec: OpSpec) -> str | None:
    return None if len(spec.contract.sig.inputs) > 1 else "one input: no subset to ask for"


def _bridged(spec: OpSpec) -> str | None:
    from opzoo.library import why_not

    return why_not(spec)


# -- the table ------------------------------------------------------------------------------------

#: Inductor's compiler, which a first compile loads even for aot_eager (0.9 s): every worker of a
#: compiling check needs it, so the pool loads it before forking even for one op.
COMPILER = "torch._inductor.compile_fx"

# What a first torch.compile (aot_eager) and a first opcheck import beside torch._dynamo (~0.5 s).
_COMPILE_LOADS = (
    COMPILER,
    "torch._dynamo.repro.after_dynamo",
    "torch.export._trace",
    "torch.fx.experimental.validator",
    "torch._subclasses.schema_check_mode",
    "torch.distributed.tensor.experimental",
    "torch._functorch._aot_autograd.subclass_codegen",
)

#: name -> property, in the order they are reported.
PROPERTIES: dict[str, Property] = {
    p.name: p
    for p in (
        # First: the quick probe of an op (opzoo check --jobs runs an op's first check alone).
        Property(
            "accepts",
            "_hygiene:accepts",
            "the forward takes every input the contract allows (those it rejects: left out elsewhere)",
            fixed=2,
            edges=True,
            screened=False,
        ),
        # Fast mode has missed wrong gradients: full Jacobians on a few small fixed inputs too.
        Property(
            "gradient",
            "_gradient:gradient",
            "the backward matches central differences (gradcheck), or the declared surrogate; by design: "
            "it is linear in grad_output",
            fixed=2,
            edges=True,
        ),
        Property(
            "double_backward",
            "_gradient:double_backward",
            "second derivatives that come back are right (gradgradcheck)",
            edges=True,
        ),
        Property(
            "reference",
            "_reference:reference",
            "forward and gradient match the declared reference, in every declared dtype",
            _needs_reference,
            edges=True,
        ),
        Property(
            "layout",
            "_hygiene:layout",
            "non-contiguous inputs and grad_outputs give the same values",
            edges=True,
        ),
        Property(
            "hygiene",
            "_hygiene:hygiene",
            "output shapes, dtype and device; nothing mutated; backward repeats",
            edges=True,
        ),
        Property(
            "kinks",
            "_declared_kinks:kinks",
            "the gradient at each declared kink is the declared one",
            _needs_kinks,
        ),
        Property(
            "autograd",
            "_oracles:autograd",
            "the backward equals autograd's derivative of the forward (1e-9; unreferenced: every dtype)",
            _oracle_applies,
            fixed=2,
            edges=True,
        ),
        Property(
            "extremes",
            "_extremes:extremes",
            "a finite gradient at inputs scaled to 1e4 wherever the forward is finite",
            fixed=2,
        ),
        Property(
            "subsets",
            "_subsets:subsets",
            "any subset of the inputs requiring grad gets the same gradients",
            _several_inputs,
            edges=True,
        ),
        # Compiling is slow: once, on one fixed input.
        Property(
            "compile",
            "_compile:compile",
            "torch.compile gives eager's values and gradients, in one graph",
            drawn=False,
            fixed=1,
            slow=True,
            loads=_COMPILE_LOADS,
        ),
        Property(
            "forward_mode",
            "_forward:forward_mode",
            "a declared jvp and vmap rule agree with the backward; undeclared ones refuse",
            fixed=1,
            slow=True,
            loads=("torch._decomp.decompositions_for_jvp",),
        ),
        # Drawn inputs: opcheck's quick tests, on ten (the records' verdicts, measured: the same as
        # on fifty); the fixed one: all of them.
        Property(
            "library",
            "_library:library",
            "bridged to torch.library, it passes opcheck and equals the Function",
            _bridged,
            draws=10,
            fixed=1,
            slow=True,
            loads=(*_COMPILE_LOADS, "torch.testing._internal.optests", "sympy.tensor.tensor"),
        ),
    )
}


def parse_properties(items: Iterable[str] | None) -> list[str]:
    """Property names from comma-separated items (all of them if None); ValueError on an unknown
    name, or on items that name none (`-p ""`)."""
    return choose(items, PROPERTIES, "property", list(PROPERTIES))


def choose(items: Iterable[str] | None, table: Iterable[str], what: str, default: list[str]) -> list[str]:
    """Names from comma-separated ``items``, each a key of ``table``, once each in the order given;
    ``default`` if ``items`` is None. ValueError on an unknown name, or on items that name none; the
    message calls a name a ``what`` and lists the table's."""
    known = list(table)
    names = [n.strip() for item in items or () for n in item.split(",") if n.strip()]
    if items is not None and not names:
        raise ValueError(f"no {what} named; choose from {', '.join(known)}")
    for name in names:
        if name not in known:
            raise ValueError(f"unknown {what} {name!r}; choose from {', '.join(known)}")
    return list(dict.fromkeys(names)) or default


def summaries() -> str:
    """The properties, one ``name: summary`` per line, for help texts."""
    return "\n".join(f"  {p.name}: {p.summary}" for p in PROPERTIES.values())


# Plugins' and opzoo's own tests import these from here; they live in _bound (and import torch).
_FROM_BOUND = ("Bound", "PropertyFailed", "PropertySkipped", "bind", "noncontiguous", "ramp")

__all__ = ["PROPERTIES", "Property", "choose", "parse_properties", "summaries", *_FROM_BOUND]


def __getattr__(name: str) -> Any:
    if name in _FROM_BOUND:
        return getattr(importlib.import_module("opzoo.testing.checks._bound"), name)
    raise AttributeError(f"module 'opzoo.testing.properties' has no attribute {name!r}")
