"""Hang reports with the line (#33): how long `eventspace stack` takes on 16 MPI ranks and on the 64-node
layout (1,024 threads), against py-spy dumping the same processes one by one (the tool users reach for
today, where it is installed: `pip install py-spy`), and how long a PATHS run takes to end once a thread
raises while the others wait for it.

    python benchmarks/stack_bench.py [--rounds 5] [--ranks 16] [--skip-64]

Wall times of whole commands, medians over rounds (each round runs every case once, in turn).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from timing import Figure, report  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
EVENTSPACE = [sys.executable, "-m", "eventspace.cli"]
PROGRAMS = REPO / "tests" / "programs"
WAITS = REPO / "tests" / "mpi" / "programs" / "waits.py"


def timed(cmd: list[str], **kwargs) -> tuple[float, subprocess.CompletedProcess]:
    started = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)
    return time.perf_counter() - started, done


def until_live(name: str, env: dict, timeout: float = 240.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = subprocess.run([*EVENTSPACE, "runs", "--json"], capture_output=True, text=True, env=env)
        for run in json.loads(done.stdout or "[]"):
            if run["name"] == name and run["state"] == "live":
                return run
        time.sleep(0.5)
    raise SystemExit(f"run {name} did not come up within {timeout} s")


def py_spy_all(pids, env) -> float:
    """Seconds for `py-spy dump` of every process, one after another."""
    started = time.perf_counter()
    for pid in pids:
        subprocess.run(["py-spy", "dump", "--pid", str(pid)], capture_output=True, text=True, env=env, timeout=120)
    return time.perf_counter() - started


def stacks_of(name: str, pids, rounds: int, env, label: str, figures: list, ours_target: str) -> None:
    ours = Figure(f"eventspace stack, {label}")
    peer = Figure(f"py-spy dump of each process, {label}") if shutil.which("py-spy") else None
    for _ in range(rounds):
        took, done = timed([*EVENTSPACE, "stack", "--run", name, "--json"], env=env)
        if done.returncode:
            raise SystemExit(done.stderr)
        ours.rounds.append(took)
        if peer is not None:
            peer.rounds.append(py_spy_all(pids, env))
    if peer is not None:
        ours.peer = peer.name
        figures.append(peer)
    figures.append(ours)
    groups = len(json.loads(done.stdout)["groups"])
    print(f"{label}: {groups} distinct stacks")
    TARGETS[ours.name] = (ours_target, lambda f, _r, limit=float(ours_target.split()[1]): f.median <= limit)


TARGETS: dict = {}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--ranks", type=int, default=16)
    parser.add_argument("--skip-64", action="store_true", help="leave out the 64-node layout (a few minutes)")
    args = parser.parse_args()
    figures: list[Figure] = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "EVENTSPACE_RUN_DIR": str(Path(tmp) / "runs")}

        # 1. An MPI job whose ranks are all blocked (a collective that one rank never joins).
        job = subprocess.Popen([*EVENTSPACE, "mpirun", "-n", str(args.ranks), "--name", "stacks", str(WAITS),
                                "collective"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
        try:
            run = until_live("stacks", env)
            time.sleep(1.0)
            stacks_of("stacks", run["pids"].values(), args.rounds, env, f"{args.ranks} MPI ranks", figures, "≤ 1 s")
        finally:
            os.killpg(job.pid, 9)
            job.wait()

        # 2. The 64-node layout, its threads waiting on one that stalls.
        if not args.skip_64:
            layout = REPO / "pathmaps" / "windtunnel-64node.yaml"
            wt = subprocess.Popen([*EVENTSPACE, "run", "windtunnel", "--pathmap", str(layout), "--size", "1024",
                                   "--steps", "1000000", "--stall", "T700:5:3600", "--json"], env=env,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
            try:
                run = until_live("windtunnel-64node", env)
                time.sleep(5.0)
                stacks_of("windtunnel-64node", run["pids"].values(), args.rounds, env,
                          "64 nodes, 1,024 threads", figures, "≤ 2 s")
            finally:
                os.killpg(wt.pid, 2)   # Ctrl-C: the launcher stops its nodes
                try:
                    wt.wait(60)
                except subprocess.TimeoutExpired:
                    os.killpg(wt.pid, 9)
                    wt.wait()

        # 3. A PATHS run whose thread T1 raises in round 40: how much sooner it ends than a run whose
        #    threads all make round 40 and end (the time to notice, stop the others and exit).
        sys.path.insert(0, str(REPO / "tests"))
        from runs import TWO_NODES, pathmap_for, ring_app

        pathmap = Path(tmp) / "fails.yaml"
        pathmap_for(ring_app(4), TWO_NODES, name="failing").dump(pathmap)
        ok, failing = Figure("40 rounds, no thread raises"), Figure("T1 raises in round 40, others wait for it")
        failing.peer = ok.name
        for _ in range(args.rounds):
            for figure, extra in ((ok, ["--arg", "round=999"]), (failing, ["--arg", "round=40"])):
                took, done = timed([*EVENTSPACE, "run", "programs:fails_in_round", "--pathmap", str(pathmap),
                                    "--path", str(PROGRAMS), "--arg", "rounds=41" if figure is failing else
                                    "rounds=40", "--arg", "thread=T1", *extra], env=env)
                if done.returncode != (2 if figure is failing else 0):
                    raise SystemExit(done.stderr)
                figure.rounds.append(took)
        added = Figure("ending on a raise, over ending normally", [a - b for a, b in zip(failing.rounds, ok.rounds)])
        TARGETS[added.name] = ("≤ 1 s", lambda f, _r: f.median <= 1.0)
        figures += [ok, failing, added]
    report(f"Stacks on demand and a failing thread, medians of {args.rounds} rounds", figures, TARGETS,
           "stack_bench.json", unit="s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
