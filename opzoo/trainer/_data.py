"""What a run trains on: the seed's random tensors, scikit-learn's digits, or a user's loader, with
the initial weights (:func:`make_data`), and the mini-batches of held-out data (:func:`batch_rows`).

``random`` is drawn as the seed program draws it, float for float. Every other data set is a
held-out classification task: train and test inputs, and one-hot targets, so that the seed's
sum-of-squares loss applies unchanged and accuracy is the argmax of the prediction.
"""

from __future__ import annotations

import functools
import importlib
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import torch

from opzoo._records import PLUGIN_ERRORS
from opzoo.exceptions import ConfigError, one_line
from opzoo.trainer._preflight import DTYPES, resolve_device

if TYPE_CHECKING:
    from opzoo.trainer._config import TrainConfig

#: The split of digits into train and test is fixed, whatever --seed: every run sees the same test set.
SPLIT_SEED = 0
TEST_FRACTION = 0.2
BUILTIN = ("random", "digits")


@dataclass(frozen=True)
class Dataset:
    """Standardised inputs and one-hot targets, train and test."""

    x: torch.Tensor
    y: torch.Tensor
    x_test: torch.Tensor
    y_test: torch.Tensor

    @property
    def d_in(self) -> int:
        return self.x.shape[1]

    @property
    def d_out(self) -> int:
        return self.y.shape[1]


def make_data(config: TrainConfig, device: torch.device | None = None) -> dict[str, torch.Tensor]:
    """Draw x, y, w1, w2 exactly as the seed does, after ``torch.manual_seed(seed)`` if given, on
    ``device`` (by default the config's).

    With another ``data`` than random, x and y are its training set (and x_test, y_test its test
    set); w1 and w2 are drawn as the seed draws them.
    """
    if config.seed is not None:
        torch.manual_seed(config.seed)
    device = resolve_device(config.device) if device is None else device
    kw = {"device": device, "dtype": DTYPES[config.dtype]}
    if config.data != "random":
        return _held_out_data(config, kw)
    x = torch.randn(config.batch, config.d_in, **kw)
    y = torch.randn(config.batch, config.d_out, **kw)
    w1 = torch.randn(config.d_in, config.hidden, **kw)
    w2 = torch.randn(config.hidden, config.d_out, **kw)
    return {"x": x, "y": y, "w1": w1, "w2": w2}


def _held_out_data(config: TrainConfig, kw: dict[str, Any]) -> dict[str, torch.Tensor]:
    ds = load(config.data)
    if (config.d_in, config.d_out) != (ds.d_in, ds.d_out):
        raise ConfigError(
            f"data {config.data!r} has d-in={ds.d_in} and d-out={ds.d_out}, but the settings say "
            f"d-in={config.d_in} and d-out={config.d_out}; leave them out"
        )
    # Drawn as the seed draws them, then scaled by 1/sqrt(fan-in): the seed's unit weights on
    # standardised inputs give outputs of standard deviation ~sqrt(d_in * hidden / 2) (about 57 on
    # digits) against one-hot targets, which no learning rate recovers from in a few epochs.
    w1 = torch.randn(config.d_in, config.hidden, **kw) / math.sqrt(config.d_in)
    w2 = torch.randn(config.hidden, config.d_out, **kw) / math.sqrt(config.hidden)
    tensors = {"x": ds.x, "y": ds.y, "x_test": ds.x_test, "y_test": ds.y_test}
    return {k: v.to(**kw) for k, v in tensors.items()} | {"w1": w1, "w2": w2}


def batch_rows(config: TrainConfig, n: int, t: int) -> torch.Tensor:
    """The rows of mini-batch ``t``: epochs of a fixed permutation each, drawn from the seed and the
    epoch alone, so that a resumed run sees the same batches as an uninterrupted one."""
    per_epoch = max(n // config.batch, 1)
    epoch, i = divmod(t, per_epoch)
    return _epoch_order(config.seed, n, epoch)[i * config.batch : (i + 1) * config.batch]


@functools.lru_cache(maxsize=4)
def _epoch_order(seed: int | None, n: int, epoch: int) -> torch.Tensor:
    # Its own generator: the global RNG stays as the seed's program leaves it.
    base = 0 if seed is None else seed
    g = torch.Generator().manual_seed((base * 1_000_003 + epoch) % 2**63)
    return torch.randperm(n, generator=g)


def load(name: str) -> Dataset:
    """Return data set ``name``: ``digits``, or ``module:function`` (see :func:`from_loader`)."""
    if name == "digits":
        return digits()
    if ":" in name:
        return from_loader(name)
    raise ConfigError(f"unknown data {name!r}; choose from {', '.join(BUILTIN)}, or give module:function")


def digits() -> Dataset:
    """scikit-learn's bundled 8x8 digits (1,797 images, 10 classes), split and standardised."""
    try:
        import sklearn  # noqa: F401  (first: a blocked parent must fail even if a submodule is loaded)
        from sklearn.datasets import load_digits
    except ImportError:
        raise ConfigError("data 'digits' needs scikit-learn: pip install 'opzoo[data]'") from None
    bunch = load_digits()  # read from the installed package: no download
    x = torch.as_tensor(bunch.data, dtype=torch.float64)
    labels = torch.as_tensor(bunch.target, dtype=torch.int64)
    order = torch.randperm(len(x), generator=torch.Generator().manual_seed(SPLIT_SEED))
    n_test = round(len(x) * TEST_FRACTION)
    test, train = order[:n_test], order[n_test:]
    return _prepared(x[train], labels[train], x[test], labels[test], "digits")


def from_loader(spec: str) -> Dataset:
    """Call ``module:function``, which returns ``(x_train, y_train, x_test, y_test)``.

    x is 2-D (rows, features); y is either class indices (1-D integers) or one-hot / score rows
    (2-D, one column per class). Inputs are standardised with the train statistics, as digits is.
    Whatever the loader does (raise, exit, return meta, sparse, NaN or absurd labels) is one
    ConfigError line.
    """
    module_name, _, attr = spec.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import data loader {spec!r}: {exc}") from None
    except PLUGIN_ERRORS as exc:  # the user's module may raise anything at import, sys.exit too
        raise ConfigError(f"cannot import data loader {spec!r}: {one_line(exc)}") from None
    function: Callable[[], Any] | None = getattr(module, attr, None)
    if function is None:
        raise ConfigError(f"data loader {spec!r}: module {module_name!r} has no {attr!r}")
    if not callable(function):
        raise ConfigError(f"data loader {spec!r} is not a function")
    try:
        got = function()
    except PLUGIN_ERRORS as exc:  # SystemExit(0) ended the command with exit 0, nothing trained
        raise ConfigError(f"data loader {spec!r} raised {one_line(exc, with_type=True)}") from None
    tensors = isinstance(got, (tuple, list)) and all(isinstance(t, torch.Tensor) for t in got)
    if not (tensors and len(got) == 4):
        raise ConfigError(f"data loader {spec!r} must return four tensors (x_train, y_train, x_test, y_test)")
    for name, t in zip(("x_train", "y_train", "x_test", "y_test"), got):
        problem = _tensor_problem(t, labels=name.startswith("y"))
        if problem:
            raise ConfigError(f"data loader {spec!r} returned {name} {problem}")
    x, y, x_test, y_test = got
    return _prepared(x.cpu(), y.cpu(), x_test.cpu(), y_test.cpu(), spec)


def _tensor_problem(t: torch.Tensor, *, labels: bool) -> str | None:
    """Why ``t`` is no data opzoo trains on (dense, on the CPU or a GPU, real, finite), or None."""
    if t.layout != torch.strided or t.is_quantized:
        return f"of layout {t.layout}; give a dense tensor (.to_dense())"
    if t.device.type not in ("cpu", "cuda"):
        return f"on device {t.device}; give a CPU or CUDA tensor"
    if t.is_complex() or (t.dtype == torch.bool and not labels):
        return f"of dtype {t.dtype}; give real numbers"
    if t.dtype.is_floating_point and not bool(torch.isfinite(t).all()):
        bad = int((~torch.isfinite(t)).sum())
        return f"with {bad} value(s) that are not finite (NaN or infinite)"
    return None


def _prepared(
    x: torch.Tensor, y: torch.Tensor, x_test: torch.Tensor, y_test: torch.Tensor, name: str
) -> Dataset:
    if x.dim() != 2 or x_test.dim() != 2 or x.shape[1] != x_test.shape[1]:
        raise ConfigError(
            f"data {name!r}: x_train and x_test must be 2-D with the same columns, got "
            f"{tuple(x.shape)} and {tuple(x_test.shape)}"
        )
    if len(x) != len(y) or len(x_test) != len(y_test) or len(x) == 0 or len(x_test) == 0:
        raise ConfigError(f"data {name!r}: x and y must have the same (non-zero) number of rows")
    classes = max(_classes(y, name), _classes(y_test, name))
    _check_room(len(y) + len(y_test), classes, name)
    y, y_test = _one_hot(y, classes, name), _one_hot(y_test, classes, name)
    x, x_test = _standardized(x.double(), x_test.double(), name)
    return Dataset(x, y, x_test, y_test)


def _standardized(x: torch.Tensor, x_test: torch.Tensor, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Both inputs standardized with the train statistics only: the test set must not leak into
    training. Constant columns (digits has some: pixels that are always 0) keep a scale of 1 instead
    of dividing by 0. Statistics that are not numbers are refused: one row has no spread, and finite
    features near 1e300 have one that overflows (every feature would be trained on as 0)."""
    if len(x) < 2:
        raise ConfigError(f"data {name!r} has 1 training row: standardizing its features needs at least 2")
    mean, std = x.mean(0), x.std(0)
    bad = ~(mean.isfinite() & std.isfinite())
    if bool(bad.any()):
        j = int(bad.nonzero()[0, 0])
        raise ConfigError(
            f"data {name!r}: x_train's column {j} is too large to standardize (its values reach "
            f"{float(x[:, j].abs().max()):.3g}; their spread overflows float64): scale the features down"
        )
    std = torch.where(std > 0, std, torch.ones_like(std))
    scaled = (x_test - mean) / std
    bad = ~scaled.isfinite().all(0)
    if bool(bad.any()):
        j = int(bad.nonzero()[0, 0])
        raise ConfigError(
            f"data {name!r}: x_test's column {j} overflows float64 when standardized (its values reach "
            f"{float(x_test[:, j].abs().max()):.3g}, x_train's spread is {float(std[j]):.3g}): scale the "
            "features down"
        )
    return (x - mean) / std, scaled


def _classes(y: torch.Tensor, name: str) -> int:
    if y.dim() == 1:
        if y.dtype.is_floating_point or y.dtype == torch.bool or (len(y) and int(y.min()) < 0):
            raise ConfigError(f"data {name!r}: 1-D y must hold class indices (non-negative integers)")
        return int(y.max()) + 1 if len(y) else 0
    return y.shape[1] if y.dim() == 2 else 0


def _check_room(rows: int, classes: int, name: str) -> None:
    """Refuse labels whose one-hot targets cannot fit in memory (a label of 10**9 asked for 240 GB)."""
    from opzoo._host import _bytes, memory_available

    needed = rows * classes * 8  # float64 one-hot rows
    free = memory_available(torch.device("cpu"))
    if free is not None and needed > free:
        raise ConfigError(
            f"data {name!r} has {classes} classes (its largest label plus one): one-hot targets for its "
            f"{rows} rows need about {_bytes(needed)} of memory, but cpu has {_bytes(free)} available"
        )


def _one_hot(y: torch.Tensor, classes: int, name: str) -> torch.Tensor:
    if y.dim() == 1:
        if y.dtype.is_floating_point or y.dtype == torch.bool or (len(y) and int(y.min()) < 0):
            raise ConfigError(f"data {name!r}: 1-D y must hold class indices (non-negative integers)")
        return torch.nn.functional.one_hot(y.long(), classes).double()
    if y.dim() == 2 and y.shape[1] == classes:
        return y.double()
    raise ConfigError(f"data {name!r}: y must be 1-D class indices or 2-D with one column per class")
