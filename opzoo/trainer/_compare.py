"""Comparisons: several activations trained on the same data and initial weights, once per seed, ranked.

:func:`compare` runs them; the :class:`Comparison` it returns holds every run and says how the
activations rank (:meth:`Comparison.ranking`) and what table ``opzoo train`` prints
(:meth:`Comparison.table`).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, NamedTuple, overload

from opzoo import _lifetime
from opzoo.exceptions import ConfigError, ParamError
from opzoo.nn import params_of
from opzoo.trainer import _preflight, _trainer
from opzoo.trainer._config import TrainConfig
from opzoo.trainer._data import make_data
from opzoo.trainer._network import build
from opzoo.trainer._trainer import TrainResult

if TYPE_CHECKING:
    from opzoo.core._registry import Registry

Row = tuple[str, ...]
#: Runs of `seeds` N at most: each is a whole training run, so ten thousand is already days (1e11
#: seeds was a MemoryError).
MAX_SEEDS = 10_000


class Spread(NamedTuple):
    """The mean of some runs' values and their sample standard deviation (0 for one run)."""

    mean: float
    std: float


def _spread(values: list[float]) -> Spread:
    return Spread(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0)


@dataclass(frozen=True)
class Standing:
    """One activation's place in a comparison: its runs, their spread, its rank (1 is best)."""

    rank: int
    label: str
    runs: tuple[TrainResult, ...]  # one per seed, in the seeds' order
    final_loss: Spread | None  # over the runs that did not diverge; None when all did
    test_accuracy: Spread | None  # likewise, with held-out data; None on the seed's random data

    @property
    def finished(self) -> list[TrainResult]:
        """The runs that trained to the end."""
        return [r for r in self.runs if r.diverged_at is None]

    @property
    def diverged_at(self) -> list[int]:
        """The step at which each diverged run stopped."""
        return [r.diverged_at for r in self.runs if r.diverged_at is not None]


@dataclass(frozen=True)
class Comparison(Sequence[TrainResult]):
    """What :func:`compare` returns: every run, seed by seed, each seed's activations in the order given.

    It is a sequence of :class:`TrainResult` (``comparison[0]``, ``len``, iteration), as the list
    ``compare`` returned before it took seeds.
    """

    runs: tuple[TrainResult, ...]
    seeds: tuple[int, ...] | None = None  # None: one run per activation, at the config's own seed

    @overload
    def __getitem__(self, i: int) -> TrainResult: ...
    @overload
    def __getitem__(self, i: slice) -> Sequence[TrainResult]: ...
    def __getitem__(self, i: int | slice) -> TrainResult | Sequence[TrainResult]:
        return self.runs[i]

    def __len__(self) -> int:
        return len(self.runs)

    @property
    def held_out(self) -> bool:
        """Whether the runs measured test accuracy (held-out data)."""
        return any(r.test_accuracy is not None for r in self.runs)

    def by_activation(self) -> list[tuple[str, list[TrainResult]]]:
        """Each activation's label and its runs, in the order given."""
        groups: dict[str, list[TrainResult]] = {}
        for r in self.runs:
            groups.setdefault(r.label, []).append(r)
        return list(groups.items())

    def ranking(self) -> list[Standing]:
        """Return one standing per activation, best first.

        By mean test accuracy with held-out data, else by mean final loss; an activation whose every
        run diverged ranks last; a tie keeps the order given.
        """
        return sorted(self._standings(), key=lambda s: s.rank)

    def _standings(self) -> list[Standing]:
        held_out = self.held_out
        scored = []
        for label, runs in self.by_activation():
            ok = [r.final_loss for r in runs if r.diverged_at is None]
            accuracy = [
                r.test_accuracy for r in runs if r.diverged_at is None and r.test_accuracy is not None
            ]
            loss = _spread(ok) if ok else None
            acc = _spread(accuracy) if accuracy and held_out else None
            key = (not ok, -acc.mean if acc else 0.0, loss.mean if loss else 0.0)
            scored.append((key, label, tuple(runs), loss, acc))
        order = sorted(range(len(scored)), key=lambda i: scored[i][0])
        rank = {i: place + 1 for place, i in enumerate(order)}
        return [
            Standing(rank[i], label, runs, loss, acc) for i, (_, label, runs, loss, acc) in enumerate(scored)
        ]

    def table(self) -> tuple[Row, list[Row]]:
        """Return the header and rows ``opzoo train`` prints for this comparison.

        With seeds, one row per activation in the order given: its rank, mean ± sample standard
        deviation of the final loss (and test accuracy), and its number of runs. Without, one row
        per run: final loss (and test accuracy) and steps per second.
        """
        return self._seeds_table() if self.seeds is not None else self._runs_table()

    def _runs_table(self) -> tuple[Row, list[Row]]:
        held_out = self.held_out
        head = ("ACTIVATION", "FINAL LOSS") + (("TEST ACCURACY",) if held_out else ()) + ("STEPS/S",)
        rows = []
        for r in self.runs:
            if r.diverged_at is not None:
                rows.append(
                    (r.label, f"diverged at step {r.diverged_at}", *(("-",) if held_out else ()), "-")
                )
                continue
            acc = (f"{r.test_accuracy:.4f}",) if held_out else ()
            rows.append((r.label, f"{r.final_loss:.6g}", *acc, f"{r.steps_per_sec:.0f}"))
        return head, rows

    def _seeds_table(self) -> tuple[Row, list[Row]]:
        held_out = self.held_out
        head: Row = ("RANK", "ACTIVATION", "FINAL LOSS (MEAN ± STD)")
        head += ("TEST ACCURACY (MEAN ± STD)",) if held_out else ()
        head += ("RUNS",)
        rows = []
        for s in self._standings():
            diverged = s.diverged_at
            runs = f"{len(s.finished)}" + (
                f" ({len(diverged)} diverged at step {min(diverged)}+)" if diverged else ""
            )
            loss = s.final_loss
            loss_cell = f"{loss.mean:.4g} ± {loss.std:.2g}" if loss else f"diverged at step {min(diverged)}"
            acc = s.test_accuracy
            acc_cell = (f"{acc.mean:.4f} ± {acc.std:.4f}" if acc else "-",) if held_out else ()
            rows.append((str(s.rank), s.label, loss_cell, *acc_cell, runs))
        return head, rows


def compare(
    config: TrainConfig | None = None,
    activations: Sequence[str] | str | None = None,
    *,
    seeds: int | Sequence[int] | None = None,
    registry: Registry | None = None,
    on_log: Callable[..., None] | None = None,
    progress: bool = False,
    **overrides: Any,
) -> Comparison:
    """Train each activation on the same data and initial weights, once per seed; return every run.

    ``config`` (or, without one, the defaults of its ``data``) with the keywords ``overrides``
    holds the settings, as for :func:`opzoo.train`. ``activations``: the op names to compare
    (default: the config's one). ``seeds``: a count N (seeds 0 to N-1) or the seeds themselves;
    each draws its own initial weights (and, on random data, its own data), and within a seed every
    activation starts from the same ones. None: one run each at the config's ``seed``.

    ``on_log(name, step, loss)`` hears of every run's logged losses; with ``seeds`` it is called
    ``on_log(name, step, loss, seed)``. A run whose loss stops being finite ends there, marked
    ``diverged_at``, and the others go on. Every setting, seed and name is checked before any
    training starts.
    """
    config = _trainer.config_for(**overrides) if config is None else replace(config, **overrides)
    names = [config.activation] if activations is None else _names(activations)
    seed_list = None if seeds is None else seed_list_of(seeds)
    check_comparable(vars(config), seed_list)
    configs = [config] if seed_list is None else [replace(config, seed=s) for s in seed_list]
    for each in configs:
        _preflight.check(each)
    own = _own_args(config, names, registry)
    runs = []
    for seeded in configs:
        data = make_data(seeded)
        for name in names:
            log = _log_of(on_log, name, None if seed_list is None else seeded.seed)
            # One activation diverging says something about it, not about the others: they go on.
            try:
                runs.append(
                    _trainer.run(
                        replace(seeded, activation=name, act_args=own[name]),
                        registry=registry,
                        data=data,
                        on_log=log,
                        progress=progress,
                        stop_on_divergence=True,
                    )
                )
            except _lifetime.Stopped as stop:  # a signal (opzoo train): what finished is kept
                stop.results[:0] = runs
                raise
    return Comparison(tuple(runs), None if seed_list is None else tuple(seed_list))


def check_comparable(settings: Mapping[str, Any], seeds: list[int] | None) -> None:
    """Refuse the settings a comparison does not take (``settings``: a config's, or those given):
    a `seed` beside `seeds`, and a `checkpoint` or `resume`, which belong to one run."""
    if seeds is not None:
        if settings.get("seed") is not None:
            raise ConfigError("`seeds` runs each of its seeds; leave out `seed`")
        for what in ("checkpoint", "resume"):
            if settings.get(what):
                raise ConfigError(f"`{what}` takes one run, not `seeds`")
    elif settings.get("checkpoint") or settings.get("resume"):
        raise ConfigError("`checkpoint` and `resume` take one activation, not a comparison")


def _own_args(
    config: TrainConfig, names: list[str], registry: Registry | None
) -> dict[str, dict[str, float]]:
    """Each activation's share of ``act_args``, the values it takes; a value no activation takes is
    an error, and so is a bad name or value: all before any training starts."""
    own = {
        name: {k: v for k, v in config.act_args.items() if k in params_of(name, registry=registry)}
        for name in names
    }
    unused = sorted(set(config.act_args) - {k for args in own.values() for k in args})
    if unused:
        raise ParamError(f"no activation among {', '.join(names)} takes parameter {unused[0]!r}")
    for name in names:
        build(name, own[name], linear=config.linear, loss=config.loss, registry=registry)
    return own


def _log_of(
    on_log: Callable[..., None] | None, name: str, seed: int | None
) -> Callable[[int, float], None] | None:
    """One run's ``on_log``: compare's, told the run's name (and seed, with ``seeds``)."""
    if on_log is None:
        return None
    if seed is not None:
        return lambda t, v: on_log(name, t, v, seed)
    return lambda t, v: on_log(name, t, v)


def _names(activations: Sequence[str] | str) -> list[str]:
    names = [activations] if isinstance(activations, str) else list(activations)
    if not names:
        raise ConfigError("`activations` needs at least one op name")
    if not all(isinstance(n, str) for n in names):
        raise ConfigError(f"`activations` takes op names, got {activations!r}")
    return names


def seed_list_of(seeds: int | Sequence[int], *, shown: str | None = None) -> list[int]:
    """The seeds of ``seeds``: a count N is 0..N-1 (at most MAX_SEEDS); a sequence lists each seed
    once. ``shown``: the value as an error shows it (the command line's text), ``repr(seeds)`` by default."""
    shown = repr(seeds) if shown is None else shown
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        if seeds <= 0:
            raise ConfigError(f"`seeds` N must be a positive integer, got {shown}")
        if seeds > MAX_SEEDS:
            raise ConfigError(f"`seeds` N runs at most {MAX_SEEDS} seeds, got {shown}")
        return list(range(seeds))
    if isinstance(seeds, (str, bytes)) or not isinstance(seeds, Sequence):
        raise ConfigError(f"`seeds` takes a count N or a list of seeds, got {shown}")
    listed = list(seeds)
    if not all(isinstance(s, int) and not isinstance(s, bool) for s in listed):
        raise ConfigError(f"`seeds` takes integers, got {shown}")
    if not listed or len(set(listed)) != len(listed):
        raise ConfigError(f"`seeds` lists each seed once, got {shown}")
    return listed
