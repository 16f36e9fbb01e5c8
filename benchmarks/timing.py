"""Timing for benchmarks on a noisy machine: interleaved rounds, medians, ratios to a peer, tables."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

RESULTS = Path(__file__).parent / "results"


@dataclass
class Figure:
    """One measured figure: seconds per operation in every round, and its peer's name."""

    name: str
    rounds: list[float] = field(default_factory=list)
    peer: str | None = None
    unit_ops: int = 1          # operations per call (a batch of N counts as N when reporting)

    @property
    def median(self) -> float:
        return statistics.median(self.rounds)

    @property
    def spread(self) -> float:
        """Half the inter-quartile range, relative to the median."""
        if len(self.rounds) < 4:
            return (max(self.rounds) - min(self.rounds)) / 2 / self.median
        q = statistics.quantiles(self.rounds, n=4)
        return (q[2] - q[0]) / 2 / self.median


def per_call(fn, calls: int) -> float:
    """Seconds per call of `fn` over `calls` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def interleave(cases: dict[str, tuple], rounds: int) -> dict[str, Figure]:
    """Run every case once per round, in turn, so that noise hits all of them alike.

    `cases` maps a name to (fn, calls, peer_name_or_None).
    """
    figures = {name: Figure(name, peer=peer) for name, (_, _, peer) in cases.items()}
    for _ in range(rounds):
        for name, (fn, calls, _) in cases.items():
            figures[name].rounds.append(per_call(fn, calls))
    return figures


def machine() -> dict:
    return {"cores": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M")}


def report(title: str, figures: list[Figure], targets: dict[str, str], out: str) -> None:
    """Print a rich table (median µs, spread, ratio to peer, target) and write JSON results."""
    from rich.console import Console
    from rich.table import Table

    by_name = {f.name: f for f in figures}
    table = Table(title=f"{title} ({machine()['cores']} cores)")
    for column in ("figure", "median µs", "spread", "peer", "ratio to peer", "target"):
        table.add_column(column, justify="left" if column in ("figure", "peer", "target") else "right")
    rows = []
    for f in figures:
        peer = by_name.get(f.peer)
        ratio = f.median / peer.median if peer else None
        table.add_row(f.name, f"{f.median * 1e6:.2f}", f"±{f.spread:.0%}", f.peer or "",
                      "" if ratio is None else f"{ratio:.2f}", targets.get(f.name, ""))
        rows.append({**asdict(f), "median_s": f.median, "spread": f.spread, "ratio_to_peer": ratio,
                     "target": targets.get(f.name)})
    Console(width=150).print(table)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / out
    path.write_text(json.dumps({"title": title, "machine": machine(), "figures": rows}, indent=2))
    print(f"results written to {path}")
