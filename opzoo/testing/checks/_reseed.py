"""The seed a random op's every call runs under (``Contract(random=True)``), and the block that applies it.

Apart from :mod:`._bound` (which calls the op under it) so that the checks that call a reference or a
compiled op the same way import it from one place. Torch: yes.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import torch

__all__ = ["SEED", "reseeded"]

#: The seed every call of a random op runs under (``Contract(random=True)``).
SEED = 20260


@contextlib.contextmanager
def reseeded(tensors: Sequence[Any], seed: int = SEED) -> Iterator[None]:
    """torch's generators (the CPU's, and those of the GPUs ``tensors`` are on) forked and seeded to
    ``seed`` in the block: a random forward draws the same numbers at every call."""
    devices = sorted({t.get_device() for t in tensors if isinstance(t, torch.Tensor) and t.is_cuda})
    with torch.random.fork_rng(devices=devices):
        torch.default_generator.manual_seed(seed)  # not torch.manual_seed: 1.5 ms (see _repeatable)
        for d in devices:
            torch.cuda.default_generators[d].manual_seed(seed)
        yield
