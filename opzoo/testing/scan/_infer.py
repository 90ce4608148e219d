"""Inferring a Function's contract by probing it: what ``opzoo scan`` declares for a Function nobody
declared, or why it cannot.

Read from the class (no call): its forward's parameters. Then the forward alone, on seeded float64
inputs of shape (3, 4): where it is defined, whether it draws random numbers, which output elements
move when one input element moves (elementwise, along its ``dim``, or neither), what it refuses. The
backward is what the checks judge, never trusted: it is only compared with the forward's central
differences, to tell a derivative from a backward that is none by design (a surrogate, a
straight-through estimator, guided backprop).

The rule behind every step: a guess that could make a correct op red is not made. Where one would
be needed, the Function is "cannot infer", with why. Probing runs op code, so it runs as a task of
the checks' workers under their time limit (:func:`infer_task`).
"""

from __future__ import annotations

import contextlib
import inspect
import io
import math
from typing import Any, Callable, Sequence

import torch

from opzoo.core._contract import Contract
from opzoo.core._discover import form_of
from opzoo.core._spec import import_path
from opzoo.exceptions import one_line
from opzoo.testing.running._signals import PropertyTimeout, time_limit
from opzoo.testing.scan._record import Inferred, signature_hint

__all__ = ["Cannot", "infer", "infer_task"]

F64 = torch.float64
SHAPE = (3, 4)
DIM_NAMES = ("dim", "axis")
NUMBER_TYPES = (int, float, bool, "int", "float", "bool")
#: Where the forward is probed, in order: the first where it runs and is finite is its domain.
DOMAINS: tuple[tuple[float, float], ...] = ((-math.inf, math.inf), (0.0, math.inf), (0.0, 1.0))


class Cannot(Exception):
    """Inference stops here: the message says why, and what to declare."""


def infer_task(target: Any, what: str, *, device: str = "cpu", timeout: float | None, **_: Any) -> Inferred:
    """:func:`infer` of ``target.name`` (an import path) as a task of the pool, within ``timeout``
    seconds: whatever the Function does there is its record's ``why``, never the caller's."""
    try:
        with time_limit(timeout):
            return infer(target.name)
    except PropertyTimeout:
        return Inferred(target.name, why=f"probing it ran past {timeout:g} s: it hung?", timed_out=True)


def infer(path: str) -> Inferred:
    """What the probes find of the Function at ``path`` (``pkg.mod:Class``, imported already)."""
    cls = import_path(path)
    rec = Inferred(path, form_of(cls))
    if isinstance(getattr(cls, "opzoo_contract", None), Contract):
        rec.own = True  # its author declared it: checked under that, as opzoo check would
        return rec
    try:
        probe = _Probe(cls, rec)
        probe.find_domain()
        probe.check_randomness()
        probe.find_structure()
        probe.find_limits()
        probe.compare_backward()
        probe.find_dtypes()
    except Cannot as exc:
        rec.why = str(exc)
    except Exception as exc:  # the op's error at a probe, or scan's own: never a verdict
        rec.why = f"probing raised {one_line(exc, with_type=True)}"
    return rec


def _values(shape: Sequence[int], seed: int, domain: tuple[float, float]) -> torch.Tensor:
    """Seeded float64 values in ``domain``: distinct, no ties, no zeros."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(tuple(shape), generator=g, dtype=F64) * 1.5
    if domain[1] == 1.0:
        return torch.sigmoid(x) * 0.9 + 0.05
    return x.abs() + 0.1 if domain[0] == 0.0 else x


def _same(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor], rtol: float = 0.0) -> bool:
    return all(
        x.shape == y.shape and torch.allclose(x, y, rtol=rtol, atol=rtol * 1e-2, equal_nan=True)
        for x, y in zip(a, b)
    )


class _Probe:
    """One Function probed: its forward's arguments read, then its behaviour found step by step."""

    def __init__(self, cls: type, rec: Inferred) -> None:
        self.cls, self.rec = cls, rec
        self.seeded = False
        self.domain = DOMAINS[0]
        self.xs: list[torch.Tensor] = []
        self.defaults: list[Any] = []
        self._read_forward()

    def _read_forward(self) -> None:
        params = list(inspect.signature(self.cls.forward).parameters.values())
        if self.cls.setup_context is torch.autograd.Function.setup_context:  # type: ignore[attr-defined]
            params = params[1:]  # ctx
        if any(p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) for p in params):
            raise Cannot("forward takes *args or **kwargs: which of them are tensors is not readable")
        if any(p.kind == p.KEYWORD_ONLY and p.default is p.empty for p in params):
            raise Cannot("forward takes a keyword-only argument without a default: apply() passes none")
        positional = [p for p in params if p.kind != p.KEYWORD_ONLY]
        required = [p for p in positional if p.default is p.empty]
        if not required:
            raise Cannot("forward takes no argument without a default: no tensor to probe")
        dims = [p.name for p in required[1:] if p.name in DIM_NAMES]
        if dims:
            raise Cannot(
                f"forward takes {dims[0]!r} with no default: scan would probe it as a tensor and cannot "
                "choose its value; declare it (params={" + f"{dims[0]!r}: opzoo.Dim()" + "}, and a signature)"
            )
        numbers = [p.name for p in required[1:] if p.annotation in NUMBER_TYPES]
        if numbers:
            raise Cannot(
                f"forward takes {', '.join(map(repr, numbers))} (annotated a number) with no default: scan "
                "cannot choose its values; declare it (params={" + f"{numbers[0]!r}: opzoo.Param(...)" + "})"
            )
        self.rec.tensors = tuple(p.name for p in required)
        for p in positional[len(required) :]:
            self.defaults.append(p.default)
            kind = _kind_of(p.name, p.default)
            if kind:  # None, strings and the like are left to the forward: no schema holds them
                self.rec.params[p.name] = (kind, p.default)

    # -- calling the forward -----------------------------------------------------------------------

    def call(self, tensors: Sequence[Any]) -> tuple[torch.Tensor, ...]:
        """The forward's outputs at ``tensors`` (and the defaults), seeded if it draws; a forward
        that writes into its input writes into a copy (the checks say so, not the probes)."""
        tensors = [t.clone() if isinstance(t, torch.Tensor) and not t.requires_grad else t for t in tensors]
        with torch.random.fork_rng(devices=[], enabled=self.seeded):
            if self.seeded:
                torch.manual_seed(0)
            with contextlib.redirect_stdout(io.StringIO()):
                out = self.cls.apply(*tensors, *self.defaults)  # type: ignore[attr-defined]
        outs = out if isinstance(out, tuple) else (out,)
        if not all(isinstance(o, torch.Tensor) for o in outs):
            raise Cannot(f"forward returned {type(out).__name__}, not tensors: declare its outputs")
        return outs

    def find_domain(self) -> None:
        """Rule 4: the first of DOMAINS where the forward runs and is finite; rules 3 and 5."""
        first = ""  # what went wrong in the first domain: the forward's error, or "was not finite"
        n = len(self.rec.tensors)
        for domain in DOMAINS:
            xs = [_values(SHAPE, i, domain) for i in range(n)]
            try:
                outs = self.call(xs)
            except Cannot:
                raise
            except Exception as exc:
                first = first or f"raised {one_line(exc, with_type=True)}"
                continue
            if all(o.isfinite().all() for o in outs if o.is_floating_point()):
                self.domain, self.xs = domain, xs
                break
            first = first or "was not finite"
        else:
            raise Cannot(
                f"forward({', '.join(self.rec.tensors)}) {first} at float64 tensors of shape {SHAPE} (in "
                "(-inf, inf); nor did it run and stay finite in (0, inf) or (0, 1)): declare which are "
                "tensors, params or integer inputs, their signature and where they live"
            )
        if self.domain != DOMAINS[0]:
            self.rec.domain = {name: self.domain for name in self.rec.tensors}
            self.rec.notes.append(f"refused or not finite outside {self.domain}: declared there")
        self._refuse_ambiguous()
        outs = self.call(self.xs)
        if (j := next((j for j, o in enumerate(outs) if not o.is_floating_point()), None)) is not None:
            raise Cannot(f"forward returns output {j} as {outs[j].dtype}: declare it (output_dtypes=)")
        if any(tuple(o.shape) != SHAPE for o in outs):
            raise Cannot(signature_hint(outs, self.rec, SHAPE))

    def _refuse_ambiguous(self) -> None:
        """Rule 3: a later argument the forward also takes as a number is a tensor or a param."""
        for i, name in enumerate(self.rec.tensors[1:], 1):
            try:
                self.call([*self.xs[:i], 1.0, *self.xs[i + 1 :]])
            except Exception:
                continue
            raise Cannot(
                f"forward takes {name!r} as a tensor or as a number: scan cannot tell which, nor choose "
                f"its values; declare it (params={{{name!r}: opzoo.Param(...)}}, or a signature)"
            )

    def check_randomness(self) -> None:
        """Rule 6: two plain calls differ; under one seed each, equal: a random forward."""
        if _same(self.call(self.xs), self.call(self.xs)):
            return
        self.seeded = True
        if not _same(self.call(self.xs), self.call(self.xs)):
            raise Cannot("forward gives other values on every call, even under the same seed")
        self.rec.random = True

    # -- structure ---------------------------------------------------------------------------------

    def _steps(self) -> list[Callable[[float], float]]:
        """Small and large moves of one value, inside the domain (a flat forward moves only under
        large ones)."""
        small = [lambda v: v + 1e-3 * max(1.0, abs(v))]
        if self.domain[1] == 1.0:
            return [*small, lambda v: v / 3, lambda v: 1 - (1 - v) / 3]
        if self.domain[0] == 0.0:
            return [*small, lambda v: v * 3, lambda v: v / 3]
        return [*small, lambda v: v + 1.0, lambda v: v - 3.0]

    def _moved(self, i: int, k: int, step: Callable[[float], float]) -> torch.Tensor:
        """Which output elements (any output) move when element ``k`` of input ``i`` moves."""
        xs = [x.clone() for x in self.xs]
        flat = xs[i].view(-1)
        flat[k] = step(float(flat[k]))
        changed = torch.zeros(SHAPE, dtype=torch.bool)
        for a, b in zip(self.call(xs), self.call(self.xs)):
            changed |= ~((a == b) | (a.isnan() & b.isnan()))
        return changed

    def find_structure(self) -> None:
        """Rule 7: elementwise if only its own element moves, at several shapes; along ``dim`` if
        only its own row; else its signature must be declared."""
        axis = next((n for n, (kind, _) in self.rec.params.items() if kind == "dim"), None)
        along = self.rec.params[axis][1] % len(SHAPE) if axis else None
        moved, diagonal, rows = False, True, axis is not None
        for i in range(len(self.xs)):
            for k in range(math.prod(SHAPE)):
                at = [int(j) for j in torch.unravel_index(torch.tensor(k), SHAPE)]
                for step in self._steps():
                    changed = self._moved(i, k, step)
                    moved = moved or bool(changed.any())
                    where = changed.nonzero().tolist()
                    diagonal = diagonal and all(p == at for p in where)
                    rows = rows and all(p[j] == at[j] for p in where for j in range(len(SHAPE)) if j != along)
        if not moved:
            raise Cannot("the forward is flat at the probe, small and large steps: declare its signature")
        n, m = len(self.xs), len(self.call(self.xs))
        if diagonal:
            self.rec.signature = ",".join(["()"] * n) + "->" + ",".join(["()"] * m)
            if axis:
                del self.rec.params[axis]
                self.rec.notes.append(f"elementwise at the probe: {axis!r} left to the forward")
            self._elementwise_at_other_shapes()
        elif rows and axis:
            self.rec.signature = ",".join(["(n)"] * n) + "->" + ",".join(["(n)"] * m)
        else:
            raise Cannot(
                "an output element depends on input elements at other positions, along no `dim` argument: "
                "declare its signature"
            )

    def _elementwise_at_other_shapes(self) -> None:
        """The same values in other shapes give the same outputs: else a dimension has a meaning."""
        whole = self.call(self.xs)
        for shape in ((12,), (5,), (2, 1, 3)):
            size = math.prod(shape)
            try:
                outs = self.call([x.reshape(-1)[:size].reshape(shape) for x in self.xs])
            except Exception as exc:
                raise Cannot(
                    f"elementwise at shape {SHAPE} but forward raised {one_line(exc, with_type=True)} at "
                    f"shape {shape}: its last dimension has a meaning? declare its signature"
                ) from None
            if not _same(outs, [o.reshape(-1)[:size].reshape(shape) for o in whole], rtol=1e-10):
                raise Cannot(f"elementwise at shape {SHAPE}, not at {shape}: declare its signature")
        try:
            self.call([x.reshape(-1)[0].clone() for x in self.xs])
        except Exception as exc:
            self.rec.min_rank = 1
            self.rec.notes.append(f"refuses 0-d inputs ({one_line(exc, with_type=True)})")
        if len(self.xs) > 1:
            self._broadcasts(whole)

    def _broadcasts(self, whole: tuple[torch.Tensor, ...]) -> None:
        """An n-ary elementwise op that does not broadcast its inputs is declared of one shape."""
        rows = [x[0] for x in self.xs[1:]]
        expected = self.call([self.xs[0], *(r.expand(SHAPE) for r in rows)])
        try:
            ok = _same(self.call([self.xs[0], *rows]), expected, rtol=1e-10)
        except Exception:
            ok = False
        if not ok:
            self.rec.broadcast = False
            self.rec.notes.append("does not broadcast its inputs at the probe: declared of one shape")
        del whole

    def find_limits(self) -> None:
        """A dim op that refuses a size-0 core dimension (at the position of its default ``dim``)."""
        if not self.rec.signature.startswith("(n)"):
            return
        axis = next(n for n, (kind, _) in self.rec.params.items() if kind == "dim")
        shape = list(SHAPE)
        shape[self.rec.params[axis][1]] = 0
        try:
            self.call([x.new_empty(shape) for x in self.xs])
        except Exception as exc:
            self.rec.min_sizes = {"n": 1}
            self.rec.notes.append(f"refuses an empty {axis} ({one_line(exc, with_type=True)})")

    # -- the backward --------------------------------------------------------------------------------

    def vjp(self, scale: float) -> tuple[list[torch.Tensor], tuple[torch.Tensor | None, ...]]:
        """grad_outputs (seeded, times ``scale``) and the backward's gradients at the probe."""
        leaves = [x.clone().requires_grad_() for x in self.xs]
        outs = self.call(leaves)
        gs = [_values(o.shape, 10 + j, DOMAINS[0]) / 1.5 * scale for j, o in enumerate(outs)]
        pairs = [(o, g) for o, g in zip(outs, gs) if o.requires_grad]
        if not pairs:
            raise Cannot("no output requires grad: the backward is never called")
        grads = torch.autograd.grad([o for o, _ in pairs], leaves, [g for _, g in pairs], allow_unused=True)
        return gs, grads

    def differences(self, gs: list[torch.Tensor]) -> list[torch.Tensor]:
        """Central differences of sum(outputs * gs), per input element (the forward's vjp)."""
        h, found = 1e-6, []
        for i in range(len(self.xs)):
            num = torch.zeros(SHAPE, dtype=F64)
            for k in range(num.numel()):
                up, down = [x.clone() for x in self.xs], [x.clone() for x in self.xs]
                up[i].view(-1)[k] += h
                down[i].view(-1)[k] -= h
                terms = [((a - b) * g).sum() for a, b, g in zip(self.call(up), self.call(down), gs)]
                num.view(-1)[k] = sum(terms) / (2 * h)
            found.append(num)
        return found

    def compare_backward(self) -> None:
        """Rules 8 and 9: which inputs the backward differentiates, and whether it is the forward's
        derivative, by design not one, or not linear in grad_output."""
        try:
            gs, grads = self.vjp(1.0)
        except Cannot:
            raise
        except Exception as exc:
            self.rec.notes.append(f"backward raised {one_line(exc, with_type=True)}: the checks will say so")
            return
        numeric = self.differences(gs)
        for name, g, num in zip(self.rec.tensors, grads, numeric):
            if g is None and float(num.abs().max()) > 1e-8:
                self.rec.no_grad += (name,)
                self.rec.notes.append(f"the backward gives {name!r} no gradient though the forward uses it")
        live = [(g, num) for g, num in zip(grads, numeric) if g is not None]
        if live:
            ana = torch.cat([g.reshape(-1) for g, _ in live])
            num = torch.cat([n.reshape(-1) for _, n in live])
            self.rec.by_design = _by_design(ana, num, torch.cat([g.reshape(-1) for g in gs]))
        for scale in (2.0, -1.0):
            pairs = zip(self.vjp(scale)[1], grads)
            if not all(a is None or torch.allclose(a, scale * b, rtol=1e-9, atol=1e-12) for a, b in pairs):
                self.rec.linear_in_grad = False
                self.rec.by_design = "the backward is not linear in grad_output (guided backprop?)"
                return

    def find_dtypes(self) -> None:
        """Rule 10: a dtype the forward raises in is dropped, with the error in a note."""
        kept = ["float64"]
        for name in ("float32", "bfloat16"):
            try:
                self.call([x.to(getattr(torch, name)) for x in self.xs])
                kept.append(name)
            except Exception as exc:
                self.rec.notes.append(f"forward raises in {name} ({one_line(exc, with_type=True)}): left out")
        self.rec.dtypes = tuple(kept)


def _kind_of(name: str, default: Any) -> str:
    """Rule 2: how a defaulted argument is declared (pinned at its default), or '' (left out)."""
    if isinstance(default, bool):
        return "flag"
    if isinstance(default, int) and name in DIM_NAMES:
        return "dim"
    return "number" if isinstance(default, (int, float)) else ""


def _by_design(ana: torch.Tensor, num: torch.Tensor, g: torch.Tensor) -> str:
    """Why the backward is no derivative by design, or '' (a derivative: the checks judge it)."""
    close = (ana - num).abs() <= 1e-5 + 1e-3 * num.abs()
    if close.all():
        return ""
    if float(num.abs().max()) <= 1e-9:
        return "the forward is flat (piecewise constant), the backward is not: surrogate or straight-through?"
    off = ~close
    if ana.shape == g.shape and bool((num[off].abs() <= 1e-9).all()) and torch.allclose(ana[off], g[off]):
        return "the backward passes grad_output where the forward is flat (straight-through, or no mask?)"
    if close.any():
        return ""  # wrong at some elements only: the checks say where
    c = float((ana * num).sum() / (num * num).sum())
    if math.isfinite(c) and torch.allclose(ana, c * num, rtol=1e-4, atol=1e-8):
        return f"the backward is {c:.6g} x the forward's derivative everywhere (gradient reversal, scaling?)"
    return "the backward matches the forward's derivative nowhere (a surrogate?)"
