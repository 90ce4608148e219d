"""Files opzoo writes: only regular files are replaced, and each is replaced whole or not at all.

Every file opzoo writes (checkpoint, export, metrics, plot, its plugin cache) goes through
:func:`replace`: the bytes are written to a temporary file beside the destination, flushed to disk,
and renamed over it, so that a crash or a full disk leaves the previous file as it was, never a torn
one. A destination that is a device, a fifo or a socket is refused (:func:`check_destination`,
before any work); a symlink is followed: the file it names is replaced, and the link stays.

Paths are resolved here, in user space, so the kernel's ``fs.protected_symlinks`` never sees a link
being followed: :func:`resolve` applies its rule itself (:func:`may_follow`), so that a link another
user planted in a shared folder (``/tmp``) is refused, not followed, whoever runs opzoo. The one
file opzoo reads back to decide something, its plugin cache, is read by the same rule
(:func:`read_own`).
"""

from __future__ import annotations

import errno
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


#: The kernel's MAXSYMLINKS: more links than this in one path is a loop (ELOOP).
_MAX_LINKS = 40
_SHARED = stat.S_ISVTX | stat.S_IWOTH


class UnsafeLink(PermissionError):
    """A symlink the kernel's ``fs.protected_symlinks`` rule would not follow; ``strerror`` is the
    whole reason, in one line."""


def shared(folder: os.stat_result) -> bool:
    """Whether ``folder`` is sticky and world-writable (``/tmp``, a shared scratch folder)."""
    return folder.st_mode & _SHARED == _SHARED


def may_follow(link: os.stat_result, folder: os.stat_result, euid: int) -> bool:
    """fs.protected_symlinks=1 (fs/namei.c may_follow_link): the follower owns the link, or the folder
    holding it is not both sticky and world-writable, or the folder's owner owns the link."""
    return link.st_uid == euid or not shared(folder) or link.st_uid == folder.st_uid


def resolve(path: str | os.PathLike[str]) -> Path:
    """The file a write to ``path`` replaces: ``path`` made absolute, symlinks followed (a link to
    a file not there yet names where it will be), as ``os.path.realpath`` does, but every link on
    the way checked by :func:`may_follow`.

    Raises :class:`UnsafeLink` for a link the kernel's rule refuses, OSError (ELOOP) for a loop.
    """
    done, todo, links = "/", _parts(os.path.abspath(path))[::-1], 0
    while todo:
        part = todo.pop()
        if part == "..":
            done = os.path.dirname(done)
            continue
        here = os.path.join(done, part)
        try:
            st = os.lstat(here)
        except OSError:  # not there (yet), or not a folder: the rest is where it will be
            return Path(os.path.join(here, *reversed(todo)))
        if not stat.S_ISLNK(st.st_mode):
            done = here
            continue
        links += 1
        if links > _MAX_LINKS:
            raise OSError(errno.ELOOP, f"too many levels of symbolic links in {os.fspath(path)!r}")
        _check_link(here, st, done)
        target = os.readlink(here)
        if os.path.isabs(target):
            done = "/"
        todo.extend(reversed(_parts(target)))
    return Path(done)


def _parts(path: str) -> list[str]:
    return [p for p in path.split(os.sep) if p not in ("", ".")]


def _check_link(link: str, st: os.stat_result, folder: str) -> None:
    holder = os.stat(folder)  # a resolved folder: no link left in it
    if not may_follow(st, holder, os.geteuid()):
        raise UnsafeLink(
            errno.EACCES,
            f"refusing to follow symlink {link!r} (owned by uid {st.st_uid}) in the sticky "
            f"world-writable folder {folder!r} (owned by uid {holder.st_uid}): neither you nor the "
            "folder's owner made it (the kernel's fs.protected_symlinks rule)",
        )


def kind(path: str | os.PathLike[str]) -> str | None:
    """What is at ``path`` (symlinks followed) if it is not a regular file, in words; None for a
    regular file or nothing."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        return None
    except OSError as exc:  # a loop of symlinks, a folder we may not enter
        return f"unreachable ({exc.strerror})"
    return kind_of(mode)


def kind_of(mode: int) -> str | None:
    """What a file of ``mode`` (``st_mode``) is if it is not a regular file, in words; else None."""
    if stat.S_ISREG(mode):
        return None
    return _KINDS.get(stat.S_IFMT(mode), "not a regular file")


#: Never through a link as the last step, never blocking on a fifo.
_READ_FLAGS = (
    os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0)
)


def read_own(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a file opzoo keeps for itself (its plugin cache), read as it is written: through
    the links :func:`resolve` follows, the last step never a link, only a regular file, and in a
    sticky world-writable folder only a file of ours or of the folder's owner (what the kernel's
    fs.protected_regular rule asks of a write there: another user's file is theirs to fill).

    Raises OSError (:class:`UnsafeLink` for a planted link) when it may not or cannot be read.
    """
    target = resolve(path)
    fd = os.open(target, _READ_FLAGS)
    try:
        st, folder = os.fstat(fd), os.stat(target.parent)
        found = kind_of(st.st_mode)
        if found is not None:
            raise OSError(errno.EINVAL, f"it is {found}, not a regular file")
        if shared(folder) and st.st_uid not in (os.geteuid(), folder.st_uid):
            raise PermissionError(
                errno.EACCES,
                f"it belongs to uid {st.st_uid}, in the sticky world-writable folder {str(target.parent)!r}",
            )
        chunks = []
        while chunk := os.read(fd, 1 << 16):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def check_destination(what: str, path: str) -> None:
    """Refuse, with one line (ConfigError, exit 2), a destination opzoo would not or could not
    replace: a device, fifo, socket or folder; a missing folder; a read-only file; a folder that
    takes no new file (a read-only, full or pseudo file system such as ``/proc``); a link the
    kernel's rule refuses (:func:`may_follow`), or a loop of links."""
    try:
        target = resolve(path)
    except OSError as exc:
        raise ConfigError(f"cannot write {what} {path!r}: {exc.strerror or exc}") from None
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
    mode = _mode_of(target)
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


def _mode_of(target: Path) -> int:
    """The mode a new file at ``target`` gets: a file of ours replaced keeps its permissions; one
    another user made there (planted in a shared folder, say) chooses nothing, no setuid bit either."""
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    if st is not None and st.st_uid == os.geteuid():
        return stat.S_IMODE(st.st_mode) & 0o777
    return 0o666 & ~_umask()


def write(what: str, path: str, data: bytes | memoryview) -> None:
    """:func:`replace`, its failure one line: WriteError (exit 74), the previous file kept."""
    try:
        replace(path, data)
    except OSError as exc:
        before = "the previous one is kept" if _exists(path) else "nothing was written"
        raise WriteError(f"cannot write {what} {path!r}: {exc.strerror or exc}; {before}") from None


def _exists(path: str) -> bool:
    try:
        return resolve(path).exists()
    except OSError:  # a link refused, or a loop: what is there stays
        return os.path.lexists(path)


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
