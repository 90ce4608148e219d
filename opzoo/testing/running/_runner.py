"""Run the properties of one op under hypothesis and report each as pass, fail or skip."""

from __future__ import annotations

import random
import time
from types import EllipsisType
from typing import Any, Callable, Iterable

import hypothesis
import torch
from hypothesis import settings
from hypothesis.errors import HypothesisException

from opzoo.core._spec import OpSpec
from opzoo.exceptions import one_line
from opzoo.testing._edges import split
from opzoo.testing.checks._bound import Bound, PropertyFailed, PropertySkipped, bind, rejects
from opzoo.testing.checks._steps import worst_rounding
from opzoo.testing.properties import PROPERTIES, Property
from opzoo.testing.running import _cases, _profiles
from opzoo.testing.running._hooks import Asked, RunHooks, hooks_of
from opzoo.testing.running._options import OPTIONS
from opzoo.testing.running._repeatable import (
    seeded_torch,
    torch_deprecations_ignored,
    without_local_constants,
)
from opzoo.testing.running._repro import EDGE_VALUES, describe, repro
from opzoo.testing.running._result import HUNG, Result, preview
from opzoo.testing.running._signals import PropertyTimeout, insistent_interrupt, signals_handled, time_limit
from opzoo.testing.strategies import edge_inputs, fixed_inputs

DEVICES = ("cpu", "cuda")

#: Seconds one property of one op may take before it counts as hung, unless the caller says (read
#: at each call: opzoo's own tests lift it, so that a loaded machine never turns a slow check into
#: a verdict; the tests of the limit itself pass theirs). The options' default, as the commands'.
TIMEOUT: float | None = OPTIONS["timeout"].default


def replay(
    spec: OpSpec,
    prop: str,
    params: dict[str, Any],
    *inputs: torch.Tensor,
    fast: bool = True,
    device: str = "cpu",
) -> None:
    """Run property ``prop`` of ``spec`` on one example as the check did (``inputs``: one per
    signature input, targets and masks included; torch's generator seeded as the check seeded it);
    raises what the check raised. An example the forward rejects is the ``accepts`` property's
    business: the other properties leave it out, as here."""
    property_ = PROPERTIES[prop]
    xs, constants = split(spec, tuple(inputs))
    op = bind(spec, params, constants=constants, device=device, fast=fast)
    if property_.screened and rejects(op, xs) is not None:
        raise PropertySkipped("the forward rejects this input: see the accepts property")
    with seeded_torch(device):
        property_(op, *xs)


def check_property(
    spec: OpSpec,
    prop: str,
    *,
    profile: str | None = None,
    examples: int | None = None,
    device: str = "cpu",
    registry: Asked = None,
    seed: int | None = None,
    timeout: float | None | EllipsisType = ...,
) -> Result:
    """Check one property of one op; never raises for a failing op.

    ``registry`` is asked for a plugin's input strategy (``opzoo_input_strategy``), if given: a
    Registry, or a run's :class:`~opzoo.testing.running._hooks.RunHooks`, which keeps the answers
    and the failures for the whole run (asked through a Registry, a hook's failure is a note).
    ``seed`` fixes hypothesis's search for a profile that is not derandomized; without one a seed
    is drawn, and a failure's ``reproduce:`` command names it, so that it fails again every time.
    ``timeout``: seconds before the property counts as hung and fails (None: no limit; not given:
    :data:`TIMEOUT`).
    """
    began = time.perf_counter()
    timeout = TIMEOUT if timeout is ... else timeout
    property_ = PROPERTIES[prop]
    reason = property_.applies(spec)
    if device == "cuda" and not torch.cuda.is_available():
        reason = "CUDA is not available"
    if reason:
        return Result(spec.name, prop, device, "skip", reason)
    profile = profile or _profiles.default_profile()
    conf, shared, draws = _settings(property_, profile, examples, seed)
    if not conf.derandomize and seed is None:
        seed = random.SystemRandom().randrange(2**32)
    hooks = hooks_of(registry) if registry is not None else None
    tried = _Trial(spec, property_, device, signals_handled(), draws)
    try:
        with torch_deprecations_ignored():
            tried.every_input(conf, seed, hooks, profile, timeout, registry if shared else _SEARCH)
    except BaseException as exc:  # the op under test may raise anything
        # A KeyboardInterrupt is Ctrl-C (or SIGTERM, SIGHUP) only if one of them was handled
        # meanwhile; one the op raised itself is its failure (in a worker, which ignores SIGINT, always).
        interrupt = _interrupt_in(exc) if signals_handled() > tried.signalled else None
        if interrupt is not None:
            raise interrupt from None
        failure: BaseException | None = exc
    else:
        failure = None
    if hooks is not None and not isinstance(registry, RunHooks):  # nobody else would say it
        tried.notes.update(dict.fromkeys(f"a plugin's hook failed: {f}" for f in hooks.failures))
    took = time.perf_counter() - began
    if failure is None:
        return tried.passed(took)
    if isinstance(failure, PropertyTimeout):
        reason = f"timed out after {timeout:g} s: the op hung?"
        return Result(spec.name, prop, device, "fail", reason, seconds=took, timed_out=True)
    profile = profile if not conf.derandomize else "ci"
    return tried.failed(failure, took, lambda example: repro(spec, prop, example, profile, seed, examples))


def _settings(
    property_: Property, profile: str, examples: int | None, seed: int | None
) -> tuple[Any, bool, int | None]:
    """Hypothesis's settings for ``property_`` under ``profile``; whether it replays the op's shared
    draw (the same examples, drawn once); and how many of that draw it replays, at most (None: all).
    A property of few drawn inputs (``Property.draws``) replays the first of the draw, or searches
    that many of its own; an ``examples`` given, and the thorough profile, run them all."""
    conf = _profiles.get(profile, examples)
    shared = _cases.shared(conf, seed)
    draws = property_.draws if profile != "thorough" and not examples else None
    if draws is not None and not shared:
        conf = settings(conf, max_examples=min(draws, conf.max_examples))
    return conf, shared, draws if shared else None


def _called(op: Bound, xs: tuple[torch.Tensor, ...]) -> str | None:
    """Where a Dim parameter moved the core dimension: the inputs as the forward got them, in words
    (an example is shown, and replayed, with it last); None where that is what the forward got."""
    axis = op.spec.contract.axis
    if axis is None:
        return None
    try:
        got = [t for t in op.arranged(*xs) if t is not None]
        shown = [t for t in op.full(*xs) if t is not None]
    except Exception:  # noqa: BLE001 - an input outside the signature: nothing to say
        return None
    if all(g.shape == s.shape and torch.equal(g, s) for g, s in zip(got, shown)):
        return None
    words = (
        f"shape{'s' * (len(got) > 1)} {', '.join(str(tuple(t.shape)) for t in got)}, {axis}={op.params[axis]}"
    )
    if len(got) == 1 and got[0].numel() <= EDGE_VALUES:
        words += f", values {preview(got[0].detach().cpu().tolist())}"
    return words + " (the example above has the core dimension last)"


#: ``every_input``'s ``registry`` where the property searches its own examples.
_SEARCH = object()


class _Trial:
    """One property of one op, tried on every input it runs on: how many ran, what the check
    noticed, and the last input tried (the failing one, once one fails)."""

    def __init__(
        self, spec: OpSpec, property_: Property, device: str, signalled: int = 0, draws: int | None = None
    ) -> None:
        self.spec, self.property, self.device = spec, property_, device
        self.draws = draws  # drawn cases replayed, at most (None: all)
        self.signalled = signalled  # signals handled before the check began
        self.last: dict[str, Any] = {}
        self.notes: dict[str, None] = {}
        self.ran = 0  # inputs the property ran on (not rejected by the forward)
        # The first input on which the property said skip (no second derivative there, say): the
        # check goes on, so that a failure on another input is still found. A skip ended the
        # search before, and which of the two was reported hung on hypothesis's order.
        self.skipped: PropertySkipped | None = None

    def every_input(
        self,
        conf: Any,
        seed: int | None,
        hooks: RunHooks | None,
        profile: str,
        timeout: float | None,
        registry: Any,
    ) -> None:
        """Drawn inputs (as many as ``conf`` says), then the fixed ones, then the edge ones, as the
        property asks, within ``timeout`` seconds; raises what the property raised. The drawn ones
        are the op's draw replayed (``registry``: whose plugins it asked) where that passes, else
        (or with ``_SEARCH``) the property's own search, under a limit of its own."""
        spec, device, fast = self.spec, self.device, profile != "thorough"
        with insistent_interrupt(), without_local_constants():
            if self.property.drawn and registry is not _SEARCH:
                with time_limit(timeout):
                    if self.replayed(
                        lambda: _cases.drawn(spec, conf, seed, device, registry, hooks, fast), hooks, fast
                    ):
                        self.others()
                        return
                self.last.clear()
                self.notes.clear()
                self.ran = 0
                self.skipped = None
            with time_limit(timeout):
                if self.property.drawn:

                    def attempt(params: dict[str, Any], inputs: tuple[torch.Tensor, ...]) -> None:
                        if not self(params, inputs, fast):
                            hypothesis.reject()

                    _cases.search(conf, seed, spec, device, hooks, attempt)
                self.others()

    def others(self) -> None:
        """The fixed inputs, then the edge ones, as the property asks."""
        spec, device = self.spec, self.device
        for xs in fixed_inputs(spec, device)[: self.property.fixed]:
            self(spec.contract.defaults(), xs, False)
        if self.property.edges:
            for k, xs in enumerate(edge_inputs(spec, device)):
                self(spec.contract.defaults(), xs, True, edge=k)

    def replayed(self, draw: Callable[[], _cases.Drawn], hooks: RunHooks | None, fast: bool) -> bool:
        """Run the property on the op's drawn cases (``draw()``) as its own search would: False where
        that search must run instead (the draw failed, a case failed, or a property that is not
        screened met a case the forward rejects, past which its own search draws other examples)."""
        try:
            drawn = draw()
            if drawn.cases is None:
                return False
            for failure in drawn.failures if hooks is not None else ():
                hooks.record(failure)  # as its own search would have met it
            for case in drawn.cases:
                if self.draws is not None and self.ran >= self.draws:
                    break
                if case.rejected and self.property.screened:
                    continue
                if case.rejected:
                    return False
                if case.repeat:
                    self.ran += 1
                    continue
                self(case.params, case.copied(), fast, screened=False)
        except PropertyTimeout:
            raise
        except BaseException as exc:  # the op under test may raise anything: its search reports it
            if _interrupt_in(exc) is not None and signals_handled() > self.signalled:
                raise
            return False
        return True

    def __call__(
        self,
        params: dict[str, Any],
        inputs: tuple[torch.Tensor, ...],
        fast: bool,
        edge: int | None = None,
        screened: bool = True,
    ) -> bool:
        """Run the property on one input; False if the forward rejects it (left out). ``screened``:
        False where the caller knows the forward accepts it."""
        self.last.clear()
        xs, constants = split(self.spec, inputs)
        op = bind(self.spec, params, constants=constants, device=self.device, fast=fast)
        # An input the forward rejects is the accepts property's to report, once: the others leave
        # it out, so that one limit of the forward does not fail (or hide) everything else.
        if self.property.screened and screened:
            with seeded_torch(self.device):
                if rejects(op, xs) is not None:
                    return False
        try:
            with seeded_torch(self.device):
                self.property(op, *xs)
        except PropertySkipped as exc:
            self.skipped = self.skipped or exc
            return True
        except BaseException as exc:
            self.last.update(params=params, xs=inputs, fast=fast, edge=edge, exc=exc, called=_called(op, xs))
            raise
        finally:
            self.notes.update(dict.fromkeys(op.notes))
        self.ran += 1
        return True

    def told(self) -> list[str]:
        """What the checks noticed, one rounding note per dtype: the worst (each example tells its own)."""
        return worst_rounding(self.notes)

    def passed(self, took: float) -> Result:
        """The result where no input failed: a skip if some said so or the forward rejected all,
        else a pass."""
        spec, prop, device = self.spec.name, self.property.name, self.device
        if self.skipped is not None:
            return Result(spec, prop, device, "skip", str(self.skipped), seconds=took, notes=self.told())
        if not self.ran:
            why = "the forward rejected every input (see the accepts property)"
            return Result(spec, prop, device, "skip", why, seconds=took, notes=self.told())
        return Result(spec, prop, device, "pass", seconds=took, notes=self.told())

    def failed(self, exc: BaseException, took: float, reproduce: Any) -> Result:
        """The result of a property that raised ``exc``: a skip if the check says so, else a
        failure with the example, the worst mismatch and ``reproduce(example)``'s lines."""
        spec, prop, device = self.spec.name, self.property.name, self.device
        cause = self.last.get("exc", exc)
        if isinstance(cause, PropertySkipped):
            return Result(spec, prop, device, "skip", str(cause), seconds=took)
        example = describe(self.last) if "xs" in self.last else None
        if isinstance(cause, PropertyFailed):
            reason = str(cause)
        elif isinstance(cause, HypothesisException):
            reason = f"hypothesis: {one_line(cause, with_type=True)}"
        else:
            reason = one_line(cause, with_type=True)
        return Result(
            spec,
            prop,
            device,
            "fail",
            reason.strip() or f"{type(cause).__name__} (no message)",
            example,
            getattr(cause, "details", {}).get("worst"),
            took,
            reproduce(example),
            self.told(),
        )


def _interrupt_in(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (or SIGTERM, SIGHUP) behind ``exc``, if any: ``exc`` itself, or one that code on
    the way turned into another exception while handling it. A Ctrl-C landing inside hypothesis's
    own bookkeeping came out as a bare AssertionError, which failed the op 12 ms into its check
    instead of ending the run (seen under load, one run in five)."""
    seen: set[int] = set()
    at: BaseException | None = exc
    while at is not None and id(at) not in seen:
        if isinstance(at, KeyboardInterrupt):
            return at
        seen.add(id(at))
        at = at.__cause__ or at.__context__
    return None


def check(
    spec: OpSpec,
    props: Iterable[str] | None = None,
    *,
    devices: Iterable[str] = DEVICES,
    into: list[Result] | None = None,
    **kw: Any,
) -> list[Result]:
    """Check the given properties (all by default) of one op on each device. Once a property hangs
    (runs past ``timeout``), the op's remaining properties are skipped, so a hung op costs one
    limit, not one per property. Each result is also appended to ``into`` as soon as it is known,
    so that a caller interrupted half-way through the op keeps what finished."""
    results: list[Result] = []
    for prop in props or PROPERTIES:
        for device in devices:
            if any(r.timed_out for r in results):
                result = Result(spec.name, prop, device, "skip", HUNG)
            else:
                result = check_property(spec, prop, device=device, **kw)
            results.append(result)
            if into is not None:
                into.append(result)
    return results
