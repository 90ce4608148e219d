"""opzoo: a registry of custom PyTorch autograd operators, extensible by plugin packages.

Importing opzoo is cheap: torch is imported only when an op is first resolved or trained.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from opzoo._records import Failure, Source
from opzoo._version import __version__ as __version__
from opzoo.core._contract import Contract
from opzoo.core._default import registry
from opzoo.core._inputs import (
    SPD,
    Drawn,
    Floats,
    Invertible,
    Orthogonal,
    Permutation,
    Positive,
    Rotation,
    Symmetric,
    UnitNorm,
)
from opzoo.core._loading import load
from opzoo.core._params import Dim, Index, Mask, Param
from opzoo.core._registry import Declared, OpSpec, Registry, declare
from opzoo.exceptions import (
    CheckpointError,
    CompileError,
    ConfigError,
    ContractError,
    DivergedError,
    DuplicateOpError,
    LibraryError,
    OpNotFoundError,
    OpZooError,
    ParamError,
    PluginError,
)
from opzoo.hookspecs import hookimpl

if TYPE_CHECKING:
    from opzoo import library, nn, testing
    from opzoo.trainer._compare import Comparison, compare
    from opzoo.trainer._config import TrainConfig
    from opzoo.trainer._trainer import TrainResult, train


__all__ = [
    "CheckpointError",
    "Comparison",
    "CompileError",
    "ConfigError",
    "Contract",
    "ContractError",
    "Declared",
    "Dim",
    "DivergedError",
    "Drawn",
    "DuplicateOpError",
    "Failure",
    "Floats",
    "Index",
    "Invertible",
    "LibraryError",
    "Mask",
    "OpNotFoundError",
    "OpSpec",
    "OpZooError",
    "Orthogonal",
    "Param",
    "ParamError",
    "Permutation",
    "PluginError",
    "Positive",
    "Registry",
    "Rotation",
    "SPD",
    "Source",
    "Symmetric",
    "TrainConfig",
    "TrainResult",
    "UnitNorm",
    "compare",
    "declare",
    "failures",
    "get",
    "hookimpl",
    "info",
    "library",
    "load",
    "names",
    "nn",
    "register",
    "registry",
    "testing",
    "train",
]


def get(name: str) -> type:
    """Return the op class registered as ``name`` (case-insensitive; ``dist:name`` to qualify)."""
    return registry().get(name)


def info(name: str) -> OpSpec:
    """Return the spec of op ``name``: contract, source distribution and version, module."""
    return registry().info(name)


def names() -> list[str]:
    """Return the names of all registered ops, importing no plugin module."""
    return registry().names()


def failures() -> list[Failure]:
    """Return the plugin failures recorded so far."""
    return registry().failures()


def register(target: Any = None, *, name: str | None = None, contract: Contract | None = None) -> Any:
    """Register an op in-process (a function, or a decorator with or without ``name=``);
    ``contract`` declares one for a class from elsewhere, as :func:`declare` does."""
    return registry().register(target, name=name, contract=contract)


def __getattr__(attr: str) -> Any:
    # The trainer, nn, library and testing import torch; load them only when asked for.
    import importlib

    if attr == "TrainConfig":  # plain Python, no torch
        return importlib.import_module("opzoo.trainer._config").TrainConfig
    if attr in ("train", "TrainResult"):
        return getattr(importlib.import_module("opzoo.trainer._trainer"), attr)
    if attr in ("compare", "Comparison"):
        return getattr(importlib.import_module("opzoo.trainer._compare"), attr)
    if attr in ("scan", "ScanReport"):  # no torch here either: the packages are scanned in children
        return getattr(importlib.import_module("opzoo.testing.scan._scan"), attr)
    if attr in ("library", "nn", "testing"):
        return importlib.import_module(f"opzoo.{attr}")
    raise AttributeError(f"module 'opzoo' has no attribute {attr!r}")
