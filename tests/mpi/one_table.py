"""A node's collector table holding an MPI collector's call and a PATHS collector's operation in flight at
once. Run as a program (`python one_table.py`, one process: MPI starts as a singleton, which pytest's own
process must not do); tests/mpi/test_mpi_table.py runs it and reads the one JSON line it prints.

The node is a one-rank MPI run's, grown by communicators after it started (as `eventspace.mpi` grows it
per communicator), until the last one's point-to-point collector has its slot on a page of the table
made after the node started. On that communicator a thread makes a traced Recv (tag 5) that blocks; on
another thread the node's PATHS collector of COMM_WORLD's tree times an observe of an empty element,
which blocks too. The node's in_flight() is read while both wait (`waiting`), then the main thread sends
the message and moves the tuple, and in_flight() is read again once both calls returned (`after`).
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

from mpi4py import MPI

from eventspace.collector import Collector
from eventspace.mpi import encoding as e
from eventspace.mpi import interpose
from eventspace.mpi.collector import MpiCollector, p2p_methods, peer_table
from eventspace.mpi.generate import Communicator, add_communicator, collector_ids, run_pathmap
from eventspace.space import NodeSpace
from eventspace.table import PAGE
from paths import NodeServer
from paths import operation as op
from paths.wrapper import ElementStage

sys.path.append(str(Path(__file__).resolve().parents[1]))   # tests/: the tests' one way to wait
from polling import until  # noqa: E402

TAG = 5


def main() -> None:
    if MPI.Query_thread() != MPI.THREAD_MULTIPLE:
        raise SystemExit("MPI runs without MPI_THREAD_MULTIPLE: a thread cannot block in Recv while another sends")
    server = NodeServer(run_pathmap("table", ["h"], {"h": "default"}, [Communicator(0, (0,), "COMM_WORLD")]), "r0")
    try:
        space = NodeSpace.of(server)
        first_pages = len(space.table.pages)
        comm_id = 0
        while collector_ids(space.catalogue, comm_id, 0)[0] < first_pages * PAGE:
            comm_id += 1
            grown = add_communicator(server.pathmap, Communicator(comm_id, (0,), f"Dup of comm {comm_id - 1}"))
            space.extend(grown.pathmap, grown.part)
        mpi_id, _ = collector_ids(space.catalogue, comm_id, 0)
        _, paths_id = collector_ids(space.catalogue, 0, 0)

        # The MPI collector, as eventspace.mpi.rank makes it for a traced communicator.
        comm = MPI.COMM_WORLD.Dup()
        page, at = space.enrol(mpi_id)
        ch = MpiCollector(mpi_id, space.appender(space.catalogue[mpi_id]), page, at, lambda: None, space.clock,
                          peer_table([0]), space.compiled, space.clock_offset_ns)
        recv = p2p_methods(comm, MPI.Intracomm, ch, interpose.Request, interpose.Message, interpose.Prequest)["Recv"]

        # The PATHS collector, on a path that ends at an element of the node.
        server.server.enter("waited", ["int"])
        stage = Collector("collector", {"id": paths_id}, server)
        stage.next = ElementStage("end", {"element": "waited"}, server)
        observe = stage.entry()

        done = {}
        buffer = bytearray(4)
        threads = [threading.Thread(target=lambda: done.update(recv=recv(buffer, 0, TAG))),
                   threading.Thread(target=lambda: done.update(observe=observe(op.OBSERVE, (0, 60))))]
        for thread in threads:
            thread.start()
        waiting = until(space.in_flight, 60, "both calls in flight", holds=lambda rows: len(rows) == 2)
        comm.Send(b"abcd", dest=0, tag=TAG)
        server.server.element("waited").move((7,))
        for thread in threads:
            thread.join(60)
        print(json.dumps({"implementation": space.implementation, "pages": [first_pages, len(space.table.pages)],
                          "mpi": mpi_id, "paths": paths_id, "comm": comm_id, "recv": e.RECV, "waiting": waiting,
                          "after": space.in_flight(), "done": {k: repr(v) for k, v in done.items()}}))
        comm.Free()
    finally:
        server.close()


if __name__ == "__main__":
    main()
