"""The seed's two-layer network, ``loss(linear(act(linear(x, w1)), w2), y)``, built from registered ops.

Each of the three parts is either the seed's own torch expression (the default) or a registered op of
the right signature: the activation maps a tensor to one of its shape, the linear layer is a matrix
product ``(n,k),(k,m)->(n,m)``, the loss reduces a prediction and a target ``(n,m),(n,m)->()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Mapping

import torch

from opzoo.core._signature import Signature
from opzoo.exceptions import ConfigError
from opzoo.nn import Activation, TorchActivation, create

if TYPE_CHECKING:
    from opzoo.core._registry import Registry

#: What each part must be, as signatures (dimension names do not matter, only their pattern).
ACTIVATION_SIGNATURES = ("()->()", "(n)->(n)")
LINEAR_SIGNATURE = "(n,k),(k,m)->(n,m)"
LOSS_SIGNATURE = "(n,m),(n,m)->()"


def seed_linear(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """The seed's linear layer."""
    return x.mm(w)


def seed_loss(y_pred: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The seed's loss: the sum of squared errors."""
    return (y_pred - y).pow(2).sum()


@dataclass
class Network:
    """The three parts of the seed's network; ``act`` may hold learnable parameters."""

    act: torch.nn.Module
    linear: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]

    def hidden(self, x: torch.Tensor, w1: torch.Tensor) -> torch.Tensor:
        return self.linear(x, w1)

    def __call__(self, x: torch.Tensor, y: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return self.loss(self.linear(self.act(self.linear(x, w1)), w2), y)


def build(
    activation: str,
    act_args: Mapping[str, float],
    *,
    linear: str | None = None,
    loss: str | None = None,
    registry: Registry | None = None,
) -> Network:
    """Build the network: ``activation`` with ``act_args``, and the linear layer and loss from the
    ops named (the seed's torch expressions where None)."""
    return Network(
        activation_module(activation, act_args, registry),
        _part("linear", linear, LINEAR_SIGNATURE, registry) or seed_linear,
        _part("loss", loss, LOSS_SIGNATURE, registry) or seed_loss,
    )


def activation_module(
    name: str, act_args: Mapping[str, float], registry: Registry | None = None
) -> Activation | TorchActivation:
    """Return activation ``name`` as a module (see :func:`opzoo.nn.create`), refusing an op that does
    not map the hidden layer to a tensor of its shape, or is not defined on all reals (the hidden
    layer's pre-activations take any real value)."""
    act = create(name, registry=registry, **act_args)
    if isinstance(act, Activation):
        _require("activation", act.spec.name, act.spec.contract.sig, ACTIVATION_SIGNATURES)
        low, high = act.spec.contract.domain
        if (low, high) != (-math.inf, math.inf):
            raise ConfigError(
                f"{act.spec.name!r} is defined on ({low:g}, {high:g}) only, but the hidden layer's "
                "pre-activations take any real value; it cannot be the trainer's activation"
            )
    return act


def _part(role: str, name: str | None, signature: str, registry: Registry | None) -> Activation | None:
    if name is None:
        return None
    op = create(name, registry=registry)
    if not isinstance(op, Activation):
        raise ConfigError(f"the {role} must be a registered op of signature {signature}, not {name!r}")
    _require(role, op.spec.name, op.spec.contract.sig, (signature,))
    return op


def _require(role: str, name: str, sig: Signature, allowed: tuple[str, ...]) -> None:
    if canonical(sig) not in {canonical(Signature.parse(a)) for a in allowed}:
        need = " or ".join(allowed)
        raise ConfigError(f"the {role} must be an op of signature {need}; {name!r} has {sig}")


def canonical(sig: Signature) -> str:
    """``sig`` with its dimensions renamed in order of appearance: equal for equivalent signatures."""
    names: dict[str, str] = {}
    for core in (*sig.inputs, *sig.outputs):
        for dim in core:
            if not dim.isdigit():
                names.setdefault(dim, f"d{len(names)}")
    rename = lambda cores: tuple(tuple(names.get(d, d) for d in c) for c in cores)  # noqa: E731
    return str(Signature(rename(sig.inputs), rename(sig.outputs)))
