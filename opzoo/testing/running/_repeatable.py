"""What makes a check give the same verdict in every process, whatever ran before it.

Two kinds of state leaked into a property's examples, so that the derandomized ci profile drew other
inputs in a full zoo run than in the printed ``reproduce:`` command, which could then pass:

- torch's global generator: gradcheck's fast mode draws its random directions from it, so an op's
  check saw whatever state the checks before it had left. Each example now runs with the generator
  seeded to a constant, and the caller's state is restored afterwards (``torch.random.fork_rng``).
- hypothesis's *local constants*: it mixes into its draws literals read from the source of every
  "local" module imported so far (opzoo itself when installed editable, plugins, a fixture folder),
  a pool that grows as modules are imported during the run. Our runs use its global constants
  only (they hold the edge values: ±0, ±inf, nan, extremes; our strategies add the kinks).

And one kind of state turned a green verdict red: the caller's warning filters. Where warnings are
errors (pytest's ``filterwarnings = error``, ``python -W error``), the deprecation warnings torch
raises from its own machinery (``torch.jit.script`` as torch.func loads its jvp decompositions,
Dynamo instantiating a Function) failed ``forward_mode`` and ``compile`` of a correct op. Those
are ignored while a check runs (:func:`torch_deprecations_ignored`); the op's own are not.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Iterator

import torch

#: torch's generator is seeded with this before each example.
SEED = 0


@contextlib.contextmanager
def seeded_torch(device: str) -> Iterator[None]:
    """torch's generators (CPU, and ``device``'s if it is a GPU) seeded to SEED in the block, and
    restored to the caller's state after it."""
    where = torch.device(device)
    gpu = {} if where.type == "cpu" else {"device_type": where.type}
    with torch.random.fork_rng(devices=[] if where.type == "cpu" else [where], **gpu):
        if where.type == "cpu":
            # torch.manual_seed also queues a seed for every lazily initialised accelerator module,
            # capturing a stack trace for each: 1.5 ms an example, a tenth of a cheap check's time.
            torch.default_generator.manual_seed(SEED)
        else:
            torch.manual_seed(SEED)
        yield


@contextlib.contextmanager
def without_local_constants() -> Iterator[None]:
    """Hypothesis draws no literals from local modules' source in the block (a private hook of
    hypothesis >= 6.131; with a hypothesis without it, nothing changes, and the repeatability test
    says so)."""
    try:
        from hypothesis.internal.conjecture import providers

        original = providers._get_local_constants
        empty = providers.Constants()
        cache = providers.CONSTANTS_CACHE
    except (ImportError, AttributeError):
        yield
        return
    providers._get_local_constants = lambda: empty
    cache.cache.clear()  # pools computed with the local constants
    try:
        yield
    finally:
        providers._get_local_constants = original
        cache.cache.clear()


@contextlib.contextmanager
def torch_deprecations_ignored() -> Iterator[None]:
    """torch's own deprecation warnings (raised from a torch module) ignored in the block, whatever
    the caller's filters; the caller's filters restored after it."""
    with warnings.catch_warnings():
        for category in (DeprecationWarning, FutureWarning):
            warnings.filterwarnings("ignore", category=category, module=r"torch(\.|$)")
        yield
