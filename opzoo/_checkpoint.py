"""Checkpoint files: atomic writes, and one writer per path.

- A crash while writing never replaces a good file with a bad one (temp file, fsync, rename).
- One run at a time writes a path: :func:`lock` holds an ``fcntl`` lock on ``PATH.lock`` for the
  run's lifetime; the OS releases it when the process dies, however it dies.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from opzoo.exceptions import CheckpointError

FORMAT = "opzoo-checkpoint/1"
def _temp_prefix(path: Path) -> str:
    # The pid in the name tells whose temp file it is; each writer removes only its own.
    return f".{path.name}.{os.getpid()}."


def save(path: str | os.PathLike[str], state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically: temp file in the same folder, fsync, rename.

    Raises OSError when the file cannot be written (full disk, permissions); the file at ``path``
    is then the previous one, untouched.
    """
    path = Path(path)
    if not path.parent.is_dir():
        raise CheckpointError(f"cannot write checkpoint {str(path)!r}: folder does not exist")
    fd, tmp = tempfile.mkstemp(prefix=_temp_prefix(path), suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": FORMAT, **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # Make the rename itself durable; not every platform lets a folder be opened.
    try:
        dir_fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def lock_path(path: str | os.PathLike[str]) -> Path:
    """The lock file that guards checkpoint ``path``: ``PATH.lock``, beside it."""
    path = Path(path)
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the exclusive write lock on checkpoint ``path``; a second holder is refused at once.

    The lock file stays after release: removing it would let a third writer lock a new file while
    a second still holds the old one.
    """
    import fcntl

    path = Path(path)
    fd = os.open(lock_path(path), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise CheckpointError(
                f"checkpoint {str(path)!r} is in use by another run (pid {holder}); "
                "wait for it to finish or write elsewhere"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _sweep_dead_writers(path)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _sweep_dead_writers(path: Path) -> None:
    # Under the lock no other live run writes this path, so a temp file of another pid is left over
    # by a writer killed mid-write (SIGKILL skips save's cleanup).
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        if not stale.name.startswith(_temp_prefix(path)):
            stale.unlink(missing_ok=True)


def probe(path: str | os.PathLike[str]) -> None:
    """Create and remove a file beside ``path``: an unwritable destination fails now, not later.

    Raises OSError (with its strerror) when the folder cannot take a new file.
    """
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.probe.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True``; any problem is a one-line CheckpointError."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {str(path)!r}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CheckpointError(
            f"{str(path)!r} is not a readable opzoo checkpoint (corrupt, truncated or foreign): {first}"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{str(path)!r} is not an opzoo checkpoint")
    return state

