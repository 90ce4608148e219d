"""The one place that loads plugins: entry points and pluggy hooks -> a validated Registry.

Every failure of a plugin while it loads (an import that raises, a hook that raises, a name offered
twice, an invalid contract) is recorded on the registry with its distribution, entry point and
reason. Only strict mode turns a failure into an error. A plugin's import that would end or hang
the process, or change torch's global state, is kept out (opzoo/core/_guard.py) and recorded the
same way.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from importlib import metadata
from typing import Iterable, Mapping

import pluggy

from opzoo import hookspecs
from opzoo._records import PLUGIN_ERRORS, SLOW_IMPORT, Failure, Source, canonical_dist
from opzoo.core._guard import Guard, guarded_call
from opzoo.core._plugins import Plugins
from opzoo.core._registry import Registry
from opzoo.core._spec import import_path
from opzoo.exceptions import PluginError, one_line

OPS_GROUP = "opzoo.ops"
HOOKS_GROUP = "opzoo"
BUILTIN_DIST = "opzoo"

ENV_DISABLE_AUTOLOAD = "OPZOO_DISABLE_PLUGIN_AUTOLOAD"
ENV_BLOCK = "OPZOO_BLOCK"
ENV_STRICT = "OPZOO_STRICT"


@dataclass(frozen=True)
class EntryPoint:
    """One entry point as found in installed metadata (or made up by a test)."""

    group: str
    name: str
    value: str
    dist: str | None = None
    version: str | None = None

    def source(self, via: str) -> Source:
        return Source(self.dist, self.version, f"{self.group}: {self.name} = {self.value}", via)


def installed() -> list[EntryPoint]:
    """Return opzoo's entry points from installed distributions, without importing any of them."""
    found: dict[tuple[str, str, str | None], EntryPoint] = {}
    for group in (OPS_GROUP, HOOKS_GROUP):
        for ep in metadata.entry_points(group=group):
            dist = getattr(ep, "dist", None)
            d = EntryPoint(group, ep.name, ep.value, dist and dist.name, dist and dist.version)
            # A distribution visible twice on sys.path (e.g. editable and site) is one source.
            found.setdefault((group, ep.name, d.dist and canonical_dist(d.dist)), d)
    return list(found.values())


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


def _block_key(text: str) -> str:
    dist, sep, name = text.strip().rpartition(":")
    return f"{canonical_dist(dist)}:{name.lower()}" if sep else canonical_dist(name)


def _is_blocked(d: EntryPoint, blocked: set[str]) -> bool:
    dist = canonical_dist(d.dist or "")
    return bool(blocked & {canonical_dist(d.name), dist, f"{dist}:{d.name.lower()}"})


def load(
    declared: Iterable[EntryPoint] | None = None,
    *,
    autoload: bool | None = None,
    block: Iterable[str] = (),
    strict: bool | None = None,
) -> Registry:
    """Build a registry from entry points (installed ones unless ``declared`` is given).

    autoload: load third-party plugins; default: unless ``$OPZOO_DISABLE_PLUGIN_AUTOLOAD`` is set.
              opzoo's own ops always load: they are declared like a plugin's, but are the core.
    block:    distribution names, entry-point names or ``dist:entry`` to skip, added to the
              comma-separated ``$OPZOO_BLOCK``.
    strict:   raise :class:`PluginError` on the first failure (default: ``$OPZOO_STRICT``), after
              resolving every op, so that a broken import cannot hide.
    """
    if autoload is None:
        autoload = not _env_flag(ENV_DISABLE_AUTOLOAD)
    if strict is None:
        strict = _env_flag(ENV_STRICT)
    names = [*os.environ.get(ENV_BLOCK, "").split(","), *block]
    blocked = {_block_key(b) for b in names if b.strip()}

    pm = pluggy.PluginManager("opzoo")
    pm.add_hookspecs(hookspecs)
    plugins = Plugins(pm)
    # Installed plugins are tried in a child process first; made-up entry points (tests) are not.
    guard = Guard.from_env(probe=declared is None)
    registry = Registry(plugins=plugins, guard=guard)

    entries = installed() if declared is None else list(declared)
    for d in entries:
        is_builtin = d.dist is not None and canonical_dist(d.dist) == BUILTIN_DIST
        if (not autoload and not is_builtin) or _is_blocked(d, blocked):
            continue
        if d.group == OPS_GROUP:
            registry.offer(d.name, d.value, d.source("entry point"))
        elif d.group == HOOKS_GROUP:
            _register_hook_plugin(plugins, registry, guard, d)

    _collect_hook_ops(plugins, registry)
    if strict:
        registry.load_all()
        failures = registry.failures()
        if failures:
            raise PluginError(failures[0])
    return registry


def _register_hook_plugin(plugins: Plugins, registry: Registry, guard: Guard, d: EntryPoint) -> None:
    pm, source = plugins.pm, d.source("hook")
    name = f"{d.dist or 'local'}:{d.name}"
    refused = guard.refusal(d.value, source, call="opzoo_ops")
    if refused is not None:
        registry.record(Failure(source, refused))
        return
    try:
        with guard.watching(source):
            # the import alone is timed: the watch around it is opzoo's time, not the plugin's
            began = time.perf_counter()
            try:
                plugin = import_path(d.value)
            finally:
                if (took := time.perf_counter() - began) > SLOW_IMPORT:
                    plugins.slow.append(f"importing {source} ({source.entry_point}) took {took:.1f} s")
        pm.register(plugin, name=name)
    except PLUGIN_ERRORS as exc:  # a plugin's import may raise anything; isolate it
        registry.record(Failure(source, one_line(exc)))
        return
    # pluggy defers unknown hook names to check_pending(), which fails for all plugins at once.
    unknown = [
        impl.function.__name__
        for caller in pm.get_hookcallers(plugin) or []
        if caller.spec is None
        for impl in caller.get_hookimpls()
        if impl.plugin is plugin and not impl.optionalhook
    ]
    if unknown:
        pm.unregister(plugin)
        registry.record(Failure(source, f"implements unknown hook {unknown[0]!r}"))
        return
    plugins.sources[name] = source


def _collect_hook_ops(plugins: Plugins, registry: Registry) -> None:
    """Call each plugin's ``opzoo_ops`` on its own, so that one that raises harms no other."""
    for impl in plugins.pm.hook.opzoo_ops.get_hookimpls():
        source = plugins.source(impl.plugin_name)
        try:
            offered = guarded_call(registry.guard, source, impl.function)
            if offered is None:
                continue
            if not isinstance(offered, Mapping):
                raise TypeError(f"opzoo_ops must return a mapping, got {type(offered).__name__}")
        except PLUGIN_ERRORS as exc:
            registry.record(Failure(source, f"hook opzoo_ops raised {one_line(exc)}"))
            continue
        for name, ref in offered.items():
            registry.offer(str(name), ref, source)
