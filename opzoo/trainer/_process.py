"""What a run changes in its process while it trains, each put back afterwards: the checkpoint's
writer lock, deterministic mode, one intra-op thread for small batches (:func:`scoped`)."""

from __future__ import annotations

import contextlib
import os
from typing import Iterator

import torch

from opzoo.trainer import _checkpoint
from opzoo.trainer._config import TrainConfig


def scoped(stack: contextlib.ExitStack, config: TrainConfig, device: torch.device) -> None:
    """Enter every setting ``config`` asks of the process on ``stack``; closing it puts them back."""
    stack.enter_context(_writer_lock(config))
    stack.enter_context(_determinism(config, device))
    stack.enter_context(_small_batches(config, device))


@contextlib.contextmanager
def _writer_lock(config: TrainConfig) -> Iterator[None]:
    if config.checkpoint is None:
        yield
        return
    with _checkpoint.lock(config.checkpoint):
        yield


@contextlib.contextmanager
def _small_batches(config: TrainConfig, device: torch.device) -> Iterator[None]:
    """Mini-batches of held-out data on the CPU run on one intra-op thread, restored afterwards.

    A 64x64 by 64x100 product is too small to split: on this 2-core machine shared with other jobs,
    two threads ran digits at 10-20 steps/s against 2,600 with one (they spin waiting for each other).
    The seed's random data keeps torch's setting, so its run is unchanged.
    """
    if config.data == "random" or device.type != "cpu":
        yield
        return
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@contextlib.contextmanager
def _determinism(config: TrainConfig, device: torch.device) -> Iterator[None]:
    """With ``deterministic``: MKL's reproducible mode, one intra-op thread, deterministic kernels.

    Without it, a float32 matmul's rounding depends on the code path MKL picks at run time (unset
    ``MKL_CBWR`` and ``MKL_CBWR=AVX2`` part in the fifth digit after 1500 Adam steps) and, on large
    sizes, on how many threads split a reduction. MKL reads ``MKL_CBWR`` at its first call, so this
    takes full effect in a fresh process (as ``opzoo train`` is); the threads and kernels are
    restored afterwards.
    """
    if not config.deterministic:
        yield
        return
    # Conditional numerical reproducibility on this CPU's own code path; STRICT drops its need for
    # 64-byte aligned arrays. Overridden, not defaulted: any other setting is another code path.
    # The variables are put back afterwards too: a child process started later (a test's next
    # subprocess, say) must not silently inherit another MKL code path.
    saved_env = {k: os.environ.get(k) for k in ("MKL_CBWR", "CUBLAS_WORKSPACE_CONFIG")}
    os.environ["MKL_CBWR"] = "AUTO,STRICT"
    if device.type == "cuda":
        # cuBLAS is deterministic only with a fixed workspace, read when its first handle is made.
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    threads, algorithms = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(algorithms)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
