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
from typing import Sequence

import torch

from opzoo.testing.checks._convexity import TOL, gap_evidence, midpoint_evidence
from opzoo.testing.checks._nearby import Fn, Nearby, Tensors, flat

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
SMOOTH, CONVEX, CONCAVE, MIXED, JUMPS, UNBOUNDED, UNDEFINED = range(7)
KINDS = ("smooth", "convex", "concave", "mixed", "jump", "unbounded", "undefined")


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
        steps = self.steps = Nearby(fn, xs)  # the function's values at the point and near it
        self.xs, self.n, self.m, self.f0, self.ulp = steps.xs, steps.n, steps.m, steps.f0, steps.ulp
        self.in_shapes, self.out_shapes = steps.in_shapes, steps.out_shapes
        self.diagonal = diagonal and self.n > 0 and self.m > 0
        if self.diagonal:
            self.elements = self.xs[0].numel()
            if any(x.numel() != self.elements for x in self.xs) or self.m % self.elements:
                self.diagonal = False
        self.dirs = self._directions(most)
        self.coordinates = self._n_coordinates
        self._unstable: torch.Tensor | None = None
        self._measure()

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
        both = self.steps.many(torch.cat([H * dirs, -H * dirs])).T  # (rows, 2 directions)
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
        convex_no, concave_no = gap_evidence(self.steps.many, f0, dirs, H, self.up, self.down, self._short)
        complete = self.diagonal or self.coordinates == self.n
        nonlinear = self._nonlinear() if complete else torch.zeros(self.m, dtype=torch.bool)
        kinked = convex_no | concave_no | nonlinear
        if not complete:
            kinked = torch.ones(self.m, dtype=torch.bool)  # only the midpoints can tell
        if bool((kinked & finite & nearby & ~jumps).any()):
            first = 0 if self.diagonal else self.coordinates
            mid_convex_no, mid_concave_no, mid_nearby = midpoint_evidence(
                self.steps.many, dirs, first, H, self.up, self.down, base, self._short
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
            nears = self.steps.many(sign * H2 * self.dirs[js])
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
            ends = self.steps.many(torch.cat([H / 4 * self.dirs[:c], -H / 4 * self.dirs[:c]]))
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
