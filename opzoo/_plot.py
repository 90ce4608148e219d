"""Loss curves with matplotlib (optional dependency; imported only when a plot is asked for)."""

from __future__ import annotations

from typing import Sequence

from opzoo.exceptions import ConfigError


def plot_losses(path: str, runs: Sequence[tuple[str, Sequence[float]]], title: str) -> None:
    """Draw each run's per-step loss on one log-scale chart and save it to ``path``."""
    try:
        import matplotlib

        matplotlib.use("Agg")  # files only; never needs a display
        import matplotlib.pyplot as plt
    except ImportError:
        raise ConfigError("--plot needs matplotlib: pip install 'opzoo[train]'") from None
    fig, ax = plt.subplots(figsize=(7, 4.2), dpi=110)
    for label, losses in runs:
        ax.plot(range(len(losses)), losses, label=label, linewidth=1.4)
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (sum of squared errors)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path)
    except (OSError, ValueError) as exc:
        raise ConfigError(f"cannot write plot {path!r}: {exc}") from None
    finally:
        plt.close(fig)
