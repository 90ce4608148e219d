"""``RunHooks``: what one run of the checks asks of the plugins' hooks, and which of them failed.

A registry is only read once it is loaded: the answers and failures of the hooks the checks call
(``opzoo_input_strategy``) belong to the run, here. A run asks each process's plugins at most once
per op and dtype. Its worker processes each hold a copy (forked), so a worker sends the failures it
met back with each result (``_parallel``), and the run reports each failure once, whichever process
met it. A strategy is not sent back (hypothesis strategies cannot be pickled): a worker that checks
an op asks for it itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Union

from opzoo._records import Failure

if TYPE_CHECKING:
    from opzoo.core._registry import Registry
    from opzoo.core._spec import OpSpec

__all__ = ["RunHooks", "hooks_of"]


@dataclass
class RunHooks:
    """The hooks of ``registry``'s plugins as one run of the checks calls them: each answer kept
    (by op and dtype), each failure recorded once."""

    registry: Registry | None = None
    failures: list[Failure] = field(default_factory=list)
    _answers: dict[tuple[str, str], Any] = field(default_factory=dict)
    _sent: int = 0  # failures already handed on by news()

    def input_strategy(self, spec: OpSpec, dtype: Any, accept: Callable[[Any], bool] | None = None) -> Any:
        """A plugin's input strategy for ``spec`` in ``dtype``, or None for the default: asked once
        per op and dtype. A plugin whose hook raises, or returns something ``accept`` refuses, is
        recorded as failed and passed over, so it cannot fail the checks of another plugin's op."""
        key = (spec.name, str(dtype))
        if key not in self._answers:
            plugins = self.registry.plugins if self.registry is not None else None
            self._answers[key] = (
                None
                if plugins is None
                else plugins.first("opzoo_input_strategy", self.record, accept, spec=spec, dtype=dtype)
            )
        return self._answers[key]

    def record(self, failure: Failure) -> None:
        """Record a hook's failure, once however often it is met."""
        if failure not in self.failures:
            self.failures.append(failure)

    def news(self) -> list[Failure]:
        """The failures recorded since the last call: what a worker sends back with a result."""
        new = self.failures[self._sent :]
        self._sent = len(self.failures)
        return new


#: Where the checks ask plugins: a registry (asked afresh for each check) or a run's hooks.
Asked = Union["Registry", RunHooks, None]


def hooks_of(registry: Asked) -> RunHooks:
    """The run's hooks: ``registry`` itself if it is one, else a new run over that registry."""
    return registry if isinstance(registry, RunHooks) else RunHooks(registry)
