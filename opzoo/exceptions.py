"""Exceptions raised by opzoo.

Every error opzoo raises on purpose derives from :class:`OpZooError`, and also from the builtin that
matches its meaning, so callers can catch either::

    OpZooError
    ├── OpNotFoundError      (LookupError)   no op under that name
    ├── DuplicateOpError     (LookupError)   two sources offer one name
    ├── PluginError                           a plugin failed to load or validate
    ├── ContractError        (ValueError)     an op's declared contract is invalid
    ├── ParamError           (ValueError)     a bad value for an op parameter
    ├── ConfigError          (ValueError)     a bad trainer or command setting
    ├── CheckpointError                       a checkpoint cannot be read, or is not this run's
    │   └── CheckpointWriteError              the final checkpoint could not be written (exit 74)
    ├── WriteError                            an output could not be written: a full disk (exit 74)
    ├── DivergedError        (ArithmeticError) training produced a non-finite loss
    ├── CompileError         (RuntimeError)   torch.compile failed on a valid setting
    └── LibraryError         (TypeError)      an op cannot be bridged to torch.library

and :func:`one_line`, how any exception is worded in one line of a report, and :func:`printable`, how
any text from a plugin or an exception is shown on a terminal. This module is at the bottom of the
package: it imports nothing of opzoo's at run time.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Sequence

if TYPE_CHECKING:
    from opzoo._records import Failure


class OpZooError(Exception):
    """Base class of every error opzoo raises on purpose."""


class OpNotFoundError(OpZooError, LookupError):
    """No op is registered under the name asked for."""

    def __init__(self, name: str, known: Sequence[str] = ()) -> None:
        import difflib

        self.name = name
        self.suggestions = difflib.get_close_matches(name.lower(), list(known), n=3, cutoff=0.5)
        msg = f"no op named {name!r}"
        if self.suggestions:
            msg += "; did you mean " + ", ".join(repr(s) for s in self.suggestions) + "?"
        elif known:
            msg += f"; known ops: {', '.join(sorted(known))}"
        super().__init__(msg)


class DuplicateOpError(OpZooError, LookupError):
    """Two sources offer the same op name; neither silently wins."""

    def __init__(self, name: str, sources: Sequence[str]) -> None:
        self.name = name
        self.sources = tuple(sorted(sources))
        qualified = ", ".join(f"{s}:{name}" for s in self.sources)
        super().__init__(
            f"op {name!r} is offered by {' and '.join(repr(s) for s in self.sources)}; "
            f"ask for one of {qualified}, or block one of the plugins"
        )


class PluginError(OpZooError):
    """A plugin, or one op it declares, failed to load or validate."""

    def __init__(self, failure: Failure) -> None:
        self.failure = failure
        super().__init__(str(failure))


class ContractError(OpZooError, ValueError):
    """An op's declared contract is invalid."""


class ParamError(OpZooError, ValueError):
    """An op parameter is unknown or outside its declared range."""


class ConfigError(OpZooError, ValueError):
    """A trainer or command setting is invalid."""


class CheckpointError(OpZooError):
    """A checkpoint cannot be read, or does not belong to this run."""


class WriteError(OpZooError):
    """A file or stream opzoo writes could not be written (a full disk, a closed stdout); a file's
    previous contents are kept whole."""

    # Not a usage mistake (destinations are checked before any work): EX_IOERR of sysexits.h, so
    # that a script tells a full disk from a failed check (1) or a bad command line (2).
    exit_code = 74


class CheckpointWriteError(CheckpointError, WriteError):
    """The run's final checkpoint could not be written (a full disk); the last good one is kept."""


class DivergedError(OpZooError, ArithmeticError):
    """Training produced a non-finite loss."""

    exit_code = 1  # not a usage mistake: the run itself failed


class CompileError(OpZooError, RuntimeError):
    """torch.compile failed on a setting that was valid: the compiler's or the op's failure."""

    exit_code = 1  # not a usage mistake; the cause is chained for a debugger


class LibraryError(OpZooError, TypeError):
    """An op cannot be bridged to ``torch.library`` (opzoo.library): its form, or a name taken."""


def one_line(exc: BaseException, *, with_type: bool | None = None, lines: int = 1) -> str:
    """Return the first line of ``exc``'s message (the first ``lines`` non-blank ones, joined),
    prefixed by its type name, :func:`printable`.

    opzoo's own errors are written to be read as they are, so they get no prefix unless asked for.
    """
    text = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    detail = " ".join(text[:lines])
    if with_type is None:
        with_type = not isinstance(exc, OpZooError)
    if not with_type:
        return printable(detail) or type(exc).__name__
    return printable(f"{type(exc).__name__}: {detail}" if detail else type(exc).__name__)


#: What a terminal would act on rather than show: C0 controls (ESC among them), DEL, C1 controls
#: (U+009B is a second CSI), the bidirectional marks, embeddings, overrides and isolates (U+202E
#: shows the rest of a line reversed), and the Unicode line and paragraph separators.
_OTHERS = r"\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069"
_UNPRINTABLE = re.compile(rf"[\x00-\x1f{_OTHERS}]")
_UNPRINTABLE_BUT_NEWLINE = re.compile(rf"[\x00-\x09\x0b-\x1f{_OTHERS}]")


def printable(text: str, *, lines: bool = False) -> str:
    """Return ``text`` with every control character shown as its escape (``\\x1b``, ``\\u202e``).

    What a plugin or an exception says (a summary, a formula, an error message) reaches a terminal
    through this: shown, it cannot set the window's title, clear the screen or fake a line of
    opzoo's. With ``lines``, newlines are kept (a report of several lines); a tab is escaped too,
    as it would break a table's columns. Idempotent: an escape is plain text.
    """
    pattern = _UNPRINTABLE_BUT_NEWLINE if lines else _UNPRINTABLE
    return pattern.sub(_escape, text)


_NAMED = {"\t": "\\t", "\n": "\\n", "\r": "\\r"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    code = ord(char)
    return _NAMED.get(char) or (f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}")
