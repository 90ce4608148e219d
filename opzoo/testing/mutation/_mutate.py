"""Mutation testing of the checks: each mutant of an op (:mod:`opzoo.testing.mutation._mutants`) through the
op's properties, the property that killed it, or why it survived; and the score.

Two steps, each on the same worker processes as ``opzoo check`` (:mod:`opzoo.testing.running._parallel`):

1. the *control*, the op wrapped by the mutant that changes nothing, through every property, as
   ``opzoo check`` runs them: a property it fails is one the op (or the wrapping) fails by itself,
   so it can tell nothing of a mutant, and is not run on the op's mutants; then each op's *facts*
   (:func:`facts`: which mutants apply, its kinks found numerically), one task each, since finding
   them runs the op;
2. every other mutant that applies, one task each: its properties run one at a time, those able to
   see it first (:meth:`Mutant.catchers`), and the first that fails kills it. One that survives all
   gets the reason it survived where one can be given: it changed no gradient the checks asked
   for (on a domain without negative inputs, say), or the properties able to see it did not run
   (no reference declared). A survivor with no reason is a blind spot of the checks.

No op code runs in the caller's process: an op that exits, hangs or raises anything while its
facts are gathered has its control failed or its mutants unjudged, as ``opzoo check`` fails it.

The score is killed / (killed + survived): a mutant that does not apply (a swap of two gradients on
an op of one input) is not counted.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

from opzoo.core._path_op import settled
from opzoo.core._registry import OpSpec, Registry
from opzoo.testing.mutation._facts_task import Facts, gather
from opzoo.testing.mutation._mutant_ops import mutant_spec
from opzoo.testing.mutation._mutants import MUTANTS, Mutant
from opzoo.testing.properties import PROPERTIES
from opzoo.testing.running._cases import searching
from opzoo.testing.running._options import RunOptions
from opzoo.testing.running._parallel import check_all, run_pool
from opzoo.testing.running._result import HUNG
from opzoo.testing.running._runner import TIMEOUT, Result, check_property

CONTROL = next(m.name for m in MUTANTS.values() if m.control)
#: Statuses of a :class:`Verdict`; only the first two count towards the score.
KILLED, SURVIVED, NOT_APPLICABLE, UNJUDGED, PASSED, FAILED = (
    "killed",
    "survived",
    "n/a",
    "unjudged",
    "control passed",
    "control failed",
)


@dataclass
class Verdict:
    """What became of one mutant of one op.

    status:  killed, survived, n/a (the mutant does not apply to the op), unjudged (the checks
             could not run), or, for the control, control passed / control failed.
    prop:    the property that killed it (the control: those it failed, comma-separated).
    reason:  killed: the property's failure, one line; survived: why, or "" for a blind spot of the
             checks; n/a and unjudged: why.
    seconds: the time its checks took.
    changed: whether it changed any gradient (or tangent) the checks asked for.
    """

    op: str
    mutant: str
    status: str
    prop: str = ""
    reason: str = ""
    seconds: float = 0.0
    changed: bool = False
    ran: list[str] = field(default_factory=list)  # the properties run, in order
    # a worker process's bookkeeping (a mutant's hang is a kill, not the op's); the control's: the op hung
    timed_out: bool = False

    @property
    def counted(self) -> bool:
        return self.status in (KILLED, SURVIVED)

    @property
    def explained(self) -> bool:
        return self.status == SURVIVED and bool(self.reason)

    def why(self) -> str:
        """The verdict in a few words: the killing property and its failure, or a reason."""
        if self.status == KILLED:
            return f"{self.prop}: {self.reason}"
        if self.status == SURVIVED and not self.reason:
            passed = ", ".join(self.ran) or "nothing"
            return f"no reason: a blind spot of the checks ({passed} passed)"
        if self.status == FAILED:
            return f"the op fails {self.prop} by itself: mutants are not judged by it ({self.reason})"
        return self.reason

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "timed_out"} | {"explained": self.explained}


@dataclass(frozen=True)
class Score:
    """The mutation score of some verdicts: killed / (killed + survived), None when nothing counted."""

    killed: int
    survived: int
    explained: int
    not_applicable: int
    unjudged: int
    seconds: float

    @classmethod
    def of(cls, verdicts: Iterable[Verdict]) -> Score:
        vs = list(verdicts)
        return cls(
            killed=sum(v.status == KILLED for v in vs),
            survived=sum(v.status == SURVIVED for v in vs),
            explained=sum(v.explained for v in vs),
            not_applicable=sum(v.status == NOT_APPLICABLE for v in vs),
            unjudged=sum(v.status == UNJUDGED for v in vs),
            seconds=sum(v.seconds for v in vs),
        )

    @property
    def rate(self) -> float | None:
        counted = self.killed + self.survived
        return self.killed / counted if counted else None

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__) | {"rate": self.rate}


def parse_score(text: str) -> float:
    """A minimum score: a fraction from 0 to 1, or a percentage (``99%``); ValueError otherwise."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        value = float("nan")
    if not 0 <= value <= 1:  # nan too
        raise ValueError(f"a score is a fraction from 0 to 1 or a percentage (0.99 or 99%), got {text!r}")
    return value


# -- one mutant -----------------------------------------------------------------------------------


def order(spec: OpSpec, mutant: Mutant, props: Sequence[str]) -> list[str]:
    """The properties to run on ``mutant``: those able to see it first, then the others, in the
    table's order. ``accepts`` looks at the forward alone, which no mutant changes: the control's."""
    first = [p for p in mutant.catchers(spec) if p in props]
    rest = [p for p in props if p not in first]
    run = first + rest
    return run if mutant.control else [p for p in run if p != "accepts"]


def mutate_one(
    spec: OpSpec,
    mutant: str,
    device: str = "cpu",
    *,
    props: Sequence[str] | None = None,
    failing: dict[str, Sequence[str]] | None = None,
    **kw: Any,
) -> Verdict:
    """Run ``props`` (all by default) on ``spec`` mutated by ``mutant`` until one fails; never
    raises for the op's sake. ``failing``: op name -> properties its control failed, not run here.
    ``kw`` goes to :func:`~opzoo.testing.running._runner.check_property` (profile, examples, timeout...)."""
    spec = settled(spec)  # an import path's op imported here, a worker: its mutant wrapped at once
    m = MUTANTS[mutant]
    why = m.applies(spec)
    if why:
        return Verdict(spec.name, mutant, NOT_APPLICABLE, reason=why)
    kw.setdefault("profile", "ci")
    changes = [0]

    def changed() -> None:
        changes[0] += 1

    try:
        mutated = mutant_spec(spec, m, changed=changed)
    except Exception as exc:  # an op whose class cannot be subclassed, say
        from opzoo.exceptions import one_line

        return Verdict(spec.name, mutant, UNJUDGED, reason=f"cannot wrap the op: {one_line(exc)}")
    skipped = set((failing or {}).get(spec.name, ()))
    results: dict[str, Result] = {}
    began = time.perf_counter()
    for prop in order(spec, m, list(props or PROPERTIES)):
        if prop in skipped:
            continue
        with searching():  # a mutant is a new op, most killed early: its own search, not a draw
            result = check_property(mutated, prop, device=device, **kw)
        results[prop] = result
        if result.status == "fail":
            return Verdict(
                spec.name,
                mutant,
                KILLED,
                prop,
                result.reason.strip().splitlines()[0] if result.reason.strip() else "failed",
                time.perf_counter() - began,
                changes[0] > 0,
                list(results),
            )
    took = time.perf_counter() - began
    ran = [p for p, r in results.items() if r.status == "pass"]
    reason = _survived(spec, m, results, changes[0] > 0, props)
    return Verdict(spec.name, mutant, SURVIVED, "", reason, took, changes[0] > 0, ran)


def _survived(
    spec: OpSpec, m: Mutant, results: dict[str, Result], changed: bool, asked: Sequence[str] | None
) -> str:
    """Why ``m`` survived on ``spec``, or "" where no reason can be given (a blind spot)."""
    if not any(r.status == "pass" for r in results.values()):
        return "no property ran: " + "; ".join(f"{p}: {r.reason}" for p, r in results.items())
    if not changed:
        return m.unseen(spec)
    catchers = m.catchers(spec)
    if catchers and not any(p in results and results[p].status == "pass" for p in catchers):
        idle = []
        for p in catchers:
            r = results.get(p)
            idle.append(f"{p}: {r.reason}" if r is not None else f"{p}: not run")
        return "the properties that can see it did not run (" + "; ".join(idle) + ")"
    return ""


# -- many ops -------------------------------------------------------------------------------------


def mutate(
    specs: Sequence[OpSpec],
    mutants: Sequence[str] | None = None,
    *,
    props: Sequence[str] | None = None,
    jobs: int = 1,
    profile: str = "ci",
    examples: int | None = None,
    registry: Registry | None = None,
    timeout: float | None = TIMEOUT,
    started: Callable[[OpSpec], None] = lambda spec: None,
    into: list[Verdict] | None = None,
) -> list[Verdict]:
    """Every mutant (all by default, the control always) of every spec through ``props`` (all by
    default), with ``jobs`` worker processes; the verdicts by op, in the table's order. Each is
    also appended to ``into`` once its op's step is done, so that an interrupted caller keeps what
    finished."""
    props = list(props or PROPERTIES)
    names = [n for n in mutants or MUTANTS if not MUTANTS[n].control]
    kw: dict[str, Any] = dict(profile=profile, examples=examples, registry=registry, timeout=timeout)
    verdicts = _controls(specs, props, jobs, started, kw)
    failing = {spec.name: verdicts[spec.name, CONTROL].prop.split(", ") for spec in specs}
    hung = {i for i, spec in enumerate(specs) if verdicts[spec.name, CONTROL].timed_out}
    done: dict[Any, Any] = {}
    try:
        tasks = _tasks(specs, names, verdicts, gather(specs, names, hung, jobs, timeout))
        run_pool(
            specs,
            tasks,
            mutate_one,
            jobs=jobs,
            limit=None if timeout is None else timeout * len(props),
            done=done,
            props=props,
            failing=failing,
            **kw,
        )
    finally:
        for (i, name, _), got in done.items():
            verdicts[specs[i].name, name] = verdict_of(specs[i], name, got)
        out = [
            verdicts[spec.name, name]
            for spec in specs
            for name in [CONTROL, *names]
            if (spec.name, name) in verdicts
        ]
        if into is not None:
            into.extend(out)
    return out


def _controls(
    specs: Sequence[OpSpec],
    props: list[str],
    jobs: int,
    started: Callable[[OpSpec], None],
    kw: dict[str, Any],
) -> dict[tuple[str, str], Verdict]:
    """Step 1: each op's control through every property, as opzoo check runs it; its verdict by
    (op, mutant)."""
    controls = [mutant_spec(spec, CONTROL) for spec in specs]
    checked: list[Result] = []
    try:
        options = RunOptions(
            props, kw["profile"], kw["examples"], device="cpu", timeout=kw["timeout"], jobs=jobs
        )
        check_all(controls, options, registry=kw["registry"], into=checked, started=started)
    finally:
        verdicts = {
            (spec.name, CONTROL): _control(spec, control, checked) for spec, control in zip(specs, controls)
        }
    return verdicts


def _tasks(
    specs: Sequence[OpSpec],
    names: list[str],
    verdicts: dict[tuple[str, str], Verdict],
    found: dict[int, Any],
) -> list[tuple[int, str, str]]:
    """Step 2's tasks: each mutant that applies to an op (its ``found`` facts say), one task each
    (the op by its index); one that does not, or of an op that hung or failed while its facts were
    found, gets its verdict in ``verdicts``."""
    tasks = []
    for i, spec in enumerate(specs):
        got = found.get(i)
        if got is None:
            why = HUNG
        elif not isinstance(got, Facts) or got.reason:
            why = f"not run: the op failed while its facts were found: {got.reason}"
        for name in names:
            if not isinstance(got, Facts) or got.reason:
                verdicts[spec.name, name] = Verdict(spec.name, name, UNJUDGED, reason=why)
            elif got.applies[name]:
                verdicts[spec.name, name] = Verdict(spec.name, name, NOT_APPLICABLE, reason=got.applies[name])
            else:
                tasks.append((i, name, "cpu"))
    return tasks


def _control(spec: OpSpec, control: OpSpec, results: list[Result]) -> Verdict:
    mine = [r for r in results if r.op == control.name]
    failed = [r for r in mine if r.status == "fail"]
    seconds = sum(r.seconds for r in mine)
    ran = [r.prop for r in mine if r.status == "pass"]
    if failed:
        reason = "; ".join(
            f"{r.prop}: {r.reason.strip().splitlines()[0] if r.reason.strip() else 'failed'}" for r in failed
        )
        hung = any(r.timed_out for r in mine)  # its mutants are not run: each would hang as long
        return Verdict(
            spec.name,
            CONTROL,
            FAILED,
            ", ".join(r.prop for r in failed),
            reason,
            seconds,
            ran=ran,
            timed_out=hung,
        )
    return Verdict(spec.name, CONTROL, PASSED, "", "", seconds, ran=ran)


def verdict_of(spec: OpSpec, mutant: str, got: Any) -> Verdict:
    """A worker's answer as a verdict: a :class:`Result` is what the pool says of a task it killed
    (past its time limit) or lost (the worker crashed), which the checks of the mutant caused."""
    if isinstance(got, Verdict):
        return got
    if got.status == "fail":
        return Verdict(spec.name, mutant, KILLED, "(worker)", got.reason, got.seconds, True)
    return Verdict(spec.name, mutant, UNJUDGED, reason=got.reason, seconds=got.seconds)


__all__ = ["CONTROL", "Score", "Verdict", "mutate", "mutate_one", "order", "parse_score", "verdict_of"]
