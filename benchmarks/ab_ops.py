#!/usr/bin/env python3
"""Time the built-in ops of this working tree against the same ops at another commit, interleaved.

    .venv/bin/python benchmarks/ab_ops.py --base REV [--sizes 6400,1000000] [--rounds 3] [NAME ...]

The old ``opzoo/ops/`` is read from git (``git show REV:...``) into a temporary package beside the
new one, so both run in one process, on the same inputs, alternately (A, B, A, B, after a warm-up;
medians, as ``opzoo bench`` does): a noisy neighbour slows both alike. Each round times, per op and
size, forward+backward (the path ``opzoo bench`` measures: backward's fast path), forward+double
backward (the composite backward) and a forward-mode jvp. It prints new / old ratios, one column per
round, so that the spread between rounds shows the noise. Asserts nothing.
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable

import torch
from torch.autograd import forward_ad

import opzoo
from opzoo._bench import paired_medians

ROOT = Path(__file__).resolve().parent.parent
OLD = "_ab_old_ops"


def load_old(rev: str, into: Path) -> None:
    """Write ``opzoo/ops/*.py`` at ``rev`` into ``into/OLD``, importing each other from there."""
    names = subprocess.run(
        ["git", "ls-tree", "--name-only", f"{rev}:opzoo/ops"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    pkg = into / OLD
    pkg.mkdir()
    for name in names:
        if name.endswith(".py"):
            text = subprocess.run(
                ["git", "show", f"{rev}:opzoo/ops/{name}"],
                cwd=ROOT,
                check=True,
                capture_output=True,
                text=True,
            ).stdout
            (pkg / name).write_text(text.replace("opzoo.ops.", f"{OLD}."))
    sys.path.insert(0, str(into))


def old_class(target: type) -> type:
    module = importlib.import_module(target.__module__.replace("opzoo.ops", OLD, 1))
    return getattr(module, target.__qualname__)


def cases(fn: Callable[..., Any], x: torch.Tensor, g: torch.Tensor) -> dict[str, Callable[[], Any]]:
    """The three ways to differentiate ``fn`` at ``x``, each a call to time."""

    def fwd_bwd() -> Any:
        return torch.autograd.grad(fn(x), x, g)

    gg = g.clone().requires_grad_()  # so that a slope constant in x still has a second derivative

    def double() -> Any:
        (gx,) = torch.autograd.grad(fn(x), x, gg, create_graph=True)
        return torch.autograd.grad(gx, (x, gg), g, allow_unused=True)

    def jvp() -> Any:
        with forward_ad.dual_level():
            return forward_ad.unpack_dual(fn(forward_ad.make_dual(x.detach(), g))).tangent

    return {"fwd+bwd": fwd_bwd, "double bwd": double, "jvp": jvp}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", metavar="NAME", help="ops (default: every elementwise built-in)")
    parser.add_argument("--base", required=True, help="the commit whose ops are the old side")
    parser.add_argument("--sizes", default="6400,1000000")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeat", type=int, default=41)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--what", default="fwd+bwd,double bwd,jvp")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    registry = opzoo.load(autoload=False)
    names = args.names or [
        n
        for n in registry.names()
        if registry.info(n).kind == "function" and registry.info(n).contract.sig.elementwise
    ]
    whats = args.what.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        load_old(args.base, Path(tmp))
        rows: dict[tuple[str, str, int], list[float]] = {}
        for _ in range(args.rounds):
            for n in map(int, args.sizes.split(",")):
                gen = torch.Generator().manual_seed(n)
                x = torch.randn(n, generator=gen).requires_grad_()
                g = torch.randn(n, generator=gen)
                for name in names:
                    spec = registry.info(name)
                    params = tuple(spec.contract.defaults().values())
                    new, old = spec.target, old_class(spec.target)
                    a = cases(lambda t, f=new: f.apply(t, *params), x, g)
                    b = cases(lambda t, f=old: f.apply(t, *params), x, g)
                    for what in whats:
                        reps = args.repeat if n < 5_000_000 else max(3, args.repeat // 4)
                        t_new, t_old = paired_medians(a[what], b[what], repeat=reps, min_time=0.05)
                        rows.setdefault((name, what, n), []).append(t_new / t_old)
                        if len(rows[(name, what, n)]) == 1:
                            rows[(name, what, n)].insert(0, t_old * 1e6)
                print(f"# round done: {n:,}", file=sys.stderr, flush=True)
    print(f"new (this tree) / old ({args.base}), {args.threads} thread(s), {args.rounds} rounds\n")
    print(
        "| op | what | size | old, round 1 | "
        + " | ".join(f"round {i + 1}" for i in range(args.rounds))
        + " |"
    )
    print("|---|---|---|---|" + "---|" * args.rounds)
    for (name, what, n), (old_us, *ratios) in sorted(
        rows.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])
    ):
        cells = " | ".join(f"{r:.2f}x" for r in ratios)
        print(f"| {name} | {what} | {n:,} | {old_us:.4g} us | {cells} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
