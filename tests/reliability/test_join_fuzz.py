"""A fuzzer of the scope-join calls a node hosts for any client (install, pull, renew, remove, cursors,
list): random and adversarial fields, sizes and types, joins that name themselves or each other as
children (on one node and across nodes), endpoints nobody answers at. Against a live run's node
processes, with a bystander moving tuples on the node all along and a monitor's scope pulling it now
and then. The node owes every request one reply, an error only of pastset's named kinds and never a
bug's (a hosted call that failed with a Python exception), keeps its memory under its budget, and
serves the monitor and the bystander throughout.

    EVENTSPACE_JOIN_FUZZ_SECONDS=180 EVENTSPACE_JOIN_FUZZ_SEED=7 \\
        .venv/bin/python -m pytest -s tests/reliability/test_join_fuzz.py

runs it for three minutes (seconds of fuzzing; default 10) and prints what it saw: requests by kind
and outcome, the node's peak memory, the bystander's slowest move. A finding prints its seed and step,
and the request, so that a run of that seed repeats it.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import signal
import time
from collections import Counter

import pytest
import zmq

from eventspace.catalogue import Catalogue
from eventspace.hosted import CURSORS, INSTALL, LIST, PULL, REMOVE, RENEW
from eventspace.scope import EventScope
from paths import Instrument, Selector, launch
from pastset import protocol as p
from pastset.errors import ERRORS_BY_NAME
from runs import ENV, THREE_NODES, pathmap_for, ring_app
from server_attacks import Bystander, Peer, memory_kb

SECONDS = float(os.environ.get("EVENTSPACE_JOIN_FUZZ_SECONDS", "10"))
SEED = int(os.environ.get("EVENTSPACE_JOIN_FUZZ_SEED", str(random.randrange(1 << 30))))
REPLY_WITHIN = 70.0          # a pull waits at most JoinLimits.max_timeout (60 s); every other call less
MEMORY_BUDGET_KB = 1 << 20   # pastset.Limits().max_memory: what the node may hold for its clients
MONITOR_EVERY = 40           # requests between two pulls of the monitor's scope

UNREACHABLE = ["tcp://127.0.0.1:1", "tcp://10.255.255.1:9", "tcp://[::1]:2", "ipc:///nonexistent/x", "bogus",
               "tcp://127.0.0.1:99999", ""]


_PLACED = object()   # Fuzzer.pull's default: a join it placed


class Fuzzer:
    """Draws requests for node A of a three-node run (A, B, C) from a seeded random source."""

    def __init__(self, rng: random.Random, run, trap: str):
        self.rng = rng
        self.run = run
        catalogue = Catalogue(run.pathmap)
        self.traces = {n.name: [e.trace for e in catalogue.on_node(n.name)] for n in run.pathmap.nodes}
        self.unreachable = [*UNREACHABLE, trap]
        self.keys: list[str] = []           # keys this fuzzer asked to install
        self.placed: list[str] = []         # of them, those the node placed (some gone since)
        self.p_bad = 0.25                   # how often a field is drawn bad, per request
        self.serial = 0

    # -- values --------------------------------------------------------------------------------

    def junk(self, depth: int = 0):
        r = self.rng
        kinds = ["none", "bool", "int", "big", "float", "nan", "text", "bytes", "list", "map"]
        kind = r.choice(kinds if depth < 2 else kinds[:8])
        if kind == "none":
            return None
        if kind == "bool":
            return r.random() < 0.5
        if kind == "int":
            return r.randint(-5, 70)
        if kind == "big":
            return r.choice([2 ** 63 - 1, -(2 ** 63), 2 ** 64 - 1, 10 ** 12])
        if kind == "float":
            return r.choice([0.0, -0.5, 1e-300, 1e308, 0.25])
        if kind == "nan":
            return r.choice([math.nan, math.inf, -math.inf])
        if kind == "text":
            return r.choice(["", "A", "trace/1", "é" * 3, "x" * r.randint(1, 400), "\x00"])
        if kind == "bytes":
            return bytes(r.randrange(256) for _ in range(r.randint(0, 16)))
        if kind == "list":
            return [self.junk(depth + 1) for _ in range(r.randint(0, 4))]
        return {str(self.junk(depth + 1))[:8]: self.junk(depth + 1) for _ in range(r.randint(0, 3))}

    def maybe(self, good, bad, scale: float = 1.0):
        """`good()`, or now and then (`p_bad` times `scale`) `bad()`."""
        return bad() if self.rng.random() < self.p_bad * scale else good()

    def key(self) -> str:
        r = self.rng
        choice = r.random()
        if choice < 0.2 and self.keys:
            return r.choice(self.keys)         # replace one, or name one that is gone
        if choice < 0.25:
            return "k" * r.choice([256, 257, 5_000, 100_000])
        self.serial += 1
        return f"fuzz-{SEED}/{self.serial}"

    def leaves(self, node: str):
        r = self.rng
        own = self.traces[node]
        choice = r.random() * min(1.0, 4 * self.p_bad)
        if choice < 0.45:
            return {node: r.sample(own, r.randint(0, len(own)))}
        if choice < 0.6:
            other = r.choice(["B", "C"])
            return {node: own[:2], other: r.sample(self.traces[other], r.randint(1, len(self.traces[other])))}
        if choice < 0.7:
            return {node: own + own[:1]}                                   # one named twice
        if choice < 0.78:
            return {node: ["x"] * r.choice([10, 100_001, 1_500_000])}      # over the limit, or unknown
        if choice < 0.85:
            return {r.choice(["Z", "", "A/B"]): own}                       # not a node of the run
        if choice < 0.9:
            return {"B": self.traces["A"]}                                 # another node's elements
        return self.junk()

    def children(self, key: str):
        r = self.rng
        choice = r.random()
        if choice < 0.35:
            return []
        if choice < 0.5:
            return [["A", key, ["A"]]]                                     # itself
        if choice < 0.75 and self.placed:                                  # joins that may be above it
            return [[r.choice(["A", "A", "B"]), key, [r.choice(["A", "B", "C"])]]
                    for key in dict.fromkeys(r.choice(self.placed) for _ in range(r.randint(1, 4)))]
        if choice < 0.82:
            return [["C", f"missing/{i}", ["C"]] for i in range(r.choice([1, 3, 300]))]
        if choice < 0.9:
            return [[r.choice(["A", "B", "Z", 7]), self.junk(), self.junk()]]
        return self.junk()

    def stage(self):
        r = self.rng
        n = r.choice([1, 5, 50, 700, 2000])
        return r.choice([
            "latest", "gather", "sort:t_end", "sort:nope", "convert:records", "reduce:max_t_end@thread",
            "reduce:count@node", "reduce:sum@cluster", "reduce:os:system", "reduce:max:arg@path",
            "classes:ops@thread", "classes:durations@node", "histogram:duration@node", "histogram:nbytes@all",
            "filter:op == move", "filter:t_end - t_start > 1000 and op in (move, observe)",
            'filter:"x" * 3000000000 == op', "filter:b'x' * 99 == op", 'filter:-"x" == op', "filter:op % 0 == 1",
            "filter:t_end // 0 > 1", "filter:t_end * 1" + "0" * 40 + " > 1", "filter:__import__('os')",
            "filter:" + "(" * n + "op" + ")" * n + " == 1", "filter:" + " or ".join(["op == 1"] * n),
            "filter:op in (" + ", ".join(str(i) for i in range(n)) + ")", "filter:" + "-" * n + "op == 1",
            "x" * n, "", "filter:", "reduce:", "histogram:duration@nowhere",
        ])

    def stages(self):
        r = self.rng
        return self.maybe(lambda: [self.stage() for _ in range(r.choice([0, 1, 2, 3, 17]))],
                          lambda: r.choice([self.junk(), [self.junk()], "latest"]), 0.4)

    def seconds(self, good: tuple[float, float]):
        r = self.rng
        return self.maybe(lambda: round(r.uniform(*good), 3),
                          lambda: r.choice([0, -1, math.nan, math.inf, 1e6, 601, 61, "2", None, True, [1]]))

    def endpoints(self):
        r = self.rng
        endpoints = dict(self.run.endpoints)
        if r.random() < 0.5:
            endpoints[r.choice(["A", "B", "C"])] = r.choice(self.unreachable)
        return self.maybe(lambda: endpoints, lambda: r.choice([{"Z": "tcp://127.0.0.1:1"}, {"B": 7}, self.junk()]),
                          0.4)

    def cursors(self, leaves):
        r = self.rng
        if not isinstance(leaves, dict) or r.random() < 0.6:
            return {}
        names = [f"{n}/{e}" for n, es in leaves.items() if isinstance(es, list) for e in es[:5] if isinstance(e, str)]
        return {name: self.maybe(lambda: r.choice([0, 5, 2 ** 40]), lambda: r.choice([2 ** 63, -1, "3", None]))
                for name in names}

    def spec(self):
        r = self.rng
        self.p_bad = r.choice([0.0, 0.0, 0.02, 0.1, 0.25])
        key = self.key()
        node = self.maybe(lambda: "A", lambda: r.choice(["B", "Z", None, 5]), 0.2)
        leaves = self.leaves("A")
        spec = dict(key=key, level=self.maybe(lambda: r.randint(1, 6), lambda: r.choice([0, -1, 64, 10 ** 9, "1", 1.5])),
                    node=node, leaves=leaves, children=self.children(key), stages=self.stages(),
                    mode=self.maybe(lambda: r.choice(["latest", "stream", "backlog"]), self.junk, 0.2),
                    concurrency=self.maybe(lambda: r.choice(["concurrent", "sequential"]), self.junk, 0.2),
                    timeout=self.seconds((0.05, 2.0)), endpoints=self.endpoints(), cursors=self.cursors(leaves))
        if r.random() < self.p_bad / 4:
            del spec[r.choice(list(spec))]
        if r.random() < self.p_bad / 4:
            spec[r.choice(["extra", "lease", "owner"])] = self.junk()
        if r.random() < self.p_bad / 8:
            return self.junk()
        return spec

    # -- requests ------------------------------------------------------------------------------

    def request(self) -> tuple[str, list]:
        """(kind, the CALL's [name, args])."""
        r = self.rng
        choice = r.random()
        if choice < 0.45:
            spec = self.spec()
            if isinstance(spec, dict) and isinstance(spec.get("key"), str) and len(spec["key"]) < 300:
                self.keys.append(spec["key"])
            args = [spec, self.seconds((0.5, 30.0))]
            return "install", [INSTALL, args if r.random() > 0.03 else args[:r.randint(0, 1)] + [1, 2][:r.randint(0, 2)]]
        self.p_bad = 0.25
        pick = r.random()
        key = (r.choice(self.placed) if self.placed and pick < 0.7 else r.choice(self.keys) if self.keys and pick < 0.9
               else self.junk())
        if choice < 0.75:
            return "pull", self.pull(key)
        if choice < 0.83:
            keys = self.maybe(lambda: r.sample(self.keys, min(len(self.keys), r.randint(0, 8))), self.junk, 0.2)
            return "renew", [RENEW, [keys, self.seconds((0.5, 30.0))]]
        if choice < 0.92:
            return "remove", [REMOVE, [key]]
        if choice < 0.96:
            return "cursors", [CURSORS, [key]]
        return "list", [LIST, []]

    def pull(self, key=_PLACED) -> list:
        """A pull's [name, args]: of `key` (by default one placed), as a monitor (no level) or a join asks."""
        r = self.rng
        key = r.choice(self.placed) if key is _PLACED else key
        return [PULL, [key] if r.random() < 0.5 else [key, self.maybe(lambda: r.randint(-1, 8), self.junk)]]


def arity_slip(name: str, message: str) -> bool:
    """A hosted call given the wrong number of arguments: Python's own TypeError, named as such."""
    return message.startswith(f"hosted call {name} failed: TypeError:") and (
        "positional argument" in message or "takes" in message)


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    pm = pathmap_for(ring_app(6), THREE_NODES, rule="round-robin", shape="kary:2", name="joinfuzz")
    pm = dataclasses.replace(pm, instrument=Instrument(keep=50, collectors=(Selector(at=("source", "sink")),)))
    with launch(pm.validate(), run_dir=tmp_path_factory.mktemp("runs"), env=ENV) as run:
        run.run("programs:ring", {"steps": 20}, timeout=120)
        yield run


@pytest.mark.slow   # 7-12 s: one of the longest beside the others (make test-fast's 3 minutes)
def test_the_scope_join_calls_under_a_fuzzer(run):
    rng = random.Random(SEED)
    ctx = zmq.Context()
    trap = ctx.socket(zmq.ROUTER)   # an endpoint that takes connections and never answers
    trap.setsockopt(zmq.LINGER, 0)
    fuzzer = Fuzzer(rng, run, f"tcp://127.0.0.1:{trap.bind_to_random_port('tcp://127.0.0.1')}")
    pid = run.pids["A"]
    before = memory_kb(pid)["VmRSS"]
    seen: Counter = Counter()
    findings: list[str] = []
    peers = [Peer(ctx, run.endpoints["A"]) for _ in range(3)]
    step = monitor_pulls = pauses = 0
    slowest = 0.0
    paused, resumed = None, time.monotonic()   # until when node C is paused; when it was let go last
    try:
        with Bystander(run.endpoints["A"]) as bystander, \
                EventScope(run, "node:A | node:B", tree="per-node", placement="near", timeout=5.0,
                           stages=["reduce:max_t_end@thread"], name="fuzz-monitor") as monitor:
            deadline = time.monotonic() + SECONDS
            while time.monotonic() < deadline:
                step += 1
                peer = rng.choice(peers)
                # Now and then node C is paused (SIGSTOP) for a while: pulls of joins that read it wait.
                if paused is None and time.monotonic() > resumed + 5 and rng.random() < 0.002:
                    os.kill(run.pids["C"], signal.SIGSTOP)
                    paused, pauses = time.monotonic() + rng.uniform(0.5, 3.0), pauses + 1
                elif paused is not None and time.monotonic() > paused:
                    os.kill(run.pids["C"], signal.SIGCONT)
                    paused, resumed = None, time.monotonic()
                if rng.random() < 0.02 and fuzzer.placed:   # a burst of pulls in flight at once
                    burst = [fuzzer.pull() for _ in range(rng.randint(10, 80))]
                    for i, call in enumerate(burst):
                        peer.request(-i - 1, p.CALL, *call)
                    replies = [peer.reply(REPLY_WITHIN)[0] for _ in burst]
                    assert sorted(r[0] for r in replies) == list(range(-len(burst), 0)), f"seed {SEED} step {step}"
                    for reply in replies:
                        seen["burst", "ok" if reply[1] == p.OK else reply[2]] += 1
                        if reply[1] != p.OK and reply[2] not in ("LimitExceeded", "UnknownElement", "BadArgument"):
                            findings.append(f"seed {SEED} step {step}: a burst's pull -> {reply[2]}: {reply[3][:300]}")
                    continue
                kind, call = fuzzer.request()
                started = time.perf_counter()
                peer.request(step, p.CALL, *call)
                reply, _ = peer.reply(REPLY_WITHIN)
                slowest = max(slowest, time.perf_counter() - started)
                assert reply[0] == step, f"seed {SEED} step {step}: a reply to request {reply[0]}"
                if reply[1] == p.OK:
                    seen[kind, "ok"] += 1
                    if kind == "install":
                        fuzzer.placed.append(call[1][0]["key"])
                else:
                    name, message = reply[2], reply[3]
                    seen[kind, name] += 1
                    if name not in ERRORS_BY_NAME or not message or (
                            message.startswith("hosted call") and not arity_slip(call[0], message)):
                        findings.append(f"seed {SEED} step {step}: {kind} {str(call)[:300]} -> {name}: {message[:300]}")
                if step % MONITOR_EVERY == 0:
                    pull = monitor.pull()
                    monitor_pulls += 1
                    if pull.missing or not len(pull.records):
                        findings.append(f"seed {SEED} step {step}: the monitor's pull missed {pull.missing}, "
                                        f"{len(pull.records)} records")
            seen_by = bystander.finish()
        memory = memory_kb(pid)
        trapped = trap.poll(0)
    finally:
        os.kill(run.pids["C"], signal.SIGCONT)
        for peer in peers:
            peer.close()
        ctx.destroy(0)
    print(f"\njoin fuzzer, seed {SEED}: {step} requests in {SECONDS:g} s, {monitor_pulls} monitor pulls, node C "
          f"paused {pauses} times; slowest reply {slowest:.3f} s")
    for (kind, outcome), n in sorted(seen.items()):
        print(f"  {kind:8} {outcome:16} {n}")
    print(f"node A: RSS {before / 1024:.0f} MB before, {memory['VmRSS'] / 1024:.0f} MB after, peak "
          f"{memory['VmHWM'] / 1024:.0f} MB; bystander: {seen_by['moves']} moves, slowest "
          f"{seen_by['worst_s'] * 1000:.1f} ms, {seen_by['over_100ms']} over 100 ms, errors {seen_by['errors']}")
    assert run.client("A").ping() == "A", "node A stopped answering"
    assert not findings, "\n".join(findings[:10])
    assert not trapped, "the node sent requests to an address a client named"
    assert not seen_by["errors"] and seen_by["worst_s"] < 2.0, seen_by
    assert memory["VmHWM"] - before < MEMORY_BUDGET_KB + 300 * 1024
    assert seen["install", "ok"] and seen["pull", "ok"]   # it reached the joins, not only their checks
