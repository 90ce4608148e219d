"""The ``library`` property: the op bridged to torch.library (:mod:`opzoo.library`) passes
``torch.library.opcheck``, and its gradients are the Function's, bit for bit.

The check takes the op's tensor inputs as a tuple, whatever the signature; :func:`library` is the
thin property for today's one-input form.
"""

from __future__ import annotations

import dataclasses
import traceback
from typing import Any, Mapping

import torch

from opzoo.core import _recording
from opzoo.core._registry import OpSpec
from opzoo.exceptions import one_line
from opzoo.testing.checks._bound import Bound, PropertyFailed, grad
from opzoo.testing.checks._compare import same_bits
from opzoo.testing.checks._hygiene import declaration_of
from opzoo.testing.checks._reseed import reseeded

#: What ``torch.library.opcheck`` tests on every drawn input: schema (no mutation, no aliasing),
#: autograd registration, and the fake kernel against the real one (shapes, dtypes, strides).
CHEAP = ("test_schema", "test_autograd_registration", "test_faketensor")
#: What it tests on the fixed inputs too: tracing the op, forward and backward, through AOT
#: autograd with dynamic shapes (a tenth of a second or more per call, so not on every drawn one).
FULL = (*CHEAP, "test_aot_dispatch_dynamic")


def check_library(bound: Bound, inputs: tuple[torch.Tensor, ...], *, full: bool = True) -> None:
    """opcheck the bridged op on ``inputs`` (the bound op's: differentiable, core dims last), and
    compare its outputs and gradients with the Function's, bit for bit, in every dtype the op
    declares. Without ``full``, opcheck's quick tests run in one dtype (float64 where declared); with
    it, in every dtype, and its AOT-dispatch test in that one.

    Raises :class:`~opzoo.testing.PropertyFailed` naming the dtype and the opcheck test that failed.
    """
    from opzoo import library
    from opzoo.exceptions import OpZooError

    spec, params = bound.spec, bound.params
    if library.taken(spec):  # another class of that name (two MaskedScales in one test suite): the
        # check bridges this one under a name of its own; opzoo.library.op refuses it (one namespace)
        spec = dataclasses.replace(
            spec, name=f"{spec.name}.{spec.target.__module__}.{spec.target.__qualname__}"
        )
    try:
        op = library.op(spec)
    except OpZooError as exc:
        raise PropertyFailed(f"cannot bridge: {exc}") from None
    args = tuple(params[k] for k in spec.contract.params)
    arranged = bound.arranged(*inputs)
    dtypes = spec.contract.dtypes
    # opcheck is most of the property's time. What it tests on a drawn shape does not depend on the
    # dtype: a quick run opchecks one (float64 where declared). The full run (the fixed input) runs
    # the quick tests in every dtype, where a fake kernel's dtype would show, and the AOT-dispatch
    # trace (0.1 s a call) in that one dtype. Outputs and gradients are compared in every dtype.
    first = "float64" if "float64" in dtypes else dtypes[0]
    for name in dtypes:
        dtype = getattr(torch, name)
        fixed = spec.arguments.constants if spec.arguments is not None else {}  # a float one too
        tensors = tuple(
            t.detach().to(dtype).requires_grad_(i not in fixed)
            if t is not None and t.is_floating_point()
            else t
            for i, t in enumerate(arranged)
        )
        if name == first:
            tests = FULL if full else CHEAP
        else:
            tests = CHEAP if full else ()
        if tests and any(t is not None and _breaks_opcheck(t) for t in tensors):
            bound.notes.append(
                "opcheck not run on an empty input of several zero dimensions: torch's clone_input "
                "(torch._dynamo.utils) sizes its copy negative there; outputs and gradients compared"
            )
        elif tests:
            results = torch.library.opcheck(
                op.default, (*tensors, *args), test_utils=_cheap(tests), raise_exception=False
            )
            if "test_aot_dispatch_dynamic" in tests:
                results |= _aot(bound, op, tensors, args)
            for test, outcome in results.items():
                if outcome != "SUCCESS":
                    bound.outputs(*inputs)  # outputs that do not fit the signature: that failure first
                    hint = _undeclared_dtype(spec, op, tensors, args) if test == "test_faketensor" else ""
                    raise PropertyFailed(f"opcheck {test} in {name}: {one_line(outcome, lines=2)}{hint}")
        _same_as_function(spec, params, op, tensors, args, name)


def _undeclared_dtype(spec: OpSpec, op: Any, tensors: tuple[torch.Tensor, ...], args: tuple[Any, ...]) -> str:
    """Why the fake kernel's dtype may be wrong: an integer or bool output the contract does not
    declare (the fake kernel gives every other output the inputs' dtype); else nothing."""
    with torch.no_grad():
        out = op.default(*tensors, *args)
    for j, o in enumerate(out if isinstance(out, (tuple, list)) else (out,)):
        if (hint := declaration_of(j, o.dtype)) is not None and j not in spec.contract.output_dtypes:
            return (
                f" (output {j} is {str(o.dtype).removeprefix('torch.')}, and the bridge's fake kernel gives "
                f"an output the inputs' dtype unless the op declares {hint})"
            )
    return ""


def _cheap(tests: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(t for t in tests if t != "test_aot_dispatch_dynamic")


def _aot(bound: Bound, op: Any, tensors: tuple[torch.Tensor, ...], args: tuple[Any, ...]) -> dict[str, Any]:
    """opcheck's AOT-dispatch test, on inputs where the op's outputs are finite: it compares eager
    and traced outputs with torch.testing.assert_close, to which nan never equals nan (x ** y at
    x < 0 is nan both ways). The inputs themselves, else their magnitudes plus a half (the same
    shapes: what the trace is about); where neither gives finite outputs, it is not run. Nor is it
    for a classic forward that draws random numbers, with a note: traced, the bridge's rerun of it
    for its context draws others than the kernel; and where that rerun cannot be traced, a note
    too (limits of the bridge, not the op's)."""
    if bound.random:
        bound.notes.append(
            "opcheck's AOT-dispatch test not run: a random forward (random=True), and it compares an "
            "eager and a traced run it does not seed alike; outputs and gradients compared under one seed"
        )
        return {}
    if _recording.classic(bound.spec.target) and _draws(op, tensors, args):
        bound.notes.append(
            "opcheck's AOT-dispatch test not run: the classic forward draws random numbers, and "
            "traced, the bridge's rerun of it for its context would draw others than its kernel "
            "(a Function in the setup_context form is traced)"
        )
        return {}
    for candidate in (tensors, tuple(_shifted(t) for t in tensors)):
        with torch.no_grad():
            out = op.default(*candidate, *args)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        if all(bool(o.isfinite().all()) for o in outs):
            results = torch.library.opcheck(
                op.default,
                (*candidate, *args),
                test_utils=("test_aot_dispatch_dynamic",),
                raise_exception=False,
            )
            outcome = results["test_aot_dispatch_dynamic"]
            if outcome != "SUCCESS" and _in_the_rerun(outcome):
                bound.notes.append(
                    "opcheck's AOT-dispatch test not passed, and not the op's failure: traced, the "
                    "bridge's rerun of the classic forward for its context fails "
                    f"({one_line(outcome)}); a Function in the setup_context form is traced"
                )
                return {}
            return results
    return {}


def _in_the_rerun(error: BaseException) -> bool:
    """Whether ``error`` (or one it was raised from) arose in the bridge's rerun of a classic forward
    (:func:`opzoo._rerun.again`): there a forward that branches on its values (gpytorch's
    LogNormalCDF) cannot be traced, though its kernel, which is never traced, runs."""
    seen: set[int] = set()
    while isinstance(error, BaseException) and id(error) not in seen:
        seen.add(id(error))
        for frame, _ in traceback.walk_tb(error.__traceback__):
            if frame.f_code.co_name == "again" and frame.f_code.co_filename.endswith("_rerun.py"):
                return True
        error = error.__cause__ or error.__context__
    return False


def _draws(op: Any, tensors: tuple[torch.Tensor, ...], args: tuple[Any, ...]) -> bool:
    """Whether the op's forward draws random numbers (a generator of the CPU or of the CUDA devices
    of ``tensors`` moves)."""
    devices = sorted({t.get_device() for t in tensors if t is not None and t.is_cuda})

    def states() -> list[torch.Tensor]:
        return [torch.get_rng_state(), *(torch.cuda.get_rng_state(d) for d in devices)]

    with torch.random.fork_rng(devices=devices), torch.no_grad():
        before = states()
        op.default(*tensors, *args)
        return any(not torch.equal(a, b) for a, b in zip(before, states()))


def _shifted(t: torch.Tensor | None) -> torch.Tensor | None:
    """A floating tensor's magnitudes plus a half, requiring grad; any other tensor (a mask, a class
    target, an optional input not given) as it is: it has no magnitude to shift, nor a gradient."""
    if t is None or not t.is_floating_point():
        return t
    return (t.detach().abs() + 0.5).requires_grad_()


def _same_as_function(
    spec: OpSpec,
    params: Mapping[str, Any],
    op: Any,
    tensors: tuple[torch.Tensor, ...],
    args: tuple[Any, ...],
    dtype: str,
) -> None:
    """Outputs and gradients through ``torch.ops.opzoo`` equal ``Function.apply``'s exactly (both
    run from one random seed: a random forward, a dropout, draws alike)."""
    apply = spec.bound(**params)

    def run(fn: Any) -> tuple[list[torch.Tensor], list[torch.Tensor | None]]:
        leaves = tuple(
            t if t is None else t.detach().clone().requires_grad_(t.requires_grad) for t in tensors
        )
        out = fn(*leaves)
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        # A fixed, distinct grad_output per output, so a swapped or dropped one shows.
        grads = [_ramp(o, k) for k, o in enumerate(outs)]
        wrt = [t for t in leaves if t is not None and t.requires_grad]
        got = grad(outs, wrt, grads) if any(o.requires_grad for o in outs) else ()
        return [o.detach() for o in outs], list(got)

    want_out, want_grad = _seeded(run, apply, tensors)
    got_out, got_grad = _seeded(run, lambda *ts: op(*ts, *args), tensors)
    for what, got, want in (("output", got_out, want_out), ("gradient", got_grad, want_grad)):
        if len(got) != len(want):
            raise PropertyFailed(
                f"in {dtype}: {len(got)} {what}s through torch.ops, {len(want)} through apply"
            )
        for i, (g, w) in enumerate(zip(got, want)):
            same = (g is None and w is None) or (g is not None and w is not None and same_bits(g, w))
            if not same:
                raise PropertyFailed(
                    f"in {dtype}: {what} {i} through torch.ops.opzoo differs from the Function's "
                    "(they must be equal bit for bit)"
                )


def _seeded(run: Any, fn: Any, tensors: tuple[torch.Tensor, ...]) -> Any:
    """``run(fn)`` with the random generators (CPU, and the CUDA devices of ``tensors``) seeded 0
    inside and as they were after."""
    with reseeded(tensors, 0):
        return run(fn)


def _breaks_opcheck(t: torch.Tensor) -> bool:
    """Whether opcheck cannot copy ``t``: torch 2.13's ``clone_input`` allocates
    ``sum((size - 1) * stride) + 32`` elements, negative for an empty tensor such as (0, 0, 0, 4, 4)."""
    return t.numel() == 0 and sum((n - 1) * st for n, st in zip(t.shape, t.stride())) + 32 <= 0


def _ramp(like: torch.Tensor, k: int) -> torch.Tensor:
    n = like.numel()
    ramp = torch.linspace(-1.5 + k, 2.0 + k, max(n, 1), dtype=like.dtype, device=like.device)[:n]
    return (ramp + 0.01).reshape(like.shape)


def library(op: Bound, *xs: torch.Tensor) -> None:
    """Bridged to torch.library: opcheck passes in every declared dtype, and gradients through
    torch.ops.opzoo equal the Function's bit for bit."""
    # Drawn inputs run opcheck's quick tests; the fixed ones (and the thorough profile) all of them.
    check_library(op, xs, full=not op.fast)
