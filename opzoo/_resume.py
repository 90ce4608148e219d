"""Checkpoints of a training run: what is saved, and the checks and restore of a resume.

The file format and its atomic writes and lock are :mod:`opzoo._checkpoint`'s; this module knows
what a run puts in it (config, weights, optimizer, RNG, data, losses) and what a resume must agree on.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Mapping

import torch

from opzoo import _checkpoint
from opzoo._config import MODEL_FIELDS, TrainConfig
from opzoo.exceptions import CheckpointError, CheckpointWriteError


def save(
    config: TrainConfig,
    params: Mapping[str, torch.Tensor],
    optimizer: Any,
    data: Mapping[str, torch.Tensor],
    losses: list[float],
) -> None:
    assert config.checkpoint is not None
    _checkpoint.save(
        config.checkpoint,
        {
            "config": {f.name: _plain(getattr(config, f.name)) for f in fields(config)},
            "weights": {k: p.detach().cpu() for k, p in params.items()},
            "optimizer": optimizer.state_dict() if optimizer is not None else None,
            "rng": torch.get_rng_state(),
            "data": {k: v.detach().cpu() for k, v in data.items()},
            "losses": list(losses),
        },
    )


def save_or_report(
    config: TrainConfig,
    params: Mapping[str, torch.Tensor],
    optimizer: Any,
    data: Mapping[str, torch.Tensor],
    losses: list[float],
    warn: Callable[[str], None] | None = None,
) -> None:
    """Save. A failed write (a full disk) keeps the last good file; during the run it is a warning
    (``warn``) and tried again at the next interval, at the end (no ``warn``) CheckpointWriteError."""
    try:
        save(config, params, optimizer, data, losses)
    except OSError as exc:
        what = f"checkpoint {config.checkpoint!r} at step {len(losses)}: {exc.strerror or exc}"
        if warn is None:
            raise CheckpointWriteError(
                f"cannot write the final {what}; the last good one there is kept"
            ) from None
        again = f"trying again in {config.checkpoint_every} steps"
        warn(f"cannot write {what}; the last good one is kept, {again}")


def _plain(value: Any) -> Any:
    return dict(value) if isinstance(value, Mapping) else value


def read_checkpoint(path: str) -> dict[str, Any]:
    """Load a checkpoint and check that its config is one this opzoo can resume."""
    state = _checkpoint.load(path)
    config = state["config"]
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(config) - known)
    if unknown:
        from opzoo import __version__

        raise CheckpointError(
            f"checkpoint {path!r} has setting {unknown[0]!r}, which this opzoo ({__version__}) does "
            f"not know; it was written by {_checkpoint.written_by(state)}"
        )
    missing = [name for name in MODEL_FIELDS if name not in config]
    if missing:
        raise CheckpointError(
            f"checkpoint {path!r} has no setting {missing[0]!r} (written by {_checkpoint.written_by(state)})"
        )
    return state


def check_resumable(config: TrainConfig, state: Mapping[str, Any], act: torch.nn.Module) -> None:
    saved = state["config"]
    for name in MODEL_FIELDS:
        mine = _plain(getattr(config, name))
        if saved[name] != mine:
            raise CheckpointError(
                f"checkpoint {config.resume!r} was trained with {name}={saved[name]!r}, "
                f"not {mine!r}; resume with the same settings"
            )
    # The seed only drew the initial data, which the checkpoint holds: another one would be ignored.
    if config.seed is not None and saved.get("seed") != config.seed:
        raise CheckpointError(
            f"checkpoint {config.resume!r} was trained with seed={saved.get('seed')!r}, not "
            f"{config.seed!r}; a resumed run continues the saved data and weights, so leave out the seed"
        )
    for where, name, shape in expected_shapes(config, act):
        got = tuple(state[where][name].shape) if name in state[where] else None
        if got != shape:
            raise CheckpointError(
                f"checkpoint {config.resume!r} has {where} {name!r} of shape {got}, but its settings "
                f"need {shape} (written by {_checkpoint.written_by(state)})"
            )


def expected_shapes(config: TrainConfig, act: torch.nn.Module) -> list[tuple[str, str, tuple[int, ...]]]:
    b, d_in, h, d_out = config.batch, config.d_in, config.hidden, config.d_out
    weights = {"w1": (d_in, h), "w2": (h, d_out)}
    weights.update({f"act.{k}": tuple(p.shape) for k, p in act.named_parameters()})
    data = {"x": (b, d_in), "y": (b, d_out), "w1": (d_in, h), "w2": (h, d_out)}
    if config.data != "random":
        # Rows of a held-out data set are its own (the checkpoint holds them); the columns must fit.
        data = {"w1": (d_in, h), "w2": (h, d_out)}
    return [("data", k, v) for k, v in data.items()] + [("weights", k, v) for k, v in weights.items()]


def restore(
    config: TrainConfig, state: Mapping[str, Any], params: Mapping[str, torch.Tensor], optimizer: Any
) -> list[float]:
    """Put the checkpoint's weights, optimizer and RNG state in place; return its losses."""
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(state["weights"][name])
    if optimizer is not None and state["optimizer"] is not None:
        try:
            optimizer.load_state_dict(state["optimizer"])
        except (ValueError, KeyError, TypeError, RuntimeError) as exc:
            raise CheckpointError(
                f"checkpoint {config.resume!r} has an optimizer state that does not fit: {exc} "
                f"(written by {_checkpoint.written_by(state)})"
            ) from None
    try:
        torch.set_rng_state(state["rng"])
    except RuntimeError as exc:
        raise CheckpointError(
            f"checkpoint {config.resume!r} has an rng state torch refuses: {exc} "
            f"(written by {_checkpoint.written_by(state)})"
        ) from None
    return list(state["losses"])


def saved_config(path: str) -> dict[str, Any]:
    """Return the config stored in a checkpoint (the CLI resumes with it)."""
    return dict(read_checkpoint(path)["config"])
