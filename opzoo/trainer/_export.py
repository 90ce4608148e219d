"""``opzoo train --export``: the trained network as a ``torch.export`` program (``.pt2``).

The program is the seed's network, ``act(x.mm(w1)).mm(w2)``, with the trained weights inside. A
Function activation is its ``torch.library`` form, ``torch.ops.opzoo.<name>`` (one node in the
graph; a loader calls ``opzoo.library.load()`` first); a learnable activation, which the bridge does
not take, is traced into plain aten ops with its trained parameters; a ``torch:NAME`` baseline is
the native op. The batch dimension is dynamic.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any, Callable

import torch

from opzoo import _files
from opzoo.exceptions import ConfigError

if TYPE_CHECKING:
    from opzoo.core._registry import Registry
    from opzoo.trainer._trainer import TrainResult


class Network(torch.nn.Module):
    """The seed's bias-free two-layer network, ``act(x.mm(w1)).mm(w2)``."""

    def __init__(
        self,
        act: Callable[[torch.Tensor], torch.Tensor] | torch.nn.Module,
        w1: torch.Tensor,
        w2: torch.Tensor,
    ) -> None:
        super().__init__()
        self.act = act
        self.w1 = torch.nn.Parameter(w1.detach().clone(), requires_grad=False)
        self.w2 = torch.nn.Parameter(w2.detach().clone(), requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x.mm(self.w1)).mm(self.w2)


def check_exportable(name: str, act_args: Any, registry: Registry | None) -> None:
    """Refuse, before training, an activation the export cannot hold (one line, the reason)."""
    from opzoo import library
    from opzoo.nn import Activation
    from opzoo.trainer._network import activation_module

    act = activation_module(name, act_args, registry)
    if isinstance(act, Activation) and act.inner is None:
        why = library.why_not(act.spec)
        if why is not None:
            raise ConfigError(f"cannot export: {why}")


def export_network(result: TrainResult, path: str, *, registry: Registry | None = None) -> Any:
    """Write ``result``'s trained network to ``path`` with ``torch.export.save``, atomically; return
    the program. A failed write (a full disk) is a WriteError, the previous file kept whole."""
    from opzoo import library
    from opzoo.nn import Activation
    from opzoo.trainer._network import activation_module

    config = result.config
    act: Any = activation_module(config.activation, config.act_args, registry)
    w1, w2 = result.weights["w1"], result.weights["w2"]
    if isinstance(act, Activation) and act.inner is None:
        op, args = library.op(act.spec), tuple(act.params.values())

        def bridged(h: torch.Tensor) -> torch.Tensor:
            return op(h, *args)

        act = bridged
    else:
        act = act.to(device=w1.device, dtype=w1.dtype)
        trained = {k[len("act.") :]: v for k, v in result.weights.items() if k.startswith("act.")}
        if trained:
            act.load_state_dict(trained, strict=False)
        act.requires_grad_(False)
    net = Network(act, w1, w2)
    example = torch.zeros(max(config.batch, 2), w1.shape[0], dtype=w1.dtype, device=w1.device)
    batch = torch.export.Dim("batch")
    program = torch.export.export(net, (example,), dynamic_shapes={"x": {0: batch}})
    # Serialized in memory, then written by opzoo: torch's own writer, on a full disk, aborted the
    # process (a C++ exception, exit 134) after it had truncated the previous export.
    buffer = io.BytesIO()
    torch.export.save(program, buffer)
    _files.write("export", path, buffer.getbuffer())
    return program
