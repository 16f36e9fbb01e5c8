"""`python -m paths --pathmap P --node N`: one node server process (what `paths.launch` starts);
`--by-rank` instead of `--node`: the node whose index is this process's MPI rank (paths.mpiexec)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time

import pastset
from pastset import EventSpaceError, PastSetError
from pastset.security import use as use_security

from . import snapshot
from .document import PathmapError
from .errors import PathsError
from .mpiexec import my_rank
from .node import STOP, NodeServer
from .pathmap import Pathmap


def run_node(pathmap_file: str, node: str | None, bind: str | None = None, launched: bool = False,
             endpoints: dict | None = None, insecure: bool = False, grace: float | None = None,
             checked: str | None = None) -> int:
    """Run one node until stopped; print one JSON line {node, endpoint, pid} once it serves.

    Launched (by `paths.launch`): the node also stops when its stdin closes, so that it never
    outlives the launcher. Otherwise SIGINT or SIGTERM stop it. The node's keys (the pathmap's
    `security` section, else $EVENTSPACE_KEYS) become the process's, so that everything that
    connects from inside it (scope joins placed on the node) speaks CURVE too. A non-loopback
    address without CURVE needs `insecure`. `grace` replaces the pathmap's `liveness.grace`: how
    long this node waits on another that keeps its connection but does not answer. `checked`: the
    digest of the checked pathmap its launcher wrote beside the snapshot (paths.snapshot), loaded
    instead of the YAML.

    `node` None: the node whose index in the pathmap is this process's MPI rank (started by
    mpiexec, paths.mpiexec). Launched so, only rank 0 has the launcher's stdin (an MPI launcher
    forwards it to rank 0 alone): when it closes, rank 0 stops every node it knows, then itself;
    if it knew none yet, or one did not stop, it exits with status 1. The rest is the launcher's
    (the MPI launcher ends the ranks on SIGTERM, which it also hears when its starter dies:
    paths.mpiexec.command): Hydra does not end the other ranks on rank 0's exit.
    """
    pathmap = (snapshot.load(pathmap_file, checked) if checked else Pathmap.load(pathmap_file)).with_grace(grace)
    rank = None
    if node is None:
        rank = my_rank()
        if rank >= len(pathmap.nodes):
            raise PathsError(f"rank {rank} has no node: the pathmap has {len(pathmap.nodes)} nodes; "
                             f"start {len(pathmap.nodes)} ranks (mpiexec -n {len(pathmap.nodes)})")
        node = pathmap.nodes[rank].name
    try:
        pathmap.node(node)
    except KeyError:
        raise PathmapError([pathmap.origin.problem(("nodes",), f"no node {node!r}; the pathmap's nodes are "
                                                   f"{', '.join(n.name for n in pathmap.nodes)}")]) from None
    security = pathmap.security.load()
    use_security(security)
    server = NodeServer(pathmap, node, endpoints=endpoints, security=security)
    try:
        endpoint = server.serve(bind, insecure)
    except PastSetError:
        server.close()
        raise
    # One write, newline included: under mpiexec every rank's output shares one stream, and with
    # PYTHONUNBUFFERED print writes the line and its newline apart, so two ranks' lines could merge.
    sys.stdout.write(json.dumps({"node": node, "endpoint": endpoint, "pid": os.getpid()}) + "\n")
    sys.stdout.flush()
    abandoned = threading.Event()   # the launcher went away before it stopped the node
    if launched and rank in (None, 0):
        threading.Thread(target=_watch_stdin, args=(server, rank is not None, abandoned), daemon=True).start()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: server.request_stop())
        signal.signal(signal.SIGINT, lambda *_: server.request_stop())
    try:
        while not server.wait_stopped(0.5):
            pass
    finally:
        _end_within(STOP_WITHIN, node)
        server.close()
    return 1 if abandoned.is_set() else 0


# Seconds a node process takes at most to end once it is stopped (its launcher gone, SIGTERM or
# SIGINT, a STOP call), whatever its threads are doing: a stage call waiting in an element with no
# timeout, a client closing under a thread still in a call, a buffer flushing to a node that is
# gone. Within the five seconds a launcher waits before it terminates a node.
STOP_WITHIN = 4.0


def _end_within(seconds: float, node: str) -> None:
    """End this process `seconds` from now if it has not ended by itself by then (status 1, one
    line on stderr, which the launcher keeps in the node's log)."""

    def end() -> None:
        time.sleep(seconds)
        print(f"node {node}: still closing {seconds:g} s after it was stopped (threads: "
              f"{', '.join(t.name for t in threading.enumerate() if t is not threading.current_thread())}); "
              "ending now", file=sys.stderr, flush=True)
        os._exit(1)

    threading.Thread(target=end, name=f"paths-{node}-end", daemon=True).start()


def _watch_stdin(server: NodeServer, ranks: bool, abandoned: threading.Event) -> None:
    try:  # the raw descriptor: a buffered reader would block interpreter shutdown
        while os.read(sys.stdin.fileno(), 4096):
            pass
    except OSError:
        pass
    finally:
        if ranks and not server.wait_stopped(0):
            others = [n for n in server.endpoints if n != server.name]
            stopped = sum(_stop(server, other) for other in others)
            if not others or stopped < len(others):
                abandoned.set()
        server.request_stop()


# How long rank 0 gives each other node to take its STOP: briefly, since MPI's launcher ends
# every rank on its own when the launcher dies (paths.mpiexec.command), and a node that is gone
# would otherwise hold this one (a first contact waits the pathmap's grace, 30 s by default).
STOP_WAIT = 2.0


def _stop(server: NodeServer, node: str) -> bool:
    """Ask `node` to stop, through a client of its own that waits STOP_WAIT at most; whether it took it."""
    try:
        client = pastset.connect(server.endpoint_of(node), security=server.security, timeout=STOP_WAIT,
                                 gone_after=STOP_WAIT, grace=STOP_WAIT)
    except PastSetError:
        return False   # gone already, or not answering: MPI's launcher ends it
    try:
        client.call(STOP, timeout=STOP_WAIT)
        return True
    except EventSpaceError:
        return False
    finally:
        client.close()


def add_grace_option(parser) -> None:
    """--grace S, for the commands that start or run nodes (see `Pathmap.with_grace`)."""
    parser.add_argument("--grace", type=float, metavar="S",
                        help="seconds to wait on a node that keeps its connection but does not answer "
                             "(paused, swapping) before giving up on it (default: the pathmap's "
                             "liveness.grace, else 30)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paths", description=__doc__)
    parser.add_argument("--pathmap", required=True)
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--node")
    where.add_argument("--by-rank", action="store_true",
                       help="be the node whose index in the pathmap is this process's MPI rank (under mpiexec or srun)")
    parser.add_argument("--bind", default=None)
    parser.add_argument("--launched", action="store_true")
    parser.add_argument("--endpoints", default=None, help="JSON {node: endpoint} of the other nodes")
    parser.add_argument("--insecure", action="store_true",
                        help="allow a non-loopback address without authentication")
    parser.add_argument("--checked", metavar="SHA256",
                        help="load the checked pathmap its launcher wrote beside --pathmap, if its digest is this")
    add_grace_option(parser)
    args = parser.parse_args(argv)
    try:
        return run_node(args.pathmap, args.node, args.bind, args.launched,
                        json.loads(args.endpoints) if args.endpoints else None, args.insecure, args.grace,
                        args.checked)
    except (PathmapError, PastSetError, PathsError, OSError) as exc:
        print(f"node {args.node or 'of this rank'}: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
