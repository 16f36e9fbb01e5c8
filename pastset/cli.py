"""The pastset subcommands of `eventspace`: serve, keys generate, ps stat, ps demo."""

from __future__ import annotations

import signal
import socket
import stat
import threading
from pathlib import Path as FilePath

from .transport import connect
from .security import AUTHORIZED, KEYS_ENV, Security, check_bind, default, generate
from .server import TupleServer


def register(subparsers) -> None:
    serve = subparsers.add_parser("serve", help="run a PastSet node server in the foreground")
    serve.add_argument("--bind", default="tcp://127.0.0.1:5555",
                       help="ZeroMQ endpoint to bind (port 0 picks a free one; default %(default)s)")
    serve.add_argument("--name", default=None, help="server name (default: the host name)")
    serve.add_argument("--keys", metavar="DIR", default=None,
                       help=f"serve CURVE with the key directory DIR (default: ${KEYS_ENV} if set)")
    serve.add_argument("--insecure", action="store_true",
                       help="allow binding a non-loopback address without authentication")
    serve.set_defaults(func=_serve)

    keys = subparsers.add_parser("keys", help="CURVE keys: authentication and encryption of node servers")
    keys_sub = keys.add_subparsers(dest="keys_command", metavar="SUBCOMMAND", required=True)
    generate = keys_sub.add_parser("generate", help="write a key directory: server and client key pairs, "
                                                    "and the client keys servers accept")
    generate.add_argument("dir", help="the key directory to write (created with mode 0700)")
    generate.add_argument("--force", action="store_true", help="replace the keys DIR already holds")
    generate.set_defaults(func=_keys_generate)

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


def _serve(args) -> int:
    security = Security.load(args.keys) if args.keys else default()
    check_bind(args.bind, security, args.insecure)
    server = TupleServer(args.name or socket.gethostname())
    endpoint = server.serve(args.bind, security)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())   # before we say we serve: a SIGTERM then stops us cleanly
    print(f"serving on {endpoint}" + (f" (CURVE, keys {security.keys})" if security.serves else ""),
          flush=True)
    try:
        while not stop.wait(0.5):
            pass
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
    return 0


def _stat(args) -> int:
    from .terminal import console
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
        console().print(table)
    return 0


def _keys_generate(args) -> int:
    written = generate(args.dir, force=args.force)
    base = FilePath(args.dir).resolve()
    print(f"wrote CURVE keys to {base}:")
    for path in written:
        mode = stat.S_IMODE(path.stat().st_mode)
        print(f"  {path.relative_to(written[0].parent)}  ({mode:04o})")
    print(f"""
server.key_secret stays with the node servers; client.key_secret with whoever may use the run
(nodes, monitors, tools); {AUTHORIZED}/ holds the client public keys the servers accept: add
another client's .key file there to let it in. Give the directory to every node and monitor:
  in the pathmap:       security: {{keys: {base}}}
  or the environment:   export {KEYS_ENV}={base}
Monitors and tools attaching to a run need {KEYS_ENV} (server.key and client.key_secret suffice).""")
    return 0


def _demo(args) -> int:
    from .demo import run_demo

    return run_demo(args.tuples, args.payload)
