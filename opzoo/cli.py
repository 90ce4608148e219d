"""The ``opzoo`` command: parses arguments, calls the library, turns errors into one line.

Heavy imports (torch, the trainer, the property tests) happen inside the subcommands, so that
``opzoo --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Sequence

from opzoo.exceptions import ConfigError, OpZooError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one ``opzoo: error: …`` line, not a usage dump."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        import difflib
        import re

        hint = f" (see '{self.prog} --help')"
        bad = re.search(r"invalid choice: '([^']*)' \(choose from (.*)\)", message)
        if bad:
            choices = re.findall(r"'([^']*)'", bad.group(2)) or bad.group(2).split(", ")
            close = difflib.get_close_matches(bad.group(1), choices, n=1)
            if close:
                hint = f"; did you mean {close[0]!r}?" + hint
        raise _UsageError(message + hint)


class _UsageError(Exception):
    pass


def _common(parser: argparse.ArgumentParser, suppress: bool) -> None:
    """Add the registry options, accepted before or after the subcommand."""
    default: Any = argparse.SUPPRESS if suppress else None
    g = parser.add_argument_group("plugin loading")
    g.add_argument(
        "--strict",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="fail on any plugin failure (also: OPZOO_STRICT=1)",
    )
    g.add_argument(
        "--block",
        metavar="PLUGIN",
        action="append",
        default=default,
        help="skip a plugin: a distribution, entry-point name or dist:entry (repeatable; also OPZOO_BLOCK)",
    )
    g.add_argument(
        "--no-autoload",
        action="store_true",
        default=argparse.SUPPRESS if suppress else False,
        help="load only opzoo's own ops (also: OPZOO_DISABLE_PLUGIN_AUTOLOAD=1)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="opzoo",
        description="A registry of custom PyTorch autograd ops: list them, check their "
        "backward, train with them.",
        epilog="Run 'opzoo COMMAND --help' for a command's options.",
    )
    from opzoo import __version__

    parser.add_argument("--version", action="version", version=f"opzoo {__version__}")
    _common(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (add, _) in COMMANDS.items():
        p = add(sub)
        _common(p, suppress=True)
    return parser


# -- list / info ----------------------------------------------------------------------------------


def _add_list(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("list", help="list registered ops and broken plugins")
    fmt = p.add_mutually_exclusive_group()
    fmt.add_argument("--json", action="store_true", help="print JSON")
    fmt.add_argument(
        "--format",
        choices=("table", "markdown", "names"),
        default="table",
        help="table (default), markdown (the ops reference in docs/ops.md), or names "
        "only (imports no plugin)",
    )
    return p


def _run_list(args: argparse.Namespace) -> int:
    reg = _registry(args)
    if args.format == "names":
        print("\n".join(reg.names()))
        return EXIT_OK
    if args.format == "markdown":
        from opzoo._docs import ops_markdown

        print(ops_markdown(reg))
        return EXIT_OK
    rows = reg.rows()
    if args.json:
        print(json.dumps(rows, indent=2))
        return EXIT_OK
    from opzoo._table import text_table

    print(
        text_table(
            ("NAME", "SOURCE", "STATUS", "SUMMARY"),
            [(r["name"], r["source"], r["status"], r["summary"]) for r in rows],
        )
    )
    broken = sum(r["status"] != "ok" for r in rows)
    if broken:
        print(
            f"\n{broken} problem(s); 'opzoo info NAME' shows one, --strict makes them errors", file=sys.stderr
        )
    return EXIT_OK


def _add_info(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("info", help="describe one op: contract, source, module")
    p.add_argument("name", help="op name, or dist:name to pick one source")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def _run_info(args: argparse.Namespace) -> int:
    spec = _registry(args).info(args.name)
    d = spec.to_dict()
    if args.json:
        print(json.dumps(d, indent=2, default=str))
        return EXIT_OK
    width = max(len(k) for k in d)
    for key, value in d.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        elif isinstance(value, list):
            value = ", ".join(str(v) for v in value)
        print(f"{key.ljust(width)}  {'-' if value in (None, '') else value}")
    return EXIT_OK


# -- check ----------------------------------------------------------------------------------------


def _add_check(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "check",
        help="property-test the ops' hand-written backward against numerical gradients",
        description="Check every property of the named ops (all ops by default) with hypothesis: "
        "gradient, double_backward, reference, layout, hygiene, kinks, compile. Exits 1 if any fails.",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="ops to check (default: all)")
    p.add_argument(
        "--property",
        "-p",
        action="append",
        metavar="PROP",
        help="check only these properties (repeatable or comma-separated)",
    )
    p.add_argument("--examples", type=int, metavar="N", help="hypothesis examples per property")
    p.add_argument(
        "--profile",
        choices=("ci", "dev", "thorough"),
        help="hypothesis profile (default: ci when $CI is set, else dev)",
    )
    p.add_argument(
        "--device",
        choices=("cpu", "cuda", "all"),
        default="all",
        help="where to run (default: all; cuda is skipped without CUDA)",
    )
    p.add_argument("--json", action="store_true", help="print results as JSON")
    return p


def _run_check(args: argparse.Namespace) -> int:
    if args.examples is not None and args.examples <= 0:
        raise ConfigError(f"--examples must be a positive integer, got {args.examples}")
    reg = _registry(args)
    from opzoo.testing import PROPERTIES, check

    props = [p.strip() for item in (args.property or []) for p in item.split(",") if p.strip()]
    for prop in props:
        if prop not in PROPERTIES:
            raise ConfigError(f"unknown property {prop!r}; choose from {', '.join(PROPERTIES)}")
    specs = [reg.info(n) for n in args.names] if args.names else sorted(reg.load_all(), key=lambda s: s.name)
    broken = [] if args.names else reg.failures()
    devices = ("cpu", "cuda") if args.device == "all" else (args.device,)
    results = []
    for spec in specs:
        if not args.json:
            print(f"checking {spec.name} ...", file=sys.stderr, flush=True)
        results += check(
            spec, props or None, devices=devices, profile=args.profile, examples=args.examples, hook=reg.hook
        )
    failed = [r for r in results if r.status == "fail"]
    if args.json:
        print(
            json.dumps(
                {"results": [r.to_dict() for r in results], "broken": [str(f) for f in broken]},
                indent=2,
                default=str,
            )
        )
        return EXIT_FAILED if failed or broken else EXIT_OK
    _print_check_table(results, devices)
    skipped = {}
    for r in results:
        if r.status == "skip":
            skipped.setdefault(r.reason, []).append(r.id)
    for reason, ids in skipped.items():
        print(
            f"skipped: {reason}: {len(ids)} check(s)"
            if len(ids) > 3
            else f"skipped: {reason}: {', '.join(ids)}"
        )
    for failure in broken:
        print(f"BROKEN {failure}")
    for r in failed:
        print()
        print(r.report())
    passed = sum(r.status == "pass" for r in results)
    print(
        f"\n{passed} passed, {len(failed)} failed, {len(results) - passed - len(failed)} skipped"
        + (f", {len(broken)} broken plugin(s)" if broken else "")
    )
    return EXIT_FAILED if failed or broken else EXIT_OK


def _print_check_table(results: list[Any], devices: Sequence[str]) -> None:
    from opzoo._table import text_table

    props = list(dict.fromkeys(r.prop for r in results))
    ops = list(dict.fromkeys(r.op for r in results))
    cell = {(r.op, r.prop, r.device): r.status for r in results}
    rows = []
    for op in ops:
        row = [op]
        for prop in props:
            statuses = [cell.get((op, prop, d), "") for d in devices]
            shown = [s for s in statuses if s != "skip"] or statuses[:1]
            row.append("FAIL" if "fail" in shown else shown[0])
        rows.append(row)
    print(text_table(["OP", *props], rows, wrap_last=False))


# -- bench ----------------------------------------------------------------------------------------

_SECTIONS = ("ops", "memory", "trainer", "startup")


def _add_bench(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "bench",
        help="measure ops against their native references, the trainer, and start-up",
        description="Measure, side by side in one process: forward+backward time of each op vs its "
        "reference (6,400, 1M and 16M float32 elements), bytes saved for backward, the trainer's "
        "time per step vs a hand-written loop, and start-up time. Prints ratios; asserts nothing.",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="ops to measure (default: all)")
    p.add_argument(
        "--section", action="append", choices=_SECTIONS, help="measure only these (repeatable; default: all)"
    )
    p.add_argument("--sizes", metavar="N,N,...", help="element counts for op speed")
    p.add_argument("--repeat", type=int, default=None, help="timed repetitions per measurement")
    p.add_argument("--quick", action="store_true", help="tiny sizes and few repeats: a smoke test")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def _run_bench(args: argparse.Namespace) -> int:
    sizes_text = args.sizes
    try:
        sizes = [int(s.replace("_", "")) for s in sizes_text.split(",")] if sizes_text else None
    except ValueError:
        raise ConfigError(f"--sizes takes comma-separated integers, got {sizes_text!r}") from None
    if sizes is not None and any(n <= 0 for n in sizes):
        raise ConfigError("--sizes must be positive")
    if args.repeat is not None and args.repeat <= 0:
        raise ConfigError(f"--repeat must be a positive integer, got {args.repeat}")
    reg = _registry(args)
    from opzoo import _bench

    sections = args.section or list(_SECTIONS)
    specs = [reg.info(n) for n in args.names] if args.names else sorted(reg.load_all(), key=lambda s: s.name)
    sizes = sizes or list(_bench.QUICK_SIZES if args.quick else _bench.SIZES)
    repeat = args.repeat or (3 if args.quick else 21)
    import torch

    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    rows = []
    if "ops" in sections:
        rows += _bench.bench_ops(specs, sizes, repeat=repeat, devices=devices)
    if "memory" in sections:
        rows += _bench.bench_memory(specs, n=1_000 if args.quick else 100_000)
    if "trainer" in sections:
        rows += _bench.bench_trainer(
            steps=20 if args.quick else 500, repeat=max(3, repeat // 4), quick=args.quick
        )
    if "startup" in sections:
        rows += _bench.bench_startup(repeat=3 if args.quick else 7)
    if args.json:
        print(
            json.dumps(
                {
                    "machine": _bench.machine(),
                    "rows": [r.to_dict() | {"target": _bench.verdict(r)} for r in rows],
                },
                indent=2,
            )
        )
        return EXIT_OK
    from opzoo._table import text_table

    table = [
        (
            r.section,
            r.name,
            r.detail,
            f"{r.ours:.4g} {r.unit}",
            f"{r.baseline:.4g} {r.unit}",
            f"{r.ratio:.2f}x",
            _bench.verdict(r),
        )
        for r in rows
    ]
    print(
        text_table(
            ("SECTION", "NAME", "SIZE / WHAT", "OPZOO", "BASELINE", "RATIO", "TARGET"), table, wrap_last=False
        )
    )
    for r in rows:
        if r.extra.get("imports"):
            print(f"opzoo list: {r.extra['imports']}; opzoo.names() imports: {r.extra['names_imports']}")
    m = _bench.machine()
    print(f"\nmeasured on {m['cpu']}, {m['cores']} cores, torch {m['torch']} ({m['torch_threads']} threads)")
    return EXIT_OK


# -- train ----------------------------------------------------------------------------------------


def _add_train(sub: Any) -> argparse.ArgumentParser:
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
    p.add_argument("--seed", type=int, default=S, help="call torch.manual_seed(SEED) first")
    g = p.add_argument_group("network and schedule")
    g.add_argument("--batch", type=int, default=S, help="N, rows of x (default 64)")
    g.add_argument("--d-in", type=int, default=S, help="D_in (default 1000)")
    g.add_argument("--hidden", type=int, default=S, help="H (default 100)")
    g.add_argument("--d-out", type=int, default=S, help="D_out (default 10)")
    g.add_argument("--steps", type=int, default=S, help="training steps (default 500)")
    g.add_argument("--lr", type=float, default=S, help="learning rate (default 1e-6)")
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
    c = p.add_argument_group("checkpoints")
    c.add_argument(
        "--checkpoint",
        metavar="PATH",
        default=S,
        help="write weights, optimizer, step and RNG here atomically, at the end and every "
        "--checkpoint-every steps",
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
    return p


_TRAIN_OPTIONS = (
    "seed",
    "batch",
    "d_in",
    "hidden",
    "d_out",
    "steps",
    "lr",
    "log_every",
    "optimizer",
    "device",
    "dtype",
    "compile",
    "compile_backend",
    "checkpoint",
    "checkpoint_every",
    "resume",
)


def _run_train(args: argparse.Namespace) -> int:
    given: dict[str, Any] = {k: getattr(args, k) for k in _TRAIN_OPTIONS if hasattr(args, k)}
    if hasattr(args, "act_arg"):
        given["act_args"] = _parse_act_args(args.act_arg)
    names = [n.strip() for n in getattr(args, "activation", "myrelu").split(",") if n.strip()]
    if not names:
        raise ConfigError("--activation needs at least one op name")
    if args.metrics and not args.metrics.endswith((".csv", ".jsonl")):
        raise ConfigError(f"--metrics FILE must end in .csv or .jsonl, got {args.metrics!r}")
    _registry(args)
    from opzoo import _trainer

    if "resume" in given:
        saved = _trainer.saved_config(given["resume"])
        saved.pop("resume", None)
        if len(names) == 1 and "activation" not in args:
            names = [saved["activation"]]
        given = {**saved, **given}
    given.pop("activation", None)
    config = _trainer.TrainConfig(activation=names[0], **given)

    show = not (args.quiet or args.json)
    progress = show and sys.stdout.isatty()
    if len(names) > 1:
        log = (lambda name, t, loss: _write_line(f"{name} {t} {loss}")) if show else None
        results = _trainer.compare(config, names, on_log=log, progress=progress)
    else:
        log1 = (lambda t, loss: _write_line(f"{t} {loss}")) if show else None
        results = [_trainer.run(config, on_log=log1, progress=progress)]
    many = len(results) > 1

    if args.metrics:
        _write_metrics(args.metrics, results)
    if args.plot:
        from opzoo._plot import plot_losses

        title = f"opzoo train: N={config.batch}, D_in={config.d_in}, H={config.hidden}, lr={config.lr:g}"
        plot_losses(args.plot, [(r.label, r.losses) for r in results], title)
    if args.json:
        out = [r.to_dict() for r in results]
        print(json.dumps(out if many else out[0], indent=2))
    elif many:
        from opzoo._table import text_table

        print()
        print(
            text_table(
                ("ACTIVATION", "FINAL LOSS", "STEPS/S"),
                [(r.label, f"{r.final_loss:.6g}", f"{r.steps_per_sec:.0f}") for r in results],
                wrap_last=False,
            )
        )
    elif not args.quiet:
        sys.stdout.flush()  # the loss lines first, then the summary on stderr
        r = results[0]
        print(
            f"opzoo: {r.label}: {r.steps_run} steps in {r.wall_time:.2f} s "
            f"({r.steps_per_sec:.0f} steps/s), final loss {r.final_loss:.6g}",
            file=sys.stderr,
        )
    return EXIT_OK


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


def _write_metrics(path: str, results: list[Any]) -> None:
    import csv

    rows = [(r.label, t, loss) for r in results for t, loss in enumerate(r.losses)]
    try:
        with open(path, "w", newline="") as f:
            if path.endswith(".csv"):
                w = csv.writer(f)
                w.writerow(("activation", "step", "loss"))
                w.writerows(rows)
            else:
                for label, t, loss in rows:
                    f.write(json.dumps({"activation": label, "step": t, "loss": loss}) + "\n")
    except OSError as exc:
        raise ConfigError(f"cannot write metrics {path!r}: {exc.strerror}") from None


def _registry(args: argparse.Namespace) -> Any:
    """Load the registry as the command line asks, and make it the process-wide one."""
    import opzoo

    reg = opzoo.load(
        autoload=False if args.no_autoload else None,
        block=args.block or (),
        strict=True if args.strict else None,
    )
    opzoo._registry = reg
    return reg


COMMANDS: dict[str, tuple[Callable[[Any], argparse.ArgumentParser], Callable[[argparse.Namespace], int]]] = {
    "list": (_add_list, _run_list),
    "info": (_add_info, _run_info),
    "train": (_add_train, _run_train),
    "check": (_add_check, _run_check),
    "bench": (_add_bench, _run_bench),
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        return COMMANDS[args.command][1](args)
    except _UsageError as exc:
        print(f"opzoo: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except OpZooError as exc:
        print(f"opzoo: error: {exc}", file=sys.stderr)
        return getattr(exc, "exit_code", EXIT_USAGE)
    except KeyboardInterrupt:
        print("opzoo: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # `opzoo list | head` closed the pipe; not an error of ours.
        sys.stderr.close()
        return EXIT_OK
