"""What this machine has for a new run: the memory free on a device, and how to say a size.

Imports no torch (a CUDA device's figure asks torch, which the caller has loaded): the data loader's
checks use it without the trainer's preflight.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def memory_available(device: torch.device) -> int | None:
    """Bytes free for a new run on ``device``; None when the platform does not say."""
    if device.type == "cuda":
        import torch

        return torch.cuda.mem_get_info(device)[0]
    free = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    free = int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    if free is None:
        try:
            free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            return None
    limit = _cgroup_room()
    return free if limit is None else min(free, limit)


def _cgroup_room() -> int | None:
    # A container's memory limit is lower than what the host's /proc/meminfo reports.
    try:
        with open("/sys/fs/cgroup/memory.max") as f:
            limit = f.read().strip()
        with open("/sys/fs/cgroup/memory.current") as f:
            used = int(f.read().strip())
    except (OSError, ValueError):
        return None
    return None if limit == "max" else max(int(limit) - used, 0)


def _bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if value < 1024 or unit == "PiB":
            return f"{value:.3g} {unit}" if unit != "B" else f"{n} B"
        value /= 1024
    raise AssertionError("unreachable")
