"""Files opzoo writes: only regular files are replaced, and each is replaced whole or not at all.

Every file opzoo writes (checkpoint, export, metrics, plot, its plugin cache) goes through
:func:`replace`: the bytes are written to a temporary file beside the destination, flushed to disk,
and renamed over it, so that a crash or a full disk leaves the previous file as it was, never a torn
one. A destination that is a device, a fifo or a socket is refused (:func:`check_destination`,
before any work); a symlink is followed: the file it names is replaced, and the link stays.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path

from opzoo.exceptions import ConfigError, WriteError

_KINDS = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a fifo",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


def resolve(path: str | os.PathLike[str]) -> Path:
    """The file a write to ``path`` replaces: ``path`` made absolute, symlinks followed (a link to
    a file not there yet names where it will be)."""
    return Path(os.path.realpath(os.path.abspath(path)))


def kind(path: str | os.PathLike[str]) -> str | None:
    """What is at ``path`` (symlinks followed) if it is not a regular file, in words; None for a
    regular file or nothing."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:  # a loop of symlinks, a folder we may not enter
        return f"unreachable ({exc.strerror})"
    if stat.S_ISREG(mode):
        return None
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


def check_destination(what: str, path: str) -> None:
    """Refuse, with one line (ConfigError, exit 2), a destination opzoo would not or could not
    replace: a device, fifo, socket or folder; a missing folder; a read-only file; a folder that
    takes no new file (a read-only, full or pseudo file system such as ``/proc``)."""
    target = resolve(path)
    where = repr(path) if str(target) == os.path.abspath(path) else f"{path!r} (a link to {str(target)!r})"
    if not target.parent.is_dir():
        raise ConfigError(f"cannot write {what} {where}: folder {str(target.parent)!r} does not exist")
    found = kind(target)
    if found == "a folder":
        raise ConfigError(f"cannot write {what} {where}: it is a folder")
    if found is not None:
        raise ConfigError(
            f"cannot write {what} {where}: it is {found}, and opzoo replaces only regular files"
        )
    if target.exists() and not os.access(target, os.W_OK):
        raise ConfigError(f"cannot write {what} {where}: the file is read-only")
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.probe.", suffix=".tmp", dir=target.parent)
        os.close(fd)
        os.unlink(tmp)
    except OSError as exc:
        raise ConfigError(f"cannot write {what} {where}: {exc.strerror or exc}") from None


def temp_prefix(target: Path) -> str:
    """The name a writer's temporary files start with: the pid tells whose each one is."""
    return f".{target.name}.{os.getpid()}."


def replace(path: str | os.PathLike[str], data: bytes | memoryview) -> Path:
    """Write ``data`` to ``path`` atomically: temp file in the same folder, fsync, rename, fsync
    of the folder; return the file replaced (symlinks followed).

    Raises OSError when it cannot be written (a full disk: the file at ``path`` is then the previous
    one, untouched, and no temp file is left), and also when ``path`` has become something other
    than a regular file since it was checked.
    """
    target = resolve(path)
    found = kind(target)
    if found is not None:
        raise OSError(f"it is {found}, and opzoo replaces only regular files")
    try:
        mode = stat.S_IMODE(os.stat(target).st_mode)  # a replaced file keeps its permissions
    except FileNotFoundError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=temp_prefix(target), suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), mode)
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    # Make the rename itself durable; not every platform lets a folder be opened.
    try:
        dir_fd = os.open(target.parent, os.O_RDONLY)
    except OSError:
        return target
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return target


def write(what: str, path: str, data: bytes | memoryview) -> None:
    """:func:`replace`, its failure one line: WriteError (exit 74), the previous file kept."""
    try:
        replace(path, data)
    except OSError as exc:
        before = "the previous one is kept" if resolve(path).exists() else "nothing was written"
        raise WriteError(f"cannot write {what} {path!r}: {exc.strerror or exc}; {before}") from None


def _umask() -> int:
    # Read, not set and restored: os.umask would change it for every thread meanwhile.
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022
