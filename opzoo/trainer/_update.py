"""The trainer's update rule: each parameter's learning rate, and a step of the chosen optimizer or
of the seed's hand-written update (``--optimizer manual``)."""

from __future__ import annotations

from typing import Any, Mapping

import torch

from opzoo.trainer._config import TrainConfig


def learning_rates(config: TrainConfig, params: Mapping[str, torch.Tensor]) -> dict[str, float]:
    """The learning rate of each parameter: ``lr`` for the weights, see ``act_lr`` for the rest."""
    rates = {}
    for name, p in params.items():
        if not name.startswith("act."):
            rates[name] = config.lr
        elif config.act_lr is not None:
            rates[name] = config.act_lr
        elif config.optimizer == "adam":
            rates[name] = config.lr
        else:
            rates[name] = config.lr * p.numel() / (config.batch * config.hidden)
    return rates


def optimizer(config: TrainConfig, params: Mapping[str, torch.Tensor]) -> torch.optim.Optimizer | None:
    """The optimizer ``--optimizer`` names, one parameter group per parameter at its own rate; None
    for ``manual`` (the seed's update: see :func:`step`)."""
    rates = learning_rates(config, params)
    groups = [{"params": [p], "lr": rates[name]} for name, p in params.items()]
    if config.optimizer == "sgd":
        return torch.optim.SGD(groups, lr=config.lr)
    if config.optimizer == "adam":
        return torch.optim.Adam(groups, lr=config.lr)
    return None


def step(opt: Any, params: Mapping[str, torch.Tensor], rates: Mapping[str, float]) -> None:
    """One update of ``params`` from their gradients, which are zeroed after it."""
    if opt is not None:
        opt.step()
        opt.zero_grad(set_to_none=False)
        return
    # The seed's update, outside autograd, then the gradients zeroed by hand.
    with torch.no_grad():
        for name, p in params.items():
            if p.grad is not None:
                p -= rates[name] * p.grad
                p.grad.zero_()
