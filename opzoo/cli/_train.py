"""`opzoo train`: the trainer from the command line."""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any

from opzoo.cli._common import EXIT_OK, check_seconds, in_torchrun, print_json, registry_from
from opzoo.exceptions import ConfigError, DivergedError, OpZooError


def add_train(sub: Any) -> argparse.ArgumentParser:
    S = argparse.SUPPRESS  # so that a resumed run knows which settings were given on the command line
    p = sub.add_parser(
        "train",
        help="train the seed's two-layer network with a registered op as activation",
        description="Train the seed's bias-free two-layer network (N=64, D_in=1000, H=100, D_out=10, "
        "500 steps, lr 1e-6, sum of squared errors) with any registered op as its activation. With "
        "no options it is the seed program; it prints 't loss' every --log-every steps.",
    )
    p.add_argument(
        "--activation",
        "-a",
        default=S,
        metavar="NAME[,NAME...]",
        help="registered op(s), or torch:NAME as a native baseline; several are compared on "
        "the same data and initial weights (default: myrelu)",
    )
    p.add_argument(
        "--act-arg",
        action="append",
        default=S,
        metavar="KEY=VALUE",
        help="an op parameter, validated against the op's declared range (repeatable)",
    )
    p.add_argument(
        "--linear",
        default=S,
        metavar="NAME",
        help="a registered (n,k),(k,m)->(n,m) op for both linear layers (default: the seed's x.mm(w))",
    )
    p.add_argument(
        "--loss",
        default=S,
        metavar="NAME",
        help="a registered (n,m),(n,m)->() op as the loss (default: the seed's (y_pred - y).pow(2).sum())",
    )
    p.add_argument("--seed", type=int, default=S, help="call torch.manual_seed(SEED) first")
    p.add_argument(
        "--seeds",
        metavar="N|S,S,...",
        help="run every activation once per seed (0..N-1, or the seeds listed), each seed its own data "
        "and initial weights; the table shows mean ± std and a rank",
    )
    p.add_argument(
        "--data",
        default=S,
        metavar="NAME",
        help="random: the seed's (default); digits: scikit-learn's 8x8 digits, held-out accuracy "
        "reported (needs opzoo[data]); or module:function returning (x_train, y_train, x_test, y_test)",
    )
    g = p.add_argument_group("network and schedule")
    g.add_argument(
        "--batch", type=int, default=S, help="N, rows of x; the mini-batch size with --data (default 64)"
    )
    g.add_argument("--d-in", type=int, default=S, help="D_in (default 1000)")
    g.add_argument("--hidden", type=int, default=S, help="H (default 100)")
    g.add_argument("--d-out", type=int, default=S, help="D_out (default 10)")
    g.add_argument("--steps", type=int, default=S, help="training steps (default 500)")
    g.add_argument("--lr", type=float, default=S, help="learning rate (default 1e-6)")
    g.add_argument(
        "--act-lr",
        type=float,
        default=S,
        help="learning rate of a learnable activation's parameters (default: lr / elements sharing "
        "each; lr with adam)",
    )
    g.add_argument("--log-every", type=int, default=S, help="print the loss every K steps (default 100)")
    g.add_argument(
        "--optimizer",
        default=S,
        metavar="{manual,sgd,adam}",
        help="manual: the seed's w -= lr * grad (default); sgd or adam from torch.optim",
    )
    g.add_argument("--device", default=S, help="cpu or cuda[:N] (default: cuda when available)")
    g.add_argument("--dtype", default=S, metavar="{float32,float64,bfloat16}", help="default float32")
    g.add_argument(
        "--compile",
        action="store_true",
        default=S,
        help="run forward, backward and update as one torch.compile graph (seed 003)",
    )
    g.add_argument("--compile-backend", default=S, help="torch.compile backend (default inductor)")
    g.add_argument(
        "--deterministic",
        action=argparse.BooleanOptionalAction,
        default=S,
        help="MKL's reproducible mode, one intra-op thread and deterministic kernels: bit-identical "
        "results in every process on this machine, slower on large sizes (see docs/trainer.md)",
    )
    g.add_argument(
        "--collective-timeout",
        type=float,
        default=300.0,
        metavar="SECONDS",
        help="under torchrun: how long a rank waits for the others in a collective before the job "
        "fails (default 300; a stopped rank no longer holds the others for gloo's 30 minutes)",
    )
    c = p.add_argument_group("checkpoints")
    c.add_argument(
        "--checkpoint",
        metavar="PATH",
        default=S,
        help="write weights, optimizer, step and RNG here atomically, at the end and every "
        "--checkpoint-every steps; one run at a time per PATH (default with --resume: the file "
        "resumed from)",
    )
    c.add_argument("--checkpoint-every", type=int, metavar="K", default=S)
    c.add_argument(
        "--resume",
        metavar="PATH",
        default=S,
        help="continue from a checkpoint, with its settings unless given here",
    )
    o = p.add_argument_group("output")
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
    return p


def run_train(args: argparse.Namespace) -> int:
    from opzoo import _lifetime

    check_seconds("--collective-timeout", args.collective_timeout)
    if not in_torchrun():  # one process: torch.distributed untouched
        # A signal stops the run between two steps, its metrics and checkpoint written (_stopped).
        with _lifetime.deferred():
            return _train(args, _names(args), None)
    from opzoo.trainer import _distributed

    _lifetime.die_with_parent()  # a rank ends when torchrun does, even killed with SIGKILL

    try:
        world = _distributed.from_env()
        assert world is not None
        names = _names(args)
        _refuse_under_torchrun(args, names)
        args.device = _distributed.rank_device(world, getattr(args, "device", None))
    except OpZooError as exc:
        exc.reported_by_rank_0 = True  # type: ignore[attr-defined]  # every rank refuses alike
        raise
    try:
        with _distributed.process_group(world, args.device, args.collective_timeout):
            return _train(args, names, world)
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


def _refuse_under_torchrun(args: argparse.Namespace, names: list[str] | None) -> None:
    """What data-parallel training does not do, refused on every rank before the process group."""
    if names is not None and len(names) > 1:
        raise ConfigError("under torchrun give one --activation; a comparison runs in one process")
    if args.seeds is not None:
        raise ConfigError("under torchrun --seeds is not taken; run one seed per torchrun")
    if getattr(args, "compile", False):
        raise ConfigError("under torchrun --compile is not taken: it compiles one process's whole step")


def _train(args: argparse.Namespace, names: list[str] | None, world: Any) -> int:
    """Train and report; ``world`` is this process's torchrun rank (None for one process)."""
    from opzoo.trainer import _trainer

    main = world is None or world.main
    if world is None:
        config, registry, seeds = _prepare(args, names)
    else:
        from opzoo.trainer import _distributed

        config, registry, seeds = _distributed.agree(world, lambda: _prepare(args, names, outputs=main))
    if args.export:
        from opzoo.trainer import _export
    if not main:  # only rank 0 prints and writes; the others train their shards
        _trainer.run(config, registry=registry, world=world)
        return EXIT_OK
    show = not (args.quiet or args.json)
    progress = show and sys.stdout.isatty()
    from opzoo._lifetime import Stopped

    try:
        comparison, results = _run(args, config, registry, names, seeds, world, show, progress)
    except Stopped as stop:
        return _stopped(args, stop.results, seeds is not None, stop)

    if args.metrics:
        _write_metrics(args.metrics, results, with_seed=seeds is not None)
    if args.export:
        _export.export_network(results[0], args.export, registry=registry)
    if args.plot:
        from opzoo.trainer._plot import plot_bands, plot_losses

        title = f"opzoo train: N={config.batch}, D_in={config.d_in}, H={config.hidden}, lr={config.lr:g}"
        if comparison is not None and seeds is not None:
            title += f", {len(seeds)} seeds"
            curves = [
                (label, [r.losses for r in rs if r.diverged_at is None])
                for label, rs in comparison.by_activation()
            ]
            plot_bands(args.plot, curves, title)
        else:
            plot_losses(args.plot, [(r.label, r.losses) for r in results], title)
    if args.json:
        out = [r.to_dict() for r in results]
        print_json(args, json.dumps(out if comparison is not None else out[0], indent=2))
    elif comparison is not None:
        from opzoo._table import text_table

        print()
        print(text_table(*comparison.table(), wrap_last=False))
    elif not args.quiet:
        sys.stdout.flush()  # the loss lines first, then the summary on stderr
        r = results[0]
        print(
            f"opzoo: {r.label}: {r.steps_run} steps in {r.wall_time:.2f} s "
            f"({r.steps_per_sec:.0f} steps/s), final loss {r.final_loss:.6g}"
            + ("" if r.test_accuracy is None else f", test accuracy {r.test_accuracy:.4f}"),
            file=sys.stderr,
        )
    return EXIT_OK


def _run(
    args: argparse.Namespace,
    config: Any,
    registry: Any,
    names: list[str] | None,
    seeds: list[int] | None,
    world: Any,
    show: bool,
    progress: bool,
) -> tuple[Any, list[Any]]:
    """Train every run the command line asks for; return the comparison (None for one run) and
    the runs."""
    from opzoo.trainer import _compare, _trainer

    if seeds is not None or (names is not None and len(names) > 1):
        log: Any = None
        if show and seeds is not None:
            log = lambda name, t, loss, seed: _write_line(f"{name} seed={seed} {t} {loss}")  # noqa: E731
        elif show:
            log = lambda name, t, loss: _write_line(f"{name} {t} {loss}")  # noqa: E731
        comparison = _compare.compare(
            config, names, seeds=seeds, registry=registry, on_log=log, progress=progress
        )
        return comparison, list(comparison)
    else:
        log1 = (lambda t, loss: _write_line(f"{t} {loss}")) if show else None
        results = [
            _trainer.run(
                config, registry=registry, on_log=log1, on_warning=_warn, progress=progress, world=world
            )
        ]

    return None, results


def _stopped(args: argparse.Namespace, results: list[Any], with_seed: bool, stop: Any) -> int:
    """A signal stopped the runs between two steps: write the metrics of what was trained (the
    trainer has written the checkpoint), say so in one line, exit 128 + the signal's number."""
    import signal

    if args.metrics:
        _write_metrics(args.metrics, results, with_seed=with_seed)
    steps = len(results[-1].losses) if results else 0
    line = f"opzoo: interrupted by {signal.Signals(stop.signum).name} after {steps} step(s)"
    if args.metrics:
        line += f"; metrics written to {args.metrics!r}"
    checkpoint = results[-1].config.checkpoint if results else None
    if checkpoint and results[-1].steps_run:
        line += f"; checkpoint written to {checkpoint!r}"
    sys.stdout.flush()
    print(line, file=sys.stderr)
    return stop.exit_code


def _prepare(
    args: argparse.Namespace, names: list[str] | None, *, outputs: bool = True
) -> tuple[Any, Any, Any]:
    """The run's config, registry and seeds, every setting checked; ``outputs``: check that the
    metrics, plot and export files can be written (rank 0's job under torchrun)."""
    from dataclasses import fields

    from opzoo.trainer import _trainer
    from opzoo.trainer._config import TrainConfig
    from opzoo.trainer._preflight import check_writable
    from opzoo.trainer._resume import saved_config

    # Options default to SUPPRESS, so args holds only the TrainConfig fields given on the line.
    given: dict[str, Any] = {
        f.name: getattr(args, f.name) for f in fields(TrainConfig) if hasattr(args, f.name)
    }
    given.pop("activation", None)
    if hasattr(args, "act_arg"):
        given["act_args"] = _parse_act_args(args.act_arg)
    if args.metrics and not args.metrics.endswith((".csv", ".jsonl")):
        raise ConfigError(f"--metrics FILE must end in .csv or .jsonl, got {args.metrics!r}")
    registry = registry_from(args)
    for what, path in (("metrics", args.metrics), ("plot", args.plot), ("export", args.export)):
        if path and outputs:
            check_writable(what, path)
    if args.export and names is not None and len(names) > 1:
        raise ConfigError("--export writes one network: give one --activation, not a comparison")
    seeds = None if args.seeds is None else _parse_seeds(args.seeds)
    if seeds is not None:
        if "seed" in given:
            raise ConfigError("--seeds runs each of its seeds; leave out --seed")
        for flag in ("checkpoint", "resume"):
            if flag in given:
                raise ConfigError(f"--{flag} takes one run, not --seeds")
        if args.export:
            raise ConfigError("--export writes one network, not one per --seeds")

    # Paths are resolved once, as given: a resumed run never reinterprets a stored relative path.
    for name in ("checkpoint", "resume"):
        if name in given:
            given[name] = os.path.abspath(given[name])
    if "resume" in given:
        saved = saved_config(given["resume"], given)  # less what names code
        # Where the checkpoint was first written says nothing about where this run writes:
        # it continues the file it resumed from, unless --checkpoint says otherwise.
        saved.pop("resume", None)
        saved["checkpoint"] = given["resume"]
        given = {**saved, **given}
    if names is not None:  # else the default's, or the resumed run's
        given["activation"] = names[0]
    config = _trainer.config_for(**given)
    if args.export:
        from opzoo.trainer import _export

        _export.check_exportable(config.activation, config.act_args, registry)  # before training
    return config, registry, seeds


#: Runs of --seeds N: each is a whole training run, so ten thousand is already days.
MAX_SEEDS = 10_000


def _parse_seeds(text: str) -> list[int]:
    try:
        parts = [int(p) for p in text.split(",") if p.strip()]
    except ValueError:
        raise ConfigError(f"--seeds takes a count N or a list S,S,..., got {text!r}") from None
    if "," not in text:
        if len(parts) != 1 or parts[0] <= 0:
            raise ConfigError(f"--seeds N must be a positive integer, got {text!r}")
        if parts[0] > MAX_SEEDS:  # 1e11 seeds was a MemoryError
            raise ConfigError(f"--seeds N runs at most {MAX_SEEDS} seeds, got {text!r}")
        return list(range(parts[0]))
    if not parts or len(set(parts)) != len(parts):
        raise ConfigError(f"--seeds lists each seed once, got {text!r}")
    return parts


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


def _write_metrics(path: str, results: list[Any], *, with_seed: bool = False) -> None:
    import csv
    import io

    # Held-out accuracy is measured once, after the last step: it is on that step's row only.
    held_out = any(r.test_accuracy is not None for r in results)
    head = ("activation",) + (("seed",) if with_seed else ()) + ("step", "loss")
    head += ("test_accuracy",) if held_out else ()
    rows = [
        (r.label,)
        + ((r.config.seed,) if with_seed else ())
        + (t, loss)
        + ((r.test_accuracy if t == len(r.losses) - 1 else None,) if held_out else ())
        for r in results
        for t, loss in enumerate(r.losses)
    ]
    # Written whole, then renamed into place: an interrupted or failed write never leaves a torn row.
    f = io.StringIO(newline="")
    if path.endswith(".csv"):
        w = csv.writer(f)
        w.writerow(head)
        w.writerows(["" if v is None else v for v in row] for row in rows)
    else:
        for row in rows:
            f.write(json.dumps(dict(zip(head, row))) + "\n")
    from opzoo import _files

    _files.write("metrics", path, f.getvalue().encode())
