"""Hypothesis profiles for the property tests: one table, registered on first use.

Registered under opzoo's own names (``opzoo-ci``, ``opzoo-dev``, ``opzoo-thorough``) with an explicit
parent, and applied only to opzoo's checks, so that a user's own hypothesis settings stay untouched.
Gradient checks time out meaninglessly on a busy machine, hence ``deadline=None`` everywhere.

Importing this module is cheap (no hypothesis, no torch), so the command line can offer the names.
"""

from __future__ import annotations

import os
from typing import Any

#: name -> (what it is for, hypothesis settings).
PROFILES: dict[str, tuple[str, dict[str, Any]]] = {
    # Reproducible (derandomized, no example database) and a few seconds per op and property.
    "ci": (
        "reproducible: 50 derandomized examples, no example database",
        dict(max_examples=50, derandomize=True, database=None, print_blob=True),
    ),
    # Fast feedback while writing an op. Each check runs under a seed (drawn, or --seed) that its
    # failure report names, and a seeded hypothesis keeps no example database: stated here, so that
    # no profile promises remembered examples, and parallel workers (pytest -n) share no files.
    "dev": (
        "fast feedback: 15 examples; a failure names the seed that repeats it",
        dict(max_examples=15, database=None),
    ),
    # Many examples, and the full-Jacobian (slow-mode) gradcheck on every one.
    "thorough": ("300 examples, full Jacobians on every one", dict(max_examples=300, database=None)),
}
#: The seed of every derandomized (``ci``) search. Unpinned, hypothesis derives it from the text of
#: the test function it runs (``function_digest``), so any edit of opzoo's runner would draw other
#: ``ci`` examples and change the verdicts on record. This is that digest as it was when pinned: the
#: examples stay the ones every recorded ``ci`` verdict was reached on.
CI_SEED = int(
    "11099088985453292336312142998203128809851029023420321914377605631819664399087713558195205053823"
    "153026601793342095774"
)
#: The profiles in a few words, for help texts (each command adds its default: see ``_options``).
HELP = "hypothesis profile: " + "; ".join(f"{n}: {d}" for n, (d, _) in PROFILES.items())


def default_profile() -> str:
    """``ci`` when the CI variable is set (as hypothesis itself does), else ``dev``."""
    return "ci" if os.environ.get("CI") else "dev"


def get(name: str, examples: int | None = None) -> Any:
    """Return profile ``name``'s hypothesis settings, registering opzoo's profiles on first use; with
    ``examples`` (an --examples given), that many examples instead of the profile's."""
    from hypothesis import settings

    profile = _registered(name)
    return settings(profile, max_examples=examples) if examples else profile


def _registered(name: str) -> Any:
    """Profile ``name``'s settings as registered (every profile of opzoo's, at the first ask)."""
    from hypothesis import HealthCheck, settings

    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r}; choose from {', '.join(PROFILES)}")
    try:
        return settings.get_profile(f"opzoo-{name}")
    except Exception:  # hypothesis raises InvalidArgument for a name it does not know yet
        pass
    slow_ok = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much]
    for profile, (_, values) in PROFILES.items():
        settings.register_profile(
            f"opzoo-{profile}",
            parent=settings.get_profile("default"),
            deadline=None,
            suppress_health_check=slow_ok,
            # A red check reports one counterexample: the first failure met, shrunk. Looking on for
            # failures of other kinds (hypothesis's default) drew and shrank examples that the
            # report never showed: 7 of the 9.4 s of a red check of a relu sum wrong where flat.
            report_multiple_bugs=False,
            **values,
        )
    return settings.get_profile(f"opzoo-{name}")
