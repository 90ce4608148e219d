"""Property tests for registered ops: strategies, properties and a runner.

Used by ``opzoo check`` and by the pytest plugin (``pytest --opzoo``); public so that op authors
can reuse the strategies in their own tests. Attributes load on first use (they import torch and
hypothesis), so that the command line can read the profile names cheaply.
"""

from __future__ import annotations

import importlib
from typing import Any

from opzoo.testing._profiles import PROFILES as PROFILES

_WHERE = {
    "Result": "_runner",
    "check": "_runner",
    "check_property": "_runner",
    "replay": "_runner",
    "assert_correct": "_assert",
    "BUDGETS": "_budget",
    "error_samples": "_errors",
    "in_eps": "_budget",
    "spec_of": "_assert",
    "PROPERTIES": "properties",
    "Property": "properties",
    "Bound": "_bound",
    "PropertyFailed": "_bound",
    "bind": "_bound",
    "noncontiguous": "_bound",
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
