"""``OpSpec``, a resolved op: its class, kind, validated contract and source; ``make_spec``, which
validates a class into one (the one place, with ``OpSpec.bound``, that tells a Function from a
learnable Module); ``spec_of``, a spec made directly and registered nowhere."""

from __future__ import annotations

import importlib
import inspect
import sys
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from opzoo._records import Source
from opzoo.core._arguments import PARAM, TENSOR, Arguments, arguments
from opzoo.core._contract import Contract, contract_of, summary_of, validate
from opzoo.core._declare import Declared, declare
from opzoo.exceptions import ContractError

__all__ = ["OpSpec", "import_path", "make_spec", "spec_of"]


@dataclass(frozen=True)
class OpSpec:
    """A resolved op: the class, its kind, its validated contract and its source."""

    name: str
    target: type
    kind: str  # "function" (an autograd.Function) or "module" (an nn.Module, maybe learnable)
    contract: Contract
    source: Source
    summary: str = ""
    #: How the forward takes its tensors and params (None for a learnable Module: its params go to
    #: its constructor).
    arguments: Arguments | None = None

    @property
    def module(self) -> str:
        return f"{self.target.__module__}:{self.target.__qualname__}"

    @property
    def params(self) -> Mapping[str, Any]:
        return self.contract.params

    def bound(self, **params: Any) -> Callable[..., Any]:
        """Return the op with validated parameters fixed (defaults for those not given).

        Call the result on the op's tensor inputs. A Function gives a plain callable; a learnable
        Module gives a fresh instance of itself, an ``nn.Module`` holding its parameters. This is
        the one place that tells the two kinds apart.
        """
        values = self.contract.bind(params)
        if self.kind == "module":
            return self.target(**values)
        apply, plan = self.target.apply, self.arguments
        assert plan is not None
        if (
            plan.slots
            == tuple((TENSOR, i) for i in range(len(plan.names))) + tuple((PARAM, k) for k in values)
            and not plan.tensor_params
        ):
            args = tuple(values.values())  # the usual order: the call costs nothing more

            def op(*tensors: Any) -> Any:
                return apply(*tensors, *args)

        else:

            def op(*tensors: Any) -> Any:
                return apply(*plan(tensors, values))

        op.__name__ = op.__qualname__ = self.name
        return op

    def apply(self, *tensors: Any, **params: Any) -> Any:
        """Apply the op to its tensor inputs, with validated parameters."""
        return self.bound(**params)(*tensors)

    def to_dict(self) -> dict[str, Any]:
        """Return a JSON-ready description (used by ``opzoo info --json``)."""
        c = self.contract
        return {
            "name": self.name,
            "kind": self.kind,
            "signature": c.signature,
            "summary": self.summary,
            "dist": self.source.dist,
            "version": self.source.version,
            "module": self.module,
            "entry_point": self.source.entry_point,
            "via": self.source.via,
            "domain": [c.domain[0], c.domain[1]],
            "kinks": {str(k): v for k, v in c.kinks_at().items()},
            "params": {
                n: {"default": p.default, "low": p.low, "high": p.high, "doc": p.doc}
                for n, p in c.params.items()
            },
            "reference": _describe(c.reference),
            "surrogate": _describe(c.surrogate),
            "double_backward": c.double_backward,
            "dtypes": list(c.dtypes),
            "loop_dims": c.loop_dims,
            "min_sizes": dict(c.min_sizes),
            "output_dtypes": {str(j): name for j, name in c.output_dtypes.items()},
            "formula": c.formula,
            "derivative": c.derivative,
        }


def _describe(obj: Any) -> str | None:
    if obj is None:
        return None
    name = getattr(obj, "__name__", None) or repr(obj)
    for public in ("torch", "torch.nn.functional", "torch.special"):
        module = sys.modules.get(public)
        if module is not None and getattr(module, name, None) is obj:
            return f"{public}.{name}"
    mod = getattr(obj, "__module__", None) or ""
    qual = getattr(obj, "__qualname__", name)
    return f"{mod}.{qual}" if mod else qual


def make_spec(name: str, target: Any, source: Source) -> OpSpec:
    """Validate ``target`` as an op and return its spec; raise ContractError on what is wrong."""
    import torch

    declared = None
    if isinstance(target, Declared):
        target, declared = target.target, target.contract
    if not inspect.isclass(target):
        raise ContractError(f"{target!r} is not a class (expected a torch.autograd.Function subclass)")
    if issubclass(target, torch.autograd.Function):
        kind = "function"
        if target.forward is torch.autograd.Function.forward:
            raise ContractError(f"{target.__qualname__} does not define forward")
        if target.backward is torch.autograd.Function.backward and getattr(target, "vjp", None) is getattr(
            torch.autograd.Function, "vjp", None
        ):
            raise ContractError(f"{target.__qualname__} does not define backward")
        forward = target.forward
    elif issubclass(target, torch.nn.Module):
        kind = "module"
        forward = None
    else:
        raise ContractError(
            f"{target.__module__}.{target.__qualname__} is not a torch.autograd.Function "
            "or torch.nn.Module subclass"
        )
    contract = declared if declared is not None else contract_of(target)
    validate(contract)
    plan = None
    if forward is not None:
        # The classic form, forward(ctx, ...), is the one that does not define setup_context.
        ctx = target.setup_context is torch.autograd.Function.setup_context
        plan = arguments(contract, forward, ctx=ctx)
    if kind == "module" and contract.surrogate is not None:
        raise ContractError(
            "a surrogate applies to Functions only: a learnable Module's backward is autograd's, the "
            "derivative of its forward"
        )
    if kind == "module" and (contract.inputs or contract.axis):
        raise ContractError("a learnable Module takes float tensors only, along their last dimensions")
    return OpSpec(name, target, kind, contract, source, summary_of(target, contract), plan)


def spec_of(target: Any, contract: Contract | None = None, *, name: str | None = None) -> OpSpec:
    """An op's spec made directly, registered nowhere: ``target`` a Function or learnable Module
    class, what :func:`declare` returned, or its import path ``"package.module:Class"`` (which
    ``opzoo check`` and ``pytest --opzoo`` accept in place of a name). ``contract`` declares one
    as :func:`declare` does; ``name`` defaults to the path, or the class's name. A spec already
    made (``opzoo.info(name)``'s) is returned as it is, unless a contract or name is given."""
    if isinstance(target, OpSpec):
        if contract is not None or name is not None:
            raise ContractError(f"op {target.name!r} is a spec already: declare its class instead")
        return target
    via, path = "register", None
    if isinstance(target, str):
        path = target.strip()
        if ":" not in path:
            raise ContractError(f"an import path is 'package.module:Class', got {target!r}")
        target, via = import_path(path), "path"
    offered = declare(target, contract) if contract is not None else target
    inner = offered.target if isinstance(offered, Declared) else offered
    if path is None:
        path = f"{getattr(inner, '__module__', '?')}:{getattr(inner, '__qualname__', repr(inner))}"
    shown = name or (path if via == "path" else getattr(inner, "__name__", path).lower())
    return make_spec(shown, offered, Source(entry_point=path, via=via))


def import_path(path: str) -> Any:
    """Import ``"module:attr.path"`` and return the attribute."""
    module_name, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module_name.strip())
    for part in filter(None, attr.strip().split(".")):
        obj = getattr(obj, part)
    return obj
