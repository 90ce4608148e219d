"""gufunc signatures: how many tensors an op takes and returns, and their core shapes.

NumPy's generalized-ufunc syntax: one parenthesised core shape per input, ``->``, one per output;
``()`` is a scalar core and several outputs are comma-separated. ``"(n,k),(k,m)->(n,m)"`` is a matrix
product, ``"(n)->()"`` a reduction over the last dimension, ``"()->(),()"`` an elementwise op with
two outputs. Dimensions are names (sizes that must agree wherever the name appears) or fixed sizes
(``"(3),(3)->(3)"``). Leading loop dimensions broadcast as in NumPy.

Nothing here imports torch: parsing a signature is part of validating a contract at load.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

from opzoo.exceptions import ContractError

ELEMENTWISE = "()->()"
_DIM = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*|\d+)\s*")


class ShapeError(ValueError):
    """Tensor shapes that do not fit a signature."""


@dataclass(frozen=True)
class Signature:
    """A parsed gufunc signature: the core dimensions of each input and each output."""

    inputs: tuple[tuple[str, ...], ...]
    outputs: tuple[tuple[str, ...], ...]

    @classmethod
    def parse(cls, text: str, computed: Iterable[str] = ()) -> Signature:
        """Parse ``text``; raise :class:`ContractError` saying where it is malformed. ``computed``
        names the output dimensions whose sizes a contract computes (they appear in no input)."""
        if cls is Signature and isinstance(text, str):
            return _parse(text, tuple(computed))  # contract.sig is read hundreds of times per check
        return cls._parse(text, tuple(computed))

    @classmethod
    def _parse(cls, text: str, computed: tuple[str, ...] = ()) -> Signature:
        if not isinstance(text, str):
            raise ContractError(f"signature must be a string like '(n,k),(k,m)->(n,m)', got {text!r}")
        left, arrow, right = text.partition("->")
        if not arrow:
            raise ContractError(f"signature {text!r} has no '->' between inputs and outputs")
        inputs = _cores(text, left, 0)
        outputs = _cores(text, right, len(left) + 2)
        for core in outputs:
            for dim in core:
                if not dim.isdigit() and not any(dim in c for c in inputs) and dim not in computed:
                    raise ContractError(
                        f"signature {text!r}: output dimension {dim!r} appears in no input, so its size "
                        "cannot be known (declare how to compute it: output_sizes=)"
                    )
        return cls(inputs, outputs)

    @property
    def elementwise(self) -> bool:
        """One tensor in, one out, both scalar cores: the op acts on each element alone."""
        return self.inputs == ((),) and self.outputs == ((),)

    def __str__(self) -> str:
        def side(cores: tuple[tuple[str, ...], ...]) -> str:
            return ",".join("(" + ",".join(c) + ")" for c in cores)

        return f"{side(self.inputs)}->{side(self.outputs)}"

    def input_signature(self) -> str:
        """The inputs with one scalar output: the form hypothesis's shape strategy accepts."""
        return str(Signature(self.inputs, ((),)))

    def dims(self, shapes: Sequence[Sequence[int]]) -> dict[str, int]:
        """The size of each named core dimension for input ``shapes``; :class:`ShapeError` if they
        do not fit."""
        return self._fit(shapes)[0]

    def output_shapes(
        self, shapes: Sequence[Sequence[int]], computed: Mapping[str, int] | None = None
    ) -> list[tuple[int, ...]]:
        """The output shapes for input ``shapes`` (``computed``: the sizes of output dimensions that
        appear in no input); :class:`ShapeError` if they do not fit."""
        sizes, loop = self._fit(shapes)
        sizes = sizes | dict(computed or {})
        return [loop + tuple(int(d) if d.isdigit() else sizes[d] for d in core) for core in self.outputs]

    def _fit(self, shapes: Sequence[Sequence[int]]) -> tuple[dict[str, int], tuple[int, ...]]:
        # Asked at every call of an op through a check (Bound.outputs: some 17 calls per example of
        # double_backward, 4 % of its time worked out afresh): once per signature and shapes.
        try:
            sizes, loop = _fitted(self, tuple(map(tuple, shapes)))
        except TypeError:  # a symbolic size, not hashable
            sizes, loop = _fit(self, shapes)
        return dict(sizes), loop

    def loop_shape(self, shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
        """The broadcast loop dimensions of input ``shapes``."""
        return broadcast([tuple(s)[: len(s) - len(c)] for s, c in zip(shapes, self.inputs)])


def broadcast(shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """NumPy's broadcast of ``shapes``; :class:`ShapeError` if they do not broadcast."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for axis in range(-ndim, 0):
        sizes = {s[axis] for s in shapes if len(s) >= -axis} - {1}
        if len(sizes) > 1:
            raise ShapeError(f"loop dimensions {', '.join(map(str, shapes))} do not broadcast")
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


@functools.lru_cache(maxsize=256)
def _parse(text: str, computed: tuple[str, ...]) -> Signature:
    return Signature._parse(text, computed)


def _fit(sig: Signature, shapes: Sequence[Sequence[int]]) -> tuple[dict[str, int], tuple[int, ...]]:
    """The size of each named core dimension of input ``shapes`` and their broadcast loop
    dimensions; :class:`ShapeError` if they do not fit ``sig``."""
    if len(shapes) != len(sig.inputs):
        raise ShapeError(f"{len(shapes)} input(s) given, the signature {sig} takes {len(sig.inputs)}")
    sizes: dict[str, int] = {}
    loops = []
    for i, (shape, core) in enumerate(zip(shapes, sig.inputs)):
        shape = tuple(int(s) for s in shape)
        if len(shape) < len(core):
            raise ShapeError(
                f"input {i} has shape {shape}, fewer dimensions than its core ({','.join(core)})"
            )
        split = len(shape) - len(core)
        loops.append(shape[:split])
        for dim, size in zip(core, shape[split:]):
            want = int(dim) if dim.isdigit() else sizes.setdefault(dim, size)
            if size != want:
                raise ShapeError(f"input {i} has shape {shape}: dimension {dim!r} is {size}, not {want}")
    return sizes, broadcast(loops)


#: :func:`_fit` once per signature and shapes (a misfit is not kept: it raises again each time).
_fitted = functools.lru_cache(maxsize=4096)(_fit)


def _cores(text: str, part: str, offset: int) -> tuple[tuple[str, ...], ...]:
    """The parenthesised groups of one side of the arrow, each a tuple of dimension names."""
    cores = []
    pos = 0
    while True:
        while pos < len(part) and part[pos].isspace():
            pos += 1
        if pos >= len(part) or part[pos] != "(":
            raise ContractError(f"signature {text!r}: expected '(' at position {offset + pos}")
        close = part.find(")", pos)
        if close < 0:
            raise ContractError(f"signature {text!r}: '(' at position {offset + pos} is never closed")
        inner = part[pos + 1 : close]
        dims: tuple[str, ...] = ()
        if inner.strip():
            names = inner.split(",")
            for k, name in enumerate(names):
                m = _DIM.fullmatch(name)
                if not m:
                    where = offset + pos + 1 + sum(len(n) + 1 for n in names[:k])
                    raise ContractError(
                        f"signature {text!r}: {name.strip()!r} at position {where} is not a dimension "
                        "name or size"
                    )
            dims = tuple(_DIM.fullmatch(n).group(1) for n in names)  # type: ignore[union-attr]
        cores.append(dims)
        pos = close + 1
        while pos < len(part) and part[pos].isspace():
            pos += 1
        if pos == len(part):
            return tuple(cores)
        if part[pos] != ",":
            raise ContractError(f"signature {text!r}: expected ',' or the end at position {offset + pos}")
        pos += 1
