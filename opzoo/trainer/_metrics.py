"""Every step's loss of some runs as a file: CSV or JSON Lines, one row per step, written whole."""

from __future__ import annotations

import csv
import io
import json
from typing import TYPE_CHECKING, Sequence

from opzoo import _files

if TYPE_CHECKING:
    from opzoo.trainer._trainer import TrainResult

#: The formats, by the file's ending.
FORMATS = (".csv", ".jsonl")


def write_metrics(path: str, results: Sequence[TrainResult], *, with_seed: bool = False) -> None:
    """Write a row per step of every run in ``results`` to ``path`` (``.csv`` or ``.jsonl``): its
    activation, (its seed,) the step, the loss, and with held-out data the test accuracy."""
    # Held-out accuracy is measured once, after the last step: it is on that step's row only.
    held_out = any(r.test_accuracy is not None for r in results)
    head = ("activation",) + (("seed",) if with_seed else ()) + ("step", "loss")
    head += ("test_accuracy",) if held_out else ()
    rows = [
        (r.label,)
        + ((r.config.seed,) if with_seed else ())
        + (t, loss)
        + ((r.test_accuracy if t == len(r.losses) - 1 else None,) if held_out else ())
        for r in results
        for t, loss in enumerate(r.losses)
    ]
    # Written whole, then renamed into place: an interrupted or failed write never leaves a torn row.
    f = io.StringIO(newline="")
    if path.endswith(".csv"):
        w = csv.writer(f)
        w.writerow(head)
        w.writerows(["" if v is None else v for v in row] for row in rows)
    else:
        for row in rows:
            f.write(json.dumps(dict(zip(head, row))) + "\n")
    _files.write("metrics", path, f.getvalue().encode())
