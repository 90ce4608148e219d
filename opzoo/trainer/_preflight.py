"""Checks a run passes before its first step: devices, memory, destinations, compile backends.

Each raises :class:`ConfigError` with one line, so a run that cannot finish fails in a second, not
after an hour of training.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from opzoo import _files
from opzoo._host import _bytes, memory_available
from opzoo.exceptions import ConfigError
from opzoo.trainer._config import DTYPE_NAMES

if TYPE_CHECKING:
    from opzoo.trainer._config import TrainConfig

DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}


def check(config: TrainConfig) -> torch.device:
    """Refuse ``config`` before its first step: its settings, then what this machine must provide;
    return the device it trains on."""
    config.validate()
    if config.checkpoint is not None:
        check_writable("checkpoint", config.checkpoint)
    if config.compile:
        check_compile_backend(config.compile_backend)
    device = resolve_device(config.device)
    check_memory(config, device)
    return device


def check_writable(what: str, path: str) -> None:
    """Fail before training, not after it, when ``path`` cannot be written or is no regular file.

    A device, fifo or socket is refused (opzoo replaces only regular files); a symlink is followed
    to the file it names; a file is created and removed beside the target, so that a read-only,
    full or pseudo file system (``/proc``) is found before the first step.
    """
    _files.check_destination(what, path)


def check_compile_backend(name: str) -> None:
    """Refuse a torch.compile backend that torch does not know, before anything is compiled."""
    import torch._dynamo

    if name not in torch._dynamo.list_backends(exclude_tags=()):
        # Suggest the backends meant for use, not the debugging and testing ones.
        usual = ", ".join(sorted(torch._dynamo.list_backends()))
        raise ConfigError(f"unknown compile-backend {name!r}; choose from {usual}")


def memory_needed(config: TrainConfig) -> int:
    """Estimate the bytes a run of ``config`` holds at its peak (within a small factor)."""
    b, d_in, h, d_out = config.batch, config.d_in, config.hidden, config.d_out
    weights = d_in * h + h * d_out
    # The drawn w1, w2, the trained copies and their gradients; Adam keeps two moments more.
    weight_copies = 3 + (2 if config.optimizer == "adam" else 0)
    # x and y; the hidden layer's pre-activation, output, what backward saves and its gradient;
    # the prediction and its gradient.
    elements = b * d_in + b * d_out + weight_copies * weights + 4 * b * h + 2 * b * d_out
    return elements * DTYPES[config.dtype].itemsize


def check_memory(config: TrainConfig, device: torch.device) -> None:
    """Refuse sizes whose tensors cannot fit, with the figure, rather than fail to allocate."""
    needed, free = memory_needed(config), memory_available(device)
    if free is not None and needed > free:
        raise ConfigError(
            f"batch={config.batch}, d-in={config.d_in}, hidden={config.hidden}, d-out={config.d_out} "
            f"need about {_bytes(needed)} of memory, but {device.type} has {_bytes(free)} available"
        )


def resolve_device(name: str | None) -> torch.device:
    """Return the device to train on; cuda by default when available."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, TypeError):
        raise ConfigError(f"unknown device {name!r}; use cpu or cuda[:N]") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ConfigError("device cuda was asked for, but CUDA is not available here")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ConfigError(f"device {name!r} does not exist ({torch.cuda.device_count()} GPUs)")
    elif device.type != "cpu":
        raise ConfigError(f"unsupported device {name!r}; use cpu or cuda[:N]")
    return device
