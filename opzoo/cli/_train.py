"""`opzoo train`: the trainer from the command line.

Its flags are TrainConfig's settings, each declared once, with its help and check, in
opzoo/trainer/_config.py; this module adds what only a command has: several activations and
``--seeds`` (a comparison), ``--act-arg`` pairs, where the results go, and torchrun's collective
limit. The arguments are read once, into :class:`_Asked`; the config is built from that in one
place (:func:`_config`) and handed to the library, which checks it.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass, replace
from typing import Any

from opzoo.cli._common import EXIT_OK, check_seconds, in_torchrun, print_json, registry_from
from opzoo.exceptions import ConfigError, DivergedError, OpZooError
from opzoo.trainer._config import SCHEDULE, SETTINGS, WHAT, Setting

#: The settings the command line takes its own way: several names, KEY=VALUE pairs.
_OWN = {s.name: s for s in SETTINGS if s.name in ("activation", "act_args")}


def add_train(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "train",
        help="train the seed's two-layer network with a registered op as activation",
        description="Train the seed's bias-free two-layer network (N=64, D_in=1000, H=100, D_out=10, "
        "500 steps, lr 1e-6, sum of squared errors) with any registered op as its activation. With "
        "no options it is the seed program; it prints 't loss' every --log-every steps.",
    )
    # Flags default to SUPPRESS, so that a resumed run knows which settings were given.
    S = argparse.SUPPRESS
    act, act_args = _OWN["activation"], _OWN["act_args"]
    p.add_argument(
        "--activation",
        "-a",
        default=S,
        metavar="NAME[,NAME...]",
        help=f"{act.help}; several, comma-separated, are compared on the same data and initial "
        f"weights (default: {act.default})",
    )
    p.add_argument(
        "--act-arg",
        action="append",
        default=S,
        metavar=act_args.metavar,
        help=f"{act_args.help} (repeatable)",
    )
    groups: dict[str, Any] = {WHAT: p}
    for s in SETTINGS:
        if s.name not in _OWN:
            if s.group not in groups:
                groups[s.group] = p.add_argument_group(s.group)
            _add_setting(groups[s.group], s)
    p.add_argument(
        "--seeds",
        metavar="N|S,S,...",
        help="run every activation once per seed (0..N-1, or the seeds listed), each seed its own data "
        "and initial weights; the table shows mean ± std and a rank",
    )
    groups[SCHEDULE].add_argument(
        "--collective-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="under torchrun: how long a rank waits for the others in a collective before the job "
        "fails (default 300; a stopped rank no longer holds the others for gloo's 30 minutes)",
    )
    _add_outputs(p.add_argument_group("output"))
    return p


def _add_setting(group: Any, s: Setting) -> None:
    """The flag of setting ``s``: --NAME of its type (a bool: --NAME and --no-NAME), its help with
    the default, other settings named as flags."""
    from opzoo.cli import _as_flags

    text = s.help
    if isinstance(s.default, (int, float, str)) and not isinstance(s.default, bool):
        shown = f"{s.default:g}" if isinstance(s.default, float) else str(s.default)
        shown = re.sub(r"e([+-])0(\d)", r"e\1\2", shown)  # 1e-6, not 1e-06
        text += f" (default {shown})"
    kw: dict[str, Any] = {"default": argparse.SUPPRESS, "help": _as_flags(text).replace("%", "%%")}
    if s.type is bool:
        kw["action"] = argparse.BooleanOptionalAction
    else:
        kw["type"] = s.type
        kw["metavar"] = s.metavar or ("{" + ",".join(s.choices) + "}" if s.choices else None)
    group.add_argument("--" + s.label, **kw)


def _add_outputs(o: Any) -> None:
    o.add_argument("--quiet", "-q", action="store_true", help="print no loss lines and no progress bar")
    o.add_argument("--json", action="store_true", help="print the result as JSON instead")
    o.add_argument("--metrics", metavar="FILE", help="write every step's loss to FILE (.csv or .jsonl)")
    o.add_argument("--plot", metavar="FILE.png", help="draw the loss curve(s), log scale")
    o.add_argument(
        "--export",
        metavar="FILE.pt2",
        help="write the trained network as a torch.export program, its activation the "
        "torch.library op (load it after opzoo.library.load(); see docs/trainer.md)",
    )


@dataclass(frozen=True)
class _Asked:
    """What a command line asks of the trainer, read from its arguments once."""

    given: dict[str, Any]  # the TrainConfig settings given on it, parsed (paths absolute: cli.main)
    names: list[str] | None  # --activation's; None: the config's default, or a resumed run's
    seeds: list[int] | None
    metrics: str | None
    plot: str | None
    export: str | None
    quiet: bool
    json: bool

    @property
    def comparison(self) -> bool:
        """Several runs: --seeds, or several activations."""
        return self.seeds is not None or (self.names is not None and len(self.names) > 1)

    @property
    def show(self) -> bool:
        """Whether loss lines are printed."""
        return not (self.quiet or self.json)


def _read(args: argparse.Namespace) -> _Asked:
    """Read the command line once: each setting given, parsed; what its runs or its outputs cannot
    take refused (by the library's rule where the library has one), before any file is read."""
    from opzoo.trainer._compare import check_comparable
    from opzoo.trainer._metrics import FORMATS

    given = {s.name: getattr(args, s.name) for s in SETTINGS if s.name not in _OWN and hasattr(args, s.name)}
    if hasattr(args, "act_arg"):
        given["act_args"] = _parse_act_args(args.act_arg)
    names = _names(args)
    seeds = None if args.seeds is None else _parse_seeds(args.seeds)
    asked = _Asked(given, names, seeds, args.metrics, args.plot, args.export, args.quiet, args.json)
    if asked.metrics and not asked.metrics.endswith(FORMATS):
        raise ConfigError(f"--metrics FILE must end in .csv or .jsonl, got {asked.metrics!r}")
    if asked.comparison:
        check_comparable(given, seeds)
    if asked.export and seeds is not None:
        raise ConfigError("--export writes one network, not one per --seeds")
    if asked.export and asked.comparison:
        raise ConfigError("--export writes one network: give one --activation, not a comparison")
    return asked


def run_train(args: argparse.Namespace) -> int:
    from opzoo import _lifetime

    check_seconds("--collective-timeout", args.collective_timeout)
    if not in_torchrun():  # one process: torch.distributed untouched
        asked = _read(args)
        # A signal stops the run between two steps, its metrics and checkpoint written (_stopped).
        with _lifetime.deferred():
            return _train(args, asked, None)
    from opzoo.trainer import _distributed

    _lifetime.die_with_parent()  # a rank ends when torchrun does, even killed with SIGKILL

    try:
        world = _distributed.from_env()
        assert world is not None
        asked = _read(args)
        _refuse_under_torchrun(asked)
        device = _distributed.rank_device(world, asked.given.get("device"))
        asked = replace(asked, given={**asked.given, "device": device})
    except OpZooError as exc:
        exc.reported_by_rank_0 = True  # type: ignore[attr-defined]  # every rank refuses alike
        raise
    try:
        with _distributed.process_group(world, device, args.collective_timeout):
            return _train(args, asked, world)
    except DivergedError as exc:
        exc.reported_by_rank_0 = True  # type: ignore[attr-defined]  # the global loss: on all ranks
        raise
    except RuntimeError as exc:
        raise _distributed.timed_out(exc, world, args.collective_timeout) or exc


def _names(args: argparse.Namespace) -> list[str] | None:
    """The op names of --activation; None when it is not given (the config's default, or a resumed
    run's, holds the one name then)."""
    if not hasattr(args, "activation"):
        return None
    names = [n.strip() for n in args.activation.split(",") if n.strip()]
    if not names:
        raise ConfigError("--activation needs at least one op name")
    return names


def _refuse_under_torchrun(asked: _Asked) -> None:
    """What data-parallel training does not do, refused on every rank before the process group."""
    if asked.names is not None and len(asked.names) > 1:
        raise ConfigError("under torchrun give one --activation; a comparison runs in one process")
    if asked.seeds is not None:
        raise ConfigError("under torchrun --seeds is not taken; run one seed per torchrun")
    if asked.given.get("compile", False):
        raise ConfigError("under torchrun --compile is not taken: it compiles one process's whole step")


def _train(args: argparse.Namespace, asked: _Asked, world: Any) -> int:
    """Train and report; ``world`` is this process's torchrun rank (None for one process)."""
    from opzoo._lifetime import Stopped
    from opzoo.trainer import _trainer

    main = world is None or world.main
    if world is None:
        config, registry = _config(args, asked)
    else:
        from opzoo.trainer import _distributed

        config, registry = _distributed.agree(world, lambda: _config(args, asked, outputs=main))
    if not main:  # only rank 0 prints and writes; the others train their shards
        _trainer.run(config, registry=registry, world=world)
        return EXIT_OK
    try:
        comparison, results = _run(asked, config, registry, world)
    except Stopped as stop:
        return _stopped(asked, stop.results, stop)
    _report(args, asked, config, registry, comparison, results)
    return EXIT_OK


def _config(args: argparse.Namespace, asked: _Asked, *, outputs: bool = True) -> tuple[Any, Any]:
    """The run's config and registry: the settings given, over a resumed run's own, over the data's
    defaults; ``outputs``: check first that the metrics, plot and export files can be written (rank
    0's job under torchrun). The library checks the config itself before its first step."""
    from opzoo.trainer import _trainer
    from opzoo.trainer._preflight import check_writable
    from opzoo.trainer._resume import saved_config

    registry = registry_from(args)
    for what in ("metrics", "plot", "export"):
        path = getattr(asked, what)
        if path and outputs:
            check_writable(what, path)
    given = dict(asked.given)
    if "resume" in given:
        saved = saved_config(given["resume"], given)  # less what names code
        # Where the checkpoint was first written says nothing about where this run writes:
        # it continues the file it resumed from, unless --checkpoint says otherwise.
        saved.pop("resume", None)
        saved["checkpoint"] = given["resume"]
        given = {**saved, **given}
    if asked.names is not None:  # else the default's, or the resumed run's
        given["activation"] = asked.names[0]
    config = _trainer.config_for(**given)
    if asked.export:
        from opzoo.trainer import _export

        _export.check_exportable(config.activation, config.act_args, registry)  # before training
    return config, registry


def _run(asked: _Asked, config: Any, registry: Any, world: Any) -> tuple[Any, list[Any]]:
    """Train every run the command line asks for; return the comparison (None for one run) and
    the runs."""
    from opzoo.trainer import _compare, _trainer

    progress = asked.show and sys.stdout.isatty()
    if asked.comparison:
        log: Any = None
        if asked.show and asked.seeds is not None:
            log = lambda name, t, loss, seed: _write_line(f"{name} seed={seed} {t} {loss}")  # noqa: E731
        elif asked.show:
            log = lambda name, t, loss: _write_line(f"{name} {t} {loss}")  # noqa: E731
        comparison = _compare.compare(
            config, asked.names, seeds=asked.seeds, registry=registry, on_log=log, progress=progress
        )
        return comparison, list(comparison)
    log1 = (lambda t, loss: _write_line(f"{t} {loss}")) if asked.show else None
    run = _trainer.run(
        config, registry=registry, on_log=log1, on_warning=_warn, progress=progress, world=world
    )
    return None, [run]


def _report(
    args: argparse.Namespace, asked: _Asked, config: Any, registry: Any, comparison: Any, results: list[Any]
) -> None:
    """Write the files asked for, then print the result: JSON, the comparison's table, or one line."""
    if asked.metrics:
        from opzoo.trainer._metrics import write_metrics

        write_metrics(asked.metrics, results, with_seed=asked.seeds is not None)
    if asked.export:
        from opzoo.trainer import _export

        _export.export_network(results[0], asked.export, registry=registry)
    if asked.plot:
        from opzoo.trainer._plot import plot_runs

        plot_runs(asked.plot, config, results, seeds=None if asked.seeds is None else len(asked.seeds))
    if asked.json:
        out = [r.to_dict() for r in results]
        print_json(args, json.dumps(out if comparison is not None else out[0], indent=2))
    elif comparison is not None:
        from opzoo._table import text_table

        print()
        print(text_table(*comparison.table(), wrap_last=False))
    elif not asked.quiet:
        sys.stdout.flush()  # the loss lines first, then the summary on stderr
        r = results[0]
        print(
            f"opzoo: {r.label}: {r.steps_run} steps in {r.wall_time:.2f} s "
            f"({r.steps_per_sec:.0f} steps/s), final loss {r.final_loss:.6g}"
            + ("" if r.test_accuracy is None else f", test accuracy {r.test_accuracy:.4f}"),
            file=sys.stderr,
        )


def _stopped(asked: _Asked, results: list[Any], stop: Any) -> int:
    """A signal stopped the runs between two steps: write the metrics of what was trained (the
    trainer has written the checkpoint), say so in one line, exit 128 + the signal's number."""
    import signal

    if asked.metrics:
        from opzoo.trainer._metrics import write_metrics

        write_metrics(asked.metrics, results, with_seed=asked.seeds is not None)
    steps = len(results[-1].losses) if results else 0
    line = f"opzoo: interrupted by {signal.Signals(stop.signum).name} after {steps} step(s)"
    if asked.metrics:
        line += f"; metrics written to {asked.metrics!r}"
    checkpoint = results[-1].config.checkpoint if results else None
    if checkpoint and results[-1].steps_run:
        line += f"; checkpoint written to {checkpoint!r}"
    sys.stdout.flush()
    print(line, file=sys.stderr)
    return stop.exit_code


def _parse_seeds(text: str) -> list[int]:
    """--seeds: a count N or a list S,S,...; the library's rules (`seed_list_of`), shown as typed."""
    from opzoo.trainer._compare import seed_list_of

    try:
        parts = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ConfigError(f"--seeds takes a count N or a list S,S,..., got {text!r}") from None
    if "," in text:
        return seed_list_of(parts, shown=repr(text))
    return seed_list_of(parts[0] if parts else 0, shown=repr(text))  # nothing: a count of none


def _warn(message: str) -> None:
    sys.stdout.flush()
    print(f"opzoo: warning: {message}", file=sys.stderr, flush=True)


def _write_line(line: str) -> None:
    try:
        from tqdm import tqdm

        tqdm.write(line)  # keeps a running progress bar intact
    except ImportError:
        print(line)


def _parse_act_args(items: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--act-arg takes KEY=VALUE, got {item!r}")
        try:
            out[key.strip()] = float(value)
        except ValueError:
            raise ConfigError(f"--act-arg {key.strip()}: {value!r} is not a number") from None
    return out
