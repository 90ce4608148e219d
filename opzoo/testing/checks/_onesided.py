"""Where a function is not differentiable, found numerically, and which gradients are valid there.

Central differences straddle any point where a function is not differentiable and measure no
derivative there: a tie of ``max(x, y)``, a norm's cone at 0, ``|x - y|`` at x = y, a ReLU's 0, a
jump (atan2 at the origin), a point where the function is not finite nearby (``x ** y`` at x = 0).
:class:`Probe` classifies each output element of a function (a *row* of its Jacobian) from one-sided
differences along each coordinate (each input element) and along a few random directions:

``smooth``      one-sided differences agree and are linear in the direction: no kink;
``convex``,     a kink where the function is locally convex (concave): a max (min) of smooth
``concave``     pieces, which is what every kink where two pieces meet is (a tie of two, ``|x|``, a
                clamp at one bound), and every norm. A generalised gradient g there satisfies
                ``-f'(x; -d) <= <g, d> <= f'(x; d)`` (reversed if concave) for every direction d: held
                along each coordinate (the one-sided partial derivatives) and each probed direction,
                the all-ones one among them (at a tie of ``max(x, y)``, ``(1, 1)`` passes each
                coordinate, not the direction ``(1, 1)``, along which max is linear with slope 1);
``mixed``       a kink where more than two pieces meet, neither convex nor concave (the median of
                three equal values, ``clamp(x, lo, hi)`` at x = lo = hi): a valid gradient there need
                not lie between any one-sided derivatives (torch's clamp gives x the gradient 1 where
                both one-sided partials in x are 0), so only its finiteness is held;
``jump``        not continuous: no derivative, nothing to check;
``unbounded``   not finite near x, ``undefined``: not finite at x (a variance of one element):
                nothing to check.

Convexity is judged from the function's values (``_convexity``): ``f(x + hd) + f(x - hd) >= 2 f(x)``
along each probed direction and ``f(x + h(a + b)/2) <= (f(x + ha) + f(x + hb)) / 2`` for pairs of
them; evidence against both is a mixed kink, against neither no kink at all. Each test is a direct
consequence of convexity (concavity) at the points probed, so a convex row is never judged mixed; a
mixed row that passes every probe for convexity would be judged convex, which takes a non-convex
function that looks convex along every probed pair of directions (none of torch's tie-breaking ops does: the
tests of tests/test_onesided.py probe each). A backward's Jacobian rows are held to what a Probe
measured (:meth:`Probe.violations`); ``_backward_rows`` computes them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from opzoo.testing.checks._convexity import TOL, gap_evidence, midpoint_evidence

Tensors = tuple[torch.Tensor, ...]
Fn = Callable[..., Tensors]

#: The one-sided step: gradcheck's eps, so that whatever its central differences straddle, this sees.
H = 1e-6
#: A second, smaller step: a jump's difference does not shrink with the step, a slope's does.
H2 = H / 16
#: A change at least this large (relative to 1 + |f|) that does not shrink with the step is a jump.
JUMP = 1e-3
#: Random directions probed besides the all-ones one. Each pair of them is one convexity test: at a
#: kink of several pieces one pair in six or so shows that it is neither convex nor concave, so that
#: 91 pairs miss one in millions (measured: none in 20,000 clamps at x = lo = hi, nor in 3,600 sorts
#: and medians of equal values). A diagonal op's coordinates pair up too, which shows a clamp's
#: three pieces by itself: fewer random ones there.
RANDOM = 13
RANDOM_DIAGONAL = 5
#: Columns probed one by one at most (more: only the random directions); a diagonal op's columns are
#: probed all at once.
MAX_COORDINATES = 128
#: gradcheck's tolerances, for a value held between one-sided differences.
ATOL, RTOL = 1e-5, 1e-3
#: Steps go through the function together, stacked along a new leading dimension, this many
#: elements (steps times the inputs' elements) per call at most, and only where as many as
#: STACKED_AT_LEAST steps fit in one call.
BATCH = 1 << 18
STACKED_AT_LEAST = 16
#: Ulps within which the point itself, evaluated in a stacked call, must come back as f0 (an
#: elementwise kernel may round a few ulps otherwise on a longer tensor: its vectorised path).
BATCH_ULPS = 8

SMOOTH, CONVEX, CONCAVE, MIXED, JUMPS, UNBOUNDED, UNDEFINED = range(7)
KINDS = ("smooth", "convex", "concave", "mixed", "jump", "unbounded", "undefined")


def _eps(outs: Sequence[torch.Tensor]) -> torch.Tensor:
    """Per output element, the machine epsilon of the dtype its output came back in (float64's for
    one that is not floating: integers and booleans are exact)."""
    floats = [o.dtype if o.is_floating_point() else torch.float64 for o in outs]
    eps = [torch.full((o.numel(),), torch.finfo(d).eps, dtype=torch.float64) for o, d in zip(outs, floats)]
    return torch.cat(eps) if eps else torch.zeros(0, dtype=torch.float64)


def flat(ts: Sequence[torch.Tensor]) -> torch.Tensor:
    """The tensors' elements in one float64 vector, one after the other."""
    if not ts:
        return torch.zeros(0, dtype=torch.float64)
    return torch.cat([t.detach().reshape(-1).to(device="cpu", dtype=torch.float64) for t in ts])


def _stacked_shape(got: torch.Size, b: int, shape: torch.Size) -> bool:
    """Whether ``got`` is ``shape`` stacked ``b`` times in front, with dimensions of 1 between (an
    output shaped as an input that broadcasting lengthened is)."""
    k = len(got) - len(shape)
    return k >= 1 and got[0] == b and all(d == 1 for d in got[1:k]) and tuple(got[k:]) == tuple(shape)


@dataclass
class Place:
    """Where a row (column) of the flat Jacobian sits: which output (input), at which index."""

    tensor: int
    index: tuple[int, ...]


def _place(k: int, shapes: Sequence[torch.Size]) -> Place:
    for i, shape in enumerate(shapes):
        n = math.prod(shape)
        if k < n:
            index = tuple(int(v) for v in torch.unravel_index(torch.tensor(k), tuple(shape))) if shape else ()
            return Place(i, index)
        k -= n
    raise IndexError(k)


def _kinds(
    convex_no: torch.Tensor,
    concave_no: torch.Tensor,
    nonlinear: torch.Tensor,
    jumps: torch.Tensor,
    nearby: torch.Tensor,
    finite: torch.Tensor,
) -> torch.Tensor:
    """Each row's kind from the evidence against convexity and concavity, a non-linearity neither
    explains, a jump, values not finite nearby or at the point (each later one overrides)."""
    # non-linear but neither test says which way: judge nothing there
    both = nonlinear & ~convex_no & ~concave_no
    kind = torch.full(finite.shape, SMOOTH, dtype=torch.long)
    kind[concave_no & ~convex_no] = CONVEX
    kind[convex_no & ~concave_no] = CONCAVE
    kind[(convex_no & concave_no) | both] = MIXED
    kind[jumps] = JUMPS
    kind[~nearby] = UNBOUNDED
    kind[~finite] = UNDEFINED
    return kind


class Probe:
    """One-sided differences of ``fn`` at ``xs``, each output element classified (see the module).

    ``diagonal``: ``fn`` is elementwise over inputs and outputs of one shape (output element e
    depends on the inputs' elements e alone), so that every element is probed at once along each
    input; otherwise each input element is probed on its own, if there are ``most`` at most.
    """

    def __init__(
        self, fn: Fn, xs: Sequence[torch.Tensor], *, diagonal: bool = False, most: int = MAX_COORDINATES
    ) -> None:
        self.fn = fn
        self.xs = tuple(x.detach() for x in xs)
        self.in_shapes = [x.shape for x in self.xs]
        self.n = sum(x.numel() for x in self.xs)
        outs = self._outputs(torch.zeros(self.n, dtype=torch.float64))
        self.out_shapes = [o.shape for o in outs]
        self.f0 = flat(outs)
        self.ulp = _eps(outs)
        self.m = self.f0.numel()
        self.diagonal = diagonal and self.n > 0 and self.m > 0
        if self.diagonal:
            self.elements = self.xs[0].numel()
            if any(x.numel() != self.elements for x in self.xs) or self.m % self.elements:
                self.diagonal = False
        # steps stacked along a new leading dimension (see _stacked), until a call does not give f0
        # (an input so large that few steps fit in a call costs its arithmetic, not its calls)
        self.batched = 0 < self.n <= BATCH // STACKED_AT_LEAST
        self.dirs = self._directions(most)
        self.coordinates = self._n_coordinates
        self._unstable: torch.Tensor | None = None
        self._measure()

    # -- evaluation -------------------------------------------------------------------------------

    def _outputs(self, step: torch.Tensor) -> Tensors:
        """``fn`` at x moved by ``step`` (n), or by each row of a stack of steps (b, n) at once, each
        input stacked along a new leading dimension (see :meth:`_stacked`)."""
        lead = tuple(step.shape[:-1])
        most = max(x.dim() for x in self.xs) if lead else 0
        moved = []
        at = 0
        for x in self.xs:
            k = x.numel()
            piece = step[..., at : at + k].reshape((*lead, *x.shape)).to(device=x.device, dtype=x.dtype)
            # broadcasting aligns the inputs' last dimensions: a shorter input's stack goes in front of
            # as many as the longest has (a core dimension of another length puts it elsewhere)
            pad = [1] * (most - x.dim())
            moved.append((x + piece).reshape((*lead, *pad, *x.shape)))
            at += k
        with torch.no_grad():
            out = self.fn(*moved)
        return tuple(o.detach() for o in (out if isinstance(out, tuple) else (out,)))

    def _at(self, step: torch.Tensor) -> torch.Tensor:
        return flat(self._outputs(step))

    def _at_many(self, steps: torch.Tensor) -> torch.Tensor:
        """f at x moved by each row of ``steps`` (k, n), flat: (k, m): in a few calls, stacked (see
        :meth:`_stacked`), where ``fn`` takes that; else one call each."""
        if not steps.shape[0]:
            return torch.zeros(0, self.m, dtype=torch.float64)
        if self.batched:
            try:
                got = self._stacked(steps)
            except Exception:  # noqa: BLE001 - the op may raise anything: each row on its own then
                got = None
            if got is not None:
                return got
            self.batched = False
        return torch.stack([self._at(s) for s in steps])

    def _stacked(self, steps: torch.Tensor) -> torch.Tensor | None:
        """:meth:`_at_many` where ``fn`` treats a new leading dimension of its inputs as one more
        loop dimension, as an op's signature says it does: each input stacked along it, and put
        in front of as many dimensions as the longest input has, so that broadcasting pairs the
        stacks' rows (where core dimensions differ in number, two stacks meet in two places: the
        output's shape shows it). Each call stacks the point itself first and last. None unless
        each call returns outputs of the stacked shape that give back f0 at both ends (within a
        few ulps): a function that is not elementwise along that dimension (a mean over it, a
        cumulative sum, a size read from the input, a random draw) does not, and is then called
        once per row. Not seen: a forward that branches on its whole input (``if (x > t).any()``)
        between branches that agree at the point but not at every step: a stacked call takes one
        branch for all its rows."""
        per = max(1, BATCH // self.n)
        zero = torch.zeros(1, self.n, dtype=torch.float64)
        rows = []
        for start in range(0, steps.shape[0], per):
            part = steps[start : start + per]
            block = torch.cat([zero, part, zero])
            outs = self._outputs(block)
            b = block.shape[0]
            if len(outs) != len(self.out_shapes) or not all(
                _stacked_shape(o.shape, b, shape) for o, shape in zip(outs, self.out_shapes)
            ):
                return None
            got = torch.cat([o.reshape(b, -1).to(device="cpu", dtype=torch.float64) for o in outs], 1)
            if not (self._gives_f0(got[0]) and self._gives_f0(got[-1])):
                return None
            rows.append(got[1 : 1 + part.shape[0]])
        return torch.cat(rows)

    def _gives_f0(self, row: torch.Tensor) -> bool:
        """Whether ``row`` is f0: nan and infinite where it is (the same infinities), within a few
        ulps elsewhere."""
        f0 = self.f0
        inf, finite = f0.isinf(), f0.isfinite()
        if not torch.equal(row.isnan(), f0.isnan()) or not torch.equal(row[inf], f0[inf]):
            return False
        a, b = row[finite], f0[finite]
        return bool(((a - b).abs() <= BATCH_ULPS * self.ulp[finite] * (a.abs() + b.abs())).all())

    def _directions(self, most: int) -> torch.Tensor:
        """Coordinates first (each input element, or for a diagonal op each input as a whole), then
        the all-ones direction and the random ones (a fixed generator: the same probes every run)."""
        n = self.n
        dirs = []
        if self.diagonal:
            at = 0
            for x in self.xs:
                d = torch.zeros(n, dtype=torch.float64)
                d[at : at + x.numel()] = 1
                dirs.append(d)
                at += x.numel()
        elif n <= most:
            dirs.extend(torch.eye(n, dtype=torch.float64))
        self._n_coordinates = len(dirs)
        # a diagonal op of one input: each row is a function of one variable, which the coordinate
        # probes see whole (two pieces at most meet at a point of a line)
        if not (self.diagonal and len(self.xs) == 1):
            gen = torch.Generator().manual_seed(20)
            dirs.append(torch.ones(n, dtype=torch.float64))
            count = RANDOM_DIAGONAL if self.diagonal else RANDOM
            dirs.extend(torch.randn(count, n, generator=gen, dtype=torch.float64))
        return torch.stack(dirs) if dirs else torch.zeros(0, n, dtype=torch.float64)

    def _measure(self) -> None:
        """One-sided difference quotients ψ(±d) = (f(x ± h d) - f(x)) / h along each direction, and
        each row's kind: the second step only along directions where something changes enough to be
        a jump, the midpoints only where a kink is found (to tell convex, concave and mixed apart)."""
        f0, dirs = self.f0, self.dirs
        base = f0[:, None]
        both = self._at_many(torch.cat([H * dirs, -H * dirs])).T  # (rows, 2 directions)
        k = dirs.shape[0]
        plus, minus = both[:, :k], both[:, k:]
        finite = f0.isfinite()
        nearby = torch.cat([plus, minus], 1).isfinite().all(1)
        self.up, self.down = (plus - base) / H, (base - minus) / H  # right, left derivatives
        # rounding in a difference quotient: a few ulps of the values differenced, over the step, in
        # the dtype each output came back in (a float32 output for float64 inputs rounds at 1e-7: its
        # differences over 1e-6 move by about the values themselves, which is no kink, no jump of
        # the derivative, no unboundedness); float64's is inside the tolerances already, a shorter
        # dtype's is added to them (``short``)
        values = torch.cat([plus, minus], 1).abs().nan_to_num(0.0, 0.0, 0.0).amax(1, keepdim=True)
        self.noise = 8 * self.ulp[:, None] * (base.abs().nan_to_num(0.0, 0.0, 0.0) + values) / H
        self._short = torch.where(self.ulp[:, None] > torch.finfo(torch.float64).eps, self.noise, 0.0)
        jumps, near_finite = self._jumps(plus, minus)
        nearby &= near_finite
        convex_no, concave_no = gap_evidence(self._at_many, f0, dirs, H, self.up, self.down, self._short)
        complete = self.diagonal or self.coordinates == self.n
        nonlinear = self._nonlinear() if complete else torch.zeros(self.m, dtype=torch.bool)
        kinked = convex_no | concave_no | nonlinear
        if not complete:
            kinked = torch.ones(self.m, dtype=torch.bool)  # only the midpoints can tell
        if bool((kinked & finite & nearby & ~jumps).any()):
            first = 0 if self.diagonal else self.coordinates
            mid_convex_no, mid_concave_no, mid_nearby = midpoint_evidence(
                self._at_many, dirs, first, H, self.up, self.down, base, self._short
            )
            convex_no |= mid_convex_no
            concave_no |= mid_concave_no
            nearby &= mid_nearby
        self.kind = _kinds(convex_no, concave_no, nonlinear, jumps, nearby, finite)

    def _jumps(self, plus: torch.Tensor, minus: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per row: a jump, a change that does not shrink with the step (a slope's shrinks 16-fold at
        H2), along some direction; and whether f was finite at each smaller step taken."""
        f0, base = self.f0, self.f0[:, None]
        jumps = torch.zeros(self.m, dtype=torch.bool)
        finite = torch.ones(self.m, dtype=torch.bool)
        for sign, far in ((1.0, plus), (-1.0, minus)):
            big = (far - base).abs()
            large = big > JUMP * (1 + base.abs())
            js = large.any(0).nonzero().reshape(-1)
            nears = self._at_many(sign * H2 * self.dirs[js])
            for near, j in zip(nears, js.tolist()):
                finite &= near.isfinite()
                jumps |= large[:, j] & ((near - f0).abs() > 0.5 * big[:, j])
        return jumps, finite

    def _nonlinear(self) -> torch.Tensor:
        """Per row: linear along every line yet not linear (the median of equal values: odd, so no
        gap shows), where every coordinate is probed: the central difference along each random
        direction against the coordinates' gradient."""
        k, c = self.dirs.shape[0], self.coordinates
        if k <= c:
            return torch.zeros(self.m, dtype=torch.bool)
        central = (self.up + self.down) / 2
        grad = central[:, :c]
        rows = torch.arange(self.m)
        predicted = self.dots(rows, grad)[:, c:]
        size = self.dots(rows, grad.abs(), absolute=True)[:, c:]
        tol = TOL * (1 + central[:, c:].abs() + size) + self._short
        return ((central[:, c:] - predicted).abs() > tol).any(1)

    # -- what the rows are --------------------------------------------------------------------------

    @property
    def smooth(self) -> torch.Tensor:
        """Per row: True where no kink, jump or non-finite value was found."""
        return self.kind == SMOOTH

    def mask(self, rows: torch.Tensor) -> Tensors:
        """A flat row mask as one boolean tensor per output, in the outputs' shapes."""
        out, at = [], 0
        for shape in self.out_shapes:
            k = math.prod(shape)
            out.append(rows[at : at + k].reshape(shape))
            at += k
        return tuple(out)

    def row(self, r: int) -> Place:
        return _place(r, self.out_shapes)

    def column(self, c: int) -> Place:
        return _place(c, self.in_shapes)

    def value(self, c: int) -> float:
        return float(flat(self.xs)[c])

    def columns_of(self, r: int) -> list[int]:
        """A diagonal op's row r depends on these columns (the inputs' elements at its index)."""
        e = r % self.elements
        return [i * self.elements + e for i in range(len(self.xs))]

    # -- a Jacobian held to them ------------------------------------------------------------------

    def dots(self, rows: torch.Tensor, jac: torch.Tensor, *, absolute: bool = False) -> torch.Tensor:
        """``<J_r, d>`` for each given row and each probed direction: (rows, directions). ``jac``:
        the rows of the Jacobian, (rows, n), or for a diagonal op each row's own entries, one per
        input, (rows, inputs). ``absolute``: with the directions' absolute values (a scale)."""
        dirs = self.dirs.abs() if absolute else self.dirs
        if not self.diagonal:
            return jac @ dirs.T
        if not len(rows):
            return torch.zeros(0, self.dirs.shape[0], dtype=torch.float64)
        cols = (rows % self.elements)[:, None] + torch.arange(len(self.xs))[None] * self.elements
        # dirs[:, cols]: (k, rows, inputs) -> (rows, k)
        return (jac[None] * dirs[:, cols]).sum(-1).T

    def violations(self, rows: torch.Tensor, jac: torch.Tensor) -> Violation | None:
        """The worst way in which the Jacobian rows ``jac`` of ``rows`` (see :meth:`dots`) are no
        valid generalised gradient: outside the one-sided derivatives at a convex or concave kink,
        not finite at a mixed one; None if they all are valid."""
        if not len(rows):
            return None
        kind = self.kind[rows]
        mixed = kind == MIXED
        bad = mixed & ~jac.isfinite().all(1)
        if bad.any():
            i = int(bad.nonzero()[0])
            return Violation(
                int(rows[i]), self._worst_column(int(rows[i]), jac[i]), None, math.nan, math.nan, math.nan
            )
        judged = (kind == CONVEX) | (kind == CONCAVE)
        if not judged.any() or not self.dirs.shape[0]:
            return None
        sel = rows[judged]
        got = self.dots(sel, jac[judged])
        up, down = self.up[sel], self.down[sel]
        low, high = torch.minimum(up, down), torch.maximum(up, down)
        slack = ATOL + RTOL * torch.maximum(up.abs(), down.abs()) + self.noise[sel]
        excess = torch.maximum(low - got, got - high) / slack
        excess = torch.where(got.isnan(), torch.full_like(excess, math.inf), excess)
        if not (excess > 1).any():
            return None
        # a coordinate that fails is the clearest report, then the all-ones direction (along which
        # a tie stays tied), else the worst direction
        coord = excess[:, : self.coordinates]
        ones = excess[:, self.coordinates : self.coordinates + 1]
        pool = coord if (coord > 1).any() else excess
        flat_i = int(pool.reshape(-1).nan_to_num(math.inf).argmax())
        i, d = divmod(flat_i, pool.shape[1])
        if pool is excess and ones.numel() and (ones > 1).any():
            i, d = int(ones.reshape(-1).nan_to_num(math.inf).argmax()), self.coordinates
        r = int(sel[i])
        return Violation(
            r,
            self._coordinate_column(r, d) if pool is coord else self._worst_column(r, jac[judged][i]),
            d if pool is not coord else None,
            float(got[i, d]),
            float(down[i, d]),
            float(up[i, d]),
        )

    def _coordinate_column(self, r: int, d: int) -> int:
        return self.columns_of(r)[d] if self.diagonal else d

    def _worst_column(self, r: int, jac_row: torch.Tensor) -> int:
        """The column of row r with the largest (or a non-finite) analytic entry: where to point."""
        values = jac_row.abs().nan_to_num(math.inf, math.inf)
        j = int(values.argmax()) if values.numel() else 0
        return self.columns_of(r)[j] if self.diagonal else j

    def central(self, rows: torch.Tensor) -> torch.Tensor:
        """Central differences along each coordinate for the given rows: (rows, coordinates)."""
        return (self.up[rows, : self.coordinates] + self.down[rows, : self.coordinates]) / 2

    def unstable(self) -> torch.Tensor:
        """(rows, coordinates): where the central difference along a coordinate does not settle as the
        step shrinks from H to H / 4, beyond gradcheck's tolerance and the rounding, or is not finite:
        the derivative is not bounded there (x ** (1/3) at 0 grows 2.5-fold), so finite differences
        cannot judge it. A bounded derivative's central difference changes by O(h^2) only."""
        if self._unstable is None:
            c = self.coordinates
            wide = self.central(torch.arange(self.m))
            ends = self._at_many(torch.cat([H / 4 * self.dirs[:c], -H / 4 * self.dirs[:c]]))
            narrow = ((ends[:c] - ends[c:]) / (H / 2)).T if c else wide
            slack = ATOL + RTOL * narrow.abs() + 5 * self.noise
            self._unstable = ~(wide.isfinite() & narrow.isfinite() & ((wide - narrow).abs() <= slack))
        return self._unstable


@dataclass
class Violation:
    """A Jacobian row that is no valid generalised gradient: ``row`` and the ``column`` to point at;
    ``direction``: None for a coordinate (then the column's), else which of the probed directions
    (the first after the coordinates is the all-ones one);
    the op's directional derivative there and the one-sided ones (nan: a non-finite gradient at a
    kink of several pieces)."""

    row: int
    column: int
    direction: int | None
    got: float
    left: float
    right: float
