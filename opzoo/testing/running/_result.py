"""``Result``: the outcome of one property of one op on one device, and its report as a person
reads it. A plain record, sent from a worker process to the parent."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from opzoo.exceptions import printable

__all__ = ["HUNG", "Result", "reports", "result_id"]

#: The reason of a check not run because an earlier one of its op hung.
HUNG = "not run: the op hung"


def result_id(op: str, prop: str, device: str) -> str:
    """The id of one check, as ``opzoo check`` prints it and pytest names its test: ``gradient[myrelu]``."""
    suffix = "" if device == "cpu" else f"-{device}"
    return f"{prop}[{op}{suffix}]"


@dataclass
class Result:
    """The outcome of one property of one op on one device."""

    op: str
    prop: str
    device: str
    status: str  # "pass", "fail" or "skip"
    reason: str = ""
    example: dict[str, Any] | None = None
    worst: dict[str, Any] | None = None
    seconds: float = 0.0
    repro: str = ""
    notes: list[str] = field(default_factory=list)  # what the check noticed, pass or fail
    timed_out: bool = False  # ran past its wall-clock limit: the op's other properties are not run

    @property
    def id(self) -> str:
        return result_id(self.op, self.prop, self.device)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__) | {"id": self.id}

    def report(self) -> str:
        """A multi-line failure report: the op, the property, the example, the worst mismatch;
        :func:`~opzoo.exceptions.printable`, as the reason is an exception's or a plugin's words."""
        lines = [f"{self.status.upper()} {self.id}: {self.reason}"]
        if self.example:
            e = self.example
            shown = e["inputs"]
            if len(shown) == 1:
                t = shown[0]
                lines.append(
                    f"  example:   shape {t['shape']}, strides {t['strides']}, dtype {t['dtype']}, "
                    f"params {e['params']}"
                )
                lines.append(f"  values:    {preview(t['values'])}")  # None: a large edge input
            else:
                lines.append(f"  example:   params {e['params']}")
                for i, t in enumerate(shown):
                    if t is None:
                        lines.append(f"  input {i}:   None (an optional input, not given)")
                        continue
                    lines.append(
                        f"  input {i}:   shape {t['shape']}, strides {t['strides']}, dtype {t['dtype']}"
                    )
                    lines.append(f"    values:  {preview(t['values'])}")
        if self.example and self.example.get("called"):
            lines.append(f"  as called: {self.example['called']}")
        if self.worst:
            w = self.worst
            skip = ("index", "x", "grad_output", "input", "output", "of")
            nums = ", ".join(f"{k} {v:.9g}" for k, v in w.items() if k not in skip)
            which = f"input {w['input']}, output {w['output']}, " if "input" in w else ""
            value = f"input {w['input']} = " if w.get("input") else "x = "  # that input's value there
            of = f" (the gradient of {w['of']})" if "of" in w else ""
            lines.append(f"  worst:     {which}at index {list(w['index'])}, {value}{w['x']:.9g}: {nums}{of}")
        if self.repro:
            lines.append("  reproduce: " + self.repro.replace("\n", "\n             "))
        return printable("\n".join(lines), lines=True)


def reports(failed: list[Result]) -> list[str]:
    """Each failure's report, but once for failures of one op on one device with the same reason (an
    op that returns more outputs than its signature declares fails every property alike): the first's
    report, then one line naming the others."""
    groups: dict[tuple[str, str, str], list[Result]] = {}
    for r in failed:
        groups.setdefault((r.op, r.device, r.reason), []).append(r)
    out = []
    for r, *same in groups.values():
        text = r.report()
        if same:
            text += "\n" + printable(f"FAIL {', '.join(o.id for o in same)}: the same failure as {r.id}")
        out.append(text)
    return out


def preview(values: Any, limit: int = 16) -> str:
    """The values as a flat list, cut after ``limit`` (the repro snippet keeps them all)."""

    def flat(v: Any) -> list[Any]:
        return [y for item in v for y in flat(item)] if isinstance(v, list) else [v]

    items = flat(values)
    if not isinstance(values, list) or len(items) <= limit:
        return repr(values)
    shown = ", ".join(repr(v) for v in items[:limit])
    return f"[{shown}, ...] ({len(items)} values, flattened)"
