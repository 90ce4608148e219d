"""Atomic checkpoints: a crash while writing never replaces a good file with a bad one."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch

from opzoo.exceptions import CheckpointError

FORMAT = "opzoo-checkpoint/1"


def save(path: str | os.PathLike[str], state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically: temp file in the same folder, fsync, rename."""
    path = Path(path)
    if path.parent and not path.parent.is_dir():
        raise CheckpointError(f"cannot write checkpoint {str(path)!r}: folder does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format": FORMAT, **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # A writer killed mid-write (SIGKILL skips the cleanup above) leaves its temp file behind.
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        stale.unlink(missing_ok=True)
    # Make the rename itself durable; not every platform lets a folder be opened.
    try:
        dir_fd = os.open(path.parent or ".", os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


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
