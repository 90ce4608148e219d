"""``Plugins``: the pluggy plugins of one registry, each hook called plugin by plugin."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pluggy

from opzoo._records import PLUGIN_ERRORS, Failure, Source
from opzoo.exceptions import one_line

__all__ = ["Plugins"]


@dataclass
class Plugins:
    """The pluggy plugins of one registry, filled while it loads. Each hook is called plugin by
    plugin, so that one that raises or returns junk is recorded as that plugin's failure and harms
    no other."""

    pm: pluggy.PluginManager
    sources: dict[str, Source] = field(default_factory=dict)  # pluggy name -> where it came from
    slow: list[str] = field(default_factory=list)  # a note for each plugin that was slow to import

    def source(self, plugin_name: str) -> Source:
        return self.sources.get(plugin_name, Source(entry_point=plugin_name, via="hook"))

    def each(self, hook: str) -> list[Any]:
        """The implementations of ``hook``, in the order pluggy would call them."""
        return list(reversed(getattr(self.pm.hook, hook).get_hookimpls()))

    def first(
        self,
        hook: str,
        record: Callable[[Failure], None],
        accept: Callable[[Any], bool] | None = None,
        **kwargs: Any,
    ) -> Any:
        """Call ``hook``'s implementations in turn; return the first non-None result, as pluggy's
        ``firstresult`` does, passing over (and recording) any that raise or return what
        ``accept`` refuses."""
        what = kwargs.get("spec")
        about = f" for op {what.name!r}" if getattr(what, "name", None) else ""
        for impl in self.each(hook):
            source = self.source(impl.plugin_name)
            try:
                result = impl.function(**{k: kwargs[k] for k in impl.argnames})
            except PLUGIN_ERRORS as exc:  # a plugin's hook may raise anything; isolate it
                record(Failure(source, f"hook {hook} raised{about}: {one_line(exc)}"))
                continue
            if result is None:
                continue
            if accept is not None and not accept(result):
                record(Failure(source, f"hook {hook} returned a {type(result).__name__}{about}"))
                continue
            return result
        return None
