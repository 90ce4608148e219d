"""The trainer's settings: :class:`TrainConfig`, one :class:`Setting` record per field, the defaults
for held-out data.

Each field is declared once, with its record: what it means (``help``), what it may be (``check``,
``choices``), whether a resume must agree on it (``model``) and how a value looks (``metavar``).
:meth:`TrainConfig.validate` checks every value by its record, a resume compares ``MODEL_FIELDS``,
and ``opzoo train`` makes a flag of each record, with its help (opzoo/cli/_train.py).

Plain Python, no torch: what depends on this machine (devices, memory, files, compile backends) is
checked by ``_preflight``, which imports this module, never the other way round.
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, Mapping

from opzoo.exceptions import ConfigError

OPTIMIZERS = ("manual", "sgd", "adam")
# The dtypes a run may take, by name; _preflight maps them to torch's.
DTYPE_NAMES = ("float32", "float64", "bfloat16")
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
# Where `opzoo train --help` lists a setting: the first group is the command's own options.
WHAT, SCHEDULE, CHECKPOINTS = "", "network and schedule", "checkpoints"


def _positive_int(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        return "must be a positive integer"
    return None


def _positive_number(value: Any) -> str | None:
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (number and math.isfinite(value) and value > 0):
        return "must be a positive finite number"
    return None


def _seed(value: Any) -> str | None:
    if isinstance(value, bool) or not isinstance(value, int) or not SEED_RANGE[0] <= value <= SEED_RANGE[1]:
        return "must be an integer from -2**63 to 2**64-1"
    return None


@dataclass(frozen=True)
class Setting:
    """One setting of a run as its users see it: the field's name, type and default, and its record.

    ``help`` is one line that names other settings as `name` (the command line shows them as
    ``--name``); with a default that is a number or a word it ends without one (the command line
    adds "(default X)"), with a default of None it says what None means.
    """

    name: str
    type: type  # int, float, str or bool; a setting whose default is None also takes None
    default: Any
    help: str = ""
    group: str = SCHEDULE
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    check: Callable[[Any], str | None] | None = None  # why a value is refused, or None
    model: bool = False  # a resumed run must agree with its checkpoint on it (MODEL_FIELDS)

    @property
    def label(self) -> str:
        """How a message names it (``d-in``)."""
        return self.name.replace("_", "-")

    def problem(self, value: Any) -> str | None:
        """Why ``value`` is refused, in one line naming the setting; None when it is taken."""
        if value is None and self.default is None:
            return None
        if self.choices and value not in self.choices:
            return f"unknown {self.label} {value!r}; choose from {', '.join(self.choices)}"
        why = self.check(value) if self.check is not None else None
        return None if why is None else f"{self.label} {why}, got {value!r}"


def _setting(default: Any = MISSING, help: str = "", *, factory: Any = MISSING, **record: Any) -> Any:
    """A TrainConfig field and its record (name, type and default are the field's own)."""
    return field(default=default, default_factory=factory, metadata={"setting": (help, record)})


@dataclass(frozen=True)
class TrainConfig:
    """One training run. The defaults are the seed program's."""

    activation: str = _setting(
        "myrelu",
        "a registered op, or torch:NAME as a native baseline",
        group=WHAT,
        metavar="NAME",
        model=True,
    )
    act_args: Mapping[str, float] = _setting(
        help="an op parameter, validated against the op's declared range",
        factory=dict,
        group=WHAT,
        metavar="KEY=VALUE",
        model=True,
    )
    batch: int = _setting(
        64, "N, rows of x; the mini-batch size with `data`", check=_positive_int, model=True
    )
    d_in: int = _setting(1000, "D_in", check=_positive_int, model=True)
    hidden: int = _setting(100, "H", check=_positive_int, model=True)
    d_out: int = _setting(10, "D_out", check=_positive_int, model=True)
    steps: int = _setting(500, "training steps", check=_positive_int)
    lr: float = _setting(1e-6, "learning rate", check=_positive_number, model=True)
    # None scales lr by 1 / (elements sharing each value), since a shared slope sums the gradient of
    # every element it touches (Adam, scale-free, keeps lr).
    act_lr: float | None = _setting(
        None,
        "learning rate of a learnable activation's parameters (default: lr / elements sharing each; "
        "lr with adam)",
        check=_positive_number,
        model=True,
    )
    log_every: int = _setting(100, "print the loss every K steps", metavar="K", check=_positive_int)
    seed: int | None = _setting(None, "call torch.manual_seed(SEED) first", group=WHAT, check=_seed)
    device: str | None = _setting(None, "cpu or cuda[:N] (default: cuda when available)")
    dtype: str = _setting(
        "float32", "the floating-point type of the data and the weights", choices=DTYPE_NAMES, model=True
    )
    optimizer: str = _setting(
        "manual",
        "manual: the seed's w -= lr * grad; sgd or adam from torch.optim",
        choices=OPTIMIZERS,
        model=True,
    )
    compile: bool = _setting(
        False,
        "run forward, backward and the update as one torch.compile graph, traced once and replayed "
        "every step: a static graph (see docs/trainer.md)",
    )
    compile_backend: str = _setting("inductor", "torch.compile backend")
    linear: str | None = _setting(
        None,
        "a registered (n,k),(k,m)->(n,m) op for both linear layers (default: the seed's x.mm(w))",
        group=WHAT,
        metavar="NAME",
        model=True,
    )
    loss: str | None = _setting(
        None,
        "a registered (n,m),(n,m)->() op as the loss (default: the seed's (y_pred - y).pow(2).sum())",
        group=WHAT,
        metavar="NAME",
        model=True,
    )
    deterministic: bool = _setting(
        False,
        "MKL's reproducible mode, one intra-op thread and deterministic kernels: bit-identical results "
        "in every process on this machine, slower on large sizes (see docs/trainer.md)",
    )
    checkpoint: str | None = _setting(
        None,
        "write weights, optimizer, step and RNG here atomically, at the end and every "
        "`checkpoint_every` steps; one run at a time per PATH (default with `resume`: the file resumed from)",
        group=CHECKPOINTS,
        metavar="PATH",
    )
    checkpoint_every: int | None = _setting(
        None,
        "write the checkpoint every K steps too (needs `checkpoint`)",
        group=CHECKPOINTS,
        metavar="K",
        check=_positive_int,
    )
    resume: str | None = _setting(
        None,
        "continue from a checkpoint, with its settings unless given here",
        group=CHECKPOINTS,
        metavar="PATH",
    )
    data: str = _setting(
        "random",
        "random: the seed's; digits: scikit-learn's 8x8 digits, held-out accuracy reported (needs "
        "opzoo[data]); or module:function returning (x_train, y_train, x_test, y_test)",
        group=WHAT,
        metavar="NAME",
        model=True,
    )

    def validate(self) -> None:
        """Raise ConfigError naming the first invalid setting.

        The settings alone, without torch: each value by its record, in the order of the fields, then
        the rules between settings. ``_preflight.check`` runs this first, then what depends on the
        machine (the device, memory, the checkpoint's folder, the compile backend).
        """
        for s in SETTINGS:
            problem = s.problem(getattr(self, s.name))
            if problem:
                raise ConfigError(problem)
        if self.checkpoint_every is not None and self.checkpoint is None:
            raise ConfigError("`checkpoint_every` needs a `checkpoint` path")
        if self.compile and self.optimizer != "manual":
            raise ConfigError("`compile` compiles the seed's manual update; it does not take an `optimizer`")
        if self.data != "random" and self.compile:
            raise ConfigError(
                "`compile` trains on the seed's random data only, not on mini-batches of `data`"
            )
        # A backend without `compile` was ignored: it hid a typo (`--compile-backend nosuch`).
        if not self.compile and self.compile_backend != "inductor":
            raise ConfigError(f"`compile_backend` {self.compile_backend!r} is taken with `compile` only")


def _settings() -> tuple[Setting, ...]:
    """The records of TrainConfig's fields; a setting of type ``X | None`` is of type X."""
    hints = typing.get_type_hints(TrainConfig)
    out = []
    for f in fields(TrainConfig):
        help, record = f.metadata["setting"]
        kind = hints[f.name]
        if isinstance(kind, types.UnionType):
            (kind,) = [t for t in typing.get_args(kind) if t is not type(None)]
        default = f.default_factory() if f.default is MISSING else f.default  # type: ignore[misc]
        out.append(Setting(f.name, typing.get_origin(kind) or kind, default, help, **record))
    return tuple(out)


#: Every setting of TrainConfig, in the order of its fields.
SETTINGS = _settings()
# Settings that define the model and its data; a resumed run must agree with its checkpoint on them.
MODEL_FIELDS = tuple(s.name for s in SETTINGS if s.model)
