"""What bridging a classic forward(ctx, ...) Function costs in eager mode: its setup_context runs
forward again (docs/library.md, "Classic Functions"; the record: docs/records/library.md).

One swish, written twice: classic (forward saves x and sigmoid(x)) and setup_context form
(setup_context computes sigmoid(x) again, as that form must). Forward+backward in float32 on one
thread, through ``Function.apply`` and through ``torch.ops.opzoo``, alternated after a warm-up;
medians of the per-call time. Prints a markdown table for docs/records/library.md.

    .venv/bin/python benchmarks/classic_bridge.py
"""

from __future__ import annotations

import statistics
import time

import torch

import opzoo
from opzoo import library


class SwishClassic(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        s = torch.sigmoid(x)
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, grad):
        x, s = ctx.saved_tensors
        return grad * s * (1 + x * (1 - s))  # d/dx x sigmoid(x) = s (1 + x (1 - s))


class SwishSetupContext(torch.autograd.Function):
    @staticmethod
    def forward(x):
        return x * torch.sigmoid(x)

    @staticmethod
    def setup_context(ctx, inputs, output):
        (x,) = inputs
        ctx.save_for_backward(x, torch.sigmoid(x))

    backward = SwishClassic.backward


def per_call(fn, x: torch.Tensor, g: torch.Tensor, reps: int) -> float:
    start = time.perf_counter()
    for _ in range(reps):
        torch.autograd.grad(fn(x), x, g)
    return (time.perf_counter() - start) / reps


def main() -> None:
    torch.set_num_threads(1)
    reg = opzoo.Registry()
    reg.register(SwishClassic, name="bench_swish_classic")
    reg.register(SwishSetupContext, name="bench_swish_setup_context")
    ways = {
        "classic, apply": SwishClassic.apply,
        "classic, bridged": library.op("bench_swish_classic", registry=reg),
        "setup_context, apply": SwishSetupContext.apply,
        "setup_context, bridged": library.op("bench_swish_setup_context", registry=reg),
    }
    print("| elements | " + " | ".join(ways) + " |")
    print("| --- " * (len(ways) + 1) + "|")
    for n, reps in ((6_400, 200), (1_000_000, 10)):
        gen = torch.Generator().manual_seed(0)
        x = torch.randn(n, generator=gen).requires_grad_()
        g = torch.randn(n, generator=gen)
        times: dict[str, list[float]] = {k: [] for k in ways}
        for fn in ways.values():
            per_call(fn, x, g, 3)  # warm-up
        for _ in range(9):
            for name, fn in ways.items():
                times[name].append(per_call(fn, x, g, reps))
        cells = [f"{statistics.median(t) * 1e6:,.0f} us" for t in times.values()]
        print(f"| {n:,} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
