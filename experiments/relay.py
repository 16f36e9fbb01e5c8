"""The slow link between two emulated clusters: a user-space TCP relay that delays each stream.

    python -m experiments.relay GW1 GW2 --delay-ms 5 [--back-ms 5] --port 7000 [--port ...]

GW1 and GW2 are network namespaces (`experiments.network`): in GW1 the other cluster's host
addresses are local, so a connection from cluster 1 to a cluster-2 host ends here; the relay
reads the address it was made to, opens the same address and port from GW2, and forwards every
chunk each way after the configured one-way delay (`--delay-ms` from 1 to 2, `--back-ms` from 2
to 1), in order. The same holds from GW2 to GW1. It runs until its stdin closes or it is signalled,
and prints "relaying" once it listens. Needs root (it enters the namespaces with setns).
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import os
import signal
import socket
import sys
from contextlib import contextmanager

CLONE_NEWNET = 0x40000000
QUEUED_CHUNKS = 256   # per direction of a stream: a slow reader holds the writer back beyond this


_libc = ctypes.CDLL(None, use_errno=True)


@contextmanager
def entered(namespace: str):
    """This thread inside network namespace `namespace` (for making sockets there), then back."""
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    there = os.open(f"/run/netns/{namespace}", os.O_RDONLY)
    try:
        if _libc.setns(there, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"cannot enter network namespace {namespace}")
        try:
            yield
        finally:
            if _libc.setns(home, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "cannot return to this process's network namespace")
    finally:
        os.close(there)
        os.close(home)


def socket_in(namespace: str) -> socket.socket:
    with entered(namespace):
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setblocking(False)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


async def forward(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float) -> None:
    """Copy `reader` to `writer`, each chunk `delay` seconds after it arrived; half-close at the end."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue = asyncio.Queue(QUEUED_CHUNKS)

    async def read():
        try:
            while chunk := await reader.read(1 << 16):
                await queue.put((loop.time() + delay, chunk))
        except ConnectionError:
            pass
        await queue.put((loop.time() + delay, b""))

    async def write():
        while True:
            due, chunk = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not chunk:
                break
            writer.write(chunk)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()

    try:
        await asyncio.gather(read(), write())
    except ConnectionError:
        pass


class Link:
    """Both directions between two gateway namespaces."""

    def __init__(self, one: str, two: str, delay: float, back: float):
        self.one, self.two, self.delay, self.back = one, two, delay, back

    async def listen(self, ports: list[int]) -> list[asyncio.AbstractServer]:
        servers = []
        for here, there, delay, back in ((self.one, self.two, self.delay, self.back),
                                         (self.two, self.one, self.back, self.delay)):
            for port in ports:
                sock = socket_in(here)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind(("0.0.0.0", port))
                servers.append(await asyncio.start_server(
                    lambda r, w, there=there, delay=delay, back=back: self._relay(r, w, there, delay, back),
                    sock=sock))
        return servers

    async def _relay(self, reader, writer, there: str, delay: float, back: float) -> None:
        target = writer.get_extra_info("sockname")   # the address the client dialled: local here
        onward = socket_in(there)
        try:
            await asyncio.get_running_loop().sock_connect(onward, target)
            far_reader, far_writer = await asyncio.open_connection(sock=onward)
        except OSError:
            onward.close()
            writer.close()
            return
        writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            await asyncio.gather(forward(reader, far_writer, delay), forward(far_reader, writer, back))
        finally:
            far_writer.close()
            writer.close()


async def main_async(args) -> int:
    link = Link(args.one, args.two, args.delay_ms / 1e3, (args.delay_ms if args.back_ms is None else args.back_ms) / 1e3)
    servers = await link.listen(args.port)
    print("relaying", flush=True)
    loop = asyncio.get_running_loop()
    done = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, done.set)
    loop.add_reader(sys.stdin.fileno(), lambda: done.set() if not os.read(sys.stdin.fileno(), 4096) else None)
    await done.wait()
    for server in servers:
        server.close()
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.relay", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("one", help="cluster 1's gateway namespace")
    parser.add_argument("two", help="cluster 2's gateway namespace")
    parser.add_argument("--delay-ms", type=float, default=5.0, help="one-way delay from 1 to 2 (default %(default)s)")
    parser.add_argument("--back-ms", type=float, help="one-way delay from 2 to 1 (default: --delay-ms)")
    parser.add_argument("--port", type=int, action="append", required=True, help="a port to relay (repeat)")
    args = parser.parse_args(argv)
    try:
        return asyncio.run(main_async(args))
    except OSError as exc:
        print(f"relay: {exc}", file=sys.stderr, flush=True)
        return 2


if __name__ == "__main__":
    sys.exit(main())
