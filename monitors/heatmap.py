"""Pictures of an MPI run's traffic matrix: a heatmap of bytes between ranks, and bytes sent per host stacked by hop class."""

from __future__ import annotations

from pathlib import Path

from .matrix import HOPS, Matrix

INSTALL_HINT = "pip install 'eventspace[plot]'"
_HOP_COLOURS = ("tab:green", "tab:orange", "tab:red")


def plotting() -> bool:
    """Whether matplotlib (the `plot` extra) is installed."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def write_plots(matrix: Matrix, png: str | Path) -> list[Path]:
    """`png` (a heatmap: bytes from rank to rank, hop classes outlined) and `<stem>-hosts.png`
    beside it (per host, the bytes its ranks sent, stacked by hop class); the paths written.
    ImportError without matplotlib (see `plotting`)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    png = Path(png)
    hosts_png = png.with_name(f"{png.stem}-hosts{png.suffix or '.png'}")
    n = matrix.ranks
    fig, ax = plt.subplots(figsize=(2.5 + 0.45 * max(n, 4), 2.0 + 0.4 * max(n, 4)))
    image = ax.imshow(matrix.nbytes, cmap="viridis")
    fig.colorbar(image, ax=ax, label="bytes")
    classes = matrix.hop_classes()
    for s in range(n):
        for d in range(n):
            if classes[s, d]:   # a pair beyond the host: its cell outlined in its hop class's colour
                ax.add_patch(plt.Rectangle((d - 0.5, s - 0.5), 1, 1, fill=False, lw=1.5,
                                           edgecolor=_HOP_COLOURS[classes[s, d]]))
    ax.set_xticks(range(n), [f"r{d}" for d in range(n)])
    ax.set_yticks(range(n), [f"r{s}" for s in range(n)])
    ax.set_xlabel("to rank")
    ax.set_ylabel("from rank")
    ax.set_title("bytes between ranks")
    fig.tight_layout()
    fig.savefig(png, dpi=100)
    plt.close(fig)

    per_host = matrix.per_host()
    fig, ax = plt.subplots(figsize=(1.5 + 0.8 * len(per_host), 3.6))
    bottom = [0] * len(per_host)
    for k, hop in enumerate(HOPS):
        heights = [row[k] for row in per_host.values()]
        ax.bar(list(per_host), heights, bottom=bottom, color=_HOP_COLOURS[k], label=hop)
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.set_ylabel("bytes sent")
    ax.set_title("bytes sent per host, by hop class")
    ax.legend()
    fig.tight_layout()
    fig.savefig(hosts_png, dpi=100)
    plt.close(fig)
    return [png, hosts_png]
