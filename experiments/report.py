"""Writing experiment results: JSON for scripts, a markdown table for people, PNG figures when matplotlib is there."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from .study import Result


def write(result: Result, folder: Path) -> list[Path]:
    """`<name>.json`, `<name>.md` and, with matplotlib installed, `<name>.png`; the paths written."""
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    path = folder / f"{result.name}.json"
    path.write_text(json.dumps(asdict(result), indent=2, default=str))
    written.append(path)
    path = folder / f"{result.name}.md"
    path.write_text(markdown(result))
    written.append(path)
    figure = plot(result, folder)
    if figure is not None:
        written.append(figure)
    return written


def index(folder: Path) -> Path:
    """`README.md` in `folder`: every result there (from its JSON), in the experiments' order."""
    order = ("collect", "scopes", "reconfigure", "monitors", "trees", "scale", "clusters")
    found = {p.stem: Result(**json.loads(p.read_text())) for p in folder.glob("*.json")}
    parts = ["# Experiment results", ""]
    for name in sorted(found, key=lambda n: order.index(n) if n in order else len(order)):
        parts.append(markdown(found[name]))
        if (folder / f"{name}.png").exists():
            parts.append(f"![{found[name].title}]({name}.png)\n")
    path = folder / "README.md"
    path.write_text("\n".join(parts))
    return path


def markdown(result: Result) -> str:
    lines = [f"### {result.title}", ""]
    lines.append("| " + " | ".join(result.columns) + " |")
    lines.append("|" + "|".join("---" for _ in result.columns) + "|")
    for row in result.rows:
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    meta = result.meta
    lines += ["", f"Ran on {meta.get('cores')} cores ({meta.get('machine')}, Python {meta.get('python')}), "
                  f"{meta.get('date')}; scale `{meta.get('scale')}`, pathmap `{meta.get('pathmap')}`."]
    return "\n".join(lines) + "\n"


def _cell(value) -> str:
    if isinstance(value, float):
        return f"{value:,.3f}" if value < 10 else f"{value:,.1f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def plot(result: Result, folder: Path) -> Path | None:
    """The experiment's figure, or None when matplotlib (the `plot` extra) is not installed."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    cols = {c: i for i, c in enumerate(result.columns)}
    rows = result.rows
    if result.name == "clusters":
        return _save(_clusters_figure(plt, result, cols), result, folder, plt)
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    if result.name == "collect":
        at = range(len(rows))
        ax.bar([x - 0.2 for x in at], [r[cols["slowdown"]] for r in rows], 0.4, color="tab:blue",
               label="two launches, with and without collectors")
        ax.bar([x + 0.2 for x in at], [r[cols["switched on/off"]] for r in rows], 0.4, color="tab:green",
               label="one launch, collectors switched on / off")
        ax.set_xticks(list(at), [r[cols["size"]] for r in rows])
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_ylabel("slowdown (collected / plain)")
        highest = max(max(r[cols["slowdown"]], r[cols["switched on/off"]]) for r in rows)
        ax.set_ylim(0.9, max(1.1, highest * 1.05))
        ax.legend(fontsize=7)
    elif result.name == "scopes":
        for size in dict.fromkeys(r[0] for r in rows):
            mine = [r for r in rows if r[0] == size]
            ax.plot([r[cols["trace elements"]] for r in mine], [r[cols["observe Hz"]] for r in mine], "o-", label=size)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("trace elements in the view")
        ax.set_ylabel("observe rate (Hz)")
        ax.legend()
    elif result.name == "reconfigure":
        for r in rows:
            ax.plot(r[cols["slowdown"]], r[cols["observe Hz"]], "o")
            ax.annotate(r[cols["tree"]], (r[cols["slowdown"]], r[cols["observe Hz"]]), fontsize=7,
                        xytext=(4, 3), textcoords="offset points")
        ax.set_xlabel("application slowdown")
        ax.set_ylabel("observe rate (Hz)")
    elif result.name == "monitors":
        ax.barh([r[0] for r in rows], [r[cols["slowdown"]] for r in rows], color="tab:orange")
        ax.axvline(1.0, color="grey", lw=0.8)
        ax.set_xlabel("application slowdown")
    elif result.name == "trees":
        for shape in dict.fromkeys(r[1] for r in rows):
            mine = [r for r in rows if r[1] == shape]
            ax.plot([r[0] for r in mine], [r[cols["latency median µs"]] for r in mine], "o-", label=shape)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("participants")
        ax.set_ylabel("allreduce latency, median (µs)")
        ax.legend()
    elif result.name == "scale":
        for colour, nodes in enumerate(dict.fromkeys(r[0] for r in rows)):
            for tree in dict.fromkeys(r[2] for r in rows):
                mine = [r for r in rows if r[0] == nodes and r[2] == tree]
                ax.plot([r[cols["trace elements"]] for r in mine], [r[cols["observe Hz"]] for r in mine],
                        "o-" if tree.endswith("monitor") else "s--", color=f"C{colour}", label=f"{nodes} nodes, {tree}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("trace elements in the view")
        ax.set_ylabel("observe rate (Hz)")
        ax.legend(fontsize=7)
    ax.set_title(result.title, fontsize=9)
    return _save(fig, result, folder, plt)


def _save(fig, result: Result, folder: Path, plt) -> Path:
    fig.tight_layout()
    path = folder / f"{result.name}.png"
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _clusters_figure(plt, result: Result, cols: dict[str, int]):
    """One panel per link setting and stage: each tree's slowdown against its observe rate, the
    link's kilobytes per pull beside its name."""
    rows = result.rows
    links, stages = list(dict.fromkeys(r[0] for r in rows)), list(dict.fromkeys(r[1] for r in rows))
    fig, axes = plt.subplots(len(links), len(stages), figsize=(4.2 * len(stages), 3.4 * len(links)),
                             sharex=True, sharey=True, squeeze=False)
    for i, link in enumerate(links):
        for j, stage in enumerate(stages):
            ax = axes[i][j]
            for colour, r in enumerate(r for r in rows if r[0] == link and r[1] == stage):
                ax.plot(r[cols["slowdown"]], r[cols["observe Hz"]], "o", color=f"C{colour}")
                ax.annotate(f"{r[cols['tree']]} ({r[cols['link kB/pull']]} kB)",
                            (r[cols["slowdown"]], r[cols["observe Hz"]]), fontsize=6, xytext=(4, 3),
                            textcoords="offset points")
            ax.set_title(f"link {link}, {stage}", fontsize=8)
            if i == len(links) - 1:
                ax.set_xlabel("application slowdown")
            if j == 0:
                ax.set_ylabel("observe rate (Hz)")
    fig.suptitle(result.title, fontsize=9)
    return fig
