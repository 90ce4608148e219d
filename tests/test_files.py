"""Every file opzoo writes is replaced whole or not at all, and only a regular file is replaced
(opzoo/_files.py): devices, fifos and sockets refused, symlinks followed (but not one another user
planted in a shared folder), a full disk one line."""

from __future__ import annotations

import errno
import os
import pwd
import resource
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import run_opzoo

from opzoo import _files
from opzoo.cli import _flushed, main
from opzoo.exceptions import CheckpointError, WriteError

TINY = ["--batch", "8", "--d-in", "20", "--hidden", "12", "--d-out", "3", "--lr", "1e-3", "--device", "cpu"]
NAMES = {"--checkpoint": "ck.pt", "--metrics": "m.csv", "--plot": "p.png", "--export": "net.pt2"}


def _one_error_line(err: str) -> str:
    assert err.startswith("opzoo: error: ") and err.count("\n") == 1, err
    return err


def _make(kind: str, path) -> None:
    if kind == "fifo":
        os.mkfifo(path)
    else:
        # A socket file, bound by name relative to its folder: an AF_UNIX path is at most 108 bytes.
        here = os.getcwd()
        os.chdir(path.parent)
        try:
            s = socket.socket(socket.AF_UNIX)
            s.bind(path.name)
            s.close()
        finally:
            os.chdir(here)


@pytest.mark.parametrize("kind", ["fifo", "socket"])
@pytest.mark.parametrize("flag", list(NAMES))
def test_a_fifo_or_socket_destination_is_refused_before_training(tmp_path, flag, kind, capsys):
    """Only regular files are replaced: a fifo or a socket (as a device would be; the test makes no
    device) given to any output flag is one line, exit 2, before the first step, and stays what it
    was. (Before: `--checkpoint /dev/null`, as root, replaced /dev/null with a regular file.)"""
    target = tmp_path / NAMES[flag]
    _make(kind, target)
    assert main(["train", *TINY, "--steps", "100000", flag, str(target)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # not one step was trained
    what = "a fifo" if kind == "fifo" else "a socket"
    assert _one_error_line(captured.err).endswith(
        f"cannot write {flag[2:]} {str(target)!r}: it is {what}, and opzoo replaces only regular files\n"
    )
    mode = os.lstat(target).st_mode
    assert stat.S_ISFIFO(mode) if kind == "fifo" else stat.S_ISSOCK(mode)


def test_what_is_not_a_regular_file_is_named():
    """kind() names what it finds (stat only: nothing is written); None for a file or nothing."""
    assert _files.kind("/dev/null") == "a character device"
    assert _files.kind("/") == "a folder"
    assert _files.kind(__file__) is None
    assert _files.kind("/nonexistent/file") is None


def test_a_symlink_is_followed_its_target_replaced_and_the_link_kept(tmp_path, capsys):
    """A checkpoint and metrics given through symlinks replace the files the links name; the links
    stay links, and a resume through the link continues the target."""
    runs = tmp_path / "runs"
    runs.mkdir()
    (runs / "ck.pt").write_bytes(b"an old file")
    (tmp_path / "latest.pt").symlink_to(runs / "ck.pt")
    (tmp_path / "m.csv").symlink_to(runs / "metrics.csv")  # to a file not there yet
    argv = ["train", *TINY, "--steps", "4", "--quiet", "--checkpoint", str(tmp_path / "latest.pt")]
    assert main([*argv, "--metrics", str(tmp_path / "m.csv")]) == 0
    assert (tmp_path / "latest.pt").is_symlink() and (tmp_path / "m.csv").is_symlink()
    assert len(torch.load(runs / "ck.pt", weights_only=True)["losses"]) == 4
    assert (runs / "metrics.csv").read_text().splitlines()[0] == "activation,step,loss"
    assert main(["train", "--resume", str(tmp_path / "latest.pt"), "--steps", "6", "--quiet"]) == 0
    assert len(torch.load(runs / "ck.pt", weights_only=True)["losses"]) == 6
    assert sorted(p.name for p in runs.iterdir()) == ["ck.pt", "ck.pt.lock", "metrics.csv"]  # no temp files


def test_two_links_to_one_checkpoint_share_its_lock(tmp_path):
    """The lock is the target's: a run through one link excludes a run through another."""
    from opzoo.trainer import _checkpoint

    (tmp_path / "a.pt").symlink_to(tmp_path / "ck.pt")
    with _checkpoint.lock(tmp_path / "ck.pt"):
        with pytest.raises(CheckpointError, match="is in use by another run"):
            with _checkpoint.lock(tmp_path / "a.pt"):
                pass


def _enospc(*args):
    raise OSError(errno.ENOSPC, "No space left on device")


def test_a_failed_write_keeps_the_previous_file_whole_and_leaves_no_temp_file(tmp_path, monkeypatch):
    """replace() writes a temp file and renames it: when the disk is full (here: at fsync, where a
    file system with delayed allocation reports it), the previous file is untouched, no temp file is
    left, and write() says so in one line (WriteError, exit 74)."""
    path = tmp_path / "out.csv"
    path.write_bytes(b"the previous contents")
    monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(WriteError) as exc:
        _files.write("metrics", str(path), b"new")
    assert (
        str(exc.value)
        == f"cannot write metrics {str(path)!r}: No space left on device; the previous one is kept"
    )
    assert exc.value.exit_code == 74
    assert path.read_bytes() == b"the previous contents"
    assert [p.name for p in tmp_path.iterdir()] == ["out.csv"]


def test_a_replaced_file_keeps_its_permissions(tmp_path):
    """A file replaced keeps its mode; a new one gets the umask's (not mkstemp's private 0600)."""
    old = tmp_path / "old"
    old.write_bytes(b"x")
    old.chmod(0o640)
    _files.replace(old, b"y")
    assert stat.S_IMODE(old.stat().st_mode) == 0o640 and old.read_bytes() == b"y"
    new = tmp_path / "new"
    _files.replace(new, b"z")
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~_files._umask()


@pytest.mark.parametrize("flag", ["--metrics", "--plot"])
def test_metrics_and_plot_on_a_full_disk_are_one_line_the_old_file_kept(tmp_path, flag, monkeypatch, capsys):
    """After training, a metrics or plot file that cannot be written is one line, exit 74; the
    previous file is whole. (Before: --metrics left a torn last line.)"""
    path = tmp_path / NAMES[flag]
    path.write_bytes(b"the previous contents")
    real_replace = _files.replace

    def full(target, data):
        if os.path.basename(target) == path.name:
            _enospc()
        return real_replace(target, data)

    monkeypatch.setattr(_files, "replace", full)
    assert main(["train", *TINY, "--steps", "3", "--quiet", flag, str(path)]) == 74
    err = _one_error_line(capsys.readouterr().err)
    assert f"cannot write {flag[2:]} {str(path)!r}: No space left on device; the previous one is kept" in err
    assert path.read_bytes() == b"the previous contents"


def _file_size_limit(limit: int):
    """For preexec_fn: writes past ``limit`` bytes fail with EFBIG (Python ignores SIGXFSZ), as a
    full disk's fail with ENOSPC: a full disk, deterministic, without root or a small file system."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


@pytest.mark.parametrize("flag", ["--export", "--checkpoint"])
def test_a_real_full_disk_tears_no_export_and_no_checkpoint(tmp_path, flag):
    """torch's own writers on a full disk: `--export` aborted the process (exit 134, a C++ stack)
    and truncated the good export; a checkpoint write raised a RuntimeError traceback instead of the
    warning and retry. Now the file is serialized in memory and written by opzoo: each checkpoint
    during the run is one warning, the final write (or the export) one line, exit 74; the previous
    file byte for byte, no temp file. (Each written file is over 10 kB; the limit is 4 kB.)"""
    path = tmp_path / NAMES[flag]
    previous = b"a good file from an earlier run " * 200  # 6.4 kB: already past the limit, untouched
    path.write_bytes(previous)
    every = ["--checkpoint-every", "1"] if flag == "--checkpoint" else []
    argv = ["train", *TINY, "--steps", "3", "--quiet", flag, str(path), *every]
    out = run_opzoo(*argv, preexec_fn=_file_size_limit(4096))
    assert out.returncode == 74, out.stderr
    *warnings, line = out.stderr.splitlines()
    assert warnings == [
        f"opzoo: warning: cannot write checkpoint {str(path)!r} at step {t}: File too large; the last good "
        "one is kept, trying again in 1 steps"
        for t in ([1, 2] if flag == "--checkpoint" else [])
    ]
    assert line.startswith("opzoo: error: ") and f"{str(path)!r}" in line and "File too large" in line
    assert "kept" in line
    assert path.read_bytes() == previous
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == [path.name] + ([f"{path.name}.lock"] if flag == "--checkpoint" else [])  # no temp file


@pytest.fixture
def dev_full():
    """/dev/full opened for text: every flush fails with ENOSPC, as on a full disk."""
    full = open("/dev/full", "w")
    yield full
    try:
        full.close()
    except OSError:  # what is still buffered cannot be flushed, by design
        pass


def test_json_into_a_full_or_closed_stdout_is_one_line(dev_full, monkeypatch, capsys):
    """`--json` into a full device, or with stdout closed, is one line on stderr, exit 74 (before: a
    traceback, or the JSON on stderr). A closed stdout is refused before any work."""
    monkeypatch.setattr(sys, "stdout", dev_full)
    assert main(["info", "myrelu", "--json"]) == 74
    monkeypatch.setattr(sys, "stdout", None)
    assert main(["train", "--json", "--steps", "100000"]) == 74
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "opzoo: error: cannot write the JSON output to stdout: No space left on device",
        "opzoo: error: cannot write the JSON output: stdout is closed",
    ]


def test_text_into_a_full_stdout_is_one_line_at_exit(dev_full, monkeypatch, capsys):
    """Text still buffered when the command ends is flushed by console(): a full device is one line
    and exit 74; a command that failed keeps its status and its own line."""
    monkeypatch.setattr(sys, "stdout", dev_full)
    print("a table")
    assert _flushed(0) == 74
    print("a table")
    assert _flushed(1) == 1
    assert capsys.readouterr().err == "opzoo: error: cannot write to stdout: No space left on device\n"


def test_list_json_into_dev_full_end_to_end():
    """The whole command, as a shell runs `opzoo list --json > /dev/full`."""
    with open("/dev/full", "wb", buffering=0) as full:
        out = subprocess.run(
            [sys.executable, "-m", "opzoo", "list", "--json"], stdout=full, stderr=subprocess.PIPE, text=True
        )
    assert out.returncode == 74
    assert out.stderr == "opzoo: error: cannot write the JSON output to stdout: No space left on device\n"


# --- a shared folder: the kernel's protected_symlinks and protected_regular rules, applied by opzoo ---


def _unused_uid() -> int:
    for uid in range(40_000, 60_000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    raise AssertionError("no unused uid")


#: The second user: a uid no account has. The kernel compares uids only, so a process of this uid
#: is another user in every respect that matters here, and the test adds no account to the machine.
OTHER = _unused_uid()
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="a second user's process needs root to setuid (CI and the dev machine are root)"
)


def _as_other(folder, action) -> None:
    """Run ``action(dir_fd)`` in a child process of user OTHER, ``dir_fd`` an open ``folder``: what it
    makes there is theirs. (By descriptor: the test's own folders above are not theirs to enter.)"""
    fd = os.open(folder, os.O_RDONLY)
    pid = os.fork()
    if pid == 0:  # the child only makes system calls, then leaves at once
        code = 1
        try:
            os.setgroups([])
            os.setgid(OTHER)
            os.setuid(OTHER)
            action(fd)
            code = 0
        finally:
            os._exit(code)
    os.close(fd)
    assert os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]) == 0


def _plant_link(folder, name: str, target) -> None:
    _as_other(folder, lambda fd: os.symlink(str(target), name, dir_fd=fd))
    assert os.lstat(folder / name).st_uid == OTHER


@pytest.fixture
def shared(tmp_path):
    """A sticky world-writable folder (as /tmp is, the test's own as /tmp is root's), and a private
    file of ours elsewhere that another user would like overwritten."""
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o1777)
    victim = tmp_path / "private" / "victim"
    victim.parent.mkdir()
    victim.write_bytes(b"secret")
    victim.chmod(0o600)
    return folder, victim


def _untouched(victim) -> None:
    assert victim.read_bytes() == b"secret" and os.listdir(victim.parent) == ["victim"]


@needs_root
@pytest.mark.parametrize("flag", list(NAMES))
def test_a_link_another_user_planted_in_a_shared_folder_is_not_followed(shared, flag, capsys):
    """Another user's link in a sticky world-writable folder is refused before training, one line,
    exit 2, as the kernel's fs.protected_symlinks refuses it. (Before, as root: exit 0, the private
    file the link named replaced by the checkpoint, metrics, plot or export.)"""
    folder, victim = shared
    _plant_link(folder, NAMES[flag], victim)
    link = folder / NAMES[flag]
    assert main(["train", *TINY, "--steps", "100000", flag, str(link)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    err = _one_error_line(captured.err)
    assert err == (
        f"opzoo: error: cannot write {flag[2:]} {str(link)!r}: refusing to follow symlink {str(link)!r} "
        f"(owned by uid {OTHER}) in the sticky world-writable folder {str(folder)!r} (owned by uid 0): "
        "neither you nor the folder's owner made it (the kernel's fs.protected_symlinks rule)\n"
    )
    _untouched(victim)
    assert link.is_symlink()


@needs_root
def test_a_planted_link_is_refused_on_the_way_and_by_resume_and_report(shared, capsys):
    """Every link on the way is checked, not only the last; `--resume` reads through none, and
    `report --html` writes through none."""
    folder, victim = shared
    (victim.parent / "runs").mkdir()
    _plant_link(folder, "runs", victim.parent / "runs")
    _plant_link(folder, "ck.pt", victim)
    assert main(["train", *TINY, "--steps", "1", "--metrics", str(folder / "runs" / "m.csv")]) == 2
    assert main(["train", "--resume", str(folder / "ck.pt"), "--steps", "1"]) == 2
    assert main(["report", "myrelu", "--html", str(folder / "ck.pt")]) == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 3 and all("refusing to follow symlink" in line for line in lines), lines
    assert lines[1].startswith(f"opzoo: error: cannot read checkpoint {str(folder / 'ck.pt')!r}: ")
    assert os.listdir(victim.parent / "runs") == []
    assert victim.read_bytes() == b"secret"


@needs_root
def test_links_of_the_follower_or_of_the_folders_owner_are_followed(shared, capsys):
    """The rule is the kernel's, no stricter: a link the follower made, or one the shared folder's
    owner made, is followed as before (its target replaced, the link kept)."""
    folder, victim = shared
    (folder / "mine.csv").symlink_to(victim)  # root's own link in root's folder
    assert main(["train", *TINY, "--steps", "2", "--quiet", "--metrics", str(folder / "mine.csv")]) == 0
    assert victim.read_text().startswith("activation,step,loss")
    os.chown(folder, OTHER, OTHER)  # now the folder is OTHER's, and so is the link they plant in it
    victim.write_bytes(b"secret")
    _plant_link(folder, "theirs.csv", victim)
    assert main(["train", *TINY, "--steps", "2", "--quiet", "--metrics", str(folder / "theirs.csv")]) == 0
    assert victim.read_text().startswith("activation,step,loss")
    assert capsys.readouterr().err == ""


@needs_root
def test_a_lock_file_another_user_planted_in_a_shared_folder_is_refused(shared, capsys):
    """The lock file is opened without following a link (before, its target was truncated to the
    pid), and is not another user's regular file in a shared folder (the kernel's
    fs.protected_regular rule): neither is written, the run refused before training."""
    folder, victim = shared
    _plant_link(folder, "run.pt.lock", victim)

    def theirs(fd):
        lock = os.open("ck.pt.lock", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd)
        os.write(lock, b"theirs\n")
        os.close(lock)

    _as_other(folder, theirs)
    assert main(["train", *TINY, "--steps", "100000", "--checkpoint", str(folder / "run.pt")]) == 2
    assert main(["train", *TINY, "--steps", "100000", "--checkpoint", str(folder / "ck.pt")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines == [
        f"opzoo: error: lock file {str(folder / 'run.pt.lock')!r} is a symlink: opzoo never follows a "
        "link to lock a checkpoint; remove it",
        f"opzoo: error: lock file {str(folder / 'ck.pt.lock')!r} belongs to uid {OTHER}, not to you, in "
        f"the sticky world-writable folder {str(folder)!r}: opzoo writes into no other user's file there "
        "(the kernel's fs.protected_regular rule); remove it or write elsewhere",
    ]
    _untouched(victim)
    assert (folder / "ck.pt.lock").read_bytes() == b"theirs\n"
    assert sorted(os.listdir(folder)) == ["ck.pt.lock", "run.pt.lock"]


@needs_root
def test_a_planted_link_as_the_plugin_cache_is_no_cache(shared):
    """The plugin cache is written as every file is: with $OPZOO_CACHE_DIR in a shared folder,
    another user's link in place of the cache file is not written through; `list` works."""
    folder, victim = shared
    _plant_link(folder, "plugin-imports.json", victim)
    out = run_opzoo("list", "--format", "names", env={"OPZOO_CACHE_DIR": str(folder)})
    assert out.returncode == 0 and "myrelu" in out.stdout.split(), out.stderr
    _untouched(victim)
    assert os.listdir(folder) == ["plugin-imports.json"] and (folder / "plugin-imports.json").is_symlink()


@needs_root
def test_the_plugin_cache_is_read_through_no_link_and_from_no_file_another_user_planted(shared):
    """The cache of verdicts decides which plugins are imported untried: it is read as it is written.
    Another user's link in the shared cache folder is not read through (before: followed, its
    target's verdicts trusted), nor another user's file there; our own link is."""
    from opzoo.core import _guard

    folder, victim = shared
    cache = folder / _guard.CACHE_FILE
    victim.write_text('{"format": 2, "verdicts": {"k": {"verdict": null, "loaded": []}}}')
    _plant_link(folder, _guard.CACHE_FILE, victim)
    assert _guard.Verdicts(cache).get("k") == (False, None)
    cache.unlink()

    def theirs(fd):
        planted = os.open(_guard.CACHE_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644, dir_fd=fd)
        os.write(planted, data)
        os.close(planted)

    data = victim.read_bytes()  # read here: the victim is not theirs to read
    _as_other(folder, theirs)
    assert _guard.Verdicts(cache).get("k") == (False, None)
    cache.unlink()
    cache.symlink_to(victim)  # our own link: followed, as the kernel would
    assert _guard.Verdicts(cache).get("k") == (True, None)


def test_may_follow_is_the_kernels_rule():
    """fs/namei.c may_follow_link, on made-up stat results (no root needed): follow unless the folder
    is sticky and world-writable and the link is neither the follower's nor the folder owner's."""

    def st(uid, mode):
        return os.stat_result((mode, 0, 0, 1, uid, 0, 0, 0, 0, 0))

    link, shared, plain = st(5, 0o120777), st(0, 0o41777), st(0, 0o40755)
    assert _files.may_follow(link, plain, euid=0)  # not a shared folder: the kernel follows too
    assert _files.may_follow(st(0, 0o120777), shared, euid=0)  # the follower's own link
    assert not _files.may_follow(link, shared, euid=0)  # the case: root, a user's link in /tmp
    assert _files.may_follow(link, st(5, 0o41777), euid=0)  # the folder's owner made it
    assert _files.may_follow(link, shared, euid=5)  # its owner follows it
    assert _files.may_follow(link, st(0, 0o41775), euid=0)  # sticky, not world-writable
    assert _files.may_follow(link, st(0, 0o40777), euid=0)  # world-writable, not sticky


def test_resolve_follows_links_as_realpath_does(tmp_path):
    """Where no rule refuses, resolve() is realpath: relative and absolute links, `..` after a link,
    a missing tail, a loop (refused: ELOOP)."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "rel").symlink_to("sub/../sub")
    (tmp_path / "abs").symlink_to(tmp_path / "sub")
    (tmp_path / "loop1").symlink_to("loop2")
    (tmp_path / "loop2").symlink_to("loop1")
    for path in ["rel/x", "abs/../rel", "abs/missing/y", ".", "sub/./x/../z"]:
        assert _files.resolve(tmp_path / path) == Path(os.path.realpath(tmp_path / path))
    with pytest.raises(OSError) as exc:
        _files.resolve(tmp_path / "loop1")
    assert exc.value.errno == errno.ELOOP


def test_a_plugin_that_changes_folder_moves_no_output(tmp_path):
    """Every path flag is made absolute as it is parsed, before any plugin is imported: a hook
    plugin that changes the working folder at import moves none of `train`'s outputs, nor `report`'s
    page. (Before: all of them, and the lock file, were written in the plugin's folder.)"""
    site, work, away = tmp_path / "site", tmp_path / "work", tmp_path / "away"
    for folder in (site, work, away):
        folder.mkdir()
    info = site / "cwdmover-1.0.dist-info"
    info.mkdir()
    (site / "cwdmover.py").write_text("import os\n\nos.chdir(os.environ['OPZOO_TEST_CHDIR'])\n")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cwdmover\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[opzoo]\ncwdmover = cwdmover\n")
    (info / "RECORD").write_text("cwdmover.py,,\ncwdmover-1.0.dist-info/METADATA,,\n")
    env = {
        "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
        "OPZOO_TEST_CHDIR": str(away),
        "OPZOO_CACHE_DIR": str(tmp_path / "cache"),
    }
    outputs = ["--checkpoint", "ck.pt", "--metrics", "m.csv", "--plot", "p.png", "--export", "net.pt2"]
    out = run_opzoo("train", *TINY, "--steps", "2", "--quiet", *outputs, env=env, cwd=work)
    assert out.returncode == 0, out.stderr
    report = run_opzoo("report", "myrelu", "-p", "accepts", "--html", "r.html", env=env, cwd=work)
    assert report.returncode == 0, report.stderr
    assert sorted(os.listdir(work)) == ["ck.pt", "ck.pt.lock", "m.csv", "net.pt2", "p.png", "r.html"]
    assert os.listdir(away) == []  # nothing, not even hypothesis's example folder (issue 30, 10d)
