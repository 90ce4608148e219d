"""What the subcommands of ``opzoo`` share; ``cli/__init__.py`` assembles them, one module each.

Each module imports only the standard library at import time, so that ``opzoo --help`` never pays
for torch; the library is imported inside each ``run_*``.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2
#: The longest wait a command takes (--timeout, --collective-timeout): a week. Longer is no limit
#: at all, and past about 1e10 s the timers underneath overflow (every property failed with
#: OverflowError at --timeout 1e300).
MAX_SECONDS = 7 * 24 * 3600.0
#: Hypothesis examples per property, at most (--examples): 330 times the thorough profile's. Beyond,
#: hypothesis itself fails (at 1e8 with FlakyStrategyDefinition; at 1e9 and more it never started).
MAX_EXAMPLES = 100_000


def check_seconds(flag: str, value: float) -> None:
    """Refuse a time limit that is not a positive number of seconds, at most MAX_SECONDS."""
    import math

    from opzoo.exceptions import ConfigError

    if not (math.isfinite(value) and 0 < value <= MAX_SECONDS):
        raise ConfigError(
            f"{flag} must be a positive number of seconds, at most {MAX_SECONDS:.0f} (a week), got {value:g}"
        )


def check_run_limits(args: argparse.Namespace) -> None:
    """The limits of a command that runs checks (check, report, mutate): ``--timeout``,
    ``--examples`` and ``--jobs``, one line for each bad value, before anything runs."""
    from opzoo.exceptions import ConfigError

    check_seconds("--timeout", args.timeout)
    if args.examples is not None and not 0 < args.examples <= MAX_EXAMPLES:
        raise ConfigError(
            f"--examples must be a positive integer, at most {MAX_EXAMPLES}, got {args.examples}"
        )
    if args.jobs is not None and args.jobs <= 0:
        raise ConfigError(f"--jobs must be a positive integer, got {args.jobs}")


def registry_from(args: argparse.Namespace) -> Any:
    """Load the registry as the command line asks; the command passes it on to the library.

    It is kept on ``args`` too, so that the command line can say afterwards which plugins were slow.
    """
    from opzoo.core._loading import load

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
