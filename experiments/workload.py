"""What every experiment measures against: the wind tunnel's time per step, with and without a monitor."""

from __future__ import annotations

import dataclasses
import statistics
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pastset
from eventspace.catalogue import Catalogue
from eventspace.space import switch_collectors
from paths import Instrument, Pathmap


@dataclass(frozen=True)
class Scale:
    """How big an experiment run is: the pathmap, sizes, steps per measured run, repetitions."""

    name: str
    pathmap: str
    sizes: dict[str, int]          # size name -> N (rows)
    steps: dict[str, int]          # size name -> steps per measured run
    repeats: int                   # alternations of baseline and treatment
    participants: tuple[int, ...]  # for the trees experiment
    rounds: int                    # collective rounds per tree measurement
    # collect's run-time switch comparison: pairs of runs and steps per run, per size
    switch_pairs: dict[str, int] = field(default_factory=dict)
    switch_steps: dict[str, int] = field(default_factory=dict)


def uninstrumented(pm: Pathmap) -> Pathmap:
    """The same layout without any collector (the baseline of the collectors experiment)."""
    return dataclasses.replace(pm, instrument=Instrument()).validate()


# The gather trees the experiments reshape one scope through, by the label their tables print.
TREE_CONFIGS = {
    "flat/monitor": dict(tree="flat", placement="monitor"),
    "kary:2/near": dict(tree="kary:2", placement="near"),
    "per-node/near": dict(tree="per-node", placement="near"),
    "per-node/near sequential": dict(tree="per-node", placement="near", concurrency="sequential"),
    "per-node/near max 20 Hz": dict(tree="per-node", placement="near", max_rate=20.0),
    "per-cluster/near": dict(tree="per-cluster", placement="near"),
    "per-node/monitor": dict(tree="per-node", placement="monitor"),
    "flat/monitor, 4 in flight": dict(tree="flat", placement="monitor", pipeline=4),
    "per-cluster/near, 4 in flight": dict(tree="per-cluster", placement="near", pipeline=4),
}


def reshape(scope, config: dict) -> None:
    """Reshape `scope` to exactly `config` (one of TREE_CONFIGS): what it does not set goes back to
    the default, not to what the previous configuration set (EventScope.reconfigure keeps that)."""
    scope.reconfigure(**{"concurrency": "concurrent", "max_rate": None, "pipeline": 1, **config})


def step_time(run, n: int, steps: int, seed: int = 1) -> float:
    """Seconds per wind-tunnel step: the slowest thread's stepping time (setup not counted)."""
    results = run.run("windtunnel", {"size": n, "steps": steps, "seed": seed, "check_every": steps},
                      timeout=3600)
    return max(r["seconds"] for r in results.values()) / steps


@dataclass
class Comparison:
    """Alternating runs of a baseline and a treatment: seconds per step of each, and the slowdown."""

    baseline: list[float] = field(default_factory=list)
    treated: list[float] = field(default_factory=list)

    @property
    def slowdown(self) -> float:
        return statistics.median(self.treated) / statistics.median(self.baseline)

    @property
    def pair_median(self) -> float:
        """The median of the pairs' ratios (treated over baseline, pair by pair)."""
        return statistics.median(t / b for t, b in zip(self.treated, self.baseline))

    @property
    def quartiles(self) -> tuple[float, float]:
        """The pair ratios' first and third quartiles."""
        ratios = [t / b for t, b in zip(self.treated, self.baseline)]
        if len(ratios) < 2:
            return (ratios[0], ratios[0])
        q = statistics.quantiles(ratios, n=4)
        return (q[0], q[2])

    @property
    def spread(self) -> float:
        """Half the range of the per-pair ratios, relative to the slowdown (how noisy it was)."""
        ratios = [t / b for t, b in zip(self.treated, self.baseline)]
        if len(ratios) < 2:
            return 0.0
        return (max(ratios) - min(ratios)) / 2 / self.slowdown

    def as_dict(self) -> dict:
        return {"baseline_ms": [b * 1e3 for b in self.baseline], "treated_ms": [t * 1e3 for t in self.treated],
                "slowdown": self.slowdown, "spread": self.spread, "pair_median": self.pair_median}


def switch_collectors_of(run, pm: Pathmap, on: bool) -> None:
    """Switch every collector of `run` (launched from `pm`) on or off at run time, node by node (each
    node takes it within milliseconds); the nodes' system samplers are left as they are."""
    catalogue = Catalogue(pm)
    for node in pm.nodes:
        with pastset.connect(run.endpoints[node.name]) as client:
            switch_collectors(client, on, [e.id for e in catalogue.entries if e.node == node.name])


def switched(run, pm: Pathmap, pairs: int, n: int, steps: int) -> Comparison:
    """The same live layout with its collectors switched off (baseline) and on (treatment) between the
    runs of A B B A pairs: the same processes, threads and warm caches, so that only the recording
    differs (two launches differ by more than the collectors cost on a shared machine). The pair
    ratios' median is the slowdown to quote (`Comparison.pair_median`). The collectors are left on."""
    out = Comparison()
    for i in range(pairs):
        for on in ((False, True) if i % 2 == 0 else (True, False)):
            switch_collectors_of(run, pm, on)
            (out.treated if on else out.baseline).append(step_time(run, n, steps))
    switch_collectors_of(run, pm, True)
    return out


def alternate(repeats: int, baseline: Callable[[], float], treated: Callable[[], float]) -> Comparison:
    """Baseline, treatment, baseline, treatment...: noise hits both alike."""
    out = Comparison()
    for _ in range(repeats):
        out.baseline.append(baseline())
        out.treated.append(treated())
    return out


class Pulling:
    """A monitor pulling back to back in a thread of this process while a measured run goes on.

    `pull()` is one pull (a scope's pull, a monitor's poll or beat). Counts pulls and the time
    spent in them: the observe rate is pulls per second of pulling.
    """

    def __init__(self, pull: Callable[[], object], pause: float = 0.0):
        self._pull = pull
        self._pause = pause
        self._stop = threading.Event()
        self.pulls = 0
        self.seconds = 0.0
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="experiment-monitor", daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self):
        try:
            while not self._stop.is_set():
                started = time.perf_counter()
                self._pull()
                self.seconds += time.perf_counter() - started
                self.pulls += 1
                if self._pause:
                    self._stop.wait(self._pause)
        except BaseException as exc:  # reported by the experiment, not lost in a thread
            self.error = exc

    def warm(self, timeout: float = 120.0) -> None:
        """Wait for the first pull (a monitor's first pull is its costliest: clock sync, a whole
        backlog), then start counting afresh, so that the figures cover the measured run only."""
        deadline = time.monotonic() + timeout
        while self.pulls == 0 and self.error is None and time.monotonic() < deadline:
            time.sleep(0.01)
        self.check()
        self.pulls, self.seconds = 0, 0.0

    @property
    def rate(self) -> float:
        return self.pulls / self.seconds if self.seconds else 0.0

    def check(self) -> None:
        if self.error is not None:
            raise self.error


def monitored(run, n: int, steps: int, make_pull: Callable[[], tuple[Callable, Callable]],
              rates: list[float]) -> Callable[[], float]:
    """A treatment: one measured run while a monitor made by `make_pull()` pulls back to back.
    `make_pull` returns (pull, close); the monitor's observe rate is appended to `rates`."""

    def treated() -> float:
        pull, close = make_pull()
        try:
            with Pulling(pull) as puller:
                puller.warm()
                seconds = step_time(run, n, steps)
            puller.check()
            rates.append(puller.rate)
        finally:
            close()
        return seconds

    return treated
