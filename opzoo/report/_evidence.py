"""The report's evidence of one op, computed where its code may run: a task of the checks' pool
(:func:`evidence`), so that an op that exits, hangs or raises anything on the plot's grid or in the
error measurement is said on the page, and the command goes on; the page is drawn from what it
returns (arrays, never the op).

Each part (the plot's curves, the error samples) runs under the time limit of one property; one
that raises leaves a note, as an ``Exception`` did before, whatever it raised.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from opzoo.core._registry import OpSpec
from opzoo.exceptions import one_line
from opzoo.report._figures import Curves, curves
from opzoo.testing.running._errors import Errors, error_samples
from opzoo.testing.running._signals import PropertyTimeout, signals_handled, time_limit

__all__ = ["Evidence", "evidence", "plottable"]

_TENSORS = ("backward", "forward", "par_backward", "par_forward", "steps_backward")


@dataclass
class Evidence:
    """What the page shows of one op beyond its verdicts: its curves (an elementwise op's), its
    error samples (tensors as arrays while they travel), and notes on what could not be had."""

    curves: Curves | None = None
    errors: Errors | None = None
    notes: list[str] = field(default_factory=list)
    timed_out: bool = False  # the op hung: what was left was not run

    def loaded(self) -> Evidence:
        """This evidence with its error samples as tensors again (in the process that draws)."""
        if self.errors is None:
            return self
        back = {
            part: {k: torch.from_numpy(v) for k, v in getattr(self.errors, part).items()} for part in _TENSORS
        }
        return dataclasses.replace(self, errors=dataclasses.replace(self.errors, **back))


def plottable(spec: OpSpec) -> bool:
    """Whether the op gets a derivative plot: elementwise, one input, one output, no constants."""
    sig = spec.contract.sig
    constants = spec.arguments.constants if spec.arguments is not None else {}
    return sig.elementwise and len(sig.inputs) == 1 and len(sig.outputs) == 1 and not constants


def evidence(
    spec: OpSpec,
    what: str,
    *,
    device: str = "cpu",
    profile: str = "ci",
    examples: int | None = None,
    registry: Any = None,
    timeout: float | None = None,
    **_: Any,
) -> Evidence:
    """The op's curves and error samples (a task of the pool: ``what`` is "evidence"), each within
    ``timeout`` seconds; never raises for the op's sake."""
    found = Evidence()
    parts: list[tuple[str, Callable[[], Any]]] = []
    if plottable(spec):
        parts.append(("no plot", lambda: setattr(found, "curves", curves(spec))))
    measure = lambda: error_samples(spec, profile=profile, examples=examples, registry=registry)  # noqa: E731
    parts.append(("no error histogram", lambda: setattr(found, "errors", _portable(measure()))))
    for k, (missing, run) in enumerate(parts):
        signalled = signals_handled()
        try:
            with time_limit(timeout):
                run()
        except PropertyTimeout:
            left = " and ".join(m for m, _ in parts[k:])
            found.notes.append(f"{left}: timed out after {timeout:g} s: the op hung?")
            found.timed_out = True
            break
        except BaseException as exc:  # the op's own code, on inputs the checks never drew: anything
            if isinstance(exc, KeyboardInterrupt) and signals_handled() > signalled:
                raise  # Ctrl-C, where this runs in the command's process
            found.notes.append(f"{missing}: {one_line(exc, with_type=True)}")
    return found


def _portable(errors: Errors) -> Errors:
    """``errors`` with its tensors as arrays: sent between processes as bytes, not shared memory."""
    out = {part: {k: v.numpy().copy() for k, v in getattr(errors, part).items()} for part in _TENSORS}
    return dataclasses.replace(errors, **out)
