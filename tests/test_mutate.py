"""`opzoo mutate`: every mutant is killed on some op by the property meant to see it, a survivor says
why it survived, and the command's score, JSON and errors hold up."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest
import torch
from conftest import run_opzoo, run_pytest
from correct_ops import Cube, RoundsByPath, SavesOutput, SeedMyReLU, SinCos
from hostile_ops import ON_PATH, _Doubles

import opzoo
from opzoo.testing import spec_of
from opzoo.testing.mutation._facts_task import facts
from opzoo.testing.mutation._mutants import MUTANTS
from opzoo.testing.mutation._mutate import (
    CONTROL,
    KILLED,
    NOT_APPLICABLE,
    SURVIVED,
    Score,
    mutate_one,
    parse_score,
)

ROOT = Path(__file__).resolve().parent.parent


class Sqrt(SavesOutput):
    """sqrt on its domain, x > 0, which excludes negative inputs."""

    opzoo_contract = opzoo.Contract(domain=(0, math.inf))

    @staticmethod
    def forward(x):
        return torch.sqrt(x)

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad / (2 * y)


def _registry() -> opzoo.Registry:
    reg = opzoo.Registry()
    for name, cls in {
        "cube": Cube,
        "times": RoundsByPath,
        "seed_myrelu": SeedMyReLU,
        "sincos": SinCos,
        "sqrt": Sqrt,
    }.items():
        reg.register(cls, name=name)
    return reg


REG = _registry()

#: mutant -> (the op it is killed on, the property that kills it): the cheapest pair that shows it.
KILLS = {
    "sign": ("cube", "gradient"),
    "factor_1e-3": ("cube", "autograd"),
    "double_half": ("cube", "gradient"),
    "ones_grad_output": ("cube", "gradient"),
    "swap_inputs": ("times", "gradient"),
    "roll": ("cube", "gradient"),
    "mean_not_sum": ("times", "gradient"),
    "zero_slice": ("cube", "gradient"),
    "noise": ("cube", "gradient"),
    "grad_output_in_place": ("cube", "hygiene"),
    "detached": ("seed_myrelu", "double_backward"),  # zero second derivative in x: seen through grad_output
    "nan_second_derivative": ("seed_myrelu", "double_backward"),  # nan through grad_output
    "float32": ("cube", "autograd"),
    "wrong_on_0d": ("cube", "gradient"),
    "wrong_on_size1": ("cube", "gradient"),
    "wrong_above_4096": ("cube", "gradient"),
    "at_kinks": ("seed_myrelu", "gradient"),  # a kink nobody declared, found
    "jvp_factor": ("myrelu", "forward_mode"),
    "drop_last_input": ("times", "gradient"),
    "second_output": ("sincos", "gradient"),
    "noncontiguous_grad_output": ("cube", "layout"),
    "noncontiguous_input": ("cube", "layout"),
    "needs_input_grad": ("times", "subsets"),
    "wrong_in_low_precision": ("myrelu", "reference"),
    "wrong_dtype_short": ("cube", "hygiene"),
    "nan_when_large": ("cube", "extremes"),
    "not_repeatable": ("cube", "hygiene"),
    "wrong_on_negatives": ("cube", "gradient"),
}


def _spec(name: str):
    return REG.info(name) if name in REG else opzoo.info(name)


def test_every_mutant_has_an_op_that_kills_it():
    """Each mutant but the control is in KILLS: a mutant no check is shown to kill proves nothing."""
    assert set(KILLS) == set(MUTANTS) - {CONTROL}
    assert len(KILLS) >= 15


@pytest.mark.parametrize("mutant", list(KILLS))
def test_each_mutant_is_killed_by_the_property_meant_to_see_it(mutant):
    """The mutant, on its op, is killed by that property; and that property is among those the
    mutant's record says can see it, or the first it runs."""
    op, prop = KILLS[mutant]
    verdict = mutate_one(_spec(op), mutant, props=[prop])
    assert verdict.status == KILLED, verdict.why()
    assert verdict.prop == prop and verdict.changed


def test_the_control_passes_the_properties_that_kill_the_mutants():
    """The control (the wrapping alone) is killed by none of the properties that kill the mutants
    on those ops: a kill is the mutant's, not the wrapping's."""
    for op in ("cube", "times", "seed_myrelu", "sincos"):
        props = sorted({prop for o, prop in KILLS.values() if o == op})
        verdict = mutate_one(_spec(op), CONTROL, props=props)
        assert verdict.status == SURVIVED, verdict.why()


def test_a_survivor_says_the_domain_excludes_negatives():
    """A mutant wrong only on negative inputs survives on an op whose domain excludes them, and says
    so; on an op whose gradient is zero there it says that instead."""
    verdict = mutate_one(REG.info("sqrt"), "wrong_on_negatives", props=["gradient"])
    assert verdict.status == SURVIVED and not verdict.changed
    assert verdict.reason == "the contract's domain (0, inf) excludes negative inputs"
    relu = mutate_one(REG.info("seed_myrelu"), "wrong_on_negatives", props=["gradient"])
    assert relu.status == SURVIVED and "gradient was zero wherever" in relu.reason


def test_a_survivor_whose_catchers_did_not_run_says_so():
    """A factor of 1 + 1e-3 (inside finite differences' tolerance) survives `gradient` alone with the
    reason that the oracles able to see it were not run; the score counts it."""
    verdict = mutate_one(REG.info("cube"), "factor_1e-3", props=["gradient"])
    assert verdict.status == SURVIVED and verdict.explained
    assert verdict.reason.startswith("the properties that can see it did not run (autograd: not run")
    assert Score.of([verdict]).rate == 0.0


def test_a_mutant_that_does_not_apply_is_not_counted():
    """Swapping two inputs' gradients on an op of one input is not applicable, and not in the score."""
    verdict = mutate_one(REG.info("cube"), "swap_inputs")
    assert verdict.status == NOT_APPLICABLE and "one input" in verdict.reason
    assert Score.of([verdict]).rate is None


def test_scores_parse_as_fractions_or_percentages():
    """0.99 and 99% are the same minimum; 2, -1, nan and words are refused."""
    assert parse_score("0.99") == parse_score("99%") == pytest.approx(0.99)
    for bad in ("2", "-1", "nan", "high"):
        with pytest.raises(ValueError, match="a fraction from 0 to 1"):
            parse_score(bad)


def test_mutate_reports_json_and_exits_1_below_the_minimum_score():
    """`opzoo mutate --json --min-score`: the JSON parses, has the verdicts and scores, and the exit
    status is 1 below the minimum, 0 at it."""
    args = ("mutate", "myrelu", "-m", "sign,wrong_on_negatives", "-p", "gradient", "-j", "1", "--json")
    below = run_opzoo(*args, "--min-score", "0.9")
    assert below.returncode == 1, below.stderr
    data = json.loads(below.stdout)
    statuses = {v["mutant"]: v["status"] for v in data["verdicts"]}
    assert statuses == {"identity": "control passed", "sign": "killed", "wrong_on_negatives": "survived"}
    assert data["total"]["rate"] == 0.5 and data["ops"]["myrelu"]["killed"] == 1
    at = run_opzoo(*args, "--min-score", "50%")
    assert at.returncode == 0, at.stderr


def test_mutate_prints_the_killer_and_the_survivors_reason():
    """The text report names the property that killed each mutant and why each survivor survived."""
    out = run_opzoo("mutate", "myrelu", "-m", "sign,wrong_on_negatives", "-p", "gradient", "-j", "1")
    assert out.returncode == 0, out.stderr
    assert re.search(r"myrelu\s+sign\s+killed\s+gradient: Jacobian mismatch", out.stdout)
    assert "survived: myrelu~wrong_on_negatives: the op's gradient was zero wherever" in out.stdout
    assert "score: 1 of 2 mutant(s) killed (50.0%), 1 survived (1 explained, 0 blind spot(s))" in out.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (("-m", "bogus"), "unknown mutant 'bogus'"),
        (("--min-score", "high"), "--min-score: a score is a fraction from 0 to 1"),
        (("--jobs", "0"), "--jobs must be a positive integer"),
        # opzoo check's limits: past a week the timers underneath overflow
        (("--timeout", "1e300"), "--timeout must be a positive number of seconds, at most 604800"),
        (("--examples", "200000"), "--examples must be a positive integer, at most 100000"),
        (("-p", "nope"), "unknown property 'nope'"),
        (("nosuchop",), "no op named 'nosuchop'"),
    ],
)
def test_bad_input_is_one_line(args, message):
    """A mistake on the command line is one `opzoo: error:` line and exit status 2."""
    out = run_opzoo("mutate", *args)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("opzoo: error: ") and message in lines[0], out.stderr


def test_pytest_plugin_mutates(tmp_path):
    """`pytest --opzoo-mutate=NAME` makes one test per mutant: a killed one passes, a survivor fails
    with its reason (or is skipped at --opzoo-min-score), one that does not apply is skipped."""
    args = [
        "-rA", "--opzoo-mutate=myrelu", "--opzoo-mutant=sign,wrong_on_negatives,swap_inputs",
        "--opzoo-property=gradient",
    ]  # fmt: skip
    out = run_pytest(*args, env={}, cwd=tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    assert re.search(r"PASSED \S*mutant\[myrelu~identity\]", out.stdout), out.stdout
    assert re.search(r"PASSED \S*mutant\[myrelu~sign\]", out.stdout)
    assert "not applicable: one input: there is no other gradient to swap it with" in out.stdout
    assert "survived myrelu~wrong_on_negatives: the op's gradient was zero" in out.stdout
    lenient = run_pytest(*args, "--opzoo-min-score=0.5", env={}, cwd=tmp_path)
    assert lenient.returncode == 0, lenient.stdout + lenient.stderr


def test_layout_gives_the_op_a_strided_slice_as_it_is():
    """The layout check's non-contiguous 1-d input reaches the op non-contiguous: before, its leaf
    was a clone, which makes a strided slice contiguous again, so noncontiguous_input survived on
    every op whose drawn inputs had no two dimensions of more than one element (isru, swish_beta)."""
    from opzoo.testing import replay

    seen = []

    class Spy(_Doubles):
        @staticmethod
        def forward(x):
            seen.append(x.is_contiguous())
            return x * 2

    reg = opzoo.Registry()
    reg.register(Spy, name="spy")
    replay(reg.info("spy"), "layout", {}, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    assert False in seen


def test_a_mutants_broadcast_count_traces_without_a_dynamo_warning(capfd):
    """`compile` traces a mutant's backward, its count of broadcast uses included: written with a
    builtin max(..., default=0) it made Dynamo print "incorrect arg count ... _call_min_max" into
    `opzoo mutate`'s output."""
    from opzoo.testing.mutation._mutant_hooks import Site, _broadcast

    def scaled(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        site = Site(xs=(x, y), signature=2, cores=(0, 0), contiguous=(True, True))
        return x * _broadcast(site)[1]

    x, y = torch.ones(2, 3), torch.ones(3)
    torch._dynamo.reset()
    assert torch.equal(torch.compile(scaled, backend="eager", fullgraph=True)(x, y), x * 2)  # y used twice
    assert "incorrect arg count" not in capfd.readouterr().err


# -- an op's code runs on the workers, facts included ---------------------------------------------


def test_an_ops_facts_are_found_in_a_task_whose_escape_is_its_failure():
    """Finding which mutants apply runs the op (its backward on a grid): a SystemExit there is the
    op's failure, returned, never raised (before: it ended `opzoo mutate`, exit 0, no score)."""
    got = facts(spec_of("hostile_ops:ExitBackward"), "facts", names=["sign"], timeout=None)
    assert (got.applies, got.reason) == ({}, "SystemExit: 0")
    fine = facts(opzoo.info("myrelu"), "facts", names=["sign", "swap_inputs"], timeout=None)
    assert fine.reason == "" and fine.applies["sign"] is None and fine.applies["swap_inputs"]


@pytest.mark.parametrize("op", ["ExitBackward", "OsExitBackward", "BaseExcBackward", "KeyboardBackward"])
def test_an_op_that_escapes_its_backward_fails_the_gate_with_a_score(op):
    """`opzoo mutate --min-score` on an op whose backward exits or raises a BaseException: its
    control failed, the score printed, exit 1, no traceback (before: exit 0 and nothing printed
    for SystemExit, a traceback for a BaseException, 130 "interrupted" for a KeyboardInterrupt)."""
    out = run_opzoo(
        "mutate", f"hostile_ops:{op}", "--min-score", "0.99", "-p", "accepts,gradient", env=ON_PATH
    )
    assert out.returncode == 1, out.stderr
    assert f"control failed: hostile_ops:{op}: the op fails gradient by itself" in out.stdout
    assert "\nscore: " in out.stdout
    assert "Traceback" not in out.stderr


def test_a_hanging_op_is_stopped_by_mutates_own_limit():
    """A backward that never returns fails the control at `--timeout`, and its mutants are not run
    (before: mutate looked for its kinks in its own process, with no limit, and hung)."""
    out = run_opzoo(
        "mutate", "hostile_ops:HangBackward", "--timeout", "2", "-p", "accepts,gradient", env=ON_PATH
    )
    assert out.returncode == 1, out.stderr
    assert "gradient: timed out after 2 s: the op hung?" in out.stdout
    assert re.search(r"HangBackward\s+sign\s+unjudged\s+not run: the op hung", out.stdout)
