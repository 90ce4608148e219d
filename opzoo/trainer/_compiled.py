"""The trainer's compiled step: forward, backward and update as one ``torch.compile`` graph."""

from __future__ import annotations

from typing import Callable, Mapping

import torch

from opzoo.exceptions import CompileError, one_line
from opzoo.trainer._network import Network


def compiled_step(
    net: Network,
    params: dict[str, torch.Tensor],
    x: torch.Tensor,
    y: torch.Tensor,
    rates: Mapping[str, float],
    *,
    backend: str,
    label: str,
) -> Callable[[], torch.Tensor]:
    """Return a step whose forward, backward and update are one compiled, functional graph.

    This is seed 003's static graph: the update is part of the graph, as TensorFlow's ``assign`` is.
    """
    from torch.func import functional_call, grad_and_value

    def loss_fn(w: dict[str, torch.Tensor]) -> torch.Tensor:
        act_w = {k[4:]: v for k, v in w.items() if k.startswith("act.")}
        pre = net.linear(x, w["w1"])
        h = functional_call(net.act, act_w, (pre,)) if act_w else net.act(pre)
        return net.loss(net.linear(h, w["w2"]), y)

    def step(w: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
        grads, loss = grad_and_value(loss_fn)(w)
        return {k: w[k] - rates[k] * grads[k] for k in w}, loss

    compiled = torch.compile(step, backend=backend)

    def run_step() -> torch.Tensor:
        current = {k: p.detach() for k, p in params.items()}
        try:
            new, loss = compiled(current)
        except Exception as exc:
            # Not the user's mistake (a bad backend name is refused before training): the compiler
            # or the op failed under it. One line for the CLI, the cause chained for a debugger.
            raise CompileError(
                f"torch.compile (backend {backend!r}) failed for activation {label!r}: {one_line(exc)}"
            ) from exc
        with torch.no_grad():
            for k, p in params.items():
                p.copy_(new[k])
        return loss

    return run_step
