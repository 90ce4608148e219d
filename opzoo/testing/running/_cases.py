"""An op's drawn examples, drawn once per process and replayed for each of its properties.

Every drawn property of an op searches the same sequence of examples whenever its seed is the
same: under a derandomized profile (``ci``: the pinned ``CI_SEED``) and wherever the caller names
a seed. So one hypothesis search per op, which runs no property, records the examples (and whether
the forward rejects each, screened once under seeded torch), and each property replays them in
order (``_runner``). A property that fails on one runs its own search after all, which finds the
same first failing example and shrinks it: its report is the search's. Without a seed (``dev``,
``thorough``) each check draws its own and nothing is shared, as before.
"""

from __future__ import annotations

import contextlib
import hashlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import hypothesis
import torch
from hypothesis import given
from hypothesis.errors import Unsatisfiable

from opzoo._records import Failure
from opzoo.core._spec import OpSpec
from opzoo.testing._edges import split
from opzoo.testing.checks._bound import bind, rejects
from opzoo.testing.running import _profiles
from opzoo.testing.running._hooks import RunHooks
from opzoo.testing.running._repeatable import seeded_torch
from opzoo.testing.running._signals import PropertyTimeout
from opzoo.testing.strategies import cases

#: How many ops' draws a process keeps (an op's properties are checked one after another, per device).
KEEP = 4


@dataclass(frozen=True)
class Case:
    """One drawn example: the params, the inputs (one per signature input), whether the forward
    rejects it, and whether it repeats an earlier one exactly (a Function's check is deterministic
    on it, torch's generator being seeded per example, so it is counted as run and not run again)."""

    params: dict[str, Any]
    inputs: tuple[torch.Tensor, ...]
    rejected: bool
    repeat: bool = False

    def copied(self) -> tuple[torch.Tensor, ...]:
        """Fresh copies of the inputs, strides and storage offset kept: a property that writes into
        its inputs leaves the next property the inputs as drawn."""
        return tuple(_copy(x) for x in self.inputs)


@dataclass
class Drawn:
    """An op's drawn cases in the order its search drew them (None: the draw itself failed, so
    each property searches), and the plugins' hook failures met while drawing."""

    cases: list[Case] | None
    failures: list[Failure] = field(default_factory=list)


def search(
    conf: Any, seed: int | None, spec: OpSpec, device: str, hooks: RunHooks | None, body: Callable[..., Any]
) -> None:
    """Hypothesis's search of ``spec``'s examples under ``conf``, calling ``body(params, inputs)``
    on each: the one search both a property's check and the draw run, so that both see one
    sequence. Returns once the forward rejected every example (``Unsatisfiable``)."""

    @conf
    @given(case=cases(spec, device=device, registry=hooks))
    def run(case: tuple[dict[str, Any], tuple[torch.Tensor, ...]]) -> None:
        body(*case)

    if conf.derandomize:  # the pinned seed, not one hashed from the text of `run`
        run = hypothesis.seed(_profiles.CI_SEED)(run)
    elif seed is not None:
        run = hypothesis.seed(seed)(run)
    try:
        run()
    except Unsatisfiable:
        pass  # the forward rejected every drawn input: the accepts property says so


_memo: list[tuple[tuple[Any, ...], Drawn]] = []  # most recent last; the key holds spec and registry
_searching = [0]  # > 0: within searching(), nothing is shared


@contextlib.contextmanager
def searching() -> Iterator[None]:
    """Each check in the block runs its own search, as before the draws were shared (``opzoo
    mutate``: each mutant is a new op, killed by its first failing property, so a draw of its own
    would only add to its search)."""
    _searching[0] += 1
    try:
        yield
    finally:
        _searching[0] -= 1


def shared(conf: Any, seed: int | None) -> bool:
    """Whether checks under ``conf`` and ``seed`` (the caller's, None if it gave none) replay one draw."""
    return not _searching[0] and (conf.derandomize or seed is not None)


def drawn(
    spec: OpSpec, conf: Any, seed: int | None, device: str, registry: Any, hooks: RunHooks | None, fast: bool
) -> Drawn:
    """``spec``'s drawn cases under ``conf`` and ``seed`` on ``device``, asking ``registry``'s
    plugins (through ``hooks``): drawn on the first call, remembered for the next ones. Keyed by
    the spec and registry objects themselves (held, so that an id is never reused): a mutant's
    spec, or another registry, draws its own."""
    key = (spec, conf.max_examples, conf.derandomize, seed, device, registry)
    for i, (k, found) in enumerate(_memo):
        if all(_same(a, b) for a, b in zip(k, key)):
            _memo.append(_memo.pop(i))
            return found
    before = len(hooks.failures) if hooks is not None else 0
    try:
        found = Drawn(_draw(spec, conf, seed, device, hooks, fast))
    except PropertyTimeout:
        raise
    except Exception:  # anything the search met: each property searches and reports it
        found = Drawn(None)
    if hooks is not None:
        found.failures = hooks.failures[before:]
    _memo.append((key, found))
    del _memo[:-KEEP]
    return found


def _same(a: Any, b: Any) -> bool:
    """The memo's key parts: objects (spec, registry) by identity, plain values by value."""
    if isinstance(a, (int, str, bool, type(None))) and isinstance(b, (int, str, bool, type(None))):
        return type(a) is type(b) and a == b
    return a is b


def clear() -> None:
    """Forget every draw (the benchmarks' side-by-side runs, the tests)."""
    _memo.clear()


def _draw(
    spec: OpSpec, conf: Any, seed: int | None, device: str, hooks: RunHooks | None, fast: bool
) -> list[Case]:
    """The search of :func:`search`, recording each example and whether the forward rejects it
    (rejected examples are rejected to hypothesis too, as a screened property's search does)."""
    out: list[Case] = []
    seen: set[bytes] = set()

    def record(params: dict[str, Any], inputs: tuple[torch.Tensor, ...]) -> None:
        xs, constants = split(spec, inputs)
        op = bind(spec, params, constants=constants, device=device, fast=fast)
        with seeded_torch(device):
            bad = rejects(op, xs) is not None
        # a Module's parameters are drawn as it is built (outside the seeded block): no repeats there
        mark = _fingerprint(params, inputs) if op.module is None else None
        out.append(Case(params, inputs, bad, mark is not None and mark in seen))
        if mark is not None:
            seen.add(mark)
        if bad:
            hypothesis.reject()

    search(conf, seed, spec, device, hooks, record)
    return out


def _fingerprint(params: dict[str, Any], inputs: tuple[torch.Tensor, ...]) -> bytes | None:
    """A digest of the example exactly (params; each input's dtype, shape, strides and bytes), or
    None where it cannot be told exactly (a param that is not a plain value, a tensor not strided)."""
    plain = (int, float, str, bool, type(None))
    if not all(
        isinstance(v, plain) or (isinstance(v, tuple) and all(isinstance(e, plain) for e in v))
        for v in params.values()
    ):
        return None
    h = hashlib.sha1(repr(sorted((k, repr(v)) for k, v in params.items())).encode())
    for x in inputs:
        if type(x) is not torch.Tensor or x.layout != torch.strided:
            return None
        layout = (x.dtype, tuple(x.shape), x.stride(), x.storage_offset(), x.untyped_storage().nbytes())
        h.update(f"{layout}{x.requires_grad}|".encode())
        h.update(x.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.digest()


def _copy(x: Any) -> Any:
    """A copy of tensor ``x`` on storage of its own, with ``x``'s strides and offset."""
    if type(x) is not torch.Tensor or x.layout != torch.strided:
        return x
    with torch.no_grad():
        y = x.new_empty(0)
        y.set_(x.untyped_storage().clone(), x.storage_offset(), x.size(), x.stride())
    return y.requires_grad_(x.requires_grad)
