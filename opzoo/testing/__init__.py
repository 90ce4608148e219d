"""Property tests for registered ops: strategies, properties and a runner.

Used by ``opzoo check`` and by the pytest plugin (``pytest --opzoo``); public so that op authors
can reuse the strategies in their own tests.
"""

from __future__ import annotations

from opzoo.testing import _profiles
from opzoo.testing._runner import Result, check, check_property
from opzoo.testing.properties import PROPERTIES, Bound, PropertyFailed, bind, noncontiguous
from opzoo.testing.strategies import cases, inputs, params, shapes, tensors

__all__ = [
    "PROPERTIES",
    "Bound",
    "PropertyFailed",
    "Result",
    "bind",
    "cases",
    "check",
    "check_property",
    "inputs",
    "noncontiguous",
    "params",
    "shapes",
    "tensors",
]

PROFILES = _profiles.PROFILES
