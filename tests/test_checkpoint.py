"""Checkpoints: where a resume writes, one writer per path, unwritable destinations, the schema."""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import pytest
import torch
from conftest import ROOT, run_opzoo

import opzoo
from opzoo.cli import main
from opzoo.trainer import _checkpoint, _trainer
from opzoo.trainer._config import TrainConfig

SMALL = dict(batch=8, d_in=20, hidden=12, d_out=3, steps=30, lr=1e-3, seed=3)
TINY = ["--batch", "8", "--d-in", "20", "--hidden", "12", "--d-out", "3", "--lr", "1e-3", "--quiet"]


def _steps(path) -> int:
    return len(torch.load(path, weights_only=True)["losses"])


def _one_error_line(err: str) -> str:
    assert err.startswith("opzoo: error: ") and err.count("\n") == 1, err
    return err


# --- item 1: a resume writes the file it resumed from ---------------------------------------------


def test_resume_writes_the_file_it_resumed_from_not_the_stored_relative_path(tmp_path):
    """`cd exp && opzoo train --resume ../backup.pt` advances ../backup.pt and leaves exp/ck.pt alone."""
    exp = tmp_path / "exp"
    exp.mkdir()
    assert run_opzoo("train", *TINY, "--steps", "5", "--checkpoint", "ck.pt", cwd=exp).returncode == 0
    (tmp_path / "backup.pt").write_bytes((exp / "ck.pt").read_bytes())
    before = (exp / "ck.pt").read_bytes()

    out = run_opzoo("train", "--resume", "../backup.pt", "--steps", "9", "--quiet", cwd=exp)
    assert out.returncode == 0, out.stderr
    assert _steps(tmp_path / "backup.pt") == 9
    assert (exp / "ck.pt").read_bytes() == before


def test_resume_with_checkpoint_writes_there_and_keeps_the_source(tmp_path):
    """--resume A --checkpoint B reads A, writes B, leaves A as it was."""
    a, b = tmp_path / "a.pt", tmp_path / "b.pt"
    assert run_opzoo("train", *TINY, "--steps", "5", "--checkpoint", str(a)).returncode == 0
    before = a.read_bytes()
    out = run_opzoo("train", "--resume", str(a), "--checkpoint", str(b), "--steps", "8", "--quiet")
    assert out.returncode == 0, out.stderr
    assert a.read_bytes() == before and _steps(b) == 8


def test_paths_are_resolved_when_the_run_starts(tmp_path, monkeypatch):
    """A relative --checkpoint means the folder it was given in, even if the process moves later."""
    monkeypatch.chdir(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    def move(t: int, loss: float) -> None:
        os.chdir(elsewhere)

    _trainer.run(TrainConfig(**SMALL, checkpoint="ck.pt", log_every=5), on_log=move)
    assert _steps(tmp_path / "ck.pt") == 30 and not (elsewhere / "ck.pt").exists()
    state = torch.load(tmp_path / "ck.pt", weights_only=True)
    assert state["config"]["checkpoint"] == str(tmp_path / "ck.pt")


# --- item 2: one writer per checkpoint path -------------------------------------------------------

_HOLDER = """
import sys
from opzoo.trainer import _checkpoint
with _checkpoint.lock(sys.argv[1]):
    print("locked", flush=True)
    sys.stdin.read()  # hold the lock until the test closes our stdin
"""


def test_a_second_run_on_a_locked_checkpoint_is_refused_with_the_holders_pid(tmp_path):
    """While one process holds the checkpoint's lock, `opzoo train` on that path exits 2 at start."""
    ck = tmp_path / "ck.pt"
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(ck)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        assert holder.stdout.readline() == "locked\n"  # the lock is held from here on
        out = run_opzoo("train", *TINY, "--steps", "5", "--checkpoint", str(ck))
    finally:
        holder.stdin.close()
        holder.wait(timeout=60)
    assert out.returncode == 2
    err = _one_error_line(out.stderr)
    assert repr(str(ck)) in err and f"pid {holder.pid}" in err
    assert not ck.exists()
    # Released when the holder ends, however it ends: the next run goes ahead.
    assert run_opzoo("train", *TINY, "--steps", "5", "--checkpoint", str(ck)).returncode == 0


def test_the_lock_is_exclusive_within_a_process_too(tmp_path):
    """A second lock on one path is refused; after release it is free again."""
    ck = tmp_path / "ck.pt"
    with _checkpoint.lock(ck):
        with pytest.raises(opzoo.CheckpointError, match=rf"in use by another run \(pid {os.getpid()}\)"):
            with _checkpoint.lock(ck):
                pass
    with _checkpoint.lock(ck):
        pass


def test_a_save_leaves_other_writers_temp_files_alone(tmp_path):
    """save() never deletes another writer's temp file; only the lock holder sweeps dead ones."""
    ck = tmp_path / "ck.pt"
    other = tmp_path / ".ck.pt.999999999.abc.tmp"
    other.write_bytes(b"in flight")
    _checkpoint.save(ck, {"losses": []})
    assert other.exists()
    with _checkpoint.lock(ck):  # the holder is the only live writer: leftovers are from dead ones
        assert not other.exists()


@pytest.mark.parametrize(
    "kind, what",
    [
        ("folder", "is a folder: opzoo locks a checkpoint only with a regular file; remove it"),
        ("fifo", "is a fifo: opzoo locks a checkpoint only with a regular file; remove it"),
        ("device link", "is a symlink: opzoo never follows a link to lock a checkpoint; remove it"),
    ],
)
def test_a_lock_file_that_is_no_regular_file_is_one_line(tmp_path, kind, what, capsys):
    """`PATH.lock` a folder, a fifo or a link to a device: one line naming it, exit 2, before
    training; what is there stays as it was. (Before: 37-line tracebacks, exit 1, from open and
    ftruncate.)"""
    lock = tmp_path / "ck.pt.lock"
    if kind == "folder":
        lock.mkdir()
    elif kind == "fifo":
        os.mkfifo(lock)
    else:
        lock.symlink_to("/dev/null")
    assert main(["train", *TINY, "--steps", "100000", "--checkpoint", str(tmp_path / "ck.pt")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert _one_error_line(captured.err) == f"opzoo: error: lock file {str(lock)!r} {what}\n"
    mode = os.lstat(lock).st_mode
    assert {"folder": stat.S_ISDIR, "fifo": stat.S_ISFIFO, "device link": stat.S_ISLNK}[kind](mode)
    assert os.listdir(tmp_path) == ["ck.pt.lock"]


# --- item 3: unwritable destinations found before training; late write errors survived ------------


@pytest.mark.parametrize("flag", ["--checkpoint", "--metrics", "--plot"])
def test_an_unwritable_destination_fails_before_the_first_step(flag, capsys):
    """/proc takes no new file: refused at start with one line, before any training."""
    name = {"--checkpoint": "ck.pt", "--metrics": "m.csv", "--plot": "p.png"}[flag]
    assert main(["train", "--steps", "100000", flag, f"/proc/{name}"]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # not one step was trained
    assert f"cannot write {flag[2:]} '/proc/{name}'" in _one_error_line(captured.err)


def test_a_failed_checkpoint_write_is_one_warning_and_retried(tmp_path, monkeypatch):
    """A write error mid-run (disk full) keeps the last good file, warns once, and the next one lands."""
    ck = tmp_path / "ck.pt"
    real_save = _checkpoint.save
    calls = []

    def flaky_save(path, state):
        calls.append(len(state["losses"]))
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        real_save(path, state)

    monkeypatch.setattr(_checkpoint, "save", flaky_save)
    warned: list[str] = []
    cfg = TrainConfig(**SMALL, checkpoint=str(ck), checkpoint_every=10)
    result = _trainer.run(cfg, on_warning=warned.append)
    assert calls == [10, 20, 30] and result.steps_run == 30
    assert warned == [
        f"cannot write checkpoint {str(ck)!r} at step 20: No space left on device; the last good one "
        "is kept, trying again in 10 steps"
    ]
    assert _steps(ck) == 30


def test_a_failed_write_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    """When every later write fails, the file holds the last good step and the end is one clear error."""
    ck = tmp_path / "ck.pt"
    real_save = _checkpoint.save

    def full_after_first(path, state):
        if len(state["losses"]) > 10:
            raise OSError(28, "No space left on device")
        real_save(path, state)

    monkeypatch.setattr(_checkpoint, "save", full_after_first)
    cfg = TrainConfig(**SMALL, checkpoint=str(ck), checkpoint_every=10)
    with pytest.warns(RuntimeWarning, match="at step 20: No space left on device"):
        full = "final checkpoint .* at step 30: No space left"
        with pytest.raises(opzoo.CheckpointError, match=full) as exc:
            _trainer.run(cfg)
    assert exc.value.exit_code == 74  # a full disk (EX_IOERR); the command line was fine
    assert _steps(ck) == 10
    assert not list(tmp_path.glob(".ck.pt.*.tmp"))


# --- item 4: the schema is validated, the writer named --------------------------------------------


def _good_state(tmp_path) -> dict:
    ck = tmp_path / "good.pt"
    opzoo.train(**{**SMALL, "steps": 5}, checkpoint=str(ck))
    return torch.load(ck, weights_only=True)


def test_a_checkpoint_records_the_opzoo_that_wrote_it(tmp_path):
    """Every checkpoint holds the writing opzoo's version."""
    assert _good_state(tmp_path)["opzoo_version"] == opzoo.__version__


def _resealed(state: dict) -> dict:
    """``state`` with its checksum made to fit again: what a careful tamperer would do, so that the
    check behind the checksum is what must catch it."""
    try:
        return {**state, "checksum": _checkpoint.checksum(state)}
    except opzoo.CheckpointError:  # it holds what has no checksum (a sparse tensor): left as it is
        return state


def _broken(state: dict, how: str) -> dict:
    state = dict(state)
    if how == "only the format tag":
        return {"format": state["format"], "opzoo_version": "9.9.9"}
    if how == "no rng":
        del state["rng"]
    elif how == "a setting from a newer opzoo":
        state["config"] = {**state["config"], "warp_drive": True}
        state["opzoo_version"] = "9.9.9"
    elif how == "w1 of the wrong shape":
        state["weights"] = {**state["weights"], "w1": torch.zeros(20, 13)}
    elif how == "x of the wrong shape":
        state["data"] = {**state["data"], "x": torch.zeros(7, 20)}
    elif how == "rng of the wrong dtype":
        state["rng"] = torch.zeros(5)
    elif how == "losses that are not floats":
        state["losses"] = ["a"]
    elif how == "a missing model setting":
        state["config"] = {k: v for k, v in state["config"].items() if k != "hidden"}
    return _resealed(state)


@pytest.mark.parametrize(
    "how, message",
    [
        ("only the format tag", "has no checksum (written by opzoo 9.9.9)"),
        ("no rng", f"has no 'rng' (written by opzoo {opzoo.__version__})"),
        (
            "a setting from a newer opzoo",
            f"has setting 'warp_drive', which this opzoo ({opzoo.__version__}) does not know; "
            "it was written by opzoo 9.9.9",
        ),
        ("w1 of the wrong shape", "has weights 'w1' of shape (20, 13), but its settings need (20, 12)"),
        ("x of the wrong shape", "has data 'x' of shape (7, 20), but its settings need (8, 20)"),
        ("rng of the wrong dtype", "'rng' state of dtype torch.float32"),
        ("losses that are not floats", "'losses' that are not all floats"),
        ("a missing model setting", "has no setting 'hidden'"),
    ],
)
def test_a_malformed_checkpoint_says_what_is_wrong(tmp_path, how, message, capsys):
    """A checkpoint that lacks a part, or has one of the wrong kind or shape, is one line, exit 2."""
    ck = tmp_path / "bad.pt"
    torch.save(_broken(_good_state(tmp_path), how), ck)
    before = ck.read_bytes()
    assert main(["train", "--resume", str(ck), "--quiet"]) == 2
    err = _one_error_line(capsys.readouterr().err)
    assert message in err and repr(str(ck)) in err
    assert ck.read_bytes() == before


def test_an_old_checkpoint_without_a_version_still_resumes(tmp_path):
    """A file from before version tagging and checksums is read, and named as such in errors."""
    state = _good_state(tmp_path)
    del state["opzoo_version"], state["checksum"]
    state["format"] = _checkpoint.LEGACY_FORMAT
    ck = tmp_path / "old.pt"
    torch.save(state, ck)
    assert opzoo.train(**{**SMALL, "steps": 7}, resume=str(ck)).steps_run == 2
    assert _checkpoint.written_by(state) == "opzoo 0.1.0 or older"


def test_resume_with_another_seed_is_refused(tmp_path, capsys):
    """--resume with a different --seed would silently ignore it: refused; the same seed is fine."""
    ck = tmp_path / "ck.pt"
    assert main(["train", *TINY, "--seed", "3", "--steps", "5", "--checkpoint", str(ck)]) == 0
    assert main(["train", "--resume", str(ck), "--seed", "4", "--steps", "8", "--quiet"]) == 2
    err = _one_error_line(capsys.readouterr().err)
    assert "was trained with seed=3, not 4" in err
    assert main(["train", "--resume", str(ck), "--seed", "3", "--steps", "8", "--quiet"]) == 0
    assert _steps(ck) == 8


# --- issue 23: nothing read from a checkpoint runs code; tampering is refused ----------------------

_LOADER = """
import os, torch
def load():
    if os.environ.get("OPZOO_TEST_MARK"):
        open(os.environ["OPZOO_TEST_MARK"], "w").close()  # proof that this code ran
    g = torch.Generator().manual_seed(0)
    x = torch.randn(40, 3, generator=g)
    y = (x[:, 0] > 0).long()
    return x[:30], y[:30], x[30:], y[30:]
"""


def test_a_data_loader_named_in_a_checkpoint_is_never_imported(tmp_path, monkeypatch):
    """A checkpoint whose `data` names a loader (module:function) resumes only with --data given on
    the command line: the file alone is refused with one line, and the loader's code never runs, even
    from a module in the current folder (where `python -m opzoo` finds it). Given, it resumes."""
    (tmp_path / "opzoo_test_ck_loader.py").write_text(_LOADER)
    ck, mark = tmp_path / "ck.pt", tmp_path / "ran"
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    tiny = ["--steps", "4", "--batch", "8", "--quiet", "--device", "cpu"]
    assert main(["train", "--data", "opzoo_test_ck_loader:load", *tiny, "--checkpoint", str(ck)]) == 0
    # A fresh process, as a shell runs it in this folder: only there is the module importable from
    # the current folder without this test's help.
    out = run_opzoo("train", "--resume", "ck.pt", "--steps", "6", "--quiet", cwd=tmp_path,
                    env={"OPZOO_TEST_MARK": str(mark)})  # fmt: skip
    assert out.returncode == 2
    assert _one_error_line(out.stderr) == (
        f"opzoo: error: checkpoint {str(ck)!r} was trained on data from a loader, "
        "'opzoo_test_ck_loader:load'; opzoo runs no code a file names, so to resume give "
        "--data opzoo_test_ck_loader:load yourself, if you trust that code\n"
    )
    assert not mark.exists() and _steps(ck) == 4
    assert (
        main(["train", "--resume", "ck.pt", "--data", "opzoo_test_ck_loader:load", "--steps", "6", "--quiet"])
        == 0
    )
    assert _steps(ck) == 6


def test_a_loader_put_into_a_checkpoint_by_hand_never_runs(tmp_path, capsys):
    """The same for a checkpoint of the seed's random data edited to name a loader (checksum made to
    fit): `data='pdb:set_trace'` opened a debugger; `antigravity`, which opens a web browser when
    imported, must not even be imported."""
    state = _good_state(tmp_path)
    state["config"] = {**state["config"], "data": "antigravity:fly"}
    ck = tmp_path / "edited.pt"
    torch.save(_resealed(state), ck)
    assert main(["train", "--resume", str(ck), "--quiet"]) == 2
    assert "was trained on data from a loader, 'antigravity:fly'" in _one_error_line(capsys.readouterr().err)
    assert "antigravity" not in sys.modules


def _adam_state(tmp_path) -> dict:
    ck = tmp_path / "adam.pt"
    opzoo.train(**{**SMALL, "steps": 5}, optimizer="adam", checkpoint=str(ck))
    return torch.load(ck, weights_only=True)


def _flip_a_bit_of_w1(path) -> None:
    """Flip one bit inside w1's bytes in the file (torch's zip holds tensors uncompressed)."""
    import zipfile

    state = torch.load(path, weights_only=True)
    w1 = state["weights"]["w1"].numpy().tobytes()
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:
        for info in z.infolist():
            if z.read(info.filename) == w1:
                start = raw.index(w1, info.header_offset)
                raw[start + 5] ^= 0x10
                break
        else:
            raise AssertionError("w1's bytes not found")
    path.write_bytes(bytes(raw))


def _tampered(tmp_path, how: str) -> dict:
    state = _adam_state(tmp_path)
    if how == "an optimizer lr of 1e9":
        for group in state["optimizer"]["param_groups"]:
            group["lr"] = 1e9
    elif how == "no losses, trained weights":
        state["losses"] = []
    elif how == "fewer losses than Adam's steps":
        state["losses"] = state["losses"][:3]
    elif how == "an extra part":
        state["extra"] = 1
    elif how == "an extra weight":
        state["weights"] = {**state["weights"], "junk": torch.zeros(1)}
    elif how == "an extra optimizer state":
        state["optimizer"]["state"][0]["evil"] = torch.zeros(1)
    elif how == "a nonsense version":
        state["opzoo_version"] = "lol" * 50
    elif how == "a NaN weight":
        state["weights"]["w1"][0, 0] = float("nan")
    elif how == "a sparse weight":
        state["weights"]["w1"] = state["weights"]["w1"].to_sparse()
    elif how == "weights of another dtype":
        state["weights"]["w2"] = state["weights"]["w2"].double()
    return _resealed(state)


@pytest.mark.parametrize(
    "how, message",
    [
        (
            "an optimizer lr of 1e9",
            "has an optimizer state that sets lr=1000000000.0 for 'w1', where its settings give 0.001",
        ),  # fmt: skip
        ("no losses, trained weights", "has no losses: opzoo writes a checkpoint after a step"),
        ("fewer losses than Adam's steps", "counts 5 steps for 'w1', but its losses record 3"),
        ("an extra part", "has a part 'extra', which no opzoo checkpoint has"),
        ("an extra weight", "has weights 'junk', which no opzoo checkpoint has"),
        ("an extra optimizer state", "holds 'evil' for 'w1', which adam does not keep"),
        ("a nonsense version", "records the version of the opzoo that wrote it as 'lollol"),
        ("a NaN weight", "has weights['w1'] with values that are not finite"),
        ("a sparse weight", "holds what no checkpoint holds: a tensor of layout torch.sparse_coo"),
        ("weights of another dtype", "has weights 'w2' of dtype torch.float64, but its settings say float32"),
    ],
)
def test_a_tampered_checkpoint_is_refused_even_with_a_fitting_checksum(tmp_path, how, message, capsys):
    """Each edit the audit made, its checksum made to fit: one line naming it, exit 2, nothing written.
    (Before: all were accepted; the lr of 1e9 overrode the configured 1e-3 and the loss went to 4.8e24,
    `losses=[]` restarted the step counter.)"""
    ck = tmp_path / "bad.pt"
    torch.save(_tampered(tmp_path, how), ck)
    before = ck.read_bytes()
    assert main(["train", "--resume", str(ck), "--quiet"]) == 2
    err = _one_error_line(capsys.readouterr().err)
    assert message in err and repr(str(ck)) in err, err
    assert ck.read_bytes() == before


def test_a_flipped_bit_in_a_tensor_fails_the_checksum(tmp_path, capsys):
    """One bit flipped in w1's stored bytes still loads as a tensor; the checksum refuses it."""
    ck = tmp_path / "ck.pt"
    opzoo.train(**{**SMALL, "steps": 5}, checkpoint=str(ck))
    _flip_a_bit_of_w1(ck)
    assert main(["train", "--resume", str(ck), "--quiet"]) == 2
    err = _one_error_line(capsys.readouterr().err)
    assert "fails its checksum: it was changed after opzoo wrote it" in err


def test_the_checksum_covers_every_part():
    """Any change to any value (a tensor's bytes, dtype or shape, a float, a key) changes the checksum."""
    base = {"config": {"lr": 1e-3, "seed": 1}, "weights": {"w1": torch.arange(6.0).reshape(2, 3)},
            "losses": [1.0, 0.5], "optimizer": None}  # fmt: skip
    variants = [
        {**base, "config": {"lr": 1e-3, "seed": 2}},
        {**base, "config": {"lr": 1.0000000000000002e-3, "seed": 1}},
        {**base, "weights": {"w1": torch.arange(6.0).reshape(3, 2)}},
        {**base, "weights": {"w1": torch.arange(6.0, dtype=torch.float64).reshape(2, 3)}},
        {**base, "weights": {"w2": torch.arange(6.0).reshape(2, 3)}},
        {**base, "losses": [1.0, 0.25]},
        {**base, "optimizer": {}},
    ]
    sums = {_checkpoint.checksum(s) for s in [base, *variants]}
    assert len(sums) == 1 + len(variants)
    assert _checkpoint.checksum(base) == _checkpoint.checksum({**base, "checksum": "anything"})
