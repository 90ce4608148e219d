"""`opzoo bench`: side-by-side measurements against the native ops."""

from __future__ import annotations

import argparse
import json
from typing import Any

from opzoo.cli._common import EXIT_OK, print_json, registry_from
from opzoo.exceptions import ConfigError

_SECTIONS = ("ops", "memory", "trainer", "startup")
#: Measured only when asked for (--compile): each op compiles twice per size, minutes in all.
_ON_REQUEST = ("compiled",)


def add_bench(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser(
        "bench",
        help="measure ops against their native references, the trainer, and start-up",
        description="Measure, side by side in one process: forward+backward time of each op vs its "
        "reference (6,400, 1M and 16M float32 elements), bytes saved for backward, the trainer's "
        "time per step vs a hand-written loop, and start-up time. Prints ratios; asserts nothing.",
    )
    p.add_argument("names", nargs="*", metavar="NAME", help="ops to measure (default: all)")
    p.add_argument(
        "--section",
        action="append",
        choices=_SECTIONS + _ON_REQUEST,
        help="measure only these (repeatable; default: all but compiled)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="measure each elementwise op compiled as its torch.library form vs the native op, "
        "compiled and eager, with the compile time (6,400 and 1M elements; same as --section compiled)",
    )
    p.add_argument("--compile-backend", default="inductor", help="torch.compile backend (default inductor)")
    p.add_argument("--sizes", metavar="N,N,...", help="element counts for op speed")
    p.add_argument("--repeat", type=int, default=None, help="timed repetitions per measurement")
    p.add_argument(
        "--threads",
        type=int,
        default=None,
        help="torch.set_num_threads(N) first, N at most the CPUs this process may use (on a shared "
        "machine, 1 keeps OpenMP from waiting on neighbours; default: torch's)",
    )
    p.add_argument("--quick", action="store_true", help="tiny sizes and few repeats: a smoke test")
    p.add_argument("--json", action="store_true", help="print JSON")
    return p


def run_bench(args: argparse.Namespace) -> int:
    sizes = _parse_sizes(args.sizes) if args.sizes else None
    if args.repeat is not None and args.repeat <= 0:
        raise ConfigError(f"--repeat must be a positive integer, got {args.repeat}")
    if args.threads is not None:
        _check_threads(args.threads)
    sections = list(args.section or ([] if args.compile else _SECTIONS))
    if args.compile and "compiled" not in sections:
        sections.append("compiled")
    from opzoo.trainer._preflight import check_compile_backend

    if "compiled" in sections:
        check_compile_backend(args.compile_backend)  # before any op is measured, not after
    elif args.compile_backend != "inductor":
        raise ConfigError(f"--compile-backend {args.compile_backend!r} is taken with --compile only")
    if sizes is not None:
        _check_room(sizes)
    reg = registry_from(args)
    import torch

    if args.threads is not None:
        torch.set_num_threads(args.threads)
    rows = _measure(args, reg, sections, sizes)
    from opzoo.bench._bench import machine

    if args.json:
        print_json(args, json.dumps({"machine": machine(), "rows": [r.to_dict() for r in rows]}, indent=2))
        return EXIT_OK
    _print_rows(rows, machine())
    return EXIT_OK


def _measure(args: argparse.Namespace, reg: Any, sections: list[str], sizes: list[int] | None) -> list[Any]:
    """The rows of every section asked for, in the order of the table."""
    import torch

    from opzoo.bench import _compiled, _ops, _programs

    specs = [reg.info(n) for n in args.names] if args.names else sorted(reg.load_all(), key=lambda s: s.name)
    repeat = args.repeat or (3 if args.quick else 21)
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    quick = _ops.QUICK_SIZES if args.quick else None
    rows = []
    if "ops" in sections:
        rows += _ops.bench_ops(specs, sizes or list(quick or _ops.SIZES), repeat=repeat, devices=devices)
    if "compiled" in sections:
        compile_sizes = sizes or list(quick or _compiled.COMPILE_SIZES)
        rows += _compiled.bench_compiled(
            specs, compile_sizes, repeat=repeat, devices=devices, backend=args.compile_backend
        )
    if "memory" in sections:
        rows += _ops.bench_memory(specs, n=1_000 if args.quick else 100_000)
    if "trainer" in sections:
        steps = 20 if args.quick else 500
        rows += _programs.bench_trainer(reg, steps=steps, repeat=max(3, repeat // 4), quick=args.quick)
    if "startup" in sections:
        rows += _programs.bench_startup(repeat=3 if args.quick else 7)
    return rows


def _print_rows(rows: list[Any], m: dict[str, Any]) -> None:
    from opzoo._table import text_table

    table = [
        (
            r.section,
            r.name,
            r.detail,
            f"{r.ours:.4g} {r.unit}",
            f"{r.baseline:.4g} {r.unit}",
            f"{r.ratio:.2f}x",
        )
        for r in rows
    ]
    print(
        text_table(("SECTION", "NAME", "SIZE / WHAT", "OPZOO", "BASELINE", "RATIO"), table, wrap_last=False)
    )
    print(f"\nmeasured on {m['cpu']}, {m['cores']} cores, torch {m['torch']} ({m['torch_threads']} threads)")


def _check_threads(threads: int) -> None:
    """Refuse more threads than the CPUs this process may use: refused rather than lowered, as the
    numbers would be a configuration nobody asked for; more threads than CPUs measures the waits of
    oversubscription, not the op (and 100,000 made OpenMP abort, a segfault)."""
    from opzoo.testing.running._parallel import usable_cpus

    cpus = usable_cpus()
    if not 0 < threads <= cpus:
        raise ConfigError(
            f"--threads must be from 1 to {cpus} (the CPUs this process may use), got {threads}"
        )


def _parse_sizes(text: str) -> list[int]:
    """``--sizes``: comma-separated element counts, integers (``1_000_000`` or ``1e6`` alike)."""
    sizes = []
    for part in text.split(","):
        try:
            value = float(part.replace("_", ""))
        except ValueError:
            raise ConfigError(f"--sizes takes comma-separated integers, got {text!r}") from None
        if not (value.is_integer() and value > 0):
            raise ConfigError(f"--sizes takes positive integers, got {part.strip()!r}")
        sizes.append(int(value))
    return sizes


#: float32 tensors of n elements an op's measurement holds at once: input, incoming gradient,
#: output, input gradient, what backward saves, and the reference's own.
_TENSORS_PER_SIZE = 6


def _check_room(sizes: list[int]) -> None:
    """Refuse a size whose tensors cannot fit in memory, with the figure (1e14 elements: 2.1 PiB)."""
    import torch

    from opzoo._host import _bytes, memory_available

    n = max(sizes)
    needed, free = n * 4 * _TENSORS_PER_SIZE, memory_available(torch.device("cpu"))
    if free is not None and needed > free:
        raise ConfigError(
            f"--sizes {n}: its float32 tensors need about {_bytes(needed)} of memory, but cpu has "
            f"{_bytes(free)} available"
        )
