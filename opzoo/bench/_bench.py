"""``opzoo bench``: speed and memory of registered ops against their native references, the
trainer against a hand-written loop, and start-up time, each measured side by side in one run.

Timings alternate between the two sides of each ratio (A, B, A, B, ...) after a warm-up, and report
medians, so that a noisy neighbour slows both sides alike. No threshold is asserted here: the ratios
are printed and recorded in benchmarks/RESULTS.md.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch

from opzoo.bench._memory import saved_bytes
from opzoo.core._registry import OpSpec, Registry
from opzoo.core._signature import Signature

SIZES = (6_400, 1_000_000, 16_000_000)
QUICK_SIZES = (64, 4_096)


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


def _fwd_bwd(
    fn: Callable[..., Any], xs: Sequence[torch.Tensor], gs: Sequence[torch.Tensor]
) -> Callable[[], Any]:
    def run() -> Any:
        out = fn(*xs)
        return torch.autograd.grad(out if isinstance(out, tuple) else (out,), xs, gs)

    return run


def general_shapes(spec: OpSpec, n: int) -> list[tuple[int, ...]]:
    """Input shapes of about ``n`` elements for a non-elementwise op: square cores for a matrix
    signature (``linear`` at 1M: 1000x1000 @ 1000x1000), rows of 100 (1,000 from 100k on) for a
    signature over one dimension."""
    sig = spec.contract.sig
    rank = max(len(core) for core in sig.inputs)
    if rank == 1:
        last = 100 if n < 100_000 else 1000
        sizes, loop = dict.fromkeys((d for c in sig.inputs for d in c), last), (max(1, n // last),)
    else:
        side = max(1, round(n ** (1 / rank)))
        sizes, loop = dict.fromkeys((d for c in sig.inputs for d in c), side), ()
    return [
        (loop if len(core) < rank or rank == 1 else ())
        + tuple(int(d) if d.isdigit() else sizes[d] for d in core)
        for core in sig.inputs
    ]


#: The seed network's N, D_in, H and D_out.
SEED_N, SEED_D_IN, SEED_H, SEED_D_OUT = 64, 1000, 100, 10
#: The size whose rows are the seed's: its hidden activation has 64 x 100 elements.
SEED_SIZE = SEED_N * SEED_H


def seed_shapes(spec: OpSpec) -> list[list[tuple[int, ...]]] | None:
    """Where the seed's network uses an op of ``spec``'s kind, the input shapes it uses: a linear
    layer's two (64x1000 @ 1000x100, then 64x100 @ 100x10), the loss's 64x10 pair; else None."""
    from opzoo.trainer._network import LINEAR_SIGNATURE, LOSS_SIGNATURE, canonical

    kind = canonical(spec.contract.sig)
    if kind == canonical(Signature.parse(LINEAR_SIGNATURE)):
        return [[(SEED_N, SEED_D_IN), (SEED_D_IN, SEED_H)], [(SEED_N, SEED_H), (SEED_H, SEED_D_OUT)]]
    if kind == canonical(Signature.parse(LOSS_SIGNATURE)):
        return [[(SEED_N, SEED_D_OUT), (SEED_N, SEED_D_OUT)]]
    return None


def _sync(device: torch.device) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    def wrap(fn: Callable[[], Any]) -> Callable[[], Any]:
        if device.type != "cuda":
            return fn

        def synced() -> Any:
            out = fn()
            torch.cuda.synchronize()
            return out

        return synced

    return wrap


def bench_ops(
    specs: Sequence[OpSpec], sizes: Sequence[int], *, repeat: int, devices: Sequence[str]
) -> list[Row]:
    """Forward+backward time of each op vs its reference, per size and device (float32).

    Elementwise ops all take the same input of ``n`` elements; an op with another signature gets
    inputs of about ``n`` elements shaped by it (up to 1M: a 16M-element matrix product would
    measure the BLAS, not the op).
    """
    rows = []
    for device_name in devices:
        device = torch.device(device_name)
        sync = _sync(device)
        for n in sizes:
            gen = torch.Generator().manual_seed(n)
            x = torch.randn(n, generator=gen).to(device).requires_grad_()
            g = torch.randn(n, generator=gen).to(device)
            for spec in _with_reference(specs):
                if spec.contract.sig.elementwise:
                    cases = [([x], f"{n:,} {device_name}")]
                elif n <= 1_000_000:
                    # at the seed's size, the seed's own shapes where it has this kind of op
                    shaped = (n == SEED_SIZE and seed_shapes(spec)) or [general_shapes(spec, n)]
                    cases = [
                        (
                            [torch.randn(s, generator=gen).to(device).requires_grad_() for s in shapes],
                            f"{', '.join('x'.join(map(str, s)) for s in shapes)} {device_name}",
                        )
                        for shapes in shaped
                    ]
                else:
                    continue
                for xs, detail in cases:
                    rows.append(_time_op(spec, xs, detail, n, gen, g, repeat, sync))
    return rows


def _time_op(
    spec: OpSpec,
    xs: list[torch.Tensor],
    detail: str,
    n: int,
    gen: torch.Generator,
    g: torch.Tensor,
    repeat: int,
    sync: Callable[[Callable[[], Any]], Callable[[], Any]],
) -> Row:
    """One row: forward+backward of ``spec`` on ``xs`` against its reference, side by side."""
    device = xs[0].device
    params = spec.contract.defaults()
    outs = spec.apply(*xs)
    outs = outs if isinstance(outs, tuple) else (outs,)
    gs = [g if o.shape == g.shape else torch.randn(o.shape, generator=gen).to(device) for o in outs]
    ours = sync(_fwd_bwd(spec.bound(), xs, gs))
    ref = sync(_fwd_bwd(lambda *ts: spec.contract.reference(*ts, **params), xs, gs))
    reps = repeat if n < 5_000_000 else max(3, repeat // 4)
    t_ours, t_ref = paired_medians(ours, ref, repeat=reps, min_time=0.05)
    return Row(
        "op speed",
        spec.name,
        detail,
        t_ours * 1e6,
        t_ref * 1e6,
        "us",
        {"builtin": spec.source.dist == "opzoo", "elements": n},
    )


COMPILE_SIZES = (6_400, 1_000_000)


def bench_compiled(
    specs: Sequence[OpSpec],
    sizes: Sequence[int],
    *,
    repeat: int,
    devices: Sequence[str],
    backend: str = "inductor",
) -> list[Row]:
    """Forward+backward time of each elementwise Function op compiled as its torch.library form,
    vs its reference compiled and vs its reference in eager mode; and the one-off compile time.

    Each size is compiled on its own (``dynamic=False``): the kernels are the ones a fixed-shape
    model gets, and each compile time is that of one graph, forward and backward.
    """
    import torch._inductor.config

    from opzoo import library

    rows = []
    bridged = [s for s in _with_reference(specs) if s.contract.sig.elementwise and library.why_not(s) is None]
    for device_name in devices:
        device = torch.device(device_name)
        sync = _sync(device)
        for n in sizes:
            gen = torch.Generator().manual_seed(n)
            x = torch.randn(n, generator=gen).to(device).requires_grad_()
            g = torch.randn(n, generator=gen).to(device)
            for spec in bridged:
                # Each op's functions share code objects with the last op's: start dynamo afresh, so
                # no op pays for recompiles (or hits the recompile limit) because of another.
                torch._dynamo.reset()
                params = spec.contract.defaults()
                op, args = library.op(spec), tuple(params.values())
                reference = spec.contract.reference

                def ours_fn(t: torch.Tensor, op: Any = op, args: tuple[Any, ...] = args) -> torch.Tensor:
                    return op(t, *args)

                def native_fn(t: torch.Tensor, ref: Any = reference, p: Any = params) -> torch.Tensor:
                    return ref(t, **p)

                compiled = [
                    sync(_fwd_bwd(torch.compile(f, backend=backend, fullgraph=True, dynamic=False), [x], [g]))
                    for f in (ours_fn, native_fn)
                ]
                first = []
                # The first call compiles forward and backward. Inductor's on-disk caches would make
                # that a lookup on a re-run (and they key on the graph before decomposition, so could
                # serve a stale artifact): measure cold compiles.
                with torch._inductor.config.patch(force_disable_caches=True):
                    for run in compiled:
                        t0 = time.perf_counter()
                        run()
                        first.append(time.perf_counter() - t0)
                eager = sync(_fwd_bwd(native_fn, [x], [g]))
                reps = repeat if n < 5_000_000 else max(3, repeat // 4)
                t_ours, t_native = paired_medians(*compiled, repeat=reps, min_time=0.05)
                t_ours2, t_eager = paired_medians(compiled[0], eager, repeat=reps, min_time=0.05)
                size = f"{n:,} {device_name}"
                extra = {"builtin": spec.source.dist == "opzoo", "backend": backend}
                rows += [
                    Row(
                        "compiled",
                        spec.name,
                        f"{size} vs compiled native",
                        t_ours * 1e6,
                        t_native * 1e6,
                        "us",
                        extra,
                    ),
                    Row(
                        "compiled",
                        spec.name,
                        f"{size} vs eager native",
                        t_ours2 * 1e6,
                        t_eager * 1e6,
                        "us",
                        extra,
                    ),
                    Row(
                        "compile time",
                        spec.name,
                        f"{size}, first forward+backward",
                        first[0],
                        first[1],
                        "s",
                        extra,
                    ),
                ]
    return rows


def _with_reference(specs: Sequence[OpSpec]) -> list[OpSpec]:
    """The ops that declare a reference to be measured against. Not surrogate ops: their reference
    is a forward only (torch.heaviside has no backward at all), so forward+backward has no peer."""
    return [s for s in specs if s.contract.reference is not None and s.contract.surrogate is None]


def bench_memory(specs: Sequence[OpSpec], n: int = 100_000) -> list[Row]:
    """Bytes saved for backward per element, vs the reference (storage shared with the output is free)."""
    x = torch.randn(n)
    rows = []
    for spec in _with_reference(specs):
        if not spec.contract.sig.elementwise:
            continue  # bytes per element mean little for a matrix product or a reduction
        params = spec.contract.defaults()
        ours = saved_bytes(spec.bound(), x) / n
        ref = saved_bytes(lambda t: spec.contract.reference(t, **params), x) / n
        rows.append(
            Row(
                "saved memory",
                spec.name,
                "bytes/element",
                ours,
                ref,
                "B",
                {"over_reference": ours - ref, "builtin": spec.source.dist == "opzoo"},
            )
        )
    return rows


def bench_trainer(registry: Registry, steps: int, repeat: int, quick: bool) -> list[Row]:
    """Seconds per step of opzoo's trainer vs a hand-written seed loop, same activation and data."""
    from dataclasses import replace

    from opzoo.trainer import _trainer
    from opzoo.trainer._config import TrainConfig
    from opzoo.trainer._data import make_data

    sizes = dict(batch=8, d_in=32, hidden=16, d_out=4) if quick else {}
    config = TrainConfig(steps=steps, seed=0, **sizes)
    data = make_data(config)
    rows = []
    for name, fn in (("myrelu", registry.get("myrelu").apply), ("torch:relu", torch.relu)):
        cfg = replace(config, activation=name)

        def opzoo_run() -> Any:
            return _trainer.run(cfg, registry=registry, data=data)

        def hand_run() -> Any:
            return _seed_loop(fn, data, steps, cfg.lr)

        t_ours, t_hand = paired_medians(opzoo_run, hand_run, repeat=repeat, warmup=1)
        rows.append(
            Row("trainer", name, f"{steps} steps, per step", t_ours / steps * 1e6, t_hand / steps * 1e6, "us")
        )
    return rows


def _seed_loop(
    act: Callable[[torch.Tensor], torch.Tensor], data: dict[str, torch.Tensor], steps: int, lr: float
) -> float:
    """The seed program's loop, written by hand."""
    x, y = data["x"], data["y"]
    w1 = data["w1"].clone().requires_grad_()
    w2 = data["w2"].clone().requires_grad_()
    for t in range(steps):
        y_pred = act(x.mm(w1)).mm(w2)
        loss = (y_pred - y).pow(2).sum()
        if t % 100 == 99:
            loss.item()
        loss.backward()
        with torch.no_grad():
            w1 -= lr * w1.grad
            w2 -= lr * w2.grad
            w1.grad.zero_()
            w2.grad.zero_()
    return loss.item()


def bench_startup(repeat: int) -> list[Row]:
    """Wall time of `opzoo --help` and `opzoo list`, each vs a bare `python -c pass`."""

    def timed(*args: str) -> Callable[[], Any]:
        return lambda: subprocess.run([sys.executable, *args], capture_output=True, check=True)

    bare = timed("-c", "pass")
    rows = []
    for label, args in (("opzoo --help", ("-m", "opzoo", "--help")), ("opzoo list", ("-m", "opzoo", "list"))):
        t, t_bare = paired_medians(timed(*args), bare, repeat=repeat, warmup=1)
        rows.append(Row("start-up", label, "wall time vs python -c pass", t * 1e3, t_bare * 1e3, "ms"))
    return rows


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
