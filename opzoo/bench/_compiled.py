"""``opzoo bench --compile``: each elementwise Function op compiled as its torch.library form,
against its reference compiled and in eager mode, and the one-off compile times."""

from __future__ import annotations

import time
from typing import Sequence

import torch

from opzoo.bench._bench import Row, fwd_bwd, paired_medians, synced, with_reference
from opzoo.core._registry import OpSpec

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
    from opzoo import library

    rows = []
    bridged = [s for s in with_reference(specs) if s.contract.sig.elementwise and library.why_not(s) is None]
    for device_name in devices:
        device = torch.device(device_name)
        for n in sizes:
            gen = torch.Generator().manual_seed(n)
            x = torch.randn(n, generator=gen).to(device).requires_grad_()
            g = torch.randn(n, generator=gen).to(device)
            for spec in bridged:
                reps = repeat if n < 5_000_000 else max(3, repeat // 4)
                rows += _compiled_rows(spec, x, g, f"{n:,} {device_name}", reps, backend)
    return rows


def _compiled_rows(
    spec: OpSpec, x: torch.Tensor, g: torch.Tensor, size: str, repeat: int, backend: str
) -> list[Row]:
    """One op at one size: compiled against compiled native and against eager native, and the
    first call's compile time of each."""
    import torch._inductor.config

    from opzoo import library

    # Each op's functions share code objects with the last op's: start dynamo afresh, so no op
    # pays for recompiles (or hits the recompile limit) because of another.
    torch._dynamo.reset()
    params = spec.contract.defaults()
    op, args, reference = library.op(spec), tuple(params.values()), spec.contract.reference

    def ours_fn(t: torch.Tensor) -> torch.Tensor:
        return op(t, *args)

    def native_fn(t: torch.Tensor) -> torch.Tensor:
        return reference(t, **params)

    sync = synced(x.device)
    compiled = [
        sync(fwd_bwd(torch.compile(f, backend=backend, fullgraph=True, dynamic=False), [x], [g]))
        for f in (ours_fn, native_fn)
    ]
    first = []
    # The first call compiles forward and backward. Inductor's on-disk caches would make that a
    # lookup on a re-run (and they key on the graph before decomposition, so could serve a stale
    # artifact): measure cold compiles.
    with torch._inductor.config.patch(force_disable_caches=True):
        for run in compiled:
            t0 = time.perf_counter()
            run()
            first.append(time.perf_counter() - t0)
    eager = sync(fwd_bwd(native_fn, [x], [g]))
    t_ours, t_native = paired_medians(*compiled, repeat=repeat, min_time=0.05)
    t_ours2, t_eager = paired_medians(compiled[0], eager, repeat=repeat, min_time=0.05)
    extra = {"builtin": spec.source.dist == "opzoo", "backend": backend}
    return [
        Row("compiled", spec.name, f"{size} vs compiled native", t_ours * 1e6, t_native * 1e6, "us", extra),
        Row("compiled", spec.name, f"{size} vs eager native", t_ours2 * 1e6, t_eager * 1e6, "us", extra),
        Row("compile time", spec.name, f"{size}, first forward+backward", first[0], first[1], "s", extra),
    ]
