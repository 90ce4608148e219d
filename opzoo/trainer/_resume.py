"""Checkpoints of a training run: what is saved, and the checks and restore of a resume.

The file format and its atomic writes and lock are :mod:`opzoo.trainer._checkpoint`'s; this module knows
what a run puts in it (config, weights, optimizer, RNG, data, losses) and what a resume must agree on.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, Callable, Mapping

import torch

from opzoo.exceptions import CheckpointError, CheckpointWriteError
from opzoo.trainer import _checkpoint, _data
from opzoo.trainer._config import MODEL_FIELDS, TrainConfig
from opzoo.trainer._preflight import DTYPES


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
        from opzoo._version import __version__

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
    expected = expected_shapes(config, act)
    for where, name, shape in expected:
        got = tuple(state[where][name].shape) if name in state[where] else None
        if got != shape:
            raise CheckpointError(
                f"checkpoint {config.resume!r} has {where} {name!r} of shape {got}, but its settings "
                f"need {shape} (written by {_checkpoint.written_by(state)})"
            )
    problem = _parts_problem(config, state, {name for where, name, _ in expected if where == "weights"})
    if problem:
        raise CheckpointError(
            f"checkpoint {config.resume!r} {problem} (written by {_checkpoint.written_by(state)})"
        )


def _parts_problem(config: TrainConfig, state: Mapping[str, Any], weights: set[str]) -> str | None:
    """What in ``state`` its own settings do not account for: a weight the network has not, data of
    another kind than its ``data``, tensors of another dtype, more steps than the run was to take."""
    extra = sorted(set(state["weights"]) - weights)
    if extra:
        return f"has weights {extra[0]!r}, which its network does not have"
    held_out = set(_checkpoint.HELD_OUT_KEYS)
    if (config.data != "random") != held_out.issubset(state["data"]) or (
        config.data == "random" and held_out & set(state["data"])
    ):
        return f"has data {sorted(state['data'])}, which does not fit data={config.data!r}"
    dtype = DTYPES[config.dtype]
    for where in ("weights", "data"):
        for name, t in state[where].items():
            if t.dtype != dtype:
                return f"has {where} {name!r} of dtype {t.dtype}, but its settings say {config.dtype}"
    steps = state["config"].get("steps")
    if isinstance(steps, int) and len(state["losses"]) > steps:
        return f"has {len(state['losses'])} losses, more than the {steps} steps its run was to take"
    return None


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
    problem = optimizer_problem(config, state["optimizer"], optimizer, params, len(state["losses"]))
    if problem:
        raise CheckpointError(
            f"checkpoint {config.resume!r} has an optimizer state that {problem} "
            f"(written by {_checkpoint.written_by(state)})"
        )
    with torch.no_grad():
        for name, p in params.items():
            p.copy_(state["weights"][name])
    if optimizer is not None:
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


#: What each optimizer keeps per parameter; anything else in a checkpoint is refused.
_STATE_KEYS = {"sgd": {"momentum_buffer"}, "adam": {"step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"}}


def optimizer_problem(
    config: TrainConfig, saved: Any, optimizer: Any, params: Mapping[str, torch.Tensor], steps: int
) -> str | None:
    """Say how a checkpoint's optimizer state ``saved`` disagrees with the one ``config`` builds
    (``optimizer``, fresh): its settings (the learning rates above all) must be the config's, its
    per-parameter state must fit the parameters, and Adam's step counter must be the number of steps
    the losses record. None when it agrees."""
    if optimizer is None:
        return None if saved is None else f"the manual update (optimizer={config.optimizer!r}) has not"
    if saved is None:
        return f"is missing: optimizer={config.optimizer!r} keeps one"
    if set(saved) != {"state", "param_groups"} or not isinstance(saved["param_groups"], list):
        return "is not one torch.optim writes"
    mine = optimizer.state_dict()["param_groups"]
    theirs = saved["param_groups"]
    if len(theirs) != len(mine) or not all(isinstance(g, dict) for g in theirs):
        return f"has {len(theirs)} parameter groups, not the {len(mine)} of its settings"
    for i, (ours, group) in enumerate(zip(mine, theirs)):
        unknown = sorted(set(group) - set(ours), key=repr)
        if unknown:
            return f"sets {unknown[0]!r}, which {config.optimizer} does not have"
        for key, value in group.items():  # a key an older torch did not write gets torch's default
            if value != ours[key]:
                return f"sets {key}={value!r} for {list(params)[i]!r}, where its settings give {ours[key]!r}"
    shapes = [tuple(p.shape) for p in params.values()]
    if not isinstance(saved["state"], dict):
        return "is not one torch.optim writes"
    for index, entry in saved["state"].items():
        if not (isinstance(index, int) and 0 <= index < len(shapes)) or not isinstance(entry, dict):
            return f"has state for parameter {index!r}, which its network does not have"
        name = list(params)[index]
        for key, value in entry.items():
            if key not in _STATE_KEYS.get(config.optimizer, ()):
                return f"holds {key!r} for {name!r}, which {config.optimizer} does not keep"
            if value is None:
                continue
            if not isinstance(value, torch.Tensor):
                return f"holds {key!r} for {name!r} of type {type(value).__name__}, not a tensor"
            problem = _checkpoint.tensor_problem(value)
            if problem:
                return f"holds {key!r} for {name!r} {problem}"
            if key == "step":
                counted = value.item() if value.numel() == 1 else None
                if counted != steps:
                    shown = (
                        f"{counted:g}"
                        if counted is not None
                        else f"a tensor of shape {tuple(value.shape)} of"
                    )
                    return f"counts {shown} steps for {name!r}, but its losses record {steps}"
            elif tuple(value.shape) != shapes[index]:
                return f"holds {key!r} for {name!r} of shape {tuple(value.shape)}, not {shapes[index]}"
    return None


def saved_config(path: str, given: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Return the config stored in a checkpoint (the CLI resumes with it), less what names code.

    A ``data`` loader (``module:function``) is imported and called: a file must never decide that,
    so it is taken from ``given`` (the settings given on the command line) only, and a checkpoint
    that needs one while none is given is refused.
    """
    config = dict(read_checkpoint(path)["config"])
    data = config.get("data", "random")
    if not isinstance(data, str):
        raise CheckpointError(f"checkpoint {path!r} has data={data!r}, which is no data set")
    if data not in _data.BUILTIN:
        config.pop("data")
        if given is None or "data" not in given:
            raise CheckpointError(
                f"checkpoint {path!r} was trained on data from a loader, {data!r}; opzoo runs no code "
                f"a file names, so to resume give `data` {data} yourself, if you trust that code"
            )
    return config
