"""What the mutants need to know of each op before they are applied, found on the workers: which
of them apply, and the kinks of an elementwise op that declares none (``_mutant_facts``). Finding
them runs the op (a learnable Module built, its backward on a grid of 2,001 points), so each op's
is a task of the pool under the time limit, as its checks are: an op that exits, hangs or raises
anything there has its mutants unjudged, and the caller goes on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from opzoo.core._path_op import PathSpec
from opzoo.core._registry import OpSpec
from opzoo.exceptions import one_line
from opzoo.testing.mutation import _mutant_facts
from opzoo.testing.mutation._mutants import MUTANTS
from opzoo.testing.running._parallel import run_pool
from opzoo.testing.running._signals import PropertyTimeout, signals_handled, time_limit

__all__ = ["Facts", "facts", "gather"]


@dataclass
class Facts:
    """What the mutants need to know of one op, found in a worker: why each does not apply (None:
    it does), and the kinks found numerically (``_mutant_facts.found_kinks``), which the mutants'
    workers inherit. ``reason``: the op failed while they were found; ``timed_out``: it hung."""

    applies: dict[str, str | None]
    kinks: dict[float, float]
    reason: str = ""
    timed_out: bool = False


def facts(
    spec: OpSpec,
    what: str,
    *,
    device: str = "cpu",
    names: Sequence[str] = (),
    timeout: float | None,
    **_: Any,
) -> Facts:
    """Which of the mutants ``names`` apply to ``spec``, within ``timeout`` seconds; a task of the
    pool (``what`` is "facts"): finding them runs the op (a Module built, its kinks looked for), and
    whatever it raises is its failure, never the caller's."""
    signalled = signals_handled()
    try:
        with time_limit(timeout):
            kinks = _mutant_facts.found_kinks(spec)
            return Facts({n: MUTANTS[n].applies(spec) for n in names}, kinks)
    except PropertyTimeout:
        return Facts({}, {}, f"timed out after {timeout:g} s: the op hung?", True)
    except BaseException as exc:  # the op's own SystemExit, KeyboardInterrupt...
        if isinstance(exc, KeyboardInterrupt) and signals_handled() > signalled:
            raise  # Ctrl-C, where this runs in the caller's process
        return Facts({}, {}, one_line(exc, with_type=True))


def gather(
    specs: Sequence[OpSpec],
    names: list[str],
    hung: set[int],
    jobs: int,
    timeout: float | None,
) -> dict[int, Any]:
    """Each op's :class:`Facts` (or the pool's failing Result: the worker ended or was killed), by
    its index, found on the workers; none for an op that hung (``hung``: their indices). The kinks
    found are kept here, so that the workers of step 2, forked after, inherit them (not those of an
    import path's op, whose class is never here: each of its workers finds them again)."""
    if not names:
        return {}
    asked = [(i, "facts", "cpu") for i in range(len(specs)) if i not in hung]
    got = run_pool(specs, asked, facts, jobs=jobs, limit=timeout, names=names, timeout=timeout)
    for (i, _, _), found in got.items():
        if isinstance(found, Facts) and not found.reason and not isinstance(specs[i], PathSpec):
            _mutant_facts._FOUND[specs[i].name, id(specs[i].target)] = found.kinks
    return {i: found for (i, _, _), found in got.items()}
