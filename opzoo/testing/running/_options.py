"""The options of a run of the checks, each declared once: one :class:`Option` record holds its
parameter, flag, type, default (and a command's own default, where it differs), the check of its
value and its help.

Everything else reads the records: ``opzoo check``, ``opzoo mutate`` and ``opzoo report`` build their
flags from them (``cli/_common``), the pytest plugin its ``--opzoo-*`` options, the library takes
the values parsed and checked as one :class:`RunOptions`, and a failure's reproduce line names them
by their flags (:func:`flags`). A bad value is an :class:`OptionError` that names the parameter; each
front end names its own flag instead.

Importing this module is cheap (no torch, no hypothesis): the command line's help reads it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping

from opzoo.exceptions import ConfigError
from opzoo.testing.properties import parse_properties
from opzoo.testing.running._profiles import HELP as PROFILES_HELP
from opzoo.testing.running._profiles import PROFILES

__all__ = [
    "COMMANDS",
    "OPTIONS",
    "Option",
    "OptionError",
    "RunOptions",
    "flags",
    "in_shard",
    "parse",
    "seconds",
]

#: The commands that run checks; the pytest plugin runs them as ``check`` (``--opzoo``) and as
#: ``mutate`` (``--opzoo-mutate``).
CHECK, MUTATE, REPORT = "check", "mutate", "report"
COMMANDS = (CHECK, MUTATE, REPORT)

#: The longest time limit: a week. Longer is no limit at all, and past about 1e10 s the timers
#: underneath overflow (every property failed with OverflowError at a limit of 1e300).
MAX_SECONDS = 7 * 24 * 3600.0
#: Hypothesis examples per property, at most: 330 times the thorough profile's. Beyond, hypothesis
#: itself fails (at 1e8 with FlakyStrategyDefinition; at 1e9 and more it never started).
MAX_EXAMPLES = 100_000


def seconds(value: float) -> str | None:
    """Why ``value`` is not a time limit (a positive number of seconds, at most a week), or None."""
    if math.isfinite(value) and 0 < value <= MAX_SECONDS:
        return None
    return f"must be a positive number of seconds, at most {MAX_SECONDS:.0f} (a week), got {value:g}"


def _limit(value: float | None) -> str | None:
    return None if value is None else seconds(value)  # None: no limit (the library's)


def _examples(value: int | None) -> str | None:
    if value is None or 0 < value <= MAX_EXAMPLES:
        return None
    return f"must be a positive integer, at most {MAX_EXAMPLES}, got {value}"


def _jobs(value: int | None) -> str | None:
    return None if value is None or value > 0 else f"must be a positive integer, got {value}"


def _one_of(choices: Iterable[str]) -> Callable[[Any], str | None]:
    known = tuple(choices)

    def check(value: Any) -> str | None:
        if value is None or value in known:
            return None
        return f"must be one of {', '.join(known)}, got {value!r}"

    return check


def _shard(value: str | tuple[int, int] | None) -> tuple[int, int] | None:
    """``"K/N"`` as (K, N): part K of N (1 <= K <= N), or None for all of it."""
    if value is None or isinstance(value, tuple):
        return value
    k, sep, n = str(value).partition("/")
    try:
        part = (int(k), int(n))
    except ValueError:
        part = None
    if not sep or part is None:
        raise ValueError(f"`shard` must be K/N (part K of N, e.g. 2/4), got {value!r}")
    return part


def _part(value: tuple[int, int] | None) -> str | None:
    if value is None or 1 <= value[0] <= value[1]:
        return None
    return f"must be K/N with 1 <= K <= N, got {value[0]}/{value[1]}"


def in_shard(shard: tuple[int, int] | None, op: str, prop: str) -> bool:
    """Whether the check of ``prop`` on ``op`` is in ``shard``: a split by op and property that is
    the same on every machine and in every run (a CRC of the two names, not Python's hash)."""
    if shard is None:
        return True
    import zlib

    k, n = shard
    return zlib.crc32(f"{op}\0{prop}".encode()) % n == k - 1


def _properties(value: Iterable[str] | None) -> tuple[str, ...]:
    return tuple(parse_properties(None if value is None else list(value)))


def _fine(value: Any) -> str | None:
    return None


@dataclass(frozen=True)
class Option:
    """One option of a run of the checks.

    name:     the parameter, and the field of :class:`RunOptions`.
    help:     what it does; the front ends add its default.
    flag:     its flag, ``--NAME`` unless given; the pytest plugin's is ``--opzoo-`` and the rest.
    short:    a one-letter flag of the command line (pytest keeps those for itself).
    type:     how the text of a flag becomes its value (none for ``many``).
    many:     repeatable, and each comma-separated: the texts given, made one value by ``convert``.
    default:  the value when it is not given; ``defaults``: a command's own, where it differs;
              ``unset``: what a default of None means, as help says it.
    commands: the commands that take it; ``pytest``: whether the pytest plugin does too.
    convert:  the value from what was given (ValueError says why it cannot be).
    check:    why a value is refused (said after the parameter's name), or None.
    """

    name: str
    help: str
    flag: str = ""
    short: str = ""
    type: Callable[[str], Any] | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    many: bool = False
    default: Any = None
    defaults: Mapping[str, Any] = field(default_factory=dict)
    unset: str = ""
    commands: tuple[str, ...] = COMMANDS
    pytest: bool = True
    convert: Callable[[Any], Any] | None = None
    check: Callable[[Any], str | None] = _fine

    def __post_init__(self) -> None:
        if not self.flag:
            object.__setattr__(self, "flag", "--" + self.name.replace("_", "-"))

    def default_for(self, command: str) -> Any:
        return self.defaults.get(command, self.default)

    def help_for(self, command: str) -> str:
        """Its help, with what it is when not given to ``command``."""
        default = self.default_for(command)
        shown = self.unset if default is None else f"{default:g}" if isinstance(default, float) else default
        if shown == "":
            return self.help
        if self.help.endswith(")"):  # "(repeatable or comma-separated; default: all)"
            return f"{self.help[:-1]}; default: {shown})"
        return f"{self.help} (default: {shown})"


#: name -> option, in the order the commands list them and a reproduce line names them.
OPTIONS: dict[str, Option] = {
    o.name: o
    for o in (
        Option(
            "properties",
            "run only these properties (repeatable or comma-separated)",
            flag="--property",
            short="-p",
            metavar="PROP",
            many=True,
            unset="all",
            convert=_properties,
        ),
        Option(
            "profile",
            PROFILES_HELP,
            choices=tuple(PROFILES),
            # opzoo mutate and opzoo report keep a record: the reproducible profile, whatever $CI says
            defaults={MUTATE: "ci", REPORT: "ci"},
            unset="ci when $CI is set, else dev",
            check=_one_of(PROFILES),
        ),
        Option(
            "examples",
            "hypothesis examples per property",
            type=int,
            metavar="N",
            unset="the profile's, of which library opchecks ten, all under thorough",
            check=_examples,
        ),
        Option(
            "seed",
            "hypothesis seed for a profile that is not derandomized (a failure's reproduce line names it)",
            type=int,
            metavar="N",
            unset="drawn for each check",
            commands=(CHECK,),
        ),
        Option(
            "device",
            "where to run; cuda is skipped without CUDA",
            choices=("cpu", "cuda", "all"),
            default="all",
            commands=(CHECK,),
            check=_one_of(("cpu", "cuda", "all")),
        ),
        Option(
            "timeout",
            "wall-clock limit in seconds per property of an op; past it the op counts as hung",
            type=float,
            metavar="SECONDS",
            default=60.0,
            check=_limit,
        ),
        Option(
            "shard",
            "run only part K of N of the checks (e.g. 2/4; mutate: of the ops), split the same way on "
            "every machine, for N CI machines",
            metavar="K/N",
            unset="all",
            commands=(CHECK, MUTATE),
            pytest=False,  # pytest's items are an op's property each: pytest's sharding plugins split them
            convert=_shard,
            check=_part,
        ),
        Option(
            "jobs",
            "worker processes that run checks side by side (1: one; the ops never run in this process)",
            short="-j",
            type=int,
            metavar="N",
            unset="one per usable CPU on Linux, else 1",
            pytest=False,  # pytest-xdist's -n runs pytest's tests side by side
            check=_jobs,
        ),
    )
}


class OptionError(ConfigError):
    """A bad value of a run option. The message names it as a parameter (```timeout```);
    ``option`` is that name, and :meth:`naming` says it with a front end's flag instead."""

    def __init__(self, option: str, message: str) -> None:
        super().__init__(message)
        self.option = option

    def naming(self, flag: str) -> str:
        return str(self).replace(f"`{self.option}`", flag)


@dataclass(frozen=True)
class RunOptions:
    """What a run of the checks is asked to do: one field per option of :data:`OPTIONS`, with its
    default, each value checked when made (:class:`OptionError`, naming the parameter, if bad).

    properties: the properties to run, by name (None or not given: all; names may be comma-separated).
    profile:    the hypothesis profile (None: ``ci`` when ``$CI`` is set, else ``dev``).
    examples:   hypothesis examples per property (None: the profile's, and a property's ``draws``).
    seed:       hypothesis's seed for a profile that is not derandomized (None: drawn per check).
    device:     ``cpu``, ``cuda`` or ``all``.
    timeout:    seconds per property of an op before it counts as hung (None: no limit).
    shard:      (K, N): only part K of N of the checks (:func:`in_shard`); None: all. ``"K/N"`` too.
    jobs:       worker processes (None: one per usable CPU where workers can be forked, else 1).
    """

    properties: tuple[str, ...] | None = OPTIONS["properties"].default
    profile: str | None = OPTIONS["profile"].default
    examples: int | None = OPTIONS["examples"].default
    seed: int | None = OPTIONS["seed"].default
    device: str = OPTIONS["device"].default
    timeout: float | None = OPTIONS["timeout"].default
    shard: tuple[int, int] | None = OPTIONS["shard"].default
    jobs: int | None = OPTIONS["jobs"].default

    def __post_init__(self) -> None:
        for option in OPTIONS.values():
            value = getattr(self, option.name)
            if option.convert is not None:
                try:
                    value = option.convert(value)
                except ValueError as exc:
                    raise OptionError(option.name, str(exc)) from None
                object.__setattr__(self, option.name, value)
            why = option.check(value)
            if why is not None:
                raise OptionError(option.name, f"`{option.name}` {why}")

    @property
    def devices(self) -> tuple[str, ...]:
        return ("cpu", "cuda") if self.device == "all" else (self.device,)

    def check_kwargs(self) -> dict[str, Any]:
        """What :func:`~opzoo.testing.check_property` takes of these options."""
        return dict(profile=self.profile, examples=self.examples, seed=self.seed, timeout=self.timeout)


def parse(values: Mapping[str, Any], command: str) -> RunOptions:
    """The options ``command`` takes, from ``values`` by name as a front end parsed them (None: not
    given, so the command's default); :class:`OptionError` on a bad one."""
    given = {}
    for option in OPTIONS.values():
        if command in option.commands:
            value = values.get(option.name)
            given[option.name] = option.default_for(command) if value is None else value
    return RunOptions(**given)


def flags(**values: Any) -> str:
    """``values`` (by parameter) as the flags of the command line, in the records' order:
    ``flags(properties=["gradient"], profile="ci")`` is ``--property gradient --profile ci``. A value
    of None is left out; the values of a ``many`` option are joined with commas."""
    out = []
    for option in OPTIONS.values():
        value = values.pop(option.name, None)
        if value is None:
            continue
        if option.many:
            value = ",".join(value)
        out.append(f"{option.flag} {value}")
    if values:
        raise TypeError(f"no run option named {', '.join(map(repr, values))}")
    return " ".join(out)
