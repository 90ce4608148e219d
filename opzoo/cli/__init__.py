"""The ``opzoo`` command: parses arguments, calls the library, turns errors into one line.

Heavy imports (torch, the trainer, the property tests) happen inside the subcommands, so that
``opzoo --help`` stays fast.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import errno
import os
import sys
from typing import Any, Callable, NoReturn, Sequence

from opzoo.cli import _bench as bench
from opzoo.cli import _check as check
from opzoo.cli import _listing as listing
from opzoo.cli import _mutate as mutate
from opzoo.cli import _report as report
from opzoo.cli import _scan as scan
from opzoo.cli import _train as train
from opzoo.cli._common import EXIT_OK, EXIT_USAGE, in_torchrun, quiet_rank
from opzoo.exceptions import OpZooError, WriteError, printable

#: The exit status of a write that failed: EX_IOERR of sysexits.h (see WriteError).
EXIT_WRITE = WriteError.exit_code
#: A device that takes no more: full, over quota, over the file-size limit, failing.
_FULL = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO}


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


def _plugin_flags(parser: argparse.ArgumentParser, suppress: bool) -> None:
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
    from opzoo._version import __version__

    parser.add_argument("--version", action="version", version=f"opzoo {__version__}")
    _plugin_flags(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name, (add, _) in COMMANDS.items():
        p = add(sub)
        _plugin_flags(p, suppress=True)
    return parser


COMMANDS: dict[str, tuple[Callable[[Any], argparse.ArgumentParser], Callable[[argparse.Namespace], int]]] = {
    "list": (listing.add_list, listing.run_list),
    "info": (listing.add_info, listing.run_info),
    "train": (train.add_train, train.run_train),
    "check": (check.add_check, check.run_check),
    "mutate": (mutate.add_mutate, mutate.run_mutate),
    "bench": (bench.add_bench, bench.run_bench),
    "report": (report.add_report, report.run_report),
    "scan": (scan.add_scan, scan.run_scan),
}


def _as_flags(message: str) -> str:
    """The library names a setting as `name` (a parameter); on the command line it is --name."""
    import re

    return re.sub(r"`([a-z][a-z0-9_]*)`", lambda m: "--" + m.group(1).replace("_", "-"), message)


def _error(line: str) -> None:
    print(printable(line, lines=True), file=sys.stderr)  # it may quote a plugin or an exception


def console() -> NoReturn:
    """The ``opzoo`` command (and ``python -m opzoo``): :func:`main`, then leave the process
    without tearing the interpreter down, its exit status guarded from outside.

    The command runs in a child of a supervisor (``opzoo/_supervisor.py``) that exits with the
    status the command reported, or 70 with one line when the command ended with 0 before it
    reported any (a plugin or an op calling ``os._exit(0)``): a CI gate never passes on a command
    that did not finish. Not under torchrun, whose agent watches each rank itself.

    Finalizing the thousands of modules torch loads took 0.4-0.5 s at every exit here, a quarter
    of ``opzoo check NAME``'s start-up. Exit handlers (``atexit``, ``weakref.finalize``) still run
    and the streams are flushed, so nothing a command or a plugin arranged to do at exit is lost.
    Under torchrun the handlers are skipped too: gloo (torch 2.13) could still hold work whose
    release aborted the process during finalization ("terminate called without an active
    exception", about one run in four), after it had done everything right.
    """
    from opzoo import _supervisor

    if _supervisor.can_supervise() and not in_torchrun():
        _supervisor.supervised(_command, f"opzoo: error: {_supervisor.ENDED}")
    _command(lambda code: None)


def _command(report: Callable[[int], None]) -> NoReturn:
    """Run :func:`main`, its exit handlers and flushes; ``report`` the exit status, then leave."""
    try:
        code = main()
    except SystemExit as exc:  # argparse's --help and --version
        code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        if isinstance(exc.code, str):
            _error(exc.code)
    try:
        if not in_torchrun():
            atexit._run_exitfuncs()
    finally:
        code = _flushed(code)
        report(code)
        os._exit(code)


def _flushed(code: int) -> int:
    """Flush stdout and stderr; return the exit status, EXIT_WRITE if stdout could not take what
    was printed (a full disk: one line says so, unless the command already failed)."""
    try:
        if sys.stdout is not None:  # None: started with stdout closed
            sys.stdout.flush()
    except BrokenPipeError:  # `opzoo list | head` closed the pipe: not an error of ours
        pass
    except (OSError, ValueError) as exc:
        if code == EXIT_OK and isinstance(exc, OSError):
            _error(f"opzoo: error: cannot write to stdout: {exc.strerror or exc}")
            code = EXIT_WRITE
    try:
        if sys.stderr is not None:
            sys.stderr.flush()
    except (OSError, ValueError):
        pass
    return code


#: The flags that name a file (their ``args`` attributes), made absolute as soon as they are parsed:
#: a plugin that changes the working folder when it is imported moves no output.
PATH_ARGS = ("checkpoint", "resume", "metrics", "plot", "export", "html")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; return the exit status."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        for name in PATH_ARGS:  # before any plugin, or the user's data loader, is imported
            if getattr(args, name, None):
                setattr(args, name, os.path.abspath(getattr(args, name)))
        if args.command is None:
            parser.print_help()
            return EXIT_USAGE
        if getattr(args, "json", False):
            if sys.stdout is None:  # refused before any work, not after it
                raise WriteError("cannot write the JSON output: stdout is closed")
            # plugins may print while they load or run: keep the JSON on stdout alone
            args.json_stdout = sys.stdout
            with contextlib.redirect_stdout(sys.stderr):
                return COMMANDS[args.command][1](args)
        return COMMANDS[args.command][1](args)
    except _UsageError as exc:
        if quiet_rank():  # the same command line: rank 0 says it (see cli._common.quiet_rank)
            return EXIT_OK
        _error(f"opzoo: error: {exc}")
        return EXIT_USAGE
    except OpZooError as exc:
        if getattr(exc, "reported_by_rank_0", False) and quiet_rank():
            return EXIT_OK
        _error(f"opzoo: error: {_as_flags(str(exc))}")
        return getattr(exc, "exit_code", EXIT_USAGE)
    except KeyboardInterrupt as exc:  # Ctrl-C; SIGTERM or SIGHUP where opzoo raises them (Terminated)
        if not quiet_rank():  # torchrun passed Ctrl-C to every rank
            by = getattr(exc, "signum_name", None)
            _error("opzoo: interrupted" + (f" by {by}" if by else ""))
        return 128 + getattr(exc, "signum", 2)
    except BrokenPipeError:
        # `opzoo list | head` closed the pipe; not an error of ours.
        sys.stderr.close()
        return EXIT_OK
    except OSError as exc:
        if exc.errno not in _FULL:
            raise
        # stdout, or a file a plugin wrote, on a full disk (opzoo's own files raise WriteError)
        _error(f"opzoo: error: cannot write output: {exc.strerror}")
        return EXIT_WRITE
    finally:
        registry = getattr(locals().get("args"), "loaded_registry", None)
        for line in registry.slow() if registry is not None and not quiet_rank() else ():
            print(f"opzoo: note: {printable(line)}", file=sys.stderr)
