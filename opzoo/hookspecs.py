"""The plugin contract: pluggy hook specifications for opzoo plugins.

A plugin module declares itself under the ``opzoo`` entry-point group of its distribution and
implements any of these hooks, marked with :data:`opzoo.hookimpl`. Hooks return data; opzoo merges
and validates what they return. opzoo calls each plugin's implementation on its own
(:class:`opzoo.core._plugins.Plugins`), so a hook that raises, or returns something of the wrong
kind, is recorded as that plugin's failure and harms no other plugin: while the registry loads,
with the registry's failures (``opzoo list``, ``opzoo.failures()``); while checks run, with the
run's (``opzoo check``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Mapping, Union

import pluggy

if TYPE_CHECKING:
    from opzoo.core._spec import OpSpec

hookspec = pluggy.HookspecMarker("opzoo")
hookimpl = pluggy.HookimplMarker("opzoo")

#: What a hook may offer for one op: the class itself, or ``"module:Attribute"`` to import lazily.
OpRef = Union[type, str]


# -------------------------------------------------------------------------------------------------
# Ops
# -------------------------------------------------------------------------------------------------


@hookspec
def opzoo_ops() -> Mapping[str, OpRef] | None:
    """Return the ops this plugin contributes, as ``{name: Function class or "module:Attr"}``.

    Called once, when the registry is loaded. Results of all plugins are merged with the ops of the
    ``opzoo.ops`` entry-point group; a name offered twice is a duplicate that names both sources.
    Import paths are imported only when their op is first used, which keeps ``opzoo list`` cheap.
    """


# -------------------------------------------------------------------------------------------------
# Property tests
# -------------------------------------------------------------------------------------------------


@hookspec(firstresult=True)
def opzoo_input_strategy(spec: OpSpec, dtype: Any) -> Any | None:
    """Return a hypothesis strategy of input tensors for ``spec``, or None to use the default.

    Called by the property tests at most once per op and dtype (a ``torch.dtype``) in each process
    of a run that checks the op, and the answer kept for the run: ``opzoo check``'s worker processes
    each ask for the ops they check (a strategy cannot be sent from one process to another). Stops
    at the first non-None result that is a hypothesis strategy; a plugin whose implementation raises
    or returns anything else is skipped, and reported once per run (``opzoo check``: a ``BROKEN``
    line and exit 1; ``pytest --opzoo``: a warning).
    The strategy must draw tensors inside the op's declared domain; the default draws shapes from
    0-d to 4-d and keeps values a margin away from every declared kink.
    """
