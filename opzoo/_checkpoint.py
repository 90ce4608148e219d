"""Checkpoint files: atomic writes, one writer per path, and a validated schema on read.

- A crash while writing never replaces a good file with a bad one (temp file, fsync, rename).
- One run at a time writes a path: :func:`lock` holds an ``fcntl`` lock on ``PATH.lock`` for the
  run's lifetime; the OS releases it when the process dies, however it dies.
- :func:`load` checks the schema and says what is wrong, and which opzoo wrote the file.
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
# Each key a checkpoint holds, and the type its value must have. "opzoo_version" came later: a file
# without it was written by opzoo 0.1.0 or older, and is read all the same.
SCHEMA: Mapping[str, type | tuple[type, ...]] = {
    "config": dict,
    "weights": dict,
    "optimizer": (dict, type(None)),
    "rng": torch.Tensor,
    "data": dict,
    "losses": list,
}
DATA_KEYS = ("x", "y", "w1", "w2")


def _version() -> str:
    from opzoo import __version__

    return __version__


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
            torch.save({"format": FORMAT, "opzoo_version": _version(), **state}, f)
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
    problem = schema_problem(state)
    if problem:
        raise CheckpointError(f"checkpoint {str(path)!r} {problem} (written by {written_by(state)})")
    return state


def written_by(state: Mapping[str, Any]) -> str:
    """Which opzoo wrote ``state``, in words."""
    version = state.get("opzoo_version")
    return f"opzoo {version}" if isinstance(version, str) else "opzoo 0.1.0 or older"


def schema_problem(state: Mapping[str, Any]) -> str | None:
    """Say what is wrong with the shape of ``state``, or None when the schema holds."""
    for key, kind in SCHEMA.items():
        if key not in state:
            return f"has no {key!r}"
        if not isinstance(state[key], kind):
            return f"has {key!r} of type {type(state[key]).__name__}, not {_names(kind)}"
    rng = state["rng"]
    if rng.dtype != torch.uint8 or rng.dim() != 1:
        return f"has an 'rng' state of dtype {rng.dtype} and {rng.dim()} dimension(s), not a 1-d uint8 tensor"
    for key in ("weights", "data"):
        for name, value in state[key].items():
            if not isinstance(value, torch.Tensor):
                return f"has {key}[{name!r}] of type {type(value).__name__}, not a tensor"
    missing = [k for k in DATA_KEYS if k not in state["data"]]
    if missing:
        return f"has no data {missing[0]!r}"
    if not {"w1", "w2"} <= set(state["weights"]):
        return f"has weights {sorted(state['weights'])}, not w1 and w2"
    if not all(isinstance(v, float) for v in state["losses"]):
        return "has 'losses' that are not all floats"
    return None


def _names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
