"""Hypothesis profiles for the property tests.

Registered under opzoo's own names (``opzoo-ci``, ``opzoo-dev``, ``opzoo-thorough``) with an explicit
parent, and applied only to opzoo's checks, so that a user's own hypothesis settings stay untouched.
Gradient checks time out meaninglessly on a busy machine, hence ``deadline=None`` everywhere.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_SLOW_OK = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]

# ci: reproducible (derandomized, no example database) and about 5 s per op and property.
settings.register_profile(
    "opzoo-ci",
    parent=settings.get_profile("default"),
    max_examples=50,
    derandomize=True,
    database=None,
    deadline=None,
    print_blob=True,
    suppress_health_check=_SLOW_OK,
)
# dev: fast feedback while writing an op; remembers failing examples between runs.
settings.register_profile(
    "opzoo-dev",
    parent=settings.get_profile("default"),
    max_examples=15,
    deadline=None,
    suppress_health_check=_SLOW_OK,
)
# thorough: many examples, and the full-Jacobian (slow-mode) gradcheck on every one.
settings.register_profile(
    "opzoo-thorough",
    parent=settings.get_profile("default"),
    max_examples=300,
    deadline=None,
    suppress_health_check=_SLOW_OK,
)

PROFILES = ("ci", "dev", "thorough")


def default_profile() -> str:
    """``ci`` when the CI variable is set (as hypothesis itself does), else ``dev``."""
    return "ci" if os.environ.get("CI") else "dev"


def get(name: str) -> settings:
    return settings.get_profile(f"opzoo-{name}")
