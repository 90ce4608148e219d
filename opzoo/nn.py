"""The nn.Module path (seed 002): any activation, by name, as a module usable in ``nn.Sequential``.

:func:`create` is the one factory from a name to a module, timm's ``create_act`` in spirit: a
registered op (a Function wrapped, or a learnable Module built), or a native ``torch:NAME`` baseline.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, Callable, Mapping

import torch

from opzoo.core._registry import OpSpec
from opzoo.exceptions import ParamError

if TYPE_CHECKING:
    from opzoo.core._registry import Registry

BASELINE_PREFIX = "torch:"

#: The native elementwise activations a ``torch:NAME`` baseline may name. Only these: an arbitrary
#: torch function (``torch:save``) is no activation.
BASELINES: dict[str, Callable[..., torch.Tensor]] = {
    name: getattr(torch.nn.functional, name, None) or getattr(torch, name)
    for name in (
        "celu",
        "elu",
        "gelu",
        "hardshrink",
        "hardsigmoid",
        "hardswish",
        "hardtanh",
        "leaky_relu",
        "logsigmoid",
        "mish",
        "relu",
        "relu6",
        "selu",
        "sigmoid",
        "silu",
        "softplus",
        "softshrink",
        "softsign",
        "tanh",
        "tanhshrink",
    )
}


class Activation(torch.nn.Module):
    """A registered op with its parameters fixed, as an ``nn.Module``.

    A Function op holds no parameters; a learnable op's parameters live in ``self.inner``.

    ``compile=True`` runs the op through ``torch.compile`` (inductor; a string names another
    backend): a Function op as its ``torch.library`` form (:mod:`opzoo.library`), which compiles
    forward and backward without a graph break; a learnable op as its compiled module. The first
    call per input shape pays the compile (seconds; see docs/library.md).
    """

    def __init__(
        self,
        op: str | OpSpec,
        *,
        registry: Registry | None = None,
        compile: bool | str = False,
        **params: Any,
    ) -> None:
        super().__init__()
        self.spec = op if isinstance(op, OpSpec) else _registry(registry).info(op)
        unknown = sorted(set(params) - set(self.spec.params))
        if unknown:
            takes = ", ".join(self.spec.params) or "none"
            raise ParamError(f"{self.spec.name!r} takes no parameter {unknown[0]!r}; its parameters: {takes}")
        self.params = self.spec.contract.bind(params)
        fn = self.spec.bound(**self.params)
        # A learnable op is a submodule, so that .to(), .parameters() and state_dict() reach it.
        self.inner: torch.nn.Module | None = fn if isinstance(fn, torch.nn.Module) else None
        self._fn: Callable[..., torch.Tensor] | None = None if self.inner is not None else fn
        self.compiled = compile if isinstance(compile, str) else ("inductor" if compile else None)
        if self.compiled is not None:
            self._fn = _compiled(self.spec, self.params, self.inner, self.compiled)

    def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
        if self._fn is None:
            return self.inner(*tensors)  # type: ignore[misc]
        return self._fn(*tensors)

    def extra_repr(self) -> str:
        args = ", ".join(f"{k}={v:g}" for k, v in self.params.items())
        backend = f", compile={self.compiled!r}" if self.compiled else ""
        return f"{self.spec.name!r}" + (f", {args}" if args else "") + backend


def _compiled(
    spec: OpSpec, params: Mapping[str, Any], inner: torch.nn.Module | None, backend: str
) -> Callable[..., torch.Tensor]:
    """The op through torch.compile: a Function as its torch.library op, a learnable op as its module."""
    if inner is not None:
        return torch.compile(inner, backend=backend, fullgraph=True)
    from opzoo import library

    op, args = library.op(spec), tuple(params.values())

    def apply(*tensors: torch.Tensor) -> torch.Tensor:
        return op(*tensors, *args)

    # Dynamo caches compiled graphs per code object, with guards on the closure (op, params): every
    # Activation sharing this one code object would recompile it, and past the recompile limit
    # (8) fullgraph=True fails. A copy of the code per instance keeps each one's cache its own.
    apply.__code__ = apply.__code__.replace()
    return torch.compile(apply, backend=backend, fullgraph=True)


class TorchActivation(torch.nn.Module):
    """A native torch activation, ``torch:NAME``, for baselines such as ``torch:relu``."""

    def __init__(self, name: str, **params: Any) -> None:
        super().__init__()
        fname = name.removeprefix(BASELINE_PREFIX).lower()
        if fname not in BASELINES:
            raise ParamError(
                f"{BASELINE_PREFIX}{fname} is not a native activation; baselines: "
                + ", ".join(BASELINE_PREFIX + n for n in BASELINES)
            )
        unknown = sorted(set(params) - baseline_params(fname))
        if unknown:
            takes = ", ".join(sorted(baseline_params(fname))) or "none"
            raise ParamError(f"'torch:{fname}' takes no parameter {unknown[0]!r}; its parameters: {takes}")
        self.name, self.fn, self.params = fname, BASELINES[fname], dict(params)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x, **self.params)

    def extra_repr(self) -> str:
        args = "".join(f", {k}={v:g}" for k, v in self.params.items())
        return f"{BASELINE_PREFIX}{self.name}{args}"


def baseline_params(fname: str) -> set[str]:
    """The keyword parameters of native activation ``fname`` (``inplace`` is not one)."""
    try:
        names = list(inspect.signature(BASELINES[fname]).parameters)[1:]
    except (TypeError, ValueError):  # a builtin without a signature takes only its input here
        return set()
    return set(names) - {"inplace"}


def is_baseline(name: str) -> bool:
    return isinstance(name, str) and name.lower().startswith(BASELINE_PREFIX)


def params_of(name: str, *, registry: Registry | None = None) -> Mapping[str, Any]:
    """The parameter names activation ``name`` takes (a registered op or a ``torch:`` baseline)."""
    if is_baseline(name):
        fname = name[len(BASELINE_PREFIX) :].lower()
        return dict.fromkeys(baseline_params(fname)) if fname in BASELINES else {}
    return _registry(registry).info(name).params


def create(
    name: str | OpSpec,
    *,
    registry: Registry | None = None,
    compile: bool | str = False,
    **params: Any,
) -> Activation | TorchActivation:
    """Return activation ``name`` as a module, with ``params`` validated.

    ``name`` is a registered op (looked up in ``registry``, the default one if None), its spec, or
    ``torch:NAME`` for a native baseline. ``compile``: see :class:`Activation` (a baseline is then
    compiled as it is).
    """
    if isinstance(name, str) and is_baseline(name):
        act = TorchActivation(name, **params)
        if compile:
            act.fn = torch.compile(act.fn, backend=compile if isinstance(compile, str) else "inductor")
        return act
    return Activation(name, registry=registry, compile=compile, **params)


def _registry(registry: Registry | None) -> Registry:
    if registry is not None:
        return registry
    from opzoo.core._default import registry as default

    return default()
