"""The per-property half of benchmarks/check_speed.py: opzoo's ``gradient``, ``double_backward`` and
``library`` against the torch check each overlaps, on the very inputs the property runs on, timed
side by side in this process.

The inputs are caught by running the property through opzoo's own runner (ci profile) with its check
swapped for a recorder of the same flags (drawn, fixed, edges, screened): hypothesis draws what it
draws for the property, because the recorder never raises.
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from dataclasses import dataclass
from typing import Any, Callable

#: property -> the peer check that overlaps it
PEERS = {"gradient": "gradcheck", "double_backward": "gradgradcheck", "library": "opcheck"}


@dataclass
class Row:
    """One op and property: how many inputs, the medians (wall and CPU seconds) of opzoo's property
    and of its peer on them, and on how many inputs the peer failed (a failing peer may stop early)."""

    op: str
    prop: str
    inputs: int
    ours: float
    peer: float
    ours_cpu: float
    peer_cpu: float
    peer_fails: int

    @property
    def ratio(self) -> float:
        return self.ours / self.peer if self.peer else float("inf")

    @property
    def cpu_ratio(self) -> float:
        return self.ours_cpu / self.peer_cpu if self.peer_cpu else float("inf")


def inputs_of(spec: Any, prop: str) -> list[tuple[Any, tuple[Any, ...]]]:
    """The (bound op, inputs) ``prop`` runs on for ``spec`` under the ci profile, in order."""
    from opzoo.testing.properties import PROPERTIES
    from opzoo.testing.running._runner import check_property

    seen: list[tuple[Any, tuple[Any, ...]]] = []
    real = PROPERTIES[prop]

    def record(op: Any, *xs: Any) -> None:
        seen.append((op, tuple(x.detach().clone() for x in xs)))

    PROPERTIES[prop] = dataclasses.replace(real, check=record)
    try:
        result = check_property(spec, prop, profile="ci", timeout=None)
    finally:
        PROPERTIES[prop] = real
    if result.status == "fail":
        raise RuntimeError(f"catching the inputs of {spec.name} {prop} failed: {result.reason}")
    return seen


def _torch_check(prop: str, op: Any, xs: tuple[Any, ...]) -> bool:
    """The peer of ``prop`` on one input, as opzoo's property would run it there (fast mode where
    the property is, opcheck's AOT-dispatch test where the property runs it): whether it passed."""
    import torch
    from torch.autograd import gradcheck, gradgradcheck

    from opzoo.testing.checks._bound import differentiable

    if prop == "library":
        return _opcheck(op, xs)
    if all(x.numel() == 0 for x in xs):
        return True
    live = differentiable(op, xs)

    def fn(*ts: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(o for o, d in zip(op.outputs(*ts), live) if d)

    check = gradcheck if prop == "gradient" else gradgradcheck
    return bool(check(fn, op.inputs(*xs), fast_mode=op.fast, raise_exception=False))


def _opcheck(op: Any, xs: tuple[Any, ...]) -> bool:
    """``torch.library.opcheck`` with the tests the ``library`` property runs on this input: the
    quick ones in the first declared dtype (a drawn input), or in every dtype and the AOT-dispatch
    test in the first (a fixed one)."""
    import torch

    from opzoo import library
    from opzoo.testing.checks._library import CHEAP, FULL, _breaks_opcheck

    spec = op.spec
    lop = library.op(spec).default
    args = tuple(op.params[k] for k in spec.contract.params)
    dtypes = spec.contract.dtypes
    first = "float64" if "float64" in dtypes else dtypes[0]
    passed = True
    for name in dtypes if not op.fast else (first,):
        dtype = getattr(torch, name)
        tensors = tuple(
            t.detach().to(dtype).requires_grad_() if t.is_floating_point() else t for t in op.arranged(*xs)
        )
        if any(_breaks_opcheck(t) for t in tensors):  # the property leaves these out too
            continue
        tests = FULL if name == first and not op.fast else CHEAP
        results = torch.library.opcheck(lop, (*tensors, *args), test_utils=tests, raise_exception=False)
        passed &= all(r == "SUCCESS" for r in results.values())
    return passed


def peer(prop: str, cases: list[tuple[Any, tuple[Any, ...]]]) -> int:
    """The peer of ``prop`` on every input of ``cases``: on how many it failed (or raised)."""
    fails = 0
    for op, xs in cases:
        try:
            fails += not _torch_check(prop, op, xs)
        except Exception:  # the op's own code, or the peer refusing it
            fails += 1
    return fails


def _timed(f: Callable[[], Any]) -> tuple[float, float, Any]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = f()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def measure(spec: Any, prop: str, rounds: int) -> Row:
    """opzoo's ``prop`` (A) and its peer (B) on ``spec``, after one warm-up of each, in ``rounds``
    rounds of A B, B A, ...: the medians."""
    from opzoo.testing.running._runner import check_property

    cases = inputs_of(spec, prop)

    def ours() -> None:
        check_property(spec, prop, profile="ci", timeout=None)

    def theirs() -> int:
        return peer(prop, cases)

    ours(), theirs()  # warm-up: first-use imports and caches, for both
    times: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
    fails = 0
    for r in range(rounds):
        for which in "AB" if r % 2 == 0 else "BA":
            wall, cpu, out = _timed(ours if which == "A" else theirs)
            times[which].append((wall, cpu))
            fails = out if which == "B" else fails

    def med(which: str, k: int) -> float:
        return statistics.median(t[k] for t in times[which])

    return Row(spec.name, prop, len(cases), med("A", 0), med("B", 0), med("A", 1), med("B", 1), fails)


def quick_failures() -> None:
    """gradcheck's fast mode, failing, recomputes the whole Jacobian to word its message: hours on
    the large edge input. benchmarks/_peer.py's guard, which leaves the words out above 4,096
    elements."""
    from _peer import _quick_failures

    _quick_failures()
