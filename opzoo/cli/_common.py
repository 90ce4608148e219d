"""What the subcommands of ``opzoo`` share; ``cli/__init__.py`` assembles them, one module each.

Each module imports only the standard library at import time, so that ``opzoo --help`` never pays
for torch; the library is imported inside each ``run_*``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, Sequence, TextIO

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def check_seconds(flag: str, value: float) -> None:
    """Refuse a time limit that is not a positive number of seconds, at most a week."""
    from opzoo.exceptions import ConfigError
    from opzoo.testing.running._options import seconds

    why = seconds(value)
    if why is not None:
        raise ConfigError(f"{flag} {why}")


def run_option_flags(parser: argparse.ArgumentParser, command: str) -> None:
    """The flags of the run options that ``command`` (check, mutate or report) takes, made from
    their records (opzoo/testing/running/_options.py). Each defaults to None, "not given": the
    record knows the command's default (:func:`run_options`)."""
    from opzoo.testing.running._options import OPTIONS

    for option in OPTIONS.values():
        if command not in option.commands:
            continue
        names = [option.flag, *([option.short] if option.short else [])]
        how: dict[str, Any] = {"action": "append"} if option.many else {"type": option.type}
        if option.choices is not None:
            how["choices"] = option.choices
        parser.add_argument(
            *names, dest=option.name, metavar=option.metavar, help=option.help_for(command), **how
        )


def run_parser(
    sub: Any, command: str, *, help: str, description: str, listing: str = "", names: str, nargs: str = "*"
) -> argparse.ArgumentParser:
    """The parser of ``command``, one that runs the checks (check, mutate or report): its help, its
    description (filled; then ``listing``, what a flag may name, as it is), the ops it takes by name
    (``names``, their help) and its run flags (:func:`run_option_flags`). The command adds its own."""
    import textwrap

    text = textwrap.fill(description) + listing
    raw = {"formatter_class": argparse.RawDescriptionHelpFormatter} if listing else {}
    parser = sub.add_parser(command, help=help, description=text, **raw)
    parser.add_argument("names", nargs=nargs, metavar="NAME", help=names)
    run_option_flags(parser, command)
    return parser


def run_options(args: argparse.Namespace, command: str) -> Any:
    """The run options of ``command`` as parsed (a RunOptions), each checked before anything runs;
    a bad one is one error line naming its flag."""
    from opzoo.exceptions import ConfigError
    from opzoo.testing.running._options import OPTIONS, OptionError, parse

    try:
        return parse(vars(args), command)
    except OptionError as exc:
        raise ConfigError(exc.naming(OPTIONS[exc.option].flag)) from None


def specs_from(registry: Any, names: Sequence[str], *, here: bool = True) -> list[Any]:
    """The ops ``names`` name (each once; a name may be an import path ``package.module:Class``),
    or, if none, every op of ``registry`` that loads, by name. ``here=False``: an import path's
    module is not imported in this process (``core._registry.lookup``)."""
    from opzoo.core._registry import lookup

    if names:
        return [lookup(registry, n, here=here) for n in dict.fromkeys(names)]
    return sorted(registry.load_all(), key=lambda s: s.name)


def registry_from(args: argparse.Namespace) -> Any:
    """Load the registry as the command line asks; the command passes it on to the library.

    It is kept on ``args`` too, so that the command line can say afterwards which plugins were slow.
    torch, which loading imports, is imported first with the collector paused (``opzoo._imports``).
    """
    from opzoo._imports import heavy
    from opzoo.core._loading import load

    heavy("torch")

    args.loaded_registry = load(
        autoload=False if args.no_autoload else None,
        block=args.block or (),
        strict=True if args.strict else None,
    )
    return args.loaded_registry


def json_stream(args: argparse.Namespace) -> TextIO | None:
    """Where a command writes its JSON: the real stdout (None if it was closed). While a command
    runs with ``--json``, anything else printed to stdout (a plugin printing at import) goes to
    stderr instead."""
    return args.json_stdout if hasattr(args, "json_stdout") else sys.stdout


def print_json(args: argparse.Namespace, text: str) -> None:
    """Print ``text``, a JSON document, on the real stdout, flushed at once: a stdout that cannot
    take it (a full disk, a closed descriptor) is one WriteError line on stderr, exit 74, not a
    traceback. A closed pipe (``| head``) is BrokenPipeError, which the command line takes as done."""
    from opzoo.exceptions import WriteError

    stream = json_stream(args)
    if stream is None:
        raise WriteError("cannot write the JSON output: stdout is closed")
    try:
        print(text, file=stream, flush=True)
    except BrokenPipeError:
        raise
    except (OSError, ValueError) as exc:  # ValueError: a stream closed by Python
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise WriteError(f"cannot write the JSON output to stdout: {why}") from None


def quiet_rank() -> bool:
    """True in a torchrun process other than rank 0.

    Such a rank neither prints nor fails with an error that rank 0 reports too (a usage error, a
    refused option, an error agreed on before training, a divergence): it exits 0 and leaves the
    error to rank 0. A failed exit status would make torchrun stop every other process, rank 0
    included, possibly before rank 0 had printed the error or set its exit status.
    """
    import os

    return in_torchrun() and os.environ.get("RANK", "0").strip() != "0"


def in_torchrun() -> bool:
    """True in a process of a torchrun job of several processes (WORLD_SIZE above 1)."""
    import os

    return os.environ.get("WORLD_SIZE", "1").strip() not in ("", "1")
