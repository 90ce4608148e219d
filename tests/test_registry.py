"""Registry unit tests: no install, fake ops registered in-process or offered by import path."""

from __future__ import annotations

import fakeops
import pytest
import torch

import opzoo
from opzoo import Contract, Param, Registry, Source
from opzoo.exceptions import (
    ContractError,
    DuplicateOpError,
    OpNotFoundError,
    ParamError,
    PluginError,
)

A = Source("dist-a", "1.0", "opzoo.ops: x = a:X", "entry point")
B = Source("Dist_B", "2.0", "opzoo.ops: x = b:X", "entry point")


def test_register_function_and_get_case_insensitive():
    """An op registered in-process is found under any case and returns the class itself."""
    reg = Registry()
    reg.register(fakeops.Double)
    assert reg.get("DOUBLE") is fakeops.Double
    assert "Double" in reg and "triple" not in reg
    assert reg.names() == ["double"]


def test_register_as_decorator_with_name():
    """register works as a decorator with and without a name."""
    reg = Registry()

    @reg.register(name="Twice")
    class T(fakeops.Double):
        pass

    @reg.register
    class Other(fakeops.Double):
        pass

    assert reg.get("twice") is T and reg.get("other") is Other


@pytest.mark.parametrize("name", ["a:b", "a b", "a\nb", "x\u202ey", "abc\n", "", "1abc"])
def test_register_refuses_a_name_an_entry_point_could_not_have(name):
    """register(name=...) takes the names an entry point may have, whole: no ':', space, control or
    bidi character, no final newline (a `$` let it through), and '' is refused, not replaced by the
    class's name. Nothing is registered."""
    reg = Registry()
    with pytest.raises(ContractError, match=r"^invalid op name .*: lower-case letters, digits"):
        reg.register(fakeops.Double, name=name)
    assert reg.names() == []
    reg.offer(name, "fakeops:Double", A)
    assert reg.names() == [] and [f.reason for f in reg.failures()] == [f"invalid op name {name!r}"]


def test_register_still_takes_upper_case_and_the_class_name():
    """A name in capitals is lower-cased, as before; no name is the class's."""
    reg = Registry()
    reg.register(fakeops.Double, name="TWICE-2.x")
    reg.register(fakeops.Double)
    assert reg.names() == ["double", "twice-2.x"]


def test_unknown_name_suggests_closest():
    """A miss is an OpNotFoundError (a LookupError) naming the closest names."""
    reg = Registry()
    reg.register(fakeops.Double)
    with pytest.raises(OpNotFoundError, match="did you mean 'double'") as err:
        reg.get("doubel")
    assert isinstance(err.value, LookupError)


def test_bare_function_gets_default_contract():
    """A Function with no declarations registers with the defaults and its docstring as summary."""
    reg = Registry()
    reg.register(fakeops.Double)
    spec = reg.info("double")
    assert spec.kind == "function"
    assert spec.summary == "Multiply by two."
    assert spec.contract == Contract()
    assert spec.source.dist is None and str(spec.source) == "in-process"


def test_duplicate_register_refused_naming_both():
    """Registering a taken name in-process raises, never overwrites."""
    reg = Registry()
    reg.offer("double", "fakeops:Double", A)
    with pytest.raises(DuplicateOpError, match="dist-a 1.0.*in-process"):
        reg.register(fakeops.Scale, name="double")
    assert reg.get("double") is fakeops.Double


def test_reregistering_same_class_replaces_it():
    """Re-running a notebook cell that registers the same class again is not a duplicate."""
    reg = Registry()
    reg.register(fakeops.Double)
    reg.register(fakeops.Double)
    assert reg.get("double") is fakeops.Double


def test_two_sources_are_ambiguous_and_qualified_lookup_reaches_each():
    """Two offers of one name: a plain lookup names both, dist:name picks one."""
    reg = Registry()
    reg.offer("x", "fakeops:Double", A)
    reg.offer("X", "fakeops:Scale", B)
    with pytest.raises(DuplicateOpError) as err:
        reg.get("x")
    assert err.value.sources == ("dist-a", "dist-b")
    assert reg.get("dist-a:x") is fakeops.Double
    assert reg.get("dist_b:x") is fakeops.Scale
    assert [f.reason for f in reg.failures()] == ["duplicate op name, also offered by dist-a 1.0"]
    with pytest.raises(OpNotFoundError, match="dist-a:x"):
        reg.get("dist-c:x")


def test_offers_are_lazy():
    """Listing names imports nothing; the import happens on first use."""
    reg = Registry()
    reg.offer("ghost", "module_that_does_not_exist:Op", A)
    assert reg.names() == ["ghost"]
    assert reg.sources("ghost") == [A]
    with pytest.raises(PluginError, match="ModuleNotFoundError") as err:
        reg.get("ghost")
    assert err.value.failure.source == A and err.value.failure.name == "ghost"
    assert reg.failures() == [err.value.failure]


@pytest.mark.parametrize(
    "ref, reason",
    [
        ("fakeops:NotAnOp", "is not a torch.autograd.Function or torch.nn.Module subclass"),
        ("fakeops:hook_module_ops", "is not a class"),
        ("fakeops:WrongSignature", "parameter 'alpha' is not an argument of forward, which takes (x)"),
        ("fakeops:Missing", "AttributeError"),
    ],
)
def test_bad_offers_fail_alone(ref, reason):
    """A bad offer is recorded with its reason; other ops still resolve."""
    reg = Registry()
    reg.offer("bad", ref, A)
    reg.offer("double", "fakeops:Double", A)
    assert reg.load_all()[0].target is fakeops.Double
    (failure,) = reg.failures()
    assert reason in failure.reason and failure.name == "bad"
    assert [r["status"] for r in reg.rows()] == ["broken", "ok"]


def test_function_without_backward_is_refused():
    """A Function that defines no backward cannot be registered."""

    class NoBack(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x

    with pytest.raises(ContractError, match="does not define backward"):
        Registry().register(NoBack)


@pytest.mark.parametrize(
    "contract, message",
    [
        (Contract(domain=(1, 0)), "low < high"),
        (Contract(domain="wide"), "pair of numbers"),
        (Contract(kinks={5.0: 1.0}, domain=(0, 1)), "inside the domain"),
        (Contract(params={"a": Param(5.0, 0.0, 1.0)}), "default out of range"),
        (Contract(params={"a": 3}), "must be an opzoo.Param"),
        (Contract(dtypes=("int8",)), "dtypes must be among"),
        (Contract(kinks=lambda: 1 / 0), "kinks could not be evaluated"),
        (Contract(reference=3), "reference must be callable"),
    ],
)
def test_invalid_contracts_are_reported(contract, message):
    """Each kind of wrong declaration is a ContractError saying what is wrong."""

    class Op(fakeops.Double):
        opzoo_contract = contract

    with pytest.raises(ContractError, match=message):
        Registry().register(Op)


def test_contract_must_be_a_contract():
    """A contract attribute of the wrong type is refused."""

    class Op(fakeops.Double):
        opzoo_contract = {"domain": (0, 1)}

    with pytest.raises(ContractError, match="must be an opzoo.Contract"):
        Registry().register(Op)


def test_params_bound_and_validated():
    """apply() fills defaults, validates ranges and rejects unknown names."""
    reg = Registry()
    reg.register(fakeops.Scale)
    spec = reg.info("scale")
    x = torch.ones(3)
    assert torch.equal(spec.apply(x), x)
    assert torch.equal(spec.apply(x, factor=3), 3 * x)
    with pytest.raises(ParamError, match=r"must lie in \[0, 10\], got 11"):
        spec.apply(x, factor=11)
    with pytest.raises(ParamError, match="unknown parameter 'beta'; this op takes: factor"):
        spec.apply(x, beta=1)
    with pytest.raises(ParamError, match="must be a number"):
        spec.apply(x, factor="big")


def test_kinks_may_depend_on_params():
    """A callable kinks declaration is evaluated with the bound params."""
    c = Contract(params={"t": Param(1.0, 0.0, 5.0)}, kinks=lambda t: {t: 0.5, -t: 0.5})
    assert c.kinks_at() == {1.0: 0.5, -1.0: 0.5}
    assert c.kinks_at({"t": 2}) == {2.0: 0.5, -2.0: 0.5}


def test_module_ops_build_modules():
    """An nn.Module class registers as a 'module' op and build() instantiates it."""
    reg = Registry()

    @reg.register(name="learn")
    class Learnable(torch.nn.Module):
        """A scale with a learnable weight."""

        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(()))

        def forward(self, x):
            return x * self.w

    spec = reg.info("learn")
    assert spec.kind == "module"
    assert isinstance(spec.bound(), Learnable)


PUBLIC_API = [
    "CheckpointError",
    "Comparison",
    "CompileError",
    "ConfigError",
    "Contract",
    "ContractError",
    "Declared",
    "Dim",
    "DivergedError",
    "Drawn",
    "DuplicateOpError",
    "Failure",
    "Floats",
    "Index",
    "Invertible",
    "LibraryError",
    "Mask",
    "OpNotFoundError",
    "OpSpec",
    "OpZooError",
    "Orthogonal",
    "Param",
    "ParamError",
    "Permutation",
    "PluginError",
    "Positive",
    "Registry",
    "Rotation",
    "SPD",
    "Source",
    "Symmetric",
    "TrainConfig",
    "TrainResult",
    "UnitNorm",
    "compare",
    "declare",
    "failures",
    "get",
    "hookimpl",
    "info",
    "library",
    "load",
    "names",
    "nn",
    "register",
    "registry",
    "testing",
    "train",
]


def test_public_api_is_pinned():
    """The public API is exactly this list: a change to it is a deliberate edit here, and every
    name resolves (the lazy ones too)."""
    assert opzoo.__all__ == PUBLIC_API
    for name in PUBLIC_API:
        getattr(opzoo, name)


def test_register_refuses_what_is_not_a_class_in_one_line():
    """A caller's slip (a tuple, an instance) is a TypeError that says what register takes, not an
    AttributeError from deep inside."""
    reg = Registry()
    with pytest.raises(TypeError, match=r"register\(\) takes an autograd Function or nn.Module class"):
        reg.register((fakeops.Double, "gradient"), name="pair")
