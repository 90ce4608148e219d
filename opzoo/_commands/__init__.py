"""The subcommands of ``opzoo``, one module each; cli.py assembles them.

Each module imports only the standard library at import time, so that ``opzoo --help`` never pays
for torch; the library is imported inside each ``run_*``.
"""

from __future__ import annotations

import argparse
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE = 0, 1, 2


def registry_from(args: argparse.Namespace) -> Any:
    """Load the registry as the command line asks; the command passes it on to the library."""
    from opzoo._loading import load

    return load(
        autoload=False if args.no_autoload else None,
        block=args.block or (),
        strict=True if args.strict else None,
    )
