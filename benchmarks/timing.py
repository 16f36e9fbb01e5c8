"""Timing for benchmarks on a noisy machine: interleaved rounds, medians, ratios to a peer, tables."""

from __future__ import annotations

import json
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

RESULTS = Path(__file__).parent / "results"

# A target is its text, or (text, check) where check(figure, ratio_to_peer) says whether it is met.
Target = str | tuple[str, Callable[["Figure", float | None], bool]]


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
        if not self.median:
            return 0.0
        if len(self.rounds) < 4:
            return abs((max(self.rounds) - min(self.rounds)) / 2 / self.median)
        q = statistics.quantiles(self.rounds, n=4)
        return abs((q[2] - q[0]) / 2 / self.median)

    def ratio_rounds(self, peer: Figure) -> list[float]:
        """This figure over its peer, round by round (both measured in the same rounds)."""
        return [a / b for a, b in zip(self.rounds, peer.rounds)]


# How a kernel run as a program of its own (under mpiexec) hands its figures to the driver: one line.
_RESULT = "RESULT "


def print_result(figures) -> None:
    """Print `figures` (JSON-able) as the one line `result_of` finds among the program's output."""
    print(_RESULT + json.dumps(figures), flush=True)


def result_of(out: str):
    """The figures a kernel printed with `print_result`, from its program's standard output."""
    line = next(line for line in out.splitlines() if line.startswith(_RESULT))
    return json.loads(line[len(_RESULT):])


def per_call(fn, calls: int) -> float:
    """Seconds per call of `fn` over `calls` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    return (time.perf_counter() - start) / calls


def per_call_unpreempted(fn, calls: int, batch: int) -> float:
    """Seconds per call of `fn`: the median over batches of `batch` calls.

    On a shared machine a process is switched out for milliseconds at a time; a plain mean
    charges that to every call, in proportion to how long the case runs, which inflates
    differences between cases. Batches much shorter than a time slice are mostly not switched
    out, and their median is the speed when running.
    """
    times = []
    for _ in range(max(1, calls // batch)):
        start = time.perf_counter()
        for _ in range(batch):
            fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) / batch


def interleave(cases: dict[str, tuple], rounds: int, batch: int | None = None) -> dict[str, Figure]:
    """Run every case once per round, in turn, so that noise hits all of them alike.

    `cases` maps a name to (fn, calls, peer_name_or_None). With `batch`, each round's figure is
    the median over batches of that many calls (see `per_call_unpreempted`).
    """
    figures = {name: Figure(name, peer=peer) for name, (_, _, peer) in cases.items()}
    for _ in range(rounds):
        for name, (fn, calls, _) in cases.items():
            figures[name].rounds.append(per_call(fn, calls) if batch is None
                                        else per_call_unpreempted(fn, calls, min(batch, calls)))
    return figures


def difference(name: str, a: Figure, b: Figure, peer: str | None = None) -> Figure:
    """a - b round by round: the cost one case adds to another measured in the same rounds."""
    return Figure(name, [x - y for x, y in zip(a.rounds, b.rounds)], peer=peer)


def load() -> tuple[float, float, float]:
    """The 1, 5 and 15 minute load averages (what else ran on the machine)."""
    try:
        return os.getloadavg()
    except OSError:
        return (float("nan"),) * 3


def machine() -> dict:
    return {"cores": os.cpu_count(), "machine": platform.machine(), "python": platform.python_version(),
            "date": time.strftime("%Y-%m-%d %H:%M"), "load": [round(x, 2) for x in load()],
            "halt_poll_ns": halt_poll_ns()}


def halt_poll_ns() -> int | None:
    """How long an idle virtual CPU of this guest polls before it halts (Linux's haltpoll cpuidle
    driver; None where it is not in use). At 0, every wake-up of an idle CPU is a trip through the
    hypervisor: a message between processes costs several, which serial hops pay in full."""
    try:
        driver = Path("/sys/devices/system/cpu/cpuidle/current_driver").read_text().strip()
        if driver != "haltpoll":
            return None
        return int(Path("/sys/module/haltpoll/parameters/guest_halt_poll_ns").read_text())
    except (OSError, ValueError):
        return None


_UNITS = {"ns": 1e9, "µs": 1e6, "ms": 1e3, "s": 1.0}


def report(title: str, figures: list[Figure], targets: dict[str, Target], out: str, *,
           unit: str = "µs", rate: bool = False, extra: dict | None = None) -> list[dict]:
    """Print a rich table (median per operation, spread, ratio to peer, target and whether it is
    met) and write JSON results to benchmarks/results/`out`; returns the rows.

    `unit` is the time column's unit; `rate` adds operations per second (1 / median); `extra`
    goes into the JSON as it is (settings, what was skipped).
    """
    from rich.console import Console
    from rich.table import Table

    scale = _UNITS[unit]
    by_name = {f.name: f for f in figures}
    avg1, _, _ = load()
    here = machine()
    polls = here["halt_poll_ns"]
    table = Table(title=f"{title} ({here['cores']} cores, load {avg1:.2f}"
                        + ("" if polls is None else f", idle CPUs poll {polls:,} ns before halting") + ")")
    columns = ["figure", f"median {unit}", "spread"] + (["rate /s"] if rate else []) + \
              ["peer", "ratio to peer", "ratio spread", "target", "met"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("figure", "peer", "target") else "right")
    rows = []
    for f in figures:
        peer = by_name.get(f.peer)
        ratio, ratio_spread = None, None
        if peer is not None and peer.median:
            # The median of per-round ratios: both sides of a round saw the same noise.
            if len(f.rounds) == len(peer.rounds):
                ratios = Figure("ratio", f.ratio_rounds(peer))
                ratio, ratio_spread = ratios.median, ratios.spread
            else:
                ratio = f.median / peer.median
        target = targets.get(f.name)
        text, met = (target, None) if not isinstance(target, tuple) else (target[0], bool(target[1](f, ratio)))
        cells = [f.name, f"{f.median * scale:,.2f}", f"±{f.spread:.0%}"]
        if rate:
            cells.append(f"{1 / f.median:,.0f}" if f.median > 0 else "")
        cells += [f.peer or "", "" if ratio is None else f"{ratio:.2f}",
                  "" if ratio_spread is None else f"±{ratio_spread:.0%}", text or "",
                  "" if met is None else ("yes" if met else "NO")]
        table.add_row(*cells)
        rows.append({**asdict(f), "median_s": float(f.median), "spread": float(f.spread),
                     "ratio_to_peer": None if ratio is None else float(ratio),
                     "ratio_spread": None if ratio_spread is None else float(ratio_spread),
                     "target": text, "met": met})
    Console(width=180).print(table)
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / out
    path.write_text(json.dumps({"title": title, "machine": machine(), "figures": rows, **(extra or {})},
                               indent=2))
    print(f"results written to {path}")
    return rows


def mpiexec(install: str = "pip install 'eventspace[mpi]'", bind: bool = False) -> list[str]:
    """The mpiexec of the MPI mpi4py runs on (MPICH's or Open MPI's: eventspace.mpi.library), with what
    that launcher needs to start any number of ranks on this host (Open MPI: --oversubscribe), as
    `eventspace mpirun` starts them; SystemExit saying what to do where there is none, or where Open
    MPI's refuses to run as root. With `bind`, each rank is bound to a core, round robin (OSU-style:
    otherwise, with more ranks than cores, which ranks share a core is the scheduler's choice, job by
    job, and it moves a collective's time by up to half; see mpi_bench)."""
    from eventspace.mpi.library import find_mpiexec
    from paths.mpiexec import OPEN_MPI, launcher_options, reclaim_sessions, root_refusal

    try:
        found, library = find_mpiexec(None, install)
    except LookupError as exc:
        raise SystemExit(str(exc)) from None
    refusal = root_refusal(library.family)
    if refusal is not None:
        raise SystemExit(refusal)
    reclaim_sessions()   # sessions killed Open MPI launchers left, which stop a launcher given their pid
    binding = []
    if bind:
        binding = ["--bind-to", "core:overload-allowed"] if library.family == OPEN_MPI else ["-bind-to", "core"]
    return [found, *launcher_options(library.family), *binding]
