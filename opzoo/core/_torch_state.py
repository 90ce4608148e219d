"""torch's global state, as a plugin's import may change it: modes, defaults, attributes.

:class:`TorchState` takes a snapshot (tens of microseconds), names what differs from it now, and puts
it back. opzoo.core._guard uses it around every plugin import; a check's runner could use it around each
check, to keep an op that changes torch while it runs from changing the next op's verdicts.

Imports no torch until a snapshot is taken.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any

#: The namespaces whose attributes a plugin may not replace at import.
WATCHED = (
    "torch",
    "torch.Tensor",
    "torch.nn.functional",
    "torch.nn.Module",
    "torch.autograd",
    "torch.autograd.Function",
    "torch.linalg",
    "torch.special",
)


def _objects() -> dict[str, Any]:
    """Each of WATCHED: a module (imported, torch's own) or a class in one."""
    import importlib

    found = {}
    for name in WATCHED:
        try:
            found[name] = importlib.import_module(name)
        except ImportError:
            parent, _, attr = name.rpartition(".")
            found[name] = getattr(importlib.import_module(parent), attr)
    return found


@dataclass
class TorchState:
    """What of torch's global state a plugin's import may change: modes, defaults, attributes."""

    flags: dict[str, Any]
    attributes: dict[str, dict[str, Any]] = field(repr=False)

    @classmethod
    def now(cls) -> TorchState:
        """Take a snapshot (a few dict copies: tens of microseconds)."""
        return cls(_flags(), {name: dict(vars(obj)) for name, obj in _objects().items()})

    def changes(self) -> list[str]:
        """What differs now from this snapshot, in words (empty: nothing)."""
        now = _flags()
        found = [_flag_change(k, now[k]) for k, v in self.flags.items() if now[k] != v]
        for name, obj in _objects().items():
            before, after = self.attributes[name], vars(obj)
            for attr, old in before.items():
                if (name, attr) in _DERIVED:
                    continue
                if attr not in after:
                    found.append(f"{name}.{attr} deleted")
                elif after[attr] is not old and not _torch_own(after[attr], old):
                    found.append(f"{name}.{attr} replaced")
            if isinstance(obj, type):  # a class attribute added over a base class's shadows it
                for attr in after.keys() - before.keys():
                    if any(attr in vars(base) for base in obj.__mro__[1:]):
                        found.append(f"{name}.{attr} replaced")
        return found

    def restore(self) -> None:
        """Put back what :meth:`changes` finds."""
        _set_flags(self.flags)
        for name, obj in _objects().items():
            before, after = self.attributes[name], dict(vars(obj))
            for attr, old in before.items():
                if after.get(attr, _MISSING) is not old:
                    with contextlib.suppress(AttributeError, TypeError):
                        setattr(obj, attr, old)
            if isinstance(obj, type):
                for attr in after.keys() - before.keys():
                    with contextlib.suppress(AttributeError, TypeError):
                        delattr(obj, attr)


_MISSING = object()
_FLAG_WORDS = {
    "grad": "grad mode",
    "dtype": "default dtype",
    "device": "default device",
    "deterministic": "deterministic algorithms",
    "anomaly": "anomaly detection",
    "matmul": "float32 matmul precision",
}


#: Attributes torch itself sets from a flag above (set_default_dtype sets torch.Storage): the flag
#: is the change, and restoring it restores them.
_DERIVED = {("torch", "Storage")}


def _flag_change(key: str, now: Any) -> str:
    if isinstance(now, bool):
        return f"{_FLAG_WORDS[key]} turned {'on' if now else 'off'}"
    return f"{_FLAG_WORDS[key]} set to {now}"


def _flags() -> dict[str, Any]:
    import torch

    return {
        "grad": torch.is_grad_enabled(),
        "dtype": torch.get_default_dtype(),
        "device": str(torch.get_default_device()) if hasattr(torch, "get_default_device") else None,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "anomaly": torch.is_anomaly_enabled(),
        "matmul": torch.get_float32_matmul_precision(),
    }


def _set_flags(flags: dict[str, Any]) -> None:
    import torch

    torch.set_grad_enabled(flags["grad"])
    torch.set_default_dtype(flags["dtype"])
    if flags["device"] is not None and hasattr(torch, "set_default_device"):
        torch.set_default_device(None if flags["device"] == "cpu" else flags["device"])
    torch.use_deterministic_algorithms(flags["deterministic"])
    torch.set_anomaly_enabled(flags["anomaly"])
    torch.set_float32_matmul_precision(flags["matmul"])


def _torch_own(new: Any, old: Any) -> bool:
    # torch wraps some of its own functions when a submodule loads (importing torch._dynamo
    # replaces torch.manual_seed by a wrapper of it): a plugin that imports it changed nothing.
    module = getattr(new, "__module__", None) or ""
    return getattr(new, "__wrapped__", None) is old and module.split(".")[0] == "torch"


def changed_reason(changes: list[str], *, undone: bool = False) -> str:
    """Why a plugin whose import made ``changes`` is not loaded, in one line."""
    shown = ", ".join(changes[:3]) + (f" and {len(changes) - 3} more" if len(changes) > 3 else "")
    then = "undone, and not loaded" if undone else "not loaded"
    return f"importing it changes torch's global state ({shown}), which other ops' results depend on: {then}"
