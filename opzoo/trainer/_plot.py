"""Loss curves with matplotlib (optional dependency; imported only when a plot is asked for)."""

from __future__ import annotations

import io
import os
from typing import TYPE_CHECKING, Any, Sequence

from opzoo import _files
from opzoo.exceptions import ConfigError

if TYPE_CHECKING:
    from opzoo.trainer._config import TrainConfig
    from opzoo.trainer._trainer import TrainResult


def _pyplot() -> Any:
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; never needs a display
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("plot needs matplotlib: pip install 'opzoo[train]'") from None
    return plt


def plot_runs(
    path: str, config: TrainConfig, results: Sequence[TrainResult], *, seeds: int | None = None
) -> None:
    """Draw the losses of ``results``, trained with ``config``'s sizes: each run's curve, or with
    ``seeds`` (a comparison over that many seeds) each activation's mean and band."""
    title = f"opzoo train: N={config.batch}, D_in={config.d_in}, H={config.hidden}, lr={config.lr:g}"
    if seeds is None:
        plot_losses(path, [(r.label, r.losses) for r in results], title)
        return
    runs: dict[str, list[Sequence[float]]] = {}
    for r in results:
        runs.setdefault(r.label, []).extend([r.losses] if r.diverged_at is None else [])
    plot_bands(path, list(runs.items()), f"{title}, {seeds} seeds")


def plot_bands(path: str, runs: Sequence[tuple[str, Sequence[Sequence[float]]]], title: str) -> None:
    """Draw each activation's mean loss over its seeds, with a min-max band, and save it to ``path``.

    Each entry holds one loss history per seed (runs that diverged left out); an activation with
    none is drawn as a legend entry only, so that it is seen to be missing.
    """
    import numpy as np

    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, histories in runs:
        if not histories:
            ax.plot([], [], label=f"{label} (diverged)")
            continue
        curves = np.asarray(histories, dtype=float)
        steps = np.arange(curves.shape[1])
        (line,) = ax.plot(steps, curves.mean(0), label=f"{label} (mean of {len(curves)})", linewidth=1.4)
        ax.fill_between(steps, curves.min(0), curves.max(0), color=line.get_color(), alpha=0.2, linewidth=0)
    _finish(fig, ax, path, title)


def plot_losses(path: str, runs: Sequence[tuple[str, Sequence[float]]], title: str) -> None:
    """Draw each run's per-step loss on one log-scale chart and save it to ``path``."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, losses in runs:
        ax.plot(range(len(losses)), losses, label=label, linewidth=1.4)
    _finish(fig, ax, path, title)


def _finish(fig: Any, ax: Any, path: str, title: str) -> None:
    plt = _pyplot()
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (sum of squared errors)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    # Drawn in memory, then written whole (temp file and rename): a full disk keeps the last plot.
    buffer = io.BytesIO()
    try:
        fig.savefig(buffer, format=os.path.splitext(path)[1][1:].lower() or None)
    except ValueError as exc:  # a format matplotlib does not write
        raise ConfigError(f"cannot write plot {path!r}: {exc}") from None
    finally:
        plt.close(fig)
    _files.write("plot", path, buffer.getbuffer())
