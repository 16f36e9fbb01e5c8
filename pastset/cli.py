"""The pastset subcommands of `eventspace`: serve, ps stat, ps demo."""

from __future__ import annotations

import ipaddress
import signal
import socket
import sys
import threading
from urllib.parse import urlsplit

from .client import connect
from .errors import PastSetError
from .server import TupleServer


def register(subparsers) -> None:
    serve = subparsers.add_parser("serve", help="run a PastSet node server in the foreground")
    serve.add_argument("--bind", default="tcp://127.0.0.1:5555",
                       help="ZeroMQ endpoint to bind (port 0 picks a free one; default %(default)s)")
    serve.add_argument("--name", default=None, help="server name (default: the host name)")
    serve.add_argument("--insecure", action="store_true",
                       help="allow binding a non-loopback address without authentication")
    serve.set_defaults(func=_serve)

    ps = subparsers.add_parser("ps", help="PastSet tools: inspect a node server, run the demo")
    ps_sub = ps.add_subparsers(dest="ps_command", metavar="SUBCOMMAND", required=True)
    stat = ps_sub.add_parser("stat", help="print a table of a node server's elements")
    stat.add_argument("endpoint", help="e.g. tcp://127.0.0.1:5555")
    stat.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the server")
    stat.set_defaults(func=_stat)
    demo = ps_sub.add_parser("demo", help="a node server, two producer processes and a consumer")
    demo.add_argument("--tuples", type=int, default=5_000, help="tuples per producer")
    demo.add_argument("--payload", type=int, default=64, help="payload bytes per tuple")
    demo.set_defaults(func=_demo)


def check_bind(bind: str, insecure: bool) -> None:
    """Refuse a non-loopback bind unless the user said --insecure (no authentication exists yet)."""
    parts = urlsplit(bind)
    if parts.scheme != "tcp":
        return
    host = parts.hostname or ""
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback:
        if not insecure:
            raise PastSetError(
                f"refusing to bind {bind}: it is reachable from other hosts and anyone who can "
                "reach it may read and write every element; bind 127.0.0.1, or pass --insecure"
            )
        print(f"warning: serving {bind} without authentication", file=sys.stderr)


def _serve(args) -> int:
    check_bind(args.bind, args.insecure)
    server = TupleServer(args.name or socket.gethostname())
    endpoint = server.serve(args.bind)
    print(f"serving on {endpoint}", flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def _stat(args) -> int:
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    # Names and templates are data, not markup: "[int, str]" must print as itself.
    with connect(args.endpoint, timeout=args.timeout) as client:
        infos = client.elements()
        table = Table(title=escape(f"node server {client.name} at {args.endpoint}"))
        for column in ("element", "template", "first", "last", "held", "keep", "delta", "bytes"):
            table.add_column(column, justify="left" if column in ("element", "template") else "right")
        for i in infos:
            table.add_row(escape(i.name), escape(i.template), str(i.first), str(i.last), str(i.held),
                          "-" if i.keep is None else str(i.keep),
                          "-" if i.delta is None else str(i.delta), f"{i.nbytes:,}")
        Console().print(table)
    return 0


def _demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.tuples, args.payload)
