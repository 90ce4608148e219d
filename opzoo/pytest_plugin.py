"""opzoo's pytest plugin: ``pytest --opzoo`` checks every registered op, ``--opzoo=a,b`` some;
``pytest --opzoo-mutate`` mutation-tests the checks of every op (``--opzoo-mutate=a,b``: of some).

Registered under the ``pytest11`` entry point, so it is active wherever opzoo is installed, and
cheap until asked for: nothing heavy is imported unless ``--opzoo`` is given. Each op x property
(x device) becomes one test with an id like ``gradient[myrelu]``; under ``--opzoo-mutate`` each
op x mutant becomes one, ``mutant[myrelu~sign]``: it passes when a property kills the mutant, fails
when the mutant survives (the report says why, where a reason can be given, and the op's score so far
is in the summary), and is skipped when the mutant does not apply. ``mutant[myrelu~identity]``, the
control, fails if the op fails a property by itself; ``--opzoo-min-score`` fails a survivor only
while the op's kill rate so far is below it.

Under pytest-xdist (``-n 2``) every worker collects the same items in the same order (ids come from
the registry, never from a run's state) and each check's hypothesis examples are keyed by its id; the
``ci`` profile is derandomized and keeps no database. So the verdicts are a serial run's.
"""

from __future__ import annotations

from typing import Any

import pytest

from opzoo.testing.properties import parse_properties
from opzoo.testing.running._profiles import HELP as PROFILES_HELP
from opzoo.testing.running._profiles import PROFILES

# The registry this session checks, loaded once at collection; kept on the config, not in a global.
REGISTRY = pytest.StashKey[Any]()
# The ops named in --opzoo=..., by name or import path, as looked up at collection.
SPECS = pytest.StashKey[dict]()
# Ops that hung in this session: their remaining properties are skipped, not waited for again.
HUNG = pytest.StashKey[set]()
# --opzoo-mutate: the verdicts so far, by op; and the minimum score, parsed.
MUTATED = pytest.StashKey[dict]()
MIN_SCORE = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("opzoo", "opzoo property tests of registered ops")
    group.addoption(
        "--opzoo",
        nargs="?",
        const="*",
        default=None,
        metavar="NAMES",
        help="check registered ops: all of them, or a comma-separated list of names (or import paths "
        "package.module:Class, for ops no plugin publishes)",
    )
    group.addoption(
        "--opzoo-property",
        default=None,
        metavar="PROPS",
        help="comma-separated properties to check (default: all)",
    )
    group.addoption("--opzoo-profile", default=None, choices=list(PROFILES), help=PROFILES_HELP)
    group.addoption(
        "--opzoo-mutate",
        nargs="?",
        const="*",
        default=None,
        metavar="NAMES",
        help="mutation-test the checks of registered ops (all, or a comma-separated list): one test per "
        "op x mutant, passing when a property kills it",
    )
    group.addoption(
        "--opzoo-mutant",
        default=None,
        metavar="MUTANTS",
        help="comma-separated mutants for --opzoo-mutate (default: all)",
    )
    group.addoption(
        "--opzoo-min-score",
        default=None,
        metavar="SCORE",
        help="under --opzoo-mutate, a survivor fails only while its op's kill rate is below SCORE "
        "(0.99 or 99%%; default: every survivor fails)",
    )
    group.addoption(
        "--opzoo-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="wall-clock limit per property (default 60); an op past it is hung, its other checks skipped",
    )


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist registers it too; without xdist installed, pytest would warn of an unknown mark.
    config.addinivalue_line("markers", "xdist_group(name): run these tests on one xdist worker")


class OpzooCheckFailed(AssertionError):
    """A property of an op does not hold; its message is the full failure report."""


class OpzooItem(pytest.Item):
    """One property of one op on one device."""

    def __init__(self, *, op: str, prop: str, device: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.op, self.prop, self.device = op, prop, device

    def runtest(self) -> None:
        from opzoo.testing import check_property

        registry = self.config.stash[REGISTRY]
        hung = self.config.stash.setdefault(HUNG, set())
        if self.op in hung:
            pytest.skip("not run: the op hung")
        spec = self.config.stash.get(SPECS, {}).get(self.op) or registry.info(self.op)
        result = check_property(
            spec,
            self.prop,
            profile=self.config.getoption("opzoo_profile"),
            device=self.device,
            registry=registry,
            timeout=self.config.getoption("opzoo_timeout"),
        )
        if result.timed_out:
            hung.add(self.op)
        if result.status == "skip":
            pytest.skip(result.reason)
        if result.status == "fail":
            raise OpzooCheckFailed(result.report())

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, OpzooCheckFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[str, int | None, str]:
        return "opzoo", None, self.name


class MutantItem(pytest.Item):
    """One mutant of one op (``--opzoo-mutate``); the control runs first, its failing properties are
    not asked of the op's other mutants."""

    def __init__(self, *, op: str, mutant: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.op, self.mutant = op, mutant

    def runtest(self) -> None:
        from opzoo.testing.mutation._mutate import (
            CONTROL,
            KILLED,
            NOT_APPLICABLE,
            PASSED,
            SURVIVED,
            Score,
            mutate_one,
        )

        registry = self.config.stash[REGISTRY]
        spec = self.config.stash.get(SPECS, {}).get(self.op) or registry.info(self.op)
        seen = self.config.stash.setdefault(MUTATED, {}).setdefault(self.op, [])
        failing = {self.op: [p for v in seen if v.mutant == CONTROL for p in v.prop.split(", ") if p]}
        chosen = self.config.getoption("opzoo_property")
        props = parse_properties(None if chosen is None else [chosen])
        verdict = mutate_one(
            spec,
            self.mutant,
            props=props,
            failing=failing,
            profile=self.config.getoption("opzoo_profile") or "ci",
            registry=registry,
            timeout=self.config.getoption("opzoo_timeout"),
        )
        if self.mutant == CONTROL:
            verdict = _control_verdict(verdict)
        seen.append(verdict)
        if verdict.status == NOT_APPLICABLE:
            pytest.skip(f"not applicable: {verdict.reason}")
        if verdict.status in (KILLED, PASSED):
            return
        score = Score.of(seen)
        rate = "-" if score.rate is None else f"{100 * score.rate:.1f}%"
        minimum = self.config.stash.get(MIN_SCORE, None)
        report = f"{verdict.status} {self.op}~{self.mutant}: {verdict.why()} (the op's score so far: {rate})"
        if verdict.status == SURVIVED and minimum is not None and (score.rate or 0) >= minimum:
            pytest.skip(report)
        raise OpzooCheckFailed(report)

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, OpzooCheckFailed):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[str, int | None, str]:
        return "opzoo", None, self.name


def _control_verdict(verdict: Any) -> Any:
    """The control as mutate_one runs it (every property, none failing) as a control verdict."""
    from opzoo.testing.mutation._mutate import FAILED, KILLED, PASSED

    if verdict.status == KILLED:
        verdict.status, verdict.reason = FAILED, f"{verdict.prop}: {verdict.reason}"
    else:
        verdict.status, verdict.reason = PASSED, ""
    return verdict


class OpzooLoadItem(pytest.Item):
    """A plugin or op that failed to load: a failing test, not a silent gap in the checks."""

    def __init__(self, *, failure: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.failure = failure

    def runtest(self) -> None:
        raise OpzooCheckFailed(f"failed to load: {self.failure}")

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        return str(excinfo.value)

    def reportinfo(self) -> tuple[str, int | None, str]:
        return "opzoo", None, self.name


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect items
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
    wanted = config.getoption("opzoo")
    if config.getoption("opzoo_mutate") is not None:
        _collect_mutants(session, config, items)
    if wanted is None:
        return
    from opzoo.cli._common import check_seconds
    from opzoo.core._loading import load
    from opzoo.core._registry import lookup
    from opzoo.exceptions import ConfigError, OpNotFoundError, OpZooError
    from opzoo.testing.running._runner import DEVICES, result_id

    reg = config.stash[REGISTRY] = load()
    if wanted == "*":
        names = [spec.name for spec in reg.load_all()]
        for i, failure in enumerate(reg.failures()):
            label = failure.name or failure.source.entry_point or str(failure.source)
            items.append(OpzooLoadItem.from_parent(session, name=f"load[{label}-{i}]", failure=str(failure)))
    else:
        names = [n.strip() for n in wanted.split(",") if n.strip()]
        if not names:  # `--opzoo=` or `--opzoo=,,` tested nothing, and passed
            raise pytest.UsageError(
                f"--opzoo={wanted} names no op: give --opzoo for every op, or --opzoo=NAME[,NAME...]"
            )
    try:
        chosen = config.getoption("opzoo_property")
        props = parse_properties(None if chosen is None else [chosen])
    except ValueError as exc:
        raise pytest.UsageError(f"--opzoo-property: {exc}") from None
    timeout = config.getoption("opzoo_timeout")
    try:
        check_seconds("--opzoo-timeout", timeout)
    except ConfigError as exc:
        raise pytest.UsageError(str(exc)) from None
    for name in dict.fromkeys(names):
        if wanted != "*":
            # A name that is no op is a usage error, one line; an op that fails to load is one
            # failing test, not one per property.
            try:
                spec = lookup(reg, name)  # a name, or an import path package.module:Class
            except OpNotFoundError as exc:
                raise pytest.UsageError(f"--opzoo: {exc}") from None
            except OpZooError as exc:
                items.append(OpzooLoadItem.from_parent(session, name=f"load[{name}]", failure=str(exc)))
                continue
            config.stash.setdefault(SPECS, {})[name] = spec
        for prop in props:
            for device in DEVICES:
                item_id = result_id(name, prop, device)
                item = OpzooItem.from_parent(session, name=item_id, op=name, prop=prop, device=device)
                # Under pytest-xdist with --dist loadgroup, an op's checks stay on one worker, in
                # order, so that one that hangs skips the op's others there as in a serial run.
                item.add_marker(pytest.mark.xdist_group(name))
                items.append(item)


def _collect_mutants(session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
    """One item per op x mutant, the control first (``--opzoo-mutate``)."""
    from opzoo.core._loading import load
    from opzoo.core._registry import lookup
    from opzoo.exceptions import OpNotFoundError, OpZooError
    from opzoo.testing.mutation._mutants import MUTANTS, parse_mutants

    wanted = config.getoption("opzoo_mutate")
    try:
        chosen = config.getoption("opzoo_mutant")
        mutants = parse_mutants(None if chosen is None else [chosen])
        parse_properties(
            None if config.getoption("opzoo_property") is None else [config.getoption("opzoo_property")]
        )
        raw = config.getoption("opzoo_min_score")
        if raw is not None:
            from opzoo.testing.mutation._mutate import parse_score

            config.stash[MIN_SCORE] = parse_score(raw)
    except ValueError as exc:
        raise pytest.UsageError(f"--opzoo-mutate: {exc}") from None
    reg = config.stash[REGISTRY] = config.stash.get(REGISTRY, None) or load()
    names = (
        [s.name for s in reg.load_all()]
        if wanted == "*"
        else [n.strip() for n in wanted.split(",") if n.strip()]
    )
    control = next(m.name for m in MUTANTS.values() if m.control)
    for name in dict.fromkeys(names):
        if wanted != "*":
            try:
                config.stash.setdefault(SPECS, {})[name] = lookup(reg, name)
            except OpNotFoundError as exc:
                raise pytest.UsageError(f"--opzoo-mutate: {exc}") from None
            except OpZooError as exc:
                items.append(OpzooLoadItem.from_parent(session, name=f"load[{name}]", failure=str(exc)))
                continue
        for mutant in [control, *(m for m in mutants if m != control)]:
            item = MutantItem.from_parent(session, name=f"mutant[{name}~{mutant}]", op=name, mutant=mutant)
            item.add_marker(pytest.mark.xdist_group(f"mutate-{name}"))  # the control first, on one worker
            items.append(item)
