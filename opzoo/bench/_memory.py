"""Bytes an op saves for backward, measured with ``torch.autograd.graph.saved_tensors_hooks``."""

from __future__ import annotations

from typing import Callable

import torch


def saved_bytes(fn: Callable[[torch.Tensor], torch.Tensor], x: torch.Tensor) -> int:
    """Return the bytes ``fn(x)`` keeps for backward; storage shared with the output counts as free
    (the next layer keeps the output anyway), and storage saved twice counts once."""
    x = x.detach().requires_grad_()
    saved: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = fn(x)
    free = {y.untyped_storage().data_ptr()}
    total = 0
    for t in saved:
        ptr = t.untyped_storage().data_ptr()
        if ptr not in free:
            free.add(ptr)
            total += t.untyped_storage().nbytes()
    return total
