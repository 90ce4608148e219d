"""``opzoo bench``'s whole programs: opzoo's trainer against the seed's loop written by hand, and
the start-up time of the ``opzoo`` command."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, Callable

import torch

from opzoo.bench._bench import Row, paired_medians
from opzoo.core._registry import Registry


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
