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

import warnings
from typing import Any

import pytest

from opzoo.exceptions import printable
from opzoo.testing.running._options import CHECK, MUTATE, OPTIONS, Option, OptionError, parse

# The registry this session checks, loaded once at collection; kept on the config, not in a global.
REGISTRY = pytest.StashKey[Any]()
# The session's run: its options (as --opzoo and as --opzoo-mutate run), and what the plugins'
# hooks answered (opzoo.testing.running._hooks.RunHooks).
CHECK_OPTIONS = pytest.StashKey[Any]()
MUTATE_OPTIONS = pytest.StashKey[Any]()
HOOKS = pytest.StashKey[Any]()
# The ops named in --opzoo=..., by name or import path, as looked up at collection.
SPECS = pytest.StashKey[dict]()
# Ops that hung in this session: their remaining properties are skipped, not waited for again.
HUNG = pytest.StashKey[set]()
# Results checked ahead of their tests, by (op, property, device): see OpzooItem.checked.
CHECKED = pytest.StashKey[dict]()
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
    for option in OPTIONS.values():  # opzoo check's options, declared in testing/running/_options
        if option.pytest:
            how: dict[str, Any] = {"action": "append"} if option.many else {}
            if option.type is not None and not option.many:
                how["type"] = option.type
            if option.choices is not None:
                how["choices"] = list(option.choices)
            group.addoption(
                _flag(option),
                dest=_dest(option),
                default=None,
                metavar=option.metavar,
                help=_help(option),
                **how,
            )


def _flag(option: Option) -> str:
    return "--opzoo-" + option.flag.removeprefix("--")


def _dest(option: Option) -> str:
    return _flag(option).removeprefix("--").replace("-", "_")


def _help(option: Option) -> str:
    """The option's help, with its default under --opzoo, and under --opzoo-mutate where it differs."""
    mutate = option.default_for(MUTATE)
    if mutate == option.default_for(CHECK) or MUTATE not in option.commands:
        return option.help_for(CHECK)
    return f"{option.help_for(CHECK)[:-1]}; under --opzoo-mutate: {mutate})"


def _run_options(config: pytest.Config, command: str) -> Any:
    """The options of this session's run as ``command`` (check or mutate) runs, checked: a bad one
    is a usage error naming its flag."""
    values = {o.name: config.getoption(_dest(o)) for o in OPTIONS.values() if o.pytest}
    try:
        return parse(values, command)
    except OptionError as exc:
        flag = _flag(OPTIONS[exc.option])
        message = exc.naming(flag)
        raise pytest.UsageError(message if flag in message else f"{flag}: {message}") from None


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist registers it too; without xdist installed, pytest would warn of an unknown mark.
    config.addinivalue_line("markers", "xdist_group(name): run these tests on one xdist worker")


class OpzooCheckFailed(AssertionError):
    """A property of an op does not hold; its message is the full failure report."""


class _Item(pytest.Item):
    """An opzoo test: its failure is the report, printed whole and printable; it is located at "opzoo"."""

    op: str

    def _spec(self) -> Any:
        """The op this test checks, as --opzoo=... looked it up or by its name in the registry."""
        return self.config.stash.get(SPECS, {}).get(self.op) or self.config.stash[REGISTRY].info(self.op)

    def repr_failure(self, excinfo: Any, style: Any = None) -> Any:
        if isinstance(excinfo.value, OpzooCheckFailed):
            return printable(str(excinfo.value), lines=True)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[str, int | None, str]:
        return "opzoo", None, self.name


class OpzooItem(_Item):
    """One property of one op on one device."""

    def __init__(self, *, op: str, prop: str, device: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.op, self.prop, self.device = op, prop, device

    def runtest(self) -> None:
        hung = self.config.stash.setdefault(HUNG, set())
        if self.op in hung:
            pytest.skip("not run: the op hung")
        hooks = self.config.stash[HOOKS]
        result = self.checked(hooks)
        _warn_of(hooks)
        notes = [printable(n) for n in result.notes]  # opzoo check's `note:` lines
        if notes:  # a report section (shown with a failure, and by -rP), user properties (--junitxml)
            self.add_report_section("call", "opzoo notes", "\n".join(notes))
            self.user_properties.extend(("opzoo_note", n) for n in notes)
        if result.timed_out:
            hung.add(self.op)
        if result.status == "skip":
            pytest.skip(result.reason)
        if result.status == "fail":
            raise OpzooCheckFailed(result.report())

    def checked(self, hooks: Any) -> Any:
        """This test's result. The op's tests that come after it in this process are checked with
        it, in one worker, as ``opzoo check`` checks an op: its examples drawn once, torch's first
        calls paid once, not once per test. An xdist worker cannot tell which tests it will run,
        unless ``--dist loadgroup`` keeps an op's tests on one worker: else each is checked alone."""
        from opzoo.testing import check_property
        from opzoo.testing.running._parallel import run_pool

        checked = self.config.stash.setdefault(CHECKED, {})
        mine = (self.op, self.prop, self.device)
        if mine not in checked:
            ours = [(i.op, i.prop, i.device) for i in self.session.items if isinstance(i, OpzooItem)]
            # an xdist worker knows its --dist loadgroup so (its own --dist is "no"); under a per-test
            # limit (pytest-timeout's --timeout) a test's time must be its own check's alone
            worker = hasattr(self.config, "workerinput") and not getattr(
                self.config.option, "loadgroup", False
            )
            alone = worker or bool(getattr(self.config, "_env_timeout", None))
            later = [] if alone or mine not in ours else ours[ours.index(mine) + 1 :]
            tasks = [(0, p, d) for o, p, d in [mine, *later] if o == self.op and (o, p, d) not in checked]
            kw = self.config.stash[CHECK_OPTIONS].check_kwargs()
            done = run_pool(
                [self._spec()], tasks, check_property, jobs=1, limit=kw["timeout"], registry=hooks, **kw
            )
            checked.update({(self.op, p, d): r for (_, p, d), r in done.items()})
        return checked.pop(mine)


class MutantItem(_Item):
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
            verdict_of,
        )

        spec = self._spec()
        seen = self.config.stash.setdefault(MUTATED, {}).setdefault(self.op, [])
        failing = {self.op: [p for v in seen if v.mutant == CONTROL for p in v.prop.split(", ") if p]}
        options = self.config.stash[MUTATE_OPTIONS]
        hooks = self.config.stash[HOOKS]
        props = options.properties
        verdict = _in_a_worker(
            mutate_one,
            spec,
            self.mutant,
            "cpu",
            None if options.timeout is None else options.timeout * len(props),
            props=props,
            failing=failing,
            profile=options.profile,
            examples=options.examples,
            registry=hooks,
            timeout=options.timeout,
        )
        verdict = verdict_of(spec, self.mutant, verdict)  # the pool's Result: a worker ended or killed
        _warn_of(hooks)
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


def _in_a_worker(work: Any, spec: Any, what: str, device: str, limit: float | None, **kw: Any) -> Any:
    """``work(spec, what, device=device, **kw)`` in a forked worker, as ``opzoo check`` runs it:
    an op that ends, hangs or escapes its process fails its test, and pytest goes on (before: an
    os._exit in a backward ended pytest with exit status 0, ``.s``). A worker killed ``GRACE``
    seconds past ``limit``, or ended, is the pool's failing Result."""
    from opzoo.testing.running._parallel import run_pool

    return run_pool([spec], [(0, what, device)], work, jobs=1, limit=limit, **kw)[0, what, device]


class OpzooPluginWarning(UserWarning):
    """A plugin's hook failed while opzoo's checks ran (its answer was passed over)."""


def _warn_of(hooks: Any) -> None:
    """Warn of each failure of a plugin's hook since the last test: no test is that plugin's."""
    for failure in hooks.news():
        warnings.warn(OpzooPluginWarning(f"a plugin's hook failed: {printable(str(failure))}"), stacklevel=1)


def _control_verdict(verdict: Any) -> Any:
    """The control as mutate_one runs it (every property, none failing) as a control verdict."""
    from opzoo.testing.mutation._mutate import FAILED, KILLED, PASSED

    if verdict.status == KILLED:
        verdict.status, verdict.reason = FAILED, f"{verdict.prop}: {verdict.reason}"
    else:
        verdict.status, verdict.reason = PASSED, ""
    return verdict


class OpzooLoadItem(_Item):
    """A plugin or op that failed to load: a failing test, not a silent gap in the checks."""

    def __init__(self, *, failure: str, **kw: Any) -> None:
        super().__init__(**kw)
        self.failure = failure

    def runtest(self) -> None:
        raise OpzooCheckFailed(f"failed to load: {self.failure}")


@pytest.hookimpl(tryfirst=True)  # before -k and -m deselect items
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
    if config.getoption("opzoo_mutate") is not None:
        _collect_mutants(session, config, items)
    if config.getoption("opzoo") is not None:
        _collect_checks(session, config, items)


def _registry(config: pytest.Config) -> Any:
    """The session's registry, loaded once (with the run's RunHooks beside it)."""
    if REGISTRY not in config.stash:
        from opzoo.core._loading import load
        from opzoo.testing.running._hooks import RunHooks

        config.stash[REGISTRY] = load()
        config.stash[HOOKS] = RunHooks(config.stash[REGISTRY])
    return config.stash[REGISTRY]


def _named(config: pytest.Config, session: pytest.Session, items: list[Any], flag: str) -> list[str]:
    """The ops ``--opzoo`` or ``--opzoo-mutate`` names, looked up (into ``SPECS``): every op for
    ``*``, a load item for each that fails to load; a name that is no op is a usage error."""
    from opzoo.core._registry import lookup
    from opzoo.exceptions import OpNotFoundError, OpZooError

    wanted, reg = config.getoption(flag.removeprefix("--").replace("-", "_")), _registry(config)
    if wanted == "*":
        return [spec.name for spec in reg.load_all()]
    names = [n.strip() for n in wanted.split(",") if n.strip()]
    if not names:  # `--opzoo=` or `--opzoo=,,` tested nothing, and passed
        raise pytest.UsageError(
            f"{flag}={wanted} names no op: give {flag} for every op, or {flag}=NAME[,NAME...]"
        )
    found = []
    for name in dict.fromkeys(names):
        # A name that is no op is a usage error, one line; an op that fails to load is one
        # failing test, not one per property.
        try:
            # a name, or an import path (its module tried in a child, imported in the workers only)
            config.stash.setdefault(SPECS, {})[name] = lookup(reg, name, here=False)
        except OpNotFoundError as exc:
            raise pytest.UsageError(f"{flag}: {exc}") from None
        except OpZooError as exc:
            items.append(OpzooLoadItem.from_parent(session, name=f"load[{name}]", failure=str(exc)))
            continue
        found.append(name)
    return found


def _collect_checks(session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
    """One item per op x property x device (``--opzoo``); every failure to load one when every op
    is checked."""
    from opzoo.testing.running._result import result_id

    options = config.stash[CHECK_OPTIONS] = _run_options(config, CHECK)
    names = _named(config, session, items, "--opzoo")
    if config.getoption("opzoo") == "*":
        failures = _registry(config).failures()
        labels = [f.name or f.source.entry_point or str(f.source) for f in failures]
        twice = {label for label in labels if labels.count(label) > 1}
        for i, (label, failure) in enumerate(zip(labels, failures)):
            # a label twice (one name in two dists) is told apart by its place in the list
            shown = f"{label}-{i}" if label in twice else label
            items.append(OpzooLoadItem.from_parent(session, name=f"load[{shown}]", failure=str(failure)))
    for name in names:
        for prop in options.properties:
            for device in options.devices:
                item_id = result_id(name, prop, device)
                item = OpzooItem.from_parent(session, name=item_id, op=name, prop=prop, device=device)
                # Under pytest-xdist with --dist loadgroup, an op's checks stay on one worker, in
                # order, so that one that hangs skips the op's others there as in a serial run.
                item.add_marker(pytest.mark.xdist_group(name))
                items.append(item)


def _collect_mutants(session: pytest.Session, config: pytest.Config, items: list[Any]) -> None:
    """One item per op x mutant, the control first (``--opzoo-mutate``)."""
    from opzoo.testing.mutation._mutants import MUTANTS, parse_mutants

    try:
        chosen = config.getoption("opzoo_mutant")
        mutants = parse_mutants(None if chosen is None else [chosen])
        raw = config.getoption("opzoo_min_score")
        if raw is not None:
            from opzoo.testing.mutation._mutate import parse_score

            config.stash[MIN_SCORE] = parse_score(raw)
    except ValueError as exc:
        raise pytest.UsageError(f"--opzoo-mutate: {exc}") from None
    config.stash[MUTATE_OPTIONS] = _run_options(config, MUTATE)
    control = next(m.name for m in MUTANTS.values() if m.control)
    for name in _named(config, session, items, "--opzoo-mutate"):
        for mutant in [control, *(m for m in mutants if m != control)]:
            item = MutantItem.from_parent(session, name=f"mutant[{name}~{mutant}]", op=name, mutant=mutant)
            item.add_marker(pytest.mark.xdist_group(f"mutate-{name}"))  # the control first, on one worker
            items.append(item)
