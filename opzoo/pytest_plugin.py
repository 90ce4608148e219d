"""opzoo's pytest plugin: ``pytest --opzoo`` checks every registered op, ``--opzoo=a,b`` some.

Registered under the ``pytest11`` entry point, so it is active wherever opzoo is installed, and
cheap until asked for: nothing heavy is imported unless ``--opzoo`` is given. Each op x property
(x device) becomes one test with an id like ``gradient[myrelu]``.

Under pytest-xdist (``-n 2``) every worker collects the same items in the same order (ids come from
the registry, never from a run's state) and each check's hypothesis examples are keyed by its id; the
``ci`` profile is derandomized and keeps no database. So the verdicts are a serial run's.
"""

from __future__ import annotations

from typing import Any

import pytest

from opzoo.testing._profiles import HELP as PROFILES_HELP
from opzoo.testing._profiles import PROFILES

# The registry this session checks, loaded once at collection; kept on the config, not in a global.
REGISTRY = pytest.StashKey[Any]()
# The ops named in --opzoo=..., by name or import path, as looked up at collection.
SPECS = pytest.StashKey[dict]()
# Ops that hung in this session: their remaining properties are skipped, not waited for again.
HUNG = pytest.StashKey[set]()


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
    if wanted is None:
        return
    from opzoo._commands import check_seconds
    from opzoo._loading import load
    from opzoo._registry import lookup
    from opzoo.exceptions import ConfigError, OpNotFoundError, OpZooError
    from opzoo.testing._runner import DEVICES, result_id
    from opzoo.testing.properties import parse_properties

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
