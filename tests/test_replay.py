"""An op's examples drawn once and replayed for each property (opzoo/testing/running/_cases.py): the
same examples, the same results, and a failure reported by the property's own search (issue 32)."""

from __future__ import annotations

import functools
import hashlib
import json

import pytest
import torch
from wrong_ops import WRONG

import opzoo
from opzoo.testing import PROPERTIES, check_property, spec_of
from opzoo.testing.properties import Property
from opzoo.testing.running import _cases


@pytest.fixture(autouse=True)
def no_draws_kept():
    _cases.clear()
    yield
    _cases.clear()


@pytest.fixture
def searches(monkeypatch) -> list[str]:
    """The op names of the hypothesis searches run: the draw's, and each property's own."""
    ran: list[str] = []
    real = _cases.search

    def counted(conf, seed, spec, *rest):
        ran.append(spec.name)
        return real(conf, seed, spec, *rest)

    monkeypatch.setattr(_cases, "search", counted)
    return ran


def key(r) -> tuple:
    """Everything in a result but its time."""
    shown = (json.dumps(v, sort_keys=True, default=str) for v in (r.example, r.worst))
    return (r.status, r.reason, tuple(r.notes), *shown, r.repro, r.timed_out)


def both(spec, props, **kw) -> tuple[list, list]:
    """Each property's results by its own search, then by the op's draw replayed."""
    kw.setdefault("profile", "ci")
    with _cases.searching():
        searched = [check_property(spec, p, timeout=None, **kw) for p in props]
    _cases.clear()
    return searched, [check_property(spec, p, timeout=None, **kw) for p in props]


def fingerprint(op, *xs) -> str:
    h = hashlib.sha1(repr(sorted(op.params.items())).encode())
    for x in op.full(*xs):
        h.update(f"{x.dtype}{tuple(x.shape)}{x.stride()}".encode())
        h.update(x.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


@pytest.mark.parametrize("profile, seed", [("ci", None), ("dev", 1234)])
def test_a_replayed_property_sees_its_own_searchs_examples_in_order(monkeypatch, searches, profile, seed):
    seen: list[str] = []
    monkeypatch.setitem(
        PROPERTIES, "recording", Property("recording", lambda op, *xs: seen.append(fingerprint(op, *xs)))
    )
    spec = opzoo.info("softmax")
    with _cases.searching():
        searched = check_property(spec, "recording", profile=profile, seed=seed, examples=20)
    own, seen[:] = list(seen), []
    assert searched.status == "pass", searched.report()
    first = check_property(spec, "recording", profile=profile, seed=seed, examples=20)
    again = check_property(spec, "recording", profile=profile, seed=seed, examples=20)
    assert first.status == again.status == "pass"
    assert searches == ["softmax", "softmax"]  # the property's own search, then one draw for both
    # each exact repeat is counted as run, not run again
    once = [f for i, f in enumerate(own) if f not in own[:i]]
    assert seen == once + once
    assert len(once) > 10


@pytest.mark.parametrize(
    "profile, seed, examples",
    [("ci", None, None), ("dev", 1234, None), ("dev", None, None), ("ci", None, 12), ("thorough", 5, None)],
    ids=["ci", "dev-seeded", "dev-own-search", "examples-given", "thorough"],
)
def test_a_property_of_few_draws_runs_that_many_unless_examples_or_thorough_say(
    monkeypatch, profile, seed, examples
):
    """Property.draws (library's: ten) caps a property's drawn inputs under a fast profile: the first
    of the op's draw where one is shared, else a search of that many; an --examples given, and the
    thorough profile, run all of them."""
    seen: dict[str, list[str]] = {"all": [], "few": []}
    for name, draws in (("all", None), ("few", 4)):
        record = functools.partial(lambda into, op, *xs: into.append(fingerprint(op, *xs)), seen[name])
        monkeypatch.setitem(PROPERTIES, name, Property(name, record, draws=draws))
        result = check_property(opzoo.info("softmax"), name, profile=profile, seed=seed, examples=examples)
        assert result.status == "pass", result.report()
    capped = profile != "thorough" and examples is None
    if capped:
        assert 1 <= len(seen["few"]) <= 4 < len(seen["all"])
    if capped and seed is None and profile == "dev":  # no draw shared: each searched its own
        return
    assert seen["few"] == (seen["all"][: len(seen["few"])] if capped else seen["all"])


def test_a_check_without_a_seed_draws_its_own_examples(searches):
    spec = opzoo.info("myrelu")
    for prop in ("gradient", "layout"):
        assert check_property(spec, prop, profile="dev", timeout=None).status == "pass"
    assert searches == ["myrelu", "myrelu"]


@pytest.mark.parametrize("name", ["wrong_sign", "wrong_at_kink", "mutates_input"])
def test_a_property_that_fails_on_replay_reports_its_own_searchs_counterexample(searches, name):
    cls, prop, reason = WRONG[name]
    spec = spec_of(cls, name=name)
    searched, replayed = both(spec, ["accepts", prop])
    assert [r.status for r in replayed] == ["pass", "fail"]
    assert reason in replayed[1].reason and replayed[1].example is not None
    assert [key(r) for r in replayed] == [key(r) for r in searched]
    # two searches of the property's own, then the draw, then the failing property's search
    assert searches == [name] * 4


def test_a_rejected_case_is_left_out_by_screened_properties_and_fails_accepts(searches):
    cls, prop, _ = WRONG["zeroes_grad_output_rejects_empty"]
    spec = spec_of(cls, name="rejects_empty")
    props = ["layout", "accepts", prop]
    searched, replayed = both(spec, props)
    assert [r.status for r in replayed] == ["pass", "fail", "fail"]
    assert [key(r) for r in replayed] == [key(r) for r in searched]
    assert len(searches) == 3 + 3  # searched: one each; replayed: the draw, then accepts and hygiene
    (drawn,) = [found for _, found in _cases._memo]
    assert any(c.rejected for c in drawn.cases) and not all(c.rejected for c in drawn.cases)


def test_the_draws_are_kept_per_op_object_and_settings():
    spec = opzoo.info("myrelu")
    conf = _cases._profiles.get("ci")
    drawn = _cases.drawn(spec, conf, None, "cpu", None, None, True)
    assert _cases.drawn(spec, conf, None, "cpu", None, None, True) is drawn
    # a mutant is another spec of the same op: it draws its own, as does another registry or seed
    from opzoo.testing.mutation._mutant_ops import mutant_spec
    from opzoo.testing.mutation._mutants import MUTANTS

    mutant = mutant_spec(spec, MUTANTS["sign"])
    others = [
        _cases.drawn(mutant, conf, None, "cpu", None, None, True),
        _cases.drawn(spec_of(spec.target, name="myrelu"), conf, None, "cpu", None, None, True),
        _cases.drawn(spec, conf, None, "cpu", opzoo.registry(), None, True),
        _cases.drawn(spec, conf, 7, "cpu", None, None, True),
    ]
    assert all(d is not drawn for d in others)


def test_a_replayed_property_is_given_inputs_of_its_own(monkeypatch):
    def scribble(op, *xs):
        for x in xs:
            x.fill_(7.0)

    monkeypatch.setitem(PROPERTIES, "scribble", Property("scribble", scribble))
    spec = opzoo.info("myrelu")
    assert check_property(spec, "scribble", profile="ci", timeout=None).status == "pass"
    (drawn,) = [found for _, found in _cases._memo]
    assert any(x.numel() and not bool((x == 7.0).all()) for c in drawn.cases for x in c.inputs)
