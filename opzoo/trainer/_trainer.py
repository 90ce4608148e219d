"""The generic trainer: the seed's bias-free two-layer network, with any registered op as activation.

With the defaults it is the seed program (000_1f2b50ab3c518129.txt): x, y, w1, w2 drawn with
``torch.randn`` in that order; ``y_pred = act(x.mm(w1)).mm(w2)``; the sum of squared errors; 500
steps of ``w -= lr * w.grad`` outside autograd, then the gradients zeroed.
"""

from __future__ import annotations

import contextlib
import math
import os
import time
import warnings
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Mapping

import torch

from opzoo import _lifetime
from opzoo.exceptions import ConfigError, ContractError, DivergedError
from opzoo.nn import Activation, TorchActivation
from opzoo.trainer import _data, _distributed, _preflight, _process, _resume, _update
from opzoo.trainer._compiled import compiled_step
from opzoo.trainer._config import HELD_OUT_DEFAULTS, TrainConfig
from opzoo.trainer._distributed import World
from opzoo.trainer._network import build
from opzoo.trainer._preflight import DTYPES

if TYPE_CHECKING:
    from opzoo.core._registry import Registry


@dataclass
class TrainResult:
    """What a run returns: losses, timings and the final weights."""

    config: TrainConfig
    label: str
    losses: list[float]  # one per step, from step 0 (including steps before a resume)
    steps_run: int  # steps run by this call (fewer than config.steps after a resume)
    wall_time: float
    weights: dict[str, torch.Tensor]
    test_accuracy: float | None = None  # on held-out data; None on the seed's random data
    diverged_at: int | None = None  # the step whose loss was not finite, in a comparison

    @property
    def final_loss(self) -> float:
        return self.losses[-1] if self.diverged_at is None else math.inf

    @property
    def steps_per_sec(self) -> float:
        return self.steps_run / self.wall_time if self.wall_time > 0 else math.inf

    def logged(self) -> list[tuple[int, float]]:
        """Return (step, loss) at the log steps, as the seed prints them."""
        every = self.config.log_every
        return [(t, v) for t, v in enumerate(self.losses) if t % every == every - 1]

    def to_dict(self) -> dict[str, Any]:
        return {
            "activation": self.label,
            "final_loss": self.final_loss if self.diverged_at is None else None,  # JSON has no inf
            "logged": [{"step": t, "loss": v} for t, v in self.logged()],
            "steps_run": self.steps_run,
            "steps_per_sec": self.steps_per_sec,
            "wall_time": self.wall_time,
            "test_accuracy": self.test_accuracy,
            "diverged_at": self.diverged_at,
            "config": asdict(self.config) | {"act_args": dict(self.config.act_args)},
        }


def config_for(data: str = "random", **given: Any) -> TrainConfig:
    """Return a TrainConfig for ``data``: its defaults (HELD_OUT_DEFAULTS, and the data set's own d_in and
    d_out), then the settings ``given``, which win."""
    defaults: dict[str, Any] = {}
    if data != "random":
        ds = _data.load(data)
        defaults.update(HELD_OUT_DEFAULTS, d_in=ds.d_in, d_out=ds.d_out)
    return TrainConfig(data=data, **{**defaults, **given})


def accuracy(net: Any, data: Mapping[str, torch.Tensor], w1: torch.Tensor, w2: torch.Tensor) -> float:
    """The fraction of test rows whose largest output is the target's class."""
    with torch.no_grad():
        pred = net.linear(net.act(net.linear(data["x_test"], w1)), w2)
        return (pred.argmax(1) == data["y_test"].argmax(1)).double().mean().item()


def train(
    config: TrainConfig | None = None, *, registry: Registry | None = None, **overrides: Any
) -> TrainResult:
    """Train the seed's network with one activation; keywords override ``config``'s fields.

    Ops are looked up in ``registry`` (the default one if None). on_log(step, loss) and progress
    are not part of the config: pass them through :func:`run`.
    """
    if config is None:
        config = config_for(**overrides)
    else:
        config = replace(config, **overrides)
    return run(config, registry=registry)


def run(
    config: TrainConfig,
    *,
    registry: Registry | None = None,
    data: Mapping[str, torch.Tensor] | None = None,
    on_log: Callable[[int, float], None] | None = None,
    on_warning: Callable[[str], None] | None = None,
    progress: bool = False,
    stop_on_divergence: bool = False,
    world: World | None = None,
) -> TrainResult:
    """Train with ``config``; ``data`` (x, y, w1, w2) is drawn when not given.

    ``on_warning`` hears of problems the run survives (a checkpoint write that failed and will be
    tried again); by default they are Python warnings. A non-finite loss raises DivergedError, or,
    with ``stop_on_divergence``, ends the run with ``diverged_at`` set (a comparison goes on).
    ``world``: this process's rank in a torchrun job (inside its process group), which trains on its
    shard of each batch (opzoo/trainer/_distributed.py); None for one process.
    """
    if world is not None and not world.main:
        config = replace(config, checkpoint=None, checkpoint_every=None)  # only rank 0 writes
    warn = on_warning or (lambda message: warnings.warn(message, RuntimeWarning, stacklevel=3))
    with contextlib.ExitStack() as stack:

        def prepare() -> _Prepared:
            device = _preflight.check(config)
            resolved = _resolved(config)
            _process.scoped(stack, resolved, device)
            return _prepare(resolved, device, registry, data, world)

        ready = prepare() if world is None else _distributed.agree(world, prepare)
        return _train(ready, on_log, warn, progress, stop_on_divergence)


def _resolved(config: TrainConfig) -> TrainConfig:
    # Paths mean what they meant when given: a later chdir (or a resume elsewhere) changes nothing.
    return replace(
        config,
        checkpoint=config.checkpoint and os.path.abspath(config.checkpoint),
        resume=config.resume and os.path.abspath(config.resume),
    )


@dataclass
class _Prepared:
    """A run ready for its first step: the network, its data and parameters, restored if resumed."""

    config: TrainConfig
    net: Any
    data: Mapping[str, torch.Tensor]
    params: dict[str, torch.Tensor]
    optimizer: torch.optim.Optimizer | None
    rates: dict[str, float]
    losses: list[float]  # before a resume's first step
    loss_at: Callable[[int], tuple[torch.Tensor | None, float]]  # step -> (loss to backward, its value)


def _prepare(
    config: TrainConfig,
    device: torch.device,
    registry: Registry | None,
    data: Mapping[str, torch.Tensor] | None,
    world: World | None,
) -> _Prepared:
    net = build(config.activation, config.act_args, linear=config.linear, loss=config.loss, registry=registry)
    state = _resume.read_checkpoint(config.resume) if config.resume else None
    if state is not None:
        _resume.check_resumable(config, state, net.act)
        data = state["data"]
    elif data is None:
        data = _data.make_data(config, device)
    x, y = data["x"].to(device), data["y"].to(device)
    w1 = data["w1"].detach().clone().to(device).requires_grad_()
    w2 = data["w2"].detach().clone().to(device).requires_grad_()
    if world is not None:  # DDP finds the parameters of a module
        w1, w2 = torch.nn.Parameter(w1), torch.nn.Parameter(w2)
    net.act = net.act.to(device=device, dtype=DTYPES[config.dtype])
    params = {"w1": w1, "w2": w2, **{f"act.{k}": p for k, p in net.act.named_parameters()}}

    losses: list[float] = []
    optimizer = _update.optimizer(config, params)
    rates = _update.learning_rates(config, params)
    if state is not None:
        losses = _resume.restore(config, state, params, optimizer)
    if len(losses) > config.steps:
        raise ConfigError(f"the checkpoint is at step {len(losses)}, past `steps` {config.steps}")

    held_out = config.data != "random"
    loss_at: Callable[[int], tuple[torch.Tensor | None, float]]
    if world is not None:
        loss_at = _distributed_loss(config, world, net, x, y, w1, w2, device)
    elif config.compile:
        step = compiled_step(
            net, params, x, y, rates, backend=config.compile_backend, label=config.activation
        )

        def loss_at(t: int) -> tuple[torch.Tensor | None, float]:
            return None, step().item()  # the compiled step has updated the weights already

    else:

        def loss_at(t: int) -> tuple[torch.Tensor | None, float]:
            if held_out:
                rows = _data.batch_rows(config, len(x), t).to(device)
                loss = net(x[rows], y[rows], w1, w2)
            else:
                loss = net(x, y, w1, w2)
            return loss, loss.item()

    return _Prepared(config, net, data, params, optimizer, rates, losses, loss_at)


def _distributed_loss(
    config: TrainConfig,
    world: World,
    net: Any,
    x: torch.Tensor,
    y: torch.Tensor,
    w1: torch.Tensor,
    w2: torch.Tensor,
    device: torch.device,
) -> Callable[[int], tuple[torch.Tensor | None, float]]:
    """Each step's loss on this rank's shard of the global batch (the one a single process takes),
    and the global batch's loss, the same on every rank."""
    held_out = config.data != "random"
    _distributed.check_batch(world, min(config.batch, len(x)) if held_out else len(x))
    if config.loss is not None:
        first = _data.batch_rows(config, len(x), 0).to(device) if held_out else slice(None)
        _distributed.check_additive(world, net, x[first], y[first], w1, w2)
    model = _distributed.data_parallel(net, w1, w2, str(device))

    def loss_at(t: int) -> tuple[torch.Tensor | None, float]:
        if held_out:
            rows = _distributed.shard(world, _data.batch_rows(config, len(x), t)).to(device)
            loss = model(x[rows], y[rows])
        else:
            loss = model(_distributed.shard(world, x), _distributed.shard(world, y))
        return loss, _distributed.global_loss(loss)

    return loss_at


def _train(
    ready: _Prepared,
    on_log: Callable[[int, float], None] | None,
    warn: Callable[[str], None],
    progress: bool,
    stop_on_divergence: bool,
) -> TrainResult:
    config, params, optimizer, data = ready.config, ready.params, ready.optimizer, ready.data
    losses = ready.losses
    start = len(losses)
    diverged_at = None
    bar = _progress_bar(config, start) if progress else None
    began = time.perf_counter()
    stopped = None  # the signal that stopped the run between two steps (see _lifetime.deferred)
    try:
        for t in range(start, config.steps):
            if (stopped := _lifetime.requested()) is not None:
                break
            loss, value = ready.loss_at(t)
            if not math.isfinite(value):
                if stop_on_divergence:
                    diverged_at = t
                    break
                raise DivergedError(
                    f"loss became {value} at step {t} with activation {config.activation!r}; "
                    f"try a smaller `lr` (now {config.lr:g})"
                )
            losses.append(value)
            if t % config.log_every == config.log_every - 1 and on_log is not None:
                on_log(t, value)
            if loss is not None:
                _backward(config, loss, params["w1"], first=t == start)
                _update.step(optimizer, params, ready.rates)
            if bar is not None:
                bar.update(1)
                bar.set_postfix(loss=f"{value:.4g}", refresh=False)
            every = config.checkpoint_every
            if config.checkpoint and every and (t + 1) % every == 0 and t + 1 < config.steps:
                _resume.save_or_report(config, params, optimizer, data, losses, warn)
    finally:
        if bar is not None:
            bar.close()
    wall = time.perf_counter() - began
    if config.checkpoint and (stopped is None or len(losses) > start):
        _resume.save_or_report(config, params, optimizer, data, losses)
    weights = {k: p.detach().clone() for k, p in params.items()}
    label = config.activation + _args_label(ready.net.act)
    acc = None
    if config.data != "random" and diverged_at is None:
        device = params["w1"].device
        acc = accuracy(ready.net, {k: v.to(device) for k, v in data.items()}, params["w1"], params["w2"])
    steps_run = len(losses) - start
    result = TrainResult(config, label, losses, steps_run, wall, weights, acc, diverged_at)
    if stopped is not None:
        raise _lifetime.Stopped(stopped, [result])
    return result


def _backward(config: TrainConfig, loss: torch.Tensor, w1: torch.Tensor, *, first: bool) -> None:
    """Run backward; a gradient of the wrong count or shape, or none for w1, names the activation."""
    try:
        loss.backward()
    except RuntimeError as exc:
        message = (str(exc).strip().splitlines() or [""])[0]
        # autograd's own check of what a Function's backward returned, e.g. "Function
        # MyOpBackward returned an invalid gradient at index 0 - got [12] but expected shape ..."
        if (
            "returned an incorrect number of gradients" in message
            or "returned an invalid gradient" in message
        ):
            raise ContractError(
                f"activation {config.activation!r} has a broken backward: {message}"
            ) from None
        raise
    if first and w1.grad is None:
        raise ContractError(
            f"activation {config.activation!r} returned None as the gradient of its input, so w1 "
            "would never learn; its backward must return a tensor shaped like the input"
        )


def _args_label(act: Activation | TorchActivation) -> str:
    if not act.params:
        return ""
    return "(" + ", ".join(f"{k}={v:g}" for k, v in act.params.items()) + ")"


def _progress_bar(config: TrainConfig, start: int) -> Any:
    try:
        from tqdm import tqdm
    except ImportError:  # the bar is a nicety; train without it
        return None
    return tqdm(total=config.steps, initial=start, desc=config.activation, unit="step", leave=False)
