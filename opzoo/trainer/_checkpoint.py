"""Checkpoint files: atomic writes, one writer per path, a checksum, and a validated schema on read.

- A crash or a full disk while writing never replaces a good file with a bad one: the file is
  serialized in memory, then written through :func:`opzoo._files.replace` (temp file, fsync, rename).
- One run at a time writes a path: :func:`lock` holds an ``fcntl`` lock on ``PATH.lock`` for the
  run's lifetime; the OS releases it when the process dies, however it dies.
- :func:`load` reads with ``weights_only=True`` (no code runs), checks the checksum of everything the
  file holds, the schema and each tensor, and says what is wrong, and which opzoo wrote the file.
"""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import io
import math
import os
import re
import stat
import struct
from pathlib import Path
from typing import Any, Iterator, Mapping

import torch

from opzoo import _files
from opzoo.exceptions import CheckpointError

FORMAT = "opzoo-checkpoint/2"
#: Written before checksums: read all the same (a file without a version is from opzoo 0.1.0 or
#: older), with every check but the checksum.
LEGACY_FORMAT = "opzoo-checkpoint/1"
# Each part a checkpoint holds, and the type its value must have. "opzoo_version" came later: a file
# without it was written by opzoo 0.1.0 or older, and is read all the same.
SCHEMA: Mapping[str, type | tuple[type, ...]] = {
    "config": dict,
    "weights": dict,
    "optimizer": (dict, type(None)),
    "rng": torch.Tensor,
    "data": dict,
    "losses": list,
}
#: The parts besides SCHEMA's; any other is refused.
TAGS = ("format", "opzoo_version", "checksum")
DATA_KEYS = ("x", "y", "w1", "w2")
HELD_OUT_KEYS = ("x_test", "y_test")
# A release as PEP 440 writes one (1.2, 0.3.0rc1, 2.0.post1.dev3+local).
_VERSION = re.compile(r"\d+(\.\d+){0,4}((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?(\+[A-Za-z0-9.]{1,32})?")


def _version() -> str:
    from opzoo._version import __version__

    return __version__


def save(path: str | os.PathLike[str], state: dict[str, Any]) -> None:
    """Write ``state`` to ``path`` atomically, with its checksum; a symlink's target is replaced.

    Raises OSError when the file cannot be written (full disk, permissions); the file at ``path``
    is then the previous one, untouched. The whole file is serialized in memory first: torch's zip
    writer fails on a full disk with a RuntimeError, or aborts the process, rather than an OSError.
    """
    target = _files.resolve(path)
    if not target.parent.is_dir():
        raise CheckpointError(f"cannot write checkpoint {str(path)!r}: folder does not exist")
    full = {"format": FORMAT, "opzoo_version": _version(), **state}
    full["checksum"] = checksum(full)
    buffer = io.BytesIO()
    torch.save(full, buffer)
    _files.replace(target, buffer.getbuffer())


def checksum(state: Mapping[str, Any]) -> str:
    """The SHA-256 of everything in ``state`` but its checksum: every tensor's dtype, shape and bytes,
    every number, string and key, in a fixed order."""
    h = hashlib.sha256()
    _feed(h, {k: v for k, v in state.items() if k != "checksum"})
    return h.hexdigest()


def _feed(h: Any, value: Any) -> None:
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.is_quantized or value.is_meta:
            raise CheckpointError(f"a tensor of layout {value.layout}, not a dense one")
        t = value.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        nbytes = t.numel() * t.element_size()
        if nbytes:
            h.update(ctypes.string_at(t.data_ptr(), nbytes))
    elif isinstance(value, Mapping):
        h.update(b"D%d" % len(value))
        for key in sorted(value, key=repr):  # keys are strings, or ints in an optimizer's state
            _feed(h, key)
            _feed(h, value[key])
    elif isinstance(value, (list, tuple)):
        h.update(b"L%d" % len(value))
        for item in value:
            _feed(h, item)
    elif isinstance(value, bool) or value is None:
        h.update(repr(value).encode())
    elif isinstance(value, int):
        h.update(b"I%d;" % value)
    elif isinstance(value, float):
        h.update(b"F" + struct.pack("<d", value))
    elif isinstance(value, str):
        text = value.encode("utf-8", "surrogatepass")
        h.update(b"S%d:" % len(text) + text)
    else:
        raise CheckpointError(f"a checkpoint cannot hold a {type(value).__name__}")


def _temp_prefix(path: Path) -> str:
    # The pid in the name tells whose temp file it is; each writer removes only its own.
    return _files.temp_prefix(path)


def lock_path(path: str | os.PathLike[str]) -> Path:
    """The lock file that guards checkpoint ``path``: ``PATH.lock``, beside it."""
    path = Path(path)
    return path.with_name(path.name + ".lock")


@contextlib.contextmanager
def lock(path: str | os.PathLike[str]) -> Iterator[None]:
    """Hold the exclusive write lock on checkpoint ``path``; a second holder is refused at once.

    The lock file stays after release: removing it would let a third writer lock a new file while
    a second still holds the old one. It is never a link, a folder, a fifo or a device, nor, in a
    shared folder, another user's file (:func:`_open_lock`).
    """
    import fcntl

    shown = str(path)
    try:
        path = _files.resolve(path)  # two links to one file take one lock
    except OSError as exc:
        raise CheckpointError(f"cannot lock checkpoint {shown!r}: {exc.strerror or exc}") from None
    fd = _open_lock(lock_path(path))
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise CheckpointError(
                f"checkpoint {shown!r} is in use by another run (pid {holder}); "
                "wait for it to finish or write elsewhere"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        _sweep_dead_writers(path)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


#: Never through a link (a planted one would have its target truncated), never blocking on a fifo.
_LOCK_FLAGS = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)


def _open_lock(where: Path) -> int:
    """Open (or create) lock file ``where``: a regular file, and in a sticky world-writable folder
    one of ours or of the folder's owner (the kernel's fs.protected_regular rule, applied here)."""
    shown = str(where)
    try:
        fd = os.open(where, _LOCK_FLAGS | getattr(os, "O_CLOEXEC", 0), 0o644)
    except OSError as exc:
        # What refused it (ELOOP, or EACCES for another user's link in a sticky folder; EISDIR):
        # told by what is there, the same on every kernel.
        with contextlib.suppress(OSError):
            if stat.S_ISLNK(os.lstat(where).st_mode):
                raise CheckpointError(
                    f"lock file {shown!r} is a symlink: opzoo never follows a link to lock a "
                    "checkpoint; remove it"
                ) from None
            if stat.S_ISDIR(os.lstat(where).st_mode):
                raise CheckpointError(f"lock file {shown!r} is a folder: {_ONLY_REGULAR}") from None
        raise CheckpointError(f"cannot open lock file {shown!r}: {exc.strerror or exc}") from None
    try:
        st, folder = os.fstat(fd), os.stat(where.parent)
        found = _files.kind_of(st.st_mode)
        if found is not None:
            raise CheckpointError(f"lock file {shown!r} is {found}: {_ONLY_REGULAR}")
        if _files.shared(folder) and st.st_uid not in (os.geteuid(), folder.st_uid):
            raise CheckpointError(
                f"lock file {shown!r} belongs to uid {st.st_uid}, not to you, in the sticky "
                f"world-writable folder {str(where.parent)!r}: opzoo writes into no other user's file "
                "there (the kernel's fs.protected_regular rule); remove it or write elsewhere"
            )
    except BaseException:
        os.close(fd)
        raise
    return fd


_ONLY_REGULAR = "opzoo locks a checkpoint only with a regular file; remove it"


def _sweep_dead_writers(path: Path) -> None:
    # Under the lock no other live run writes this path, so a temp file of another pid is left over
    # by a writer killed mid-write (SIGKILL skips save's cleanup). Only our own regular files: in a
    # shared folder another user's file is theirs, whatever its name.
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        if not stale.name.startswith(_temp_prefix(path)):
            with contextlib.suppress(OSError):
                st = os.lstat(stale)
                if stat.S_ISREG(st.st_mode) and st.st_uid == os.geteuid():
                    stale.unlink(missing_ok=True)


def load(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint with ``weights_only=True``; any problem is a one-line CheckpointError.

    It is read through the links :func:`opzoo._files.resolve` follows: never one another user planted
    in a shared folder."""
    shown = str(Path(path))  # the path as given, in every message
    try:
        path = _files.resolve(path)
    except OSError as exc:
        raise CheckpointError(f"cannot read checkpoint {shown!r}: {exc.strerror or exc}") from None
    found = _files.kind(path)
    if found is not None:
        raise CheckpointError(f"{shown!r} is {found}, not a checkpoint file")
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {shown!r}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise CheckpointError(
            f"{shown!r} is not a readable opzoo checkpoint (corrupt, truncated or foreign): {first}"
        ) from None
    if not isinstance(state, dict) or state.get("format") not in (FORMAT, LEGACY_FORMAT):
        raise CheckpointError(f"{shown!r} is not an opzoo checkpoint")
    problem = version_problem(state) or checksum_problem(state) or schema_problem(state)
    if problem:
        raise CheckpointError(f"checkpoint {shown!r} {problem} (written by {written_by(state)})")
    return state


def written_by(state: Mapping[str, Any]) -> str:
    """Which opzoo wrote ``state``, in words."""
    version = state.get("opzoo_version")
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        return "opzoo 0.1.0 or older" if version is None else "an unknown writer"
    return f"opzoo {version}"


def version_problem(state: Mapping[str, Any]) -> str | None:
    """Say what is wrong with the writer's version ``state`` records, or None."""
    version = state.get("opzoo_version")
    if version is None and state["format"] == LEGACY_FORMAT:
        return None
    if not isinstance(version, str) or not _VERSION.fullmatch(version):
        shown = repr(version) if len(repr(version)) <= 40 else repr(version)[:37] + "..."
        return f"records the version of the opzoo that wrote it as {shown}, which is no version"
    return None


def checksum_problem(state: Mapping[str, Any]) -> str | None:
    """Say whether ``state`` changed since it was written (its checksum), or None."""
    if state["format"] == LEGACY_FORMAT:
        return None  # written before checksums
    recorded = state.get("checksum")
    if not isinstance(recorded, str):
        return "has no checksum"
    try:
        actual = checksum(state)
    except CheckpointError as exc:
        return f"holds what no checkpoint holds: {exc}"
    if actual != recorded:
        return "fails its checksum: it was changed after opzoo wrote it (a flipped bit, or an edit)"
    return None


def schema_problem(state: Mapping[str, Any]) -> str | None:
    """Say what is wrong with the shape of ``state``, or None when the schema holds."""
    unknown = sorted(set(state) - set(SCHEMA) - set(TAGS), key=repr)
    if unknown:
        return f"has a part {unknown[0]!r}, which no opzoo checkpoint has"
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
            problem = tensor_problem(value)
            if problem:
                return f"has {key}[{name!r}] {problem}"
    missing = [k for k in DATA_KEYS if k not in state["data"]]
    if missing:
        return f"has no data {missing[0]!r}"
    extra = sorted(set(state["data"]) - set(DATA_KEYS) - set(HELD_OUT_KEYS))
    if extra:
        return f"has data {extra[0]!r}, which no opzoo checkpoint has"
    if not {"w1", "w2"} <= set(state["weights"]):
        return f"has weights {sorted(state['weights'])}, not w1 and w2"
    extra = sorted(k for k in state["weights"] if k not in ("w1", "w2") and not k.startswith("act."))
    if extra:
        return f"has weights {extra[0]!r}, which no opzoo checkpoint has"
    losses = state["losses"]
    if not all(isinstance(v, float) for v in losses):
        return "has 'losses' that are not all floats"
    if not all(math.isfinite(v) for v in losses):
        return "has a loss that is not finite (a run stops before it records one)"
    if not losses:
        return "has no losses: opzoo writes a checkpoint after a step, never before the first"
    return None


def tensor_problem(t: torch.Tensor) -> str | None:
    """Say why ``t`` is no tensor a checkpoint holds (dense, real floating point, finite), or None."""
    if t.layout != torch.strided or t.is_quantized or t.is_meta:
        return f"of layout {t.layout}, not a dense tensor"
    if not t.dtype.is_floating_point:
        return f"of dtype {t.dtype}, not a floating-point one"
    if not bool(torch.isfinite(t).all()):
        return "with values that are not finite"
    return None


def _names(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    return " or ".join("None" if k is type(None) else k.__name__ for k in kinds)
