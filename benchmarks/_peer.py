"""One input of the peer record (benchmarks/peer_record.py): torch's gradcheck and gradgradcheck
beside opzoo's gradient and double_backward, as a property opzoo's own runner runs (so that it sees
the inputs ``gradient`` sees), and how each input is judged."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

CHECKS = ("gradcheck_fast", "gradcheck_slow", "gradgradcheck_fast", "gradgradcheck_slow")
OURS = ("gradient", "double_backward")
ROWS: list[dict[str, Any]] = []  # the peer's rows, in the process that runs the op
_KIND = ["drawn"]  # which of the runner's inputs the peer is on (set by the runner's wrapper below)


# -- one input ------------------------------------------------------------------------------------


def peer(op: Any, *xs: Any) -> None:
    """torch's gradcheck and gradgradcheck beside opzoo's gradient and double_backward on one input:
    a row in ROWS. Never raises (a failure would make hypothesis shrink, and draw other inputs)."""
    try:
        shapes = [list(x.shape) for x in op.full(*xs)]
    except Exception:
        shapes = [list(x.shape) for x in xs]
    row: dict[str, Any] = {"op": op.spec.name, "kind": _KIND[0], "shapes": shapes}
    row["params"] = {k: repr(v) for k, v in op.params.items()}
    row["peer"] = torch_verdicts(op, xs)
    row["opzoo"], row["notes"] = opzoo_verdicts(op, xs)
    surrogate = op.spec.contract.surrogate is not None
    by_design = op.spec.contract.by_design is not None
    if op.fast and judge(row, surrogate, by_design)[0] == "blind":
        # the peer's slow mode against opzoo's fast one: opzoo's full Jacobian on this input too
        row["opzoo_slow"], row["notes_slow"] = opzoo_verdicts(dataclasses.replace(op, fast=False), xs)
    if judge(row, surrogate, by_design)[0] == "blind":
        # opzoo's other properties on this very input: one that fails it means opzoo does not pass it
        row["opzoo_other"], _ = opzoo_verdicts(op, xs, others(op.spec))
    ROWS.append(row)


def torch_verdicts(op: Any, xs: tuple[Any, ...]) -> dict[str, str]:
    """gradcheck and gradgradcheck, fast and slow: "pass", "fail: ...", "error: ..." (something else
    raised: the op's backward, say) or "n/a: ..." (not run)."""
    from opzoo.exceptions import one_line
    from opzoo.testing.checks._bound import LARGE, differentiable

    if all(x.numel() == 0 for x in xs):
        return dict.fromkeys(CHECKS, "n/a: empty")
    try:
        live = differentiable(op, xs)
    except Exception as exc:
        return dict.fromkeys(CHECKS, "error: " + one_line(exc, with_type=True)[:200])
    if not any(live):
        return dict.fromkeys(CHECKS, "n/a: no differentiable output")

    def fn(*ts: Any) -> tuple[Any, ...]:
        return tuple(o for o, d in zip(op.outputs(*ts), live) if d)

    large = sum(x.numel() for x in xs) > LARGE
    sizes = None if large else _sizes(op, xs, fn)
    out = {}
    for name in CHECKS:
        if large and name.endswith("slow"):
            out[name] = "n/a: large (a full Jacobian)"
        elif name.endswith("slow") and (jacobian := _jacobian(name, sizes)):
            out[name] = f"n/a: large (a full Jacobian of {jacobian})"
        else:
            out[name] = _torch_check(name, fn, op.inputs(*xs))
    return out


def _sizes(op: Any, xs: tuple[Any, ...], fn: Callable[..., Any]) -> tuple[int, int] | None:
    """The elements of the checked inputs and of the differentiable outputs; None if the op raised
    (the peer's own call says so)."""
    import torch

    inputs = op.inputs(*xs)
    try:
        with torch.no_grad():
            outs = sum(o.numel() for o in fn(*inputs))
    except Exception:
        return None
    return sum(x.numel() for x in inputs), outs


def _jacobian(name: str, sizes: tuple[int, int] | None) -> str:
    """The full Jacobian slow mode builds, where it is too large to build: "C columns x R rows", or
    "". It takes two calls of the function per column (finite differences) and a backward per row
    (the analytical one). gradcheck's has a column per input element and a row per output element;
    gradgradcheck's a column per input and output element (the grad_outputs are inputs of the first
    derivative) and a row per input element. The bound admits every elementwise input up to LARGE
    elements (at most 2 x LARGE columns of LARGE rows): an op of a small input and a large output
    (gpytorch's RBF covariance: a 1-element lengthscale, a (317, 317) output, whose slow gradcheck
    ran out of 12 GB; its gradgradcheck, on a smaller edge, grew to 23 GB) is left out instead."""
    from opzoo.testing.checks._bound import LARGE

    if sizes is None:
        return ""
    ins, outs = sizes
    cols, rows = (ins, outs) if name.startswith("gradcheck") else (ins + outs, ins)
    if max(cols, rows) > 2 * LARGE or cols * rows > 2 * LARGE * LARGE:
        return f"{cols:,} columns x {rows:,} rows"
    return ""


def _torch_check(name: str, fn: Callable[..., Any], inputs: tuple[Any, ...]) -> str:
    from torch.autograd import gradcheck, gradgradcheck
    from torch.autograd.gradcheck import GradcheckError

    from opzoo.exceptions import one_line

    check = gradcheck if name.startswith("gradcheck") else gradgradcheck
    try:
        check(fn, inputs, fast_mode=name.endswith("fast"), raise_exception=True)
    except GradcheckError as exc:
        return "fail: " + one_line(exc, with_type=False)[:200]
    except Exception as exc:  # the op's own code, or gradcheck refusing it
        return "error: " + one_line(exc, with_type=True)[:200]
    return "pass"


def others(spec: Any) -> tuple[str, ...]:
    """opzoo's properties besides gradient and double_backward that run on drawn inputs and apply
    to the op: those that judge it at one input."""
    from opzoo.testing.properties import PROPERTIES

    return tuple(
        name
        for name, p in PROPERTIES.items()
        if name not in (*OURS, "peer") and p.drawn and p.applies(spec) is None
    )


def opzoo_verdicts(
    op: Any, xs: tuple[Any, ...], props: tuple[str, ...] = OURS
) -> tuple[dict[str, str], dict[str, list[str]]]:
    """opzoo's ``props`` (gradient and double_backward) on the same input and Bound (its learnable
    tensors and its fast flag), as ``replay`` runs them: each verdict and what the check noted."""
    from opzoo.exceptions import one_line
    from opzoo.testing.checks._bound import PropertyFailed, PropertySkipped
    from opzoo.testing.properties import PROPERTIES
    from opzoo.testing.running._repeatable import seeded_torch

    verdicts, notes = {}, {}
    for prop in props:
        fresh = dataclasses.replace(op, notes=[])
        try:
            with seeded_torch("cpu"):
                PROPERTIES[prop].run(fresh, *(x.clone() for x in xs))
            verdicts[prop] = "pass"
        except PropertySkipped as exc:
            verdicts[prop] = "skip: " + one_line(exc, with_type=False)[:200]
        except PropertyFailed as exc:
            verdicts[prop] = "fail: " + one_line(exc, with_type=False)[:200]
        except Exception as exc:  # the op raised: a failure, as in the runner
            verdicts[prop] = "fail: " + one_line(exc, with_type=True)[:200]
        notes[prop] = list(dict.fromkeys(fresh.notes))
    return verdicts, notes


def install() -> None:
    """The ``peer`` property (gradient's input flags) in opzoo's table, and a wrapper on the runner's
    per-input call that tells ``peer`` which inputs it is on. This script's process only."""
    from opzoo.testing.properties import PROPERTIES, Property
    from opzoo.testing.running._runner import _Trial

    PROPERTIES["peer"] = Property("peer", peer, "torch's gradcheck and gradgradcheck", fixed=2, edges=True)
    _quick_failures()
    call = _Trial.__call__

    def called(self: Any, params: Any, inputs: Any, fast: bool, edge: int | None = None) -> bool:
        _KIND[0] = "edge" if edge is not None else "drawn" if fast else "fixed"  # ci: drawn are fast
        return call(self, params, inputs, fast, edge)

    _Trial.__call__ = called  # type: ignore[method-assign]


# -- the verdicts ---------------------------------------------------------------------------------


def fails(verdict: str) -> bool:
    return verdict.startswith(("fail", "error"))


def judge(row: dict[str, Any], surrogate: bool, by_design: bool = False) -> tuple[str, str]:
    """One input's class: "agree" (both pass), "both fail", "opzoo only" (opzoo fails, the peer
    passes), "explained" or "blind" (the peer fails, opzoo passes), with what explains it.
    ``surrogate``, ``by_design``: the op declares a surrogate gradient or a by-design backward."""
    peer_first = any(fails(row["peer"][k]) for k in CHECKS[:2])
    peer_second = any(fails(row["peer"][k]) for k in CHECKS[2:])
    ours = [p for p in OURS if row["opzoo"][p].startswith("fail")]
    if not (peer_first or peer_second):
        return ("opzoo only", ", ".join(ours)) if ours else ("agree", "")
    # opzoo's other properties at this very input (run where nothing else explains the peer's
    # failure): an input opzoo fails, by whichever property, is not one the peer fails and opzoo passes
    ours += [f"{p} (at this input)" for p, v in row.get("opzoo_other", {}).items() if v.startswith("fail")]
    if ours:
        return "both fail", ", ".join(ours)
    whys = []
    for failed, prop in ((peer_first, "gradient"), (peer_second, "double_backward")):
        if failed:
            why = _why(row, prop, surrogate, by_design)
            if why is None:
                return "blind", f"{prop} passes unnoted"
            whys.append(why)
    return "explained", "; ".join(dict.fromkeys(whys))


def _why(row: dict[str, Any], prop: str, surrogate: bool, by_design: bool = False) -> str | None:
    """What opzoo's ``prop`` said at this input that explains the peer's failure, or None."""
    if surrogate:
        return "a declared surrogate: the backward is not the derivative, on purpose"
    if by_design:  # Contract(by_design=...): guided backprop, say; gradient holds what it can of it
        return "a declared by-design backward: the backward is not the derivative, on purpose"
    if row["opzoo"][prop].startswith("skip"):
        return f"{prop} {row['opzoo'][prop]}"
    if row["notes"][prop]:
        return f"{prop} noted: " + " | ".join(n[:160] for n in row["notes"][prop][:2])
    if prop == "double_backward" and row["notes"]["gradient"]:
        # not differentiable (or not finite) at some point of this input: not twice differentiable there
        return "gradient noted: " + " | ".join(n[:160] for n in row["notes"]["gradient"][:2])
    slow, noted = row.get("opzoo_slow", {}).get(prop, ""), row.get("notes_slow", {}).get(prop)
    if noted and not fails(slow):
        return f"{prop} in slow mode (a full Jacobian) noted: " + " | ".join(n[:160] for n in noted[:2])
    return None


def _quick_failures() -> None:
    """gradcheck's fast mode, failing, recomputes the whole Jacobian in slow mode to word its message:
    on the 100,000-element edge input a 1e10-entry Jacobian, hours in C, where no time limit reaches
    (grad_reverse's worker was killed so). Above 4,096 elements the message goes without it here; the
    verdict is the same."""
    import importlib

    from opzoo.testing.checks._bound import LARGE

    torch_gradcheck = importlib.import_module("torch.autograd.gradcheck")  # torch.autograd's: the function

    slow = torch_gradcheck._run_slow_mode_and_get_error

    def worded(func: Any, inputs: Any, *args: Any, **kw: Any) -> str:
        size = sum(t.numel() for t in inputs if hasattr(t, "numel"))
        return (
            " (not recomputed in slow mode: too large)" if size > LARGE else slow(func, inputs, *args, **kw)
        )

    torch_gradcheck._run_slow_mode_and_get_error = worded
