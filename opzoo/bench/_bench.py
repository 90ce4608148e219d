"""``opzoo bench``: speed and memory of registered ops against their native references, the
trainer against a hand-written loop, and start-up time, each measured side by side in one run.

This module holds how a pair is measured and recorded (:class:`Row`, :func:`paired_medians`) and
where (:func:`machine`); the measurements are its siblings': ``_ops`` (op speed and saved memory),
``_compiled`` (ops under torch.compile), ``_programs`` (the trainer, start-up).

Timings alternate between the two sides of each ratio (A, B, A, B, ...) after a warm-up, and report
medians, so that a noisy neighbour slows both sides alike. No threshold is asserted here: the ratios
are printed and recorded in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from opzoo.core._registry import OpSpec


@dataclass
class Row:
    """One side-by-side measurement: ours vs the baseline, and their ratio."""

    section: str
    name: str
    detail: str
    ours: float
    baseline: float
    unit: str
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.ours / self.baseline if self.baseline else float("inf") if self.ours else 1.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "section": self.section,
            "name": self.name,
            "detail": self.detail,
            "ours": self.ours,
            "baseline": self.baseline,
            "unit": self.unit,
            "ratio": self.ratio,
            **self.extra,
        }


def paired_medians(
    a: Callable[[], Any], b: Callable[[], Any], *, repeat: int, warmup: int = 3, min_time: float = 0.0
) -> tuple[float, float]:
    """Time ``a`` and ``b`` alternately; return their median seconds per call."""
    for _ in range(warmup):
        a()
        b()
    ta: list[float] = []
    tb: list[float] = []
    began = time.perf_counter()
    while len(ta) < repeat or time.perf_counter() - began < min_time:
        for fn, out in ((a, ta), (b, tb)):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        if len(ta) >= 10 * repeat:
            break
    return statistics.median(ta), statistics.median(tb)


def fwd_bwd(
    fn: Callable[..., Any], xs: Sequence[torch.Tensor], gs: Sequence[torch.Tensor]
) -> Callable[[], Any]:
    """One forward and backward of ``fn`` on ``xs``, with incoming gradients ``gs``, as a call."""

    def run() -> Any:
        out = fn(*xs)
        return torch.autograd.grad(out if isinstance(out, tuple) else (out,), xs, gs)

    return run


def synced(device: torch.device) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """A wrapper that makes a call on ``device`` wait for its kernels (a CUDA call returns first)."""

    def wrap(fn: Callable[[], Any]) -> Callable[[], Any]:
        if device.type != "cuda":
            return fn

        def run() -> Any:
            out = fn()
            torch.cuda.synchronize()
            return out

        return run

    return wrap


def with_reference(specs: Sequence[OpSpec]) -> list[OpSpec]:
    """The ops that declare a reference to be measured against. Not surrogate ops: their reference
    is a forward only (torch.heaviside has no backward at all), so forward+backward has no peer."""
    return [s for s in specs if s.contract.reference is not None and s.contract.surrogate is None]


def machine() -> dict[str, Any]:
    """Describe where the numbers were measured."""
    import os
    import platform

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cuda": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
    }
