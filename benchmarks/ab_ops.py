#!/usr/bin/env python3
"""Time the built-in ops of this working tree against the same ops at another commit, interleaved.

    .venv/bin/python benchmarks/ab_ops.py --base REV [--sizes 6400,1000000] [--rounds 3] [NAME ...]

The old ``opzoo/ops/`` is read from git (``git show REV:...``) into a temporary package beside the
new one, so that both run in one process on the same inputs, interleaved after a warm-up (medians):
a noisy neighbour slows both alike. Each round times, per op and size, forward+backward (what
``opzoo bench`` measures: backward's fast path), forward and double backward (the composite backward)
and a forward-mode jvp, on float32 inputs of about that many elements (shaped as ``opzoo bench``
shapes them for an op that is not elementwise). It prints new / old, one column per round, so that
the spread between rounds shows the noise. Asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from torch.autograd import forward_ad

import opzoo
from opzoo.bench._ops import general_shapes

ROOT = Path(__file__).resolve().parent.parent
OLD = "_ab_old_ops"
WHATS = ("fwd+bwd", "double bwd", "jvp")


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout


def load_old(rev: str, into: Path) -> None:
    """Write ``opzoo/ops/*.py`` at ``rev`` into ``into/OLD``, importing each other from there."""
    pkg = into / OLD
    pkg.mkdir()
    for name in git("ls-tree", "--name-only", f"{rev}:opzoo/ops").split():
        if name.endswith(".py"):
            (pkg / name).write_text(git("show", f"{rev}:opzoo/ops/{name}").replace("opzoo.ops.", f"{OLD}."))
    sys.path.insert(0, str(into))


def old_class(target: type) -> type:
    module = importlib.import_module(target.__module__.replace("opzoo.ops", OLD, 1))
    return getattr(module, target.__qualname__)


def paired(
    a: Callable[[], Any], b: Callable[[], Any], *, repeat: int, warmup: int = 3
) -> tuple[float, float]:
    """Median seconds per call of ``a`` and ``b``, timed in the order A B B A A B ...: whichever runs
    second in a pair finds the allocator and the caches as the first left them, an edge (about 1%
    at 6,400 elements here, in an A/A run) that must fall on both sides alike."""
    for _ in range(warmup):
        a()
        b()
    times: dict[Any, list[float]] = {a: [], b: []}
    for i in range(2 * repeat):
        for fn in (a, b) if i % 2 == 0 else (b, a):
            t0 = time.perf_counter()
            fn()
            times[fn].append(time.perf_counter() - t0)
    return statistics.median(times[a]), statistics.median(times[b])


def cases(fn: Callable[..., Any], xs: Sequence[torch.Tensor]) -> dict[str, Callable[[], Any]]:
    """The three ways to differentiate ``fn`` at ``xs``, each a call to time."""
    gen = torch.Generator().manual_seed(1)
    outs = fn(*xs)
    g = torch.randn(outs.shape, generator=gen)
    gg = g.clone().requires_grad_()  # so that a slope constant in x still has a second derivative
    vs = [torch.randn(x.shape, generator=gen) for x in xs]

    def fwd_bwd() -> Any:
        return torch.autograd.grad(fn(*xs), xs, g)

    def double() -> Any:
        firsts = torch.autograd.grad(fn(*xs), xs, gg, create_graph=True)
        return torch.autograd.grad(firsts, (*xs, gg), [torch.ones_like(f) for f in firsts], allow_unused=True)

    def jvp() -> Any:
        with forward_ad.dual_level():
            duals = [forward_ad.make_dual(x.detach(), v) for x, v in zip(xs, vs)]
            return forward_ad.unpack_dual(fn(*duals)).tangent

    return dict(zip(WHATS, (fwd_bwd, double, jvp)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="ops (default: every built-in Function)")
    parser.add_argument("--base", required=True, help="the commit whose ops are the old side")
    parser.add_argument("--sizes", default="6400,1000000", help="elements per op (comma-separated)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=41, help="timed pairs per measurement")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: neighbours wait less)")
    parser.add_argument("--what", default=",".join(WHATS), help=f"some of {', '.join(WHATS)}")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    registry = opzoo.load(autoload=False)
    names = args.names or [n for n in registry.names() if registry.info(n).kind == "function"]
    whats = args.what.split(",")
    rows: dict[tuple[str, str, int], list[float]] = {}
    old_us: dict[tuple[str, str, int], float] = {}
    with tempfile.TemporaryDirectory() as tmp:
        load_old(args.base, Path(tmp))
        for _ in range(args.rounds):
            for n in map(int, args.sizes.split(",")):
                gen = torch.Generator().manual_seed(n)
                for name in names:
                    spec = registry.info(name)
                    params = tuple(spec.contract.defaults().values())
                    shapes = [(n,)] if spec.contract.sig.elementwise else general_shapes(spec, n)
                    xs = [torch.randn(s, generator=gen).requires_grad_() for s in shapes]
                    new, old = spec.target, old_class(spec.target)
                    a = cases(lambda *ts, f=new: f.apply(*ts, *params), xs)
                    b = cases(lambda *ts, f=old: f.apply(*ts, *params), xs)
                    for what in whats:
                        t_new, t_old = paired(a[what], b[what], repeat=args.repeat)
                        rows.setdefault((name, what, n), []).append(t_new / t_old)
                        old_us.setdefault((name, what, n), t_old * 1e6)
                print(f"# a round at {n:,} elements done", file=sys.stderr, flush=True)
    print(f"new (this tree) / old ({args.base}), {args.threads} thread(s), {args.rounds} rounds\n")
    print(
        "| op | what | elements | old, round 1 | " + " | ".join(f"round {i + 1}" for i in range(args.rounds))
    )
    print("|---|---|---|---|" + "---|" * args.rounds)
    for (name, what, n), ratios in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        cells = " | ".join(f"{r:.2f}x" for r in ratios)
        print(f"| {name} | {what} | {n:,} | {old_us[(name, what, n)]:.4g} us | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
