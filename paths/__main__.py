"""`python -m paths --pathmap P --node N`: one node server process (what `paths.launch` starts)."""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from pastset import PastSetError
from pastset.security import use as use_security

from .document import PathmapError
from .node import NodeServer
from .pathmap import Pathmap


def run_node(pathmap_file: str, node: str, bind: str | None = None, launched: bool = False,
             endpoints: dict | None = None, insecure: bool = False, grace: float | None = None) -> int:
    """Run one node until stopped; print one JSON line {node, endpoint, pid} once it serves.

    Launched (by `paths.launch`): the node also stops when its stdin closes, so that it never
    outlives the launcher. Otherwise SIGINT or SIGTERM stop it. The node's keys (the pathmap's
    `security` section, else $EVENTSPACE_KEYS) become the process's, so that everything that
    connects from inside it (scope joins placed on the node) speaks CURVE too. A non-loopback
    address without CURVE needs `insecure`. `grace` replaces the pathmap's `liveness.grace`: how
    long this node waits on another that keeps its connection but does not answer.
    """
    pathmap = Pathmap.load(pathmap_file).with_grace(grace)
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
    print(json.dumps({"node": node, "endpoint": endpoint, "pid": os.getpid()}), flush=True)
    if launched:
        threading.Thread(target=_watch_stdin, args=(server,), daemon=True).start()
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, lambda *_: server.request_stop())
        signal.signal(signal.SIGINT, lambda *_: server.request_stop())
    try:
        while not server.wait_stopped(0.5):
            pass
    finally:
        server.close()
    return 0


def _watch_stdin(server: NodeServer) -> None:
    try:  # the raw descriptor: a buffered reader would block interpreter shutdown
        while os.read(sys.stdin.fileno(), 4096):
            pass
    except OSError:
        pass
    finally:
        server.request_stop()


def add_grace_option(parser) -> None:
    """--grace S, for the commands that start or run nodes (see `Pathmap.with_grace`)."""
    parser.add_argument("--grace", type=float, metavar="S",
                        help="seconds to wait on a node that keeps its connection but does not answer "
                             "(paused, swapping) before giving up on it (default: the pathmap's "
                             "liveness.grace, else 30)")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m paths", description=__doc__)
    parser.add_argument("--pathmap", required=True)
    parser.add_argument("--node", required=True)
    parser.add_argument("--bind", default=None)
    parser.add_argument("--launched", action="store_true")
    parser.add_argument("--endpoints", default=None, help="JSON {node: endpoint} of the other nodes")
    parser.add_argument("--insecure", action="store_true",
                        help="allow a non-loopback address without authentication")
    add_grace_option(parser)
    args = parser.parse_args(argv)
    try:
        return run_node(args.pathmap, args.node, args.bind, args.launched,
                        json.loads(args.endpoints) if args.endpoints else None, args.insecure, args.grace)
    except (PathmapError, PastSetError, OSError) as exc:
        print(f"node {args.node}: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
