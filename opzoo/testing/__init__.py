"""Property tests for registered ops: strategies, properties and a runner.

Used by ``opzoo check`` and by the pytest plugin (``pytest --opzoo``); public so that op authors
can reuse the strategies in their own tests. Attributes load on first use (they import torch and
hypothesis), so that the command line can read the profile names cheaply.
"""

from __future__ import annotations

import importlib
from typing import Any

from opzoo.testing.running._profiles import PROFILES as PROFILES

_WHERE = {
    "Result": "running._result",
    "check": "running._runner",
    "check_property": "running._runner",
    "replay": "running._runner",
    "assert_correct": "running._assert",
    "BUDGETS": "checks._budget",
    "error_samples": "running._errors",
    "in_eps": "checks._budget",
    "spec_of": "running._assert",
    "PROPERTIES": "properties",
    "Property": "properties",
    "Bound": "checks._bound",
    "PropertyFailed": "checks._bound",
    "bind": "checks._bound",
    "noncontiguous": "checks._bound",
    "cases": "strategies",
    "inputs": "strategies",
    "params": "strategies",
    "shapes": "strategies",
    "tensors": "strategies",
}

__all__ = sorted([*_WHERE, "PROFILES"])


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"opzoo.testing.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'opzoo.testing' has no attribute {name!r}")
