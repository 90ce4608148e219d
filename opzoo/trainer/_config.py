"""The trainer's settings: :class:`TrainConfig`, what a resume must agree on, the defaults per data set.

Plain Python, no torch: what a setting may be is checked here (:meth:`TrainConfig.validate`); what
depends on this machine (devices, memory, files, compile backends) is checked by ``_preflight``,
which imports this module, never the other way round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Mapping

from opzoo.exceptions import ConfigError

OPTIMIZERS = ("manual", "sgd", "adam")
# The dtypes a run may take, by name; _preflight maps them to torch's.
DTYPE_NAMES = ("float32", "float64", "bfloat16")
# Settings that define the model and its data; a resumed run must agree with its checkpoint on them.
MODEL_FIELDS = (
    "activation",
    "act_args",
    "batch",
    "d_in",
    "hidden",
    "d_out",
    "lr",
    "act_lr",
    "dtype",
    "optimizer",
    "linear",
    "loss",
    "data",
)
# Defaults that differ from the seed's for held-out data (digits, or a loader's; a user's explicit
# settings win): a real task on mini-batches, where the seed's lr and plain gradient descent crawl.
HELD_OUT_DEFAULTS: dict[str, Any] = {
    "batch": 64,
    "steps": 800,
    "lr": 3e-3,
    "optimizer": "adam",
    "log_every": 200,
}
# torch.manual_seed takes these, negative ones remapped; anything else overflows inside torch.
SEED_RANGE = (-(2**63), 2**64 - 1)


@dataclass(frozen=True)
class TrainConfig:
    """One training run. The defaults are the seed program's."""

    activation: str = "myrelu"
    act_args: Mapping[str, float] = field(default_factory=dict)
    batch: int = 64
    d_in: int = 1000
    hidden: int = 100
    d_out: int = 10
    steps: int = 500
    lr: float = 1e-6
    # A learnable activation's parameters: None scales lr by 1 / (elements sharing each value), since
    # a shared slope sums the gradient of every element it touches (Adam, scale-free, keeps lr).
    act_lr: float | None = None
    log_every: int = 100
    seed: int | None = None
    device: str | None = None  # None: cuda when available, else cpu
    dtype: str = "float32"
    optimizer: str = "manual"  # the seed's update; or "sgd", "adam" from torch.optim
    compile: bool = False  # the whole step (forward, backward, update) through torch.compile
    compile_backend: str = "inductor"
    linear: str | None = None  # a registered (n,k),(k,m)->(n,m) op; None: the seed's x.mm(w)
    loss: str | None = None  # a registered (n,m),(n,m)->() op; None: the seed's sum of squares
    # MKL's reproducible mode, one intra-op thread, deterministic kernels: bit-identical results
    # in every process on one machine, at some speed (docs/trainer.md).
    deterministic: bool = False
    checkpoint: str | None = None
    checkpoint_every: int | None = None
    resume: str | None = None
    # "random" (the seed's), "digits" (scikit-learn's), or "module:function" (docs/trainer.md).
    data: str = "random"

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid setting.

        The settings alone, without torch: ``_preflight.check`` runs this, then what depends on the
        machine (the device, memory, the checkpoint's folder, the compile backend).
        """
        for name in ("batch", "d_in", "hidden", "d_out", "steps", "log_every"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name.replace('_', '-')} must be a positive integer, got {value!r}")
        if self.checkpoint_every is not None and (
            not isinstance(self.checkpoint_every, int) or self.checkpoint_every <= 0
        ):
            raise ConfigError(f"checkpoint-every must be a positive integer, got {self.checkpoint_every!r}")
        if self.checkpoint_every is not None and self.checkpoint is None:
            raise ConfigError("`checkpoint_every` needs a `checkpoint` path")
        if (
            isinstance(self.lr, bool)
            or not isinstance(self.lr, (int, float))
            or not (math.isfinite(self.lr) and self.lr > 0)
        ):
            raise ConfigError(f"lr must be a positive finite number, got {self.lr!r}")
        if self.act_lr is not None and not (
            isinstance(self.act_lr, (int, float)) and math.isfinite(self.act_lr) and self.act_lr > 0
        ):
            raise ConfigError(f"act-lr must be a positive finite number, got {self.act_lr!r}")
        if self.seed is not None and (
            isinstance(self.seed, bool)
            or not isinstance(self.seed, int)
            or not SEED_RANGE[0] <= self.seed <= SEED_RANGE[1]
        ):
            raise ConfigError(f"seed must be an integer from -2**63 to 2**64-1, got {self.seed!r}")
        if self.dtype not in DTYPE_NAMES:
            raise ConfigError(f"unknown dtype {self.dtype!r}; choose from {', '.join(DTYPE_NAMES)}")
        if self.optimizer not in OPTIMIZERS:
            raise ConfigError(f"unknown optimizer {self.optimizer!r}; choose from {', '.join(OPTIMIZERS)}")
        if self.compile and self.optimizer != "manual":
            raise ConfigError("`compile` compiles the seed's manual update; it does not take an `optimizer`")
        if self.data != "random" and self.compile:
            raise ConfigError(
                "`compile` trains on the seed's random data only, not on mini-batches of `data`"
            )
        # A backend without `compile` was ignored: it hid a typo (`--compile-backend nosuch`).
        if not self.compile and self.compile_backend != "inductor":
            raise ConfigError(f"`compile_backend` {self.compile_backend!r} is taken with `compile` only")
