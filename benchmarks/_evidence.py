"""The real-world record's evidence registry: each plain-torch reproduction registers under the key a
cause of ``real_world.CAUSES`` names, with ``@evidence(key)``; benchmarks/real_world_evidence.py and
real_world_evidence_inputs.py both add to ``EVIDENCE``, and the first runs them all."""

from __future__ import annotations

from typing import Callable

import torch

F64 = torch.float64
Evidence = Callable[[], "tuple[bool, list[str]]"]
EVIDENCE: dict[str, Evidence] = {}


def evidence(key: str) -> Callable[[Evidence], Evidence]:
    def add(fn: Evidence) -> Evidence:
        EVIDENCE[key] = fn
        return fn

    return add
