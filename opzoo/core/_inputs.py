"""What a tensor input is: the set its values live in (symmetric, SPD, orthogonal, a permutation, an
interval, the user's own), and whether it is differentiated.

Each set is drawn by a deterministic map of free values (floats spread over ``[-box, box]``, of the
input's shape), never by filtering: hypothesis shrinks the free values and maps them again, so every
example it tries, shrunk or not, is in the set, and the fixed and edge inputs go through the same map.
A set that perturbing an entry leaves (a symmetric matrix whose one entry moves is not symmetric)
has a projection: the checks that differentiate pass the op ``project(x)``, so that their finite
differences move inside the set, as torch's own OpInfos do for Hermitian inputs.

Nothing here imports torch at module level: declaring a contract stays cheap.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Callable

from opzoo.exceptions import ContractError

#: Values of a bounded interval are kept this far inside its ends (as a domain's are).
MARGIN = 1e-3


class InputSet(ABC):
    """Where a tensor input's values live. ``grad``: whether it is differentiated (``False``: a
    constant of the check, like an :class:`~opzoo.Index`, cast with the check's dtype if float)."""

    grad: bool
    #: ``"float"`` (the check's dtype), or the integer dtype of a set of integers.
    dtype: str = "float"

    def validate(self, where: str, dims: set[str]) -> None:
        """:class:`ContractError` if the set's own arguments are wrong (``where`` names the input)."""

    def fits(self, where: str, core: tuple[str, ...]) -> None:
        """:class:`ContractError` if the set does not fit an input of core dimensions ``core``."""

    @abstractmethod
    def draw(self, free: Any, box: float) -> Any:
        """The input, from ``free``: float64 values in ``[-box, box]`` of the input's shape."""

    def project(self, x: Any) -> Any:
        """A smooth map onto the set, the identity on it (the identity for an open set)."""
        return x

    @property
    def projects(self) -> bool:
        """Whether :meth:`project` is more than the identity."""
        return type(self).project is not InputSet.project

    @property
    def scales(self) -> bool:
        """Whether an element times any ``c >= 1`` stays in the set (the ``extremes`` check scales
        only such inputs)."""
        return False


def _square(where: str, core: tuple[str, ...], what: str) -> None:
    if len(core) < 2 or core[-1] != core[-2]:
        shown = "(" + ",".join(core) + ")"
        raise ContractError(
            f"{where}: {what} is a square matrix, core (n,n), but the signature gives {shown}"
        )


def _cond(where: str, cond: Any) -> None:
    if isinstance(cond, bool) or not isinstance(cond, (int, float)) or not 1 <= cond < math.inf:
        raise ContractError(f"{where}: cond must be a finite number >= 1, got {cond!r}")


def _symmetric(x: Any) -> Any:
    return (x + x.mT) / 2


def interval(low: float, high: float, margin: float, box: float) -> tuple[float, float]:
    """Where values of ``[low, high]`` are drawn: less ``margin`` (relative where an end is large)
    at finite ends, ``box`` wide where the interval is unbounded (a declared domain's box too)."""
    lo = low + max(margin, abs(low) * 1e-6) if math.isfinite(low) else -box
    hi = high - max(margin, abs(high) * 1e-6) if math.isfinite(high) else box
    if math.isfinite(low) and not math.isfinite(high):
        hi = max(lo + box, hi)
    if math.isfinite(high) and not math.isfinite(low):
        lo = min(hi - box, lo)
    return lo, hi


@dataclass(frozen=True)
class Floats(InputSet):
    """Floats in the interval ``[low, high]`` (kept a margin inside a finite end); any by default.
    ``optional`` (with ``grad=False``): the forward also takes None there (a loss's ``weight=None``),
    and both are checked."""

    low: float = -math.inf
    high: float = math.inf
    grad: bool = field(default=True, kw_only=True)
    optional: bool = field(default=False, kw_only=True)

    def validate(self, where: str, dims: set[str]) -> None:
        if not isinstance(self.optional, bool) or (self.optional and self.grad):
            raise ContractError(
                f"{where}: optional=True is for an input that is not differentiated (grad=False: a "
                f"constant of the checks, None or a tensor), got optional={self.optional!r}, "
                f"grad={self.grad!r}"
            )
        try:
            ok = float(self.low) < float(self.high)
        except (TypeError, ValueError):
            ok = False
        if not ok:
            raise ContractError(
                f"{where}: the interval must be (low, high) with low < high, got "
                f"({self.low!r}, {self.high!r})"
            )

    def interval(self, box: float) -> tuple[float, float]:
        """Where drawn values lie: the interval less a margin at finite ends, ``box`` wide where it
        is unbounded."""
        return interval(float(self.low), float(self.high), MARGIN, box)

    def draw(self, free: Any, box: float) -> Any:
        lo, hi = self.interval(box)
        if (lo, hi) == (-box, box):
            return free
        return lo + (free + box) * ((hi - lo) / (2 * box))

    @property
    def scales(self) -> bool:
        low, high = float(self.low), float(self.high)
        return (low == -math.inf or low >= 0) and (high == math.inf or high <= 0)


@dataclass(frozen=True)
class Positive(Floats):
    """Positive floats."""

    low: float = field(default=0.0, init=False)
    high: float = field(default=math.inf, init=False)


@dataclass(frozen=True)
class Symmetric(InputSet):
    """Symmetric matrices, core ``(..., n, n)``: ``A == A.mT``."""

    grad: bool = field(default=True, kw_only=True)

    def fits(self, where: str, core: tuple[str, ...]) -> None:
        _square(where, core, "a symmetric matrix")

    def draw(self, free: Any, box: float) -> Any:
        return _symmetric(free)

    def project(self, x: Any) -> Any:
        return _symmetric(x)

    @property
    def scales(self) -> bool:
        return True


@dataclass(frozen=True)
class SPD(Symmetric):
    """Symmetric positive definite matrices with eigenvalues in ``[1, cond]``."""

    cond: float = 100.0

    def validate(self, where: str, dims: set[str]) -> None:
        _cond(where, self.cond)

    def fits(self, where: str, core: tuple[str, ...]) -> None:
        _square(where, core, "an SPD matrix")

    def draw(self, free: Any, box: float) -> Any:
        import torch

        if free.numel() == 0:
            return free
        values, vectors = torch.linalg.eigh(_symmetric(free))
        lam = _spread(values.abs(), self.cond)
        return _symmetric((vectors * lam.unsqueeze(-2)) @ vectors.mT)


def _spread(s: Any, cond: float) -> Any:
    """``cond ** (s / max(s))`` per matrix: in ``[1, cond]``, 1 where every ``s`` is 0."""
    top = s.amax(dim=-1, keepdim=True)
    return float(cond) ** (s / top.where(top > 0, 1.0))


@dataclass(frozen=True)
class Invertible(InputSet):
    """Square matrices with singular values in ``[1, cond]``: invertible, condition number at most
    ``cond``."""

    cond: float = 100.0
    grad: bool = field(default=True, kw_only=True)

    def validate(self, where: str, dims: set[str]) -> None:
        _cond(where, self.cond)

    def fits(self, where: str, core: tuple[str, ...]) -> None:
        _square(where, core, "an invertible matrix")

    def draw(self, free: Any, box: float) -> Any:
        import torch

        if free.numel() == 0:
            return free
        u, s, vh = torch.linalg.svd(free)
        return (u * _spread(s, self.cond).unsqueeze(-2)) @ vh

    @property
    def scales(self) -> bool:
        return True


@dataclass(frozen=True)
class Orthogonal(InputSet):
    """Orthogonal matrices, ``Q.mT @ Q == I``; ``det=1``: rotations only."""

    det: int | None = None
    grad: bool = field(default=True, kw_only=True)

    def validate(self, where: str, dims: set[str]) -> None:
        if self.det not in (None, 1):
            raise ContractError(f"{where}: det is None or 1 (a rotation), got {self.det!r}")

    def fits(self, where: str, core: tuple[str, ...]) -> None:
        _square(where, core, "an orthogonal matrix")

    def draw(self, free: Any, box: float) -> Any:
        return self.project(free)

    def project(self, x: Any) -> Any:
        # QR's Q with the signs that make R's diagonal positive: unique, identity on O(n), smooth
        # near it and twice differentiable (the polar factor's SVD backward is not finite there).
        import torch

        if x.numel() == 0:
            return x
        q, r = torch.linalg.qr(x)
        d = torch.diagonal(r, dim1=-2, dim2=-1)
        q = q * torch.where(d < 0, -1.0, 1.0).to(q.dtype).unsqueeze(-2)
        if self.det == 1:
            # a reflection becomes a rotation by negating the first column
            sign = torch.ones_like(q[..., :1, :]).detach()
            sign[..., 0, 0] = torch.where(torch.linalg.det(q.detach()) < 0, -1.0, 1.0)
            q = q * sign
        return q


@dataclass(frozen=True)
class Rotation(Orthogonal):
    """Rotation matrices: orthogonal, determinant 1."""

    det: int | None = field(default=1, init=False)


@dataclass(frozen=True)
class UnitNorm(InputSet):
    """Vectors of length 1 along the last core dimension."""

    grad: bool = field(default=True, kw_only=True)

    def fits(self, where: str, core: tuple[str, ...]) -> None:
        if not core:
            raise ContractError(f"{where}: a unit vector has a core dimension, but the signature gives ()")

    def draw(self, free: Any, box: float) -> Any:
        import torch

        norm = torch.linalg.vector_norm(free, dim=-1, keepdim=True)
        e0 = torch.zeros_like(free)
        e0[..., :1] = 1.0
        return torch.where(norm > 1e-12, free / norm.clamp_min(1e-12), e0)

    def project(self, x: Any) -> Any:
        import torch

        return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)


@dataclass(frozen=True)
class Permutation(InputSet):
    """An integer tensor, along its last core dimension (named ``along``) a permutation of
    ``range(size)``; ``inverse_of``: the inverse of the permutation another input holds (by the
    forward's name for it, or its index). Never differentiated."""

    along: str
    inverse_of: str | int | None = field(default=None, kw_only=True)
    dtype: str = field(default="int64", kw_only=True)
    grad: bool = field(default=False, init=False)

    def validate(self, where: str, dims: set[str]) -> None:
        if not isinstance(self.along, str) or self.along not in dims:
            raise ContractError(f"{where}: along must name a dimension of the signature, got {self.along!r}")
        if self.dtype not in ("int64", "int32"):
            raise ContractError(f"{where}: a Permutation's dtype is int64 or int32, got {self.dtype!r}")
        if self.inverse_of is not None and (
            isinstance(self.inverse_of, bool) or not isinstance(self.inverse_of, (str, int))
        ):
            raise ContractError(f"{where}: inverse_of names another input, got {self.inverse_of!r}")

    def fits(self, where: str, core: tuple[str, ...]) -> None:
        if not core or core[-1] != self.along:
            shown = "(" + ",".join(core) + ")"
            raise ContractError(
                f"{where}: a Permutation along {self.along!r} needs it as the last core dimension, "
                f"but the signature gives {shown}"
            )

    def draw(self, free: Any, box: float) -> Any:
        import torch

        return torch.argsort(free, dim=-1, stable=True).to(getattr(torch, self.dtype))

    def inverse(self, p: Any) -> Any:
        """The inverse of the permutations ``p`` (along the last dimension)."""
        import torch

        return torch.argsort(p, dim=-1).to(getattr(torch, self.dtype))


@dataclass(frozen=True, init=False)
class Drawn(InputSet):
    """The user's own set: ``map(free)`` of free float64 values of the input's shape (deterministic,
    so that shrinking stays inside it and the fixed and edge inputs get it too), or ``strategy(shape)``,
    a hypothesis strategy of tensors of that shape (drawn inputs only: no fixed or edge inputs then).
    ``project``: a smooth map onto the set, the identity on it, where entry-by-entry perturbation
    would leave it (without one, the checks perturb each entry)."""

    map: Callable[[Any], Any] | None = None
    strategy: Callable[[tuple[int, ...]], Any] | None = field(default=None, kw_only=True)
    project_: Callable[[Any], Any] | None = field(default=None, kw_only=True, repr=False)
    grad: bool = field(default=True, kw_only=True)

    def __init__(
        self,
        map: Callable[[Any], Any] | None = None,  # noqa: A002 - the word users read
        *,
        strategy: Callable[[tuple[int, ...]], Any] | None = None,
        project: Callable[[Any], Any] | None = None,
        grad: bool = True,
    ) -> None:
        object.__setattr__(self, "map", map)
        object.__setattr__(self, "strategy", strategy)
        object.__setattr__(self, "project_", project)
        object.__setattr__(self, "grad", grad)

    def validate(self, where: str, dims: set[str]) -> None:
        if (self.map is None) == (self.strategy is None):
            raise ContractError(f"{where}: a Drawn input takes a map or a strategy (one of them)")
        for what, fn in (("map", self.map), ("strategy", self.strategy), ("project", self.project_)):
            if fn is not None and not callable(fn):
                raise ContractError(f"{where}: {what} must be callable, got {fn!r}")

    def draw(self, free: Any, box: float) -> Any:
        if self.map is None:
            raise ValueError("this input is drawn by a strategy only")
        return self.map(free)

    def project(self, x: Any) -> Any:
        return x if self.project_ is None else self.project_(x)

    @property
    def projects(self) -> bool:
        return self.project_ is not None
