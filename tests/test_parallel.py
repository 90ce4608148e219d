"""Checks run side by side in worker processes (`opzoo check --jobs`): the same results as one
process's, in the same order; a crashed or deaf worker is one failed check, not a lost run."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from dataclasses import replace

import pytest
import torch
from conftest import run_opzoo
from correct_ops import Cube
from hostile_ops import ON_PATH
from wrong_ops import WRONG

import opzoo
from opzoo.testing import spec_of
from opzoo.testing.running._options import RunOptions
from opzoo.testing.running._parallel import can_fork, check_all

pytestmark = pytest.mark.skipif(not can_fork(), reason="worker processes are forked on Linux only")


class Crashes(Cube):
    """Kills its own process, as a segfault in an extension would."""

    @staticmethod
    def forward(x):
        os.kill(os.getpid(), signal.SIGKILL)


class Deaf(Cube):
    """Never returns (deaf to the time limit only where SIGALRM is blocked: see its test)."""

    @staticmethod
    def forward(x):
        while True:
            time.sleep(0.05)


@pytest.fixture(scope="module")
def registry():
    reg = opzoo.Registry()
    reg.register(Cube, name="cube")
    reg.register(WRONG["wrong_sign"][0], name="wrong_sign")
    reg.register(Crashes, name="crashes")
    reg.register(Deaf, name="deaf")
    return reg


def outcome(results):
    return [(r.id, r.status, r.reason, r.example, r.worst, r.repro, r.notes) for r in results]


def test_two_workers_give_one_process_results_in_its_order(registry):
    """Every field a report shows (verdict, reason, counterexample, worst mismatch, repro, notes) is
    the serial run's (in this process), in the serial order, from a private registry the workers
    inherit."""
    specs = [registry.info("cube"), registry.info("wrong_sign"), opzoo.info("myrelu")]
    props = ("gradient", "kinks", "hygiene", "double_backward", "compile")
    options = RunOptions(props, profile="ci", device="cpu", timeout=None)
    serial = check_all(specs, replace(options, jobs=1), registry=registry, isolate=False)
    started = []
    into = []
    parallel = check_all(
        specs,
        replace(options, jobs=2),
        registry=registry,
        into=into,
        started=lambda s: started.append(s.name),
    )
    assert outcome(parallel) == outcome(serial)
    assert outcome(into) == outcome(serial)
    assert sorted(started) == ["cube", "myrelu", "wrong_sign"]
    assert [r.status for r in parallel if r.op == "wrong_sign"] == ["fail", "fail", "pass", "pass", "pass"]


def test_a_check_that_kills_its_worker_fails_and_the_rest_go_on(registry):
    specs = [registry.info("crashes"), registry.info("cube")]
    results = check_all(specs, RunOptions(("gradient", "hygiene"), "ci", device="cpu", timeout=None, jobs=2))
    got = {r.id: (r.status, r.reason) for r in results}
    crashed = "the check crashed its worker process (killed by SIGKILL)"
    assert got["gradient[crashes]"][0] == got["hygiene[crashes]"][0] == "fail"
    assert got["gradient[crashes]"][1].startswith(crashed)
    assert got["gradient[cube]"] == got["hygiene[cube]"] == ("pass", "")


def test_a_check_deaf_to_its_time_limit_is_killed(registry):
    """The time limit is a SIGALRM in the worker; a check that cannot receive it (as a C loop
    holding the GIL could not) is killed by the parent `grace` seconds later, fails as hung, and
    the op's other checks are not run. Deaf by construction: SIGALRM is blocked here before the
    workers are forked, so they are deaf from their first instruction, however slow the machine."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    try:
        results = check_all(
            [registry.info("deaf")],
            RunOptions(("hygiene", "layout"), "ci", device="cpu", jobs=2, timeout=1.0),
            grace=1.0,
        )
    finally:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGALRM})
    got = {r.id: r for r in results}
    assert got["hygiene[deaf]"].status == "fail" and got["hygiene[deaf]"].timed_out
    assert "its worker was killed" in got["hygiene[deaf]"].reason
    assert (got["layout[deaf]"].status, got["layout[deaf]"].reason) == ("skip", "not run: the op hung")


def test_no_workers_once_cuda_is_initialised(registry, monkeypatch):
    """A forked child cannot use CUDA its parent initialised (a plugin might, at import): the
    checks then run in this process."""
    import opzoo.testing.running._parallel as parallel

    monkeypatch.setattr(parallel, "_cuda_initialized", lambda: True)
    monkeypatch.setattr(parallel, "Pool", None)  # forking would fail loudly
    options = RunOptions(("hygiene",), "ci", device="cpu", timeout=None, jobs=2)
    results = check_all([registry.info("cube")], options)
    assert [(r.id, r.status) for r in results] == [("hygiene[cube]", "pass")]


def test_a_hook_that_fails_in_a_worker_is_the_runs_failure_once():
    """A plugin's input-strategy hook that raises in a worker process reaches the run's failures
    (it was lost with the worker's copy of the registry), once, however many workers met it."""
    import fakehooks  # noqa: F401  (the fake plugins, importable from tests/)

    from opzoo.core._loading import EntryPoint
    from opzoo.testing.running._hooks import RunHooks

    reg = opzoo.load(
        [
            EntryPoint("opzoo.ops", "double", "fakeops:Double", "plug", "1.0"),
            EntryPoint("opzoo", "raising", "fakehooks:raising_strategy", "bad", "1.0"),
        ]
    )
    run = RunHooks(reg)
    options = RunOptions(
        ("accepts", "gradient", "hygiene"), "ci", examples=3, device="cpu", timeout=None, jobs=2
    )
    results = check_all([reg.info("double")], options, registry=run)
    assert [r.status for r in results] == ["pass", "pass", "pass"], [r.report() for r in results]
    assert [f.reason for f in run.failures] == [
        "hook opzoo_input_strategy raised for op 'double': RuntimeError: strategy boom"
    ]
    assert reg.failures() == []


# -- an op's code never runs in the command's process ---------------------------------------------


def test_one_check_on_one_job_still_runs_in_a_worker():
    """One task and one job: a worker all the same, so an op that ends its process fails its check
    rather than ending the caller (before: checked here, the process ended with exit status 0)."""
    spec = spec_of("hostile_ops:OsExitBackward")
    results = check_all([spec], RunOptions(("gradient",), "ci", device="cpu", timeout=None, jobs=1))
    ended = "the check ended its worker process (exit status 0): the op called os._exit, or crashed"
    assert [r.status for r in results] == ["fail"] and results[0].reason.startswith(ended)


def test_an_op_that_raises_keyboard_interrupt_fails_its_check():
    """A KeyboardInterrupt no signal raised is the op's own: its check fails, here and in a worker
    (before: here it was taken for Ctrl-C, in a worker it escaped as a traceback)."""
    from opzoo.testing import check_property

    spec = spec_of("hostile_ops:KeyboardBackward")
    here = check_property(spec, "gradient", profile="ci")
    assert (here.status, here.reason) == ("fail", "KeyboardInterrupt: from the op")
    pooled = check_all([spec], RunOptions(("gradient",), "ci", device="cpu", timeout=None, jobs=1))
    assert [(r.status, r.reason) for r in pooled] == [("fail", "KeyboardInterrupt: from the op")]


@pytest.mark.parametrize(
    "op, reason",
    [
        ("OsExitBackward", "the check ended its worker process (exit status 0)"),
        ("ExitBackward", "SystemExit: 0"),
        ("BaseExcBackward", "Weird: odd"),
        ("KeyboardBackward", "KeyboardInterrupt: from the op"),
    ],
)
def test_check_fails_an_op_that_escapes_its_check_with_one_job(op, reason):
    """`opzoo check -j 1` with one task: the op's escape is a FAIL and exit 1, no traceback (before:
    exit 0 with no output for an exit, 130 "interrupted" for a KeyboardInterrupt)."""
    out = run_opzoo("check", f"hostile_ops:{op}", "-p", "gradient", "--device", "cpu", "-j", "1", env=ON_PATH)
    assert out.returncode == 1, out.stderr
    assert f"FAIL gradient[hostile_ops:{op}]: {reason}" in out.stdout
    assert "Traceback" not in out.stderr


def test_an_ops_keyboard_interrupt_in_several_workers_is_its_failure_not_a_traceback():
    """With two workers, each check the op's KeyboardInterrupt ends is one FAIL (before: 8 worker
    tracebacks, each check "crashed its worker")."""
    args = ("check", "hostile_ops:KeyboardBackward", "-p", "gradient,double_backward", "--device", "cpu")
    out = run_opzoo(*args, "-j", "2", env=ON_PATH)
    assert out.returncode == 1, out.stderr
    assert "0 passed, 2 failed, 0 skipped" in out.stdout
    # one report, and the other check named as the same failure
    assert out.stdout.count(": KeyboardInterrupt: from the op") == 1
    assert "FAIL double_backward[hostile_ops:KeyboardBackward]: the same failure as gradient[" in out.stdout
    assert "Traceback" not in out.stderr


def test_nothing_an_op_starts_outlives_the_command(tmp_path):
    """A backward that starts a background process: the worker ends it before the worker itself
    ends, and the command returns after its workers, so it is gone when `opzoo check` has exited
    (before: alive, adopted by init). Exact: its pid is on file, no waiting is assumed."""
    spawned = tmp_path / "spawned"
    env = {**ON_PATH, "OPZOO_TEST_SPAWNED": str(spawned)}
    out = run_opzoo("check", "hostile_ops:Spawner", "-p", "gradient", "--device", "cpu", "-j", "1", env=env)
    pid = int(spawned.read_text())
    try:
        assert out.returncode == 0, out.stdout + out.stderr
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


@pytest.mark.parametrize("jobs", ["1", "2"])
def test_an_op_that_patches_the_checker_changes_no_later_verdict(jobs):
    """CheckerPatcher's backward replaces the gradient check's code by one that finds nothing; a
    worker that checked it and then WrongSign passed WrongSign (-j 1: always; -j 2: whenever the
    schedule gave one worker both). Each op's checks now run in workers of their own: WrongSign
    fails, however many workers."""
    argv = ["check", "hostile_ops:CheckerPatcher", "wrong_ops:WrongSign", "-p", "hygiene,gradient"]
    out = run_opzoo(*argv, "--device", "cpu", "--examples", "5", "-j", jobs, "--json", env=ON_PATH)
    assert out.returncode == 1, out.stderr
    got = {r["id"]: r["status"] for r in json.loads(out.stdout)["results"]}
    assert got == {
        "hygiene[hostile_ops:CheckerPatcher]": "pass",
        "gradient[hostile_ops:CheckerPatcher]": "pass",
        "hygiene[wrong_ops:WrongSign]": "pass",
        "gradient[wrong_ops:WrongSign]": "fail",
    }


class ParallelInside(Cube):
    """x³, whose forward also sums a million ones: a parallel region (at two threads or more)."""

    @staticmethod
    def forward(x):
        return x**3 + 0 * torch.ones(2**20, dtype=x.dtype).sum()


def test_a_worker_forked_after_a_parallel_region_runs_its_own():
    """GNU OpenMP is not fork-safe: a worker forked from a process that ran a parallel region
    waited forever at its own first one when it ran two threads (a report's plots drawn before its
    mutation score: every control 'hung', the score n/a). Workers run one thread: the check passes."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the suite runs one (OMP_NUM_THREADS=1): a user's process runs more
    try:
        torch.ones(2**20, dtype=torch.float64).sum()  # this process's parallel region
        options = RunOptions(("hygiene",), "ci", 2, device="cpu", timeout=30, jobs=1)
        results = check_all([spec_of(ParallelInside)], options)
    finally:
        torch.set_num_threads(before)
    assert [r.status for r in results] == ["pass"], results[0].reason


PARALLEL_AT_IMPORT = """
import torch

torch.ones(2**20, dtype=torch.float64).sum()  # a parallel region, at import


class Cubed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return 3 * x**2 * g
"""


@pytest.mark.parametrize("child", ["probe", "path", "discover"])
def test_a_plugin_import_forked_after_a_parallel_region_runs_its_own(child, tmp_path, monkeypatch):
    """The same for the children that import a plugin's module: the entry point's first import
    (core/_probe), an import path's (core/_path_op), a package's scan (core/_discover). A module that
    runs a parallel region at import, in a process that ran one at two threads, is imported, not
    listed as hung."""
    from opzoo.core._discover import discover
    from opzoo.core._path_op import by_path
    from opzoo.core._probe import probe

    (tmp_path / "parallel_pkg").mkdir()
    (tmp_path / "parallel_pkg" / "__init__.py").write_text(PARALLEL_AT_IMPORT)
    monkeypatch.syspath_prepend(str(tmp_path))
    before = torch.get_num_threads()
    torch.set_num_threads(2)  # the suite runs one (OMP_NUM_THREADS=1): a user's process runs more
    try:
        torch.ones(2**20, dtype=torch.float64).sum()  # this process's parallel region
        if child == "probe":
            assert probe("parallel_pkg:Cubed", timeout=30) is None
        elif child == "path":
            monkeypatch.setenv("OPZOO_IMPORT_TIMEOUT", "30")
            assert by_path("parallel_pkg:Cubed").name == "parallel_pkg:Cubed"
        else:
            verdicts = discover("parallel_pkg", timeout=30).modules
            assert [(m.module, m.status, m.why) for m in verdicts] == [("parallel_pkg", "ok", "")]
    finally:
        torch.set_num_threads(before)


_WORKER_IMPORTS = """
import json, sys
import opzoo
from opzoo.testing.properties import PROPERTIES
from opzoo.testing.running._parallel import run_pool
from opzoo.testing.running._runner import check_property

def work(spec, prop, device, **kw):
    result = check_property(spec, prop, device=device, profile="ci", timeout=None)
    result.notes.append(json.dumps(sorted(sys.modules)))
    return result

tasks = [(i, prop, "cpu") for i in (0, 1) for prop in PROPERTIES]
done = run_pool([opzoo.info("myrelu"), opzoo.info("softplus")], tasks, work, jobs=1, limit=None)
seen = set().union(*(json.loads(r.notes[-1]) for r in done.values()))
print(json.dumps({"statuses": [r.status for r in done.values()], "new": sorted(seen - set(sys.modules))}))
"""


# CI's run keeps the pool's path (its parent preloads before forking):
# test_two_workers_give_one_process_results_in_its_order.
@pytest.mark.long
def test_a_fresh_worker_imports_nothing_heavy_its_parent_could_have():
    """Checking several ops, the pool's parent imports what the properties' first checks load
    (`Property.loads`, opzoo's check modules, hypothesis's search helpers) once, before it forks: a
    worker checking every property of its op imports none of it again (each op's fresh worker paid
    ~0.5 CPU s for it). Asked of a fresh interpreter, where nothing else imported them first."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _WORKER_IMPORTS], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.splitlines()[-1])
    assert set(got["statuses"]) <= {"pass", "skip"}, got["statuses"]
    heavy = ("opzoo.testing", "sympy", "torch._decomp", "torch.testing", "torch.export", "hypothesis")
    heavy += ("torch._dynamo.variables", "torch._inductor.compile_fx", "torch._functorch._aot_autograd")
    assert not [m for m in got["new"] if m.startswith(heavy)], got["new"]


HEAVY = """
import gc, json, sys
from opzoo._imports import heavy
heavy("json", "collector_seen")  # json: loaded already, left alone; collector_seen: imported
from collector_seen import ON  # what the collector was while it loaded
on_after, frozen = gc.isenabled(), gc.get_freeze_count()
gc.disable()
heavy("wave")  # the collector off already: left off
print(json.dumps([ON, on_after, frozen > 0, gc.isenabled()]))
"""


def test_heavy_imports_run_with_the_collector_paused_and_leave_it_as_found(tmp_path):
    """A command's heavy imports (opzoo/_imports.py): no collection while they load, the collector
    on again after with what they made frozen; a collector the caller had turned off stays off."""
    import subprocess
    import sys

    (tmp_path / "collector_seen.py").write_text("import gc\nON = gc.isenabled()\n")
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", HEAVY], capture_output=True, text=True, env=env, check=True)
    assert json.loads(out.stdout) == [False, True, True, False]
