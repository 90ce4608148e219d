"""``opzoo bench``'s op speed and saved memory: each op's forward+backward against its reference,
at sizes of elements, and at the seed network's own shapes where it has an op of that kind."""

from __future__ import annotations

from typing import Any, Callable, Sequence

import torch

from opzoo.bench._bench import Row, fwd_bwd, paired_medians, synced, with_reference
from opzoo.bench._memory import saved_bytes
from opzoo.core._registry import OpSpec
from opzoo.core._signature import Signature

SIZES = (6_400, 1_000_000, 16_000_000)
QUICK_SIZES = (64, 4_096)


def general_shapes(spec: OpSpec, n: int) -> list[tuple[int, ...]]:
    """Input shapes of about ``n`` elements for a non-elementwise op: square cores for a matrix
    signature (``linear`` at 1M: 1000x1000 @ 1000x1000), rows of 100 (1,000 from 100k on) for a
    signature over one dimension, ``n`` loop elements each for scalar cores (``()->(),()``: two
    outputs, or ``(),()->()``: two inputs), as an elementwise op's."""
    sig = spec.contract.sig
    rank = max(len(core) for core in sig.inputs)
    if rank == 0:
        return [(n,)] * len(sig.inputs)
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


def bench_ops(
    specs: Sequence[OpSpec], sizes: Sequence[int], *, repeat: int, devices: Sequence[str]
) -> list[Row]:
    """Forward+backward time of each op vs its reference, per size and device (float32).

    Elementwise ops all take the same input of ``n`` elements; an op with another signature gets
    inputs of about ``n`` elements shaped by it (up to 1M: a 16M-element matrix product would
    measure the BLAS, not the op), but for scalar cores (``()->(),()``), each input as an
    elementwise op's.
    """
    rows = []
    for device_name in devices:
        device = torch.device(device_name)
        sync = synced(device)
        for n in sizes:
            gen = torch.Generator().manual_seed(n)
            x = torch.randn(n, generator=gen).to(device).requires_grad_()
            g = torch.randn(n, generator=gen).to(device)
            for spec in with_reference(specs):
                sig = spec.contract.sig
                if sig.elementwise:
                    cases = [([x], f"{n:,} {device_name}")]
                elif not any(sig.inputs):  # scalar cores (two outputs, two inputs): as elementwise
                    more = [torch.randn(n, generator=gen).to(device).requires_grad_() for _ in sig.inputs[1:]]
                    cases = [([x, *more], f"{n:,} {device_name}")]
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
    ours = sync(fwd_bwd(spec.bound(), xs, gs))
    ref = sync(fwd_bwd(lambda *ts: spec.contract.reference(*ts, **params), xs, gs))
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


def bench_memory(specs: Sequence[OpSpec], n: int = 100_000) -> list[Row]:
    """Bytes saved for backward per element, vs the reference (storage shared with the output is free)."""
    x = torch.randn(n)
    rows = []
    for spec in with_reference(specs):
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
