"""The process-wide default registry behind ``opzoo.registry()``, ``opzoo.get()`` and the bridges'
defaults, for library users and notebooks. The CLI and the pytest plugin load their own and pass
it along; nothing outside this module assigns it."""

from __future__ import annotations

from opzoo.core._loading import load
from opzoo.core._registry import Registry

_default: Registry | None = None


def registry(*, reload: bool = False) -> Registry:
    """Return the process-wide default registry, loading installed plugins on first use."""
    global _default
    if _default is None or reload:
        _default = load()
    return _default
