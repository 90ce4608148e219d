"""Plain records at the bottom of the package: where an op came from, and what failed to load.

Everything else may import this module; it imports nothing of opzoo's, so no import circle can
pass through it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

LOCAL = "local"  # the qualifier of ops registered in-process

#: What plugin code may raise and is contained as that plugin's failure: any Exception, and
#: SystemExit (a plugin calling sys.exit at import must not end opzoo). KeyboardInterrupt still stops.
PLUGIN_ERRORS = (Exception, SystemExit)
#: A plugin whose import takes longer than this many seconds gets a note naming it.
SLOW_IMPORT = 1.0


def canonical_dist(name: str) -> str:
    """Return a distribution name normalised as packaging does (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True)
class Source:
    """Where an op offer came from."""

    dist: str | None = None  # distribution name; None for in-process registration
    version: str | None = None
    entry_point: str | None = None  # e.g. "opzoo.ops: myrelu = opzoo.ops.relu:MyReLU"
    via: str = "register"  # "entry point", "hook", "register" or "path" (an import path, checked as is)

    @property
    def qualifier(self) -> str:
        """The prefix that reaches this source's ops in a qualified lookup (``dist:name``)."""
        return canonical_dist(self.dist) if self.dist else LOCAL

    def __str__(self) -> str:
        if not self.dist:
            return "in-process"
        return f"{self.dist} {self.version}" if self.version else self.dist


@dataclass(frozen=True)
class Failure:
    """One plugin or op that failed to load; recorded, never fatal unless strict."""

    source: Source
    reason: str
    name: str | None = None  # the op's name, where one is known

    def __str__(self) -> str:
        where = f" ({self.source.entry_point})" if self.source.entry_point else ""
        what = f"op {self.name!r} from " if self.name else ""
        return f"{what}{self.source}{where}: {self.reason}"


def json_safe(value: Any) -> Any:
    """``value`` with every non-finite float written as a string (``"inf"``, ``"-inf"``, ``"nan"``):
    JSON has no infinity, and ``json.dumps`` would write ``Infinity``, which strict parsers refuse.
    A domain's unbounded side is the common case."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    return value
