"""A failure as a person repeats it: the failing example, described, and the reproduce lines, a
command (its flags rendered from the options' records) and the same in Python."""

from __future__ import annotations

import sys
from typing import Any

from opzoo.core._contract import Contract
from opzoo.core._spec import OpSpec
from opzoo.testing.checks._bound import LARGE
from opzoo.testing.running._options import flags

__all__ = ["EDGE_VALUES", "describe", "repro"]

#: Inputs larger than this are described by how to rebuild them, not by their values.
EDGE_VALUES = LARGE


def describe(last: dict[str, Any]) -> dict[str, Any]:
    """The failing example: params, each input (values, unless it is a large edge input, which the
    repro rebuilds by its index in :func:`edge_inputs`)."""
    edge = last.get("edge")
    return {
        "params": dict(last["params"]),
        "fast": last["fast"],
        "edge": edge,
        "called": last.get("called"),
        "inputs": [
            None  # an optional input, not given
            if x is None
            else {
                "shape": tuple(x.shape),
                "strides": tuple(x.stride()),
                "dtype": str(x.dtype).removeprefix("torch."),
                "values": x.detach().cpu().tolist() if x.numel() <= EDGE_VALUES else None,
            }
            for x in last["xs"]
        ],
    }


def repro(
    spec: OpSpec,
    prop: str,
    example: dict[str, Any] | None,
    profile: str,
    seed: int | None,
    examples: int | None = None,
) -> str:
    """The lines that repeat a failure: the ``opzoo check`` command (where one reaches the op), then
    the failing example in Python (where there is one)."""
    name, expr = _reached(spec)
    cmd = ""
    if name is not None:
        # another count of examples draws other examples; a derandomized profile needs no seed
        shown = flags(
            properties=[prop],
            profile=profile,
            examples=examples or None,
            seed=seed if profile != "ci" else None,
        )
        cmd = f"opzoo check {name} {shown}"
    if not example:
        return cmd
    args = ", ".join(f"{k}={v!r}" for k, v in example["params"].items())
    full = "" if example["fast"] else ", fast=False"
    head = f"{cmd}\nor in Python:\n" if cmd else "in Python:\n"
    head += "  import torch, opzoo; from opzoo.testing import replay, spec_of\n"
    if expr == "spec":
        head += "  spec = ...  # the op as it was checked: spec_of(YourFunction, contract)\n"
    call = f"replay({expr}, {prop!r}, dict({args}), *xs{full})"
    if any(t is not None and t["values"] is None for t in example["inputs"]):
        return (
            head
            + "  from opzoo.testing.strategies import edge_inputs\n"
            + f"  xs = edge_inputs({expr}, 'cpu')[{example['edge']}]\n  {call}"
        )
    made = [
        "None"
        if t is None
        else f"torch.tensor({t['values']!r}, dtype=torch.{t['dtype']}).reshape({t['shape']!r})"
        for t in example["inputs"]
    ]
    return head + "  xs = [\n      " + ",\n      ".join(made) + ",\n  ]\n  " + call


def _reached(spec: OpSpec) -> tuple[str | None, str]:
    """How a reproduce line reaches ``spec``: the name or path ``opzoo check`` takes (None where none
    does), and a Python expression for its spec."""
    source = spec.source
    if source.via in ("entry point", "hook"):
        return spec.name, f"opzoo.info({spec.name!r})"
    path = source.entry_point or ""
    if source.via == "path":
        return path, f"spec_of({path!r})"
    # Registered in-process: by its import path, where that finds the same class with the same
    # contract (not one declared beside it, and not a script's __main__).
    module, _, qualname = path.partition(":")
    try:
        found: Any = sys.modules[module]
        for part in qualname.split("."):
            found = getattr(found, part)
    except (KeyError, AttributeError):
        found = None
    if (
        module != "__main__"
        and found is spec.target
        and getattr(found, "opzoo_contract", None)
        in (
            spec.contract,
            None if spec.contract == Contract() else spec.contract,
        )
    ):
        return path, f"spec_of({path!r})"
    return None, "spec"
