"""The ``opzoo`` command: parses arguments, calls the library, turns errors into one line.

Heavy imports (torch, the trainer, the property tests) happen inside the subcommands, so that
``opzoo --help`` stays fast.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Callable, Sequence

from opzoo.exceptions import OpZooError

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one ``opzoo: error: …`` line, not a usage dump."""

    def error(self, message: str) -> Any:  # type: ignore[override]
        hint = f" (see '{self.prog} --help')"
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
    fmt.add_argument("--format", choices=("table", "markdown", "names"), default="table",
                     help="table (default), markdown (the ops reference in docs/ops.md), or names "
                     "only (imports no plugin)")
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
        print(f"\n{broken} problem(s); 'opzoo info NAME' shows one, --strict makes them errors",
              file=sys.stderr)
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
