"""Pictures of an MPI run's wait states: a heatmap of waiting between ranks (waiter × cause), and each rank's waiting stacked by pattern."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from .waitstates import PATTERNS, WaitReport

_PATTERN_COLOURS = ("tab:red", "tab:orange", "tab:blue", "tab:cyan", "tab:purple", "tab:pink", "tab:green",
                    "tab:olive")


def write_plots(report: WaitReport, png: str | Path) -> list[Path]:
    """`png` (a heatmap: milliseconds each rank waited because of each other rank, every pattern with
    a cause) and `<stem>-ranks.png` beside it (per rank, its waiting stacked by pattern); the paths
    written. ImportError without matplotlib (monitors.heatmap.plotting says whether it is there)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    png = Path(png)
    ranks_png = png.with_name(f"{png.stem}-ranks{png.suffix or '.png'}")
    n = report.ranks
    pairs = np.array(report.pairs, dtype=np.float64).reshape(n, n) / 1e6
    fig, ax = plt.subplots(figsize=(2.5 + 0.45 * max(n, 4), 2.0 + 0.4 * max(n, 4)))
    image = ax.imshow(pairs, cmap="magma_r")
    fig.colorbar(image, ax=ax, label="ms waited")
    ticks = [f"r{r}" for r in range(n)] if n <= 32 else None
    if ticks:
        ax.set_xticks(range(n), ticks)
        ax.set_yticks(range(n), ticks)
    ax.set_xlabel("waited for rank (cause)")
    ax.set_ylabel("waiting rank")
    ax.set_title("who waits for whom")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)

    per_rank = np.array(report.per_rank, dtype=np.float64).reshape(n, len(PATTERNS)) / 1e6
    fig, ax = plt.subplots(figsize=(3.8 + 0.5 * max(n, 4), 3.8))
    bottom = np.zeros(n)
    for k, pattern in enumerate(PATTERNS):
        if per_rank[:, k].any():
            ax.bar([f"r{r}" for r in range(n)], per_rank[:, k], bottom=bottom, color=_PATTERN_COLOURS[k],
                   label=pattern.name)
            bottom += per_rank[:, k]
    ax.set_ylabel("ms waiting")
    ax.set_title("waiting per rank, by pattern")
    if bottom.any():
        ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(ranks_png, dpi=100)
    plt.close(fig)
    return [png, ranks_png]
