"""A run whose pathmap grows while it runs (an MPI run declaring communicators): adopt, in-flight marks, archive."""

from __future__ import annotations

import time

import pytest

from eventspace import trace
from eventspace.archive import Archive, ArchiveError
from eventspace.catalogue import Catalogue
from eventspace.mpi import encoding as e
from eventspace.mpi.generate import Communicator, add_communicator, add_ranks, run_pathmap
from eventspace.scope import EventScope
from eventspace.space import Mark, NodeSpace
from paths import NodeServer, RunFile

WORLD = Communicator(0, (0, 1), "COMM_WORLD")
SPLIT = Communicator(1, (1, 0), "Split of comm 0")


def grown(*comms, name="grow"):
    return run_pathmap(name, ["h", "h"], {"h": "default"}, list(comms))


@pytest.fixture
def node(tmp_path):
    pathmap = grown(WORLD)
    server = NodeServer(pathmap, "r0")
    server.serve("tcp://127.0.0.1:0")
    snapshot = tmp_path / "grow.pathmap.yaml"
    snapshot.write_text(pathmap.dumps())
    run = RunFile(str(snapshot), {"r0": server.endpoint, "r1": server.endpoint}, {}, time.time())
    yield server, run, snapshot
    server.close()


def test_a_node_adopts_the_collectors_a_grown_pathmap_appends(node):
    server, _, _ = node
    space = NodeSpace.of(server)
    before = space.catalogue.entries
    pages = list(space.table.pages)
    space.adopt(grown(WORLD, SPLIT))
    assert space.catalogue.entries[:len(before)] == before and len(space.catalogue) == len(before) + 4
    new = [x for x in space.catalogue.entries[len(before):] if x.trace_node == "r0"]
    assert [x.role for x in new] == ["source", "contribute"]
    for entry in new:   # their trace elements are there, ready for the collectors
        assert server.server.element(entry.trace).keep == space.catalogue.pathmap.instrument.keep
    assert all(a is b for a, b in zip(pages, space.table.pages))   # grown by pages: none moved
    assert len(space.table) >= len(space.catalogue) + 1
    with pytest.raises(ValueError, match="may only append collectors"):
        space.adopt(grown(Communicator(0, (1, 0), "reordered")))


def test_a_node_takes_a_communicator_added_to_its_run_into_its_table(node):
    """Issue 34: the node's collector table grows by the new communicator's collectors alone (the
    entries it had are kept, not made again), and the node takes the grown pathmap through its own
    method; a pathmap that is not its run grown is refused, and the node is left as it was."""
    server, _, _ = node
    space = NodeSpace.of(server)
    before, pages = space.catalogue, list(space.table.pages)
    another = add_communicator(grown(WORLD, name="another"), SPLIT)
    with pytest.raises(ValueError, match="is not run grow grown"):   # another run's pathmap
        space.extend(another.pathmap, another.part)
    assert space.catalogue is before and server.pathmap is before.pathmap
    assert not any(e.name.startswith("trace/") and int(e.name[6:]) > len(before) for e in server.server.elements())
    extension = add_communicator(server.pathmap, SPLIT)
    space.extend(extension.pathmap, extension.part)
    assert server.pathmap is extension.pathmap and space.catalogue.pathmap is extension.pathmap
    assert space.catalogue.entries == Catalogue(grown(WORLD, SPLIT)).entries
    assert all(a is b for a, b in zip(before.entries, space.catalogue.entries))
    new = [x for x in space.catalogue.entries[len(before):] if x.trace_node == "r0"]
    assert [x.role for x in new] == ["source", "contribute"]
    for entry in new:
        assert server.server.element(entry.trace).keep == extension.pathmap.instrument.keep
    assert all(a is b for a, b in zip(pages, space.table.pages)) and len(space.table) >= len(space.catalogue) + 1
    with pytest.raises(ValueError, match="may only append collectors"):   # the same communicator again
        space.extend(extension.pathmap, extension.part)
    assert server.pathmap is extension.pathmap and len(space.catalogue) == len(before) + 4


def test_a_node_takes_ranks_that_joined_its_run_then_their_communicators(node):
    """Spawned processes join an MPI run as its next ranks: a node takes their nodes and threads
    after its own (no collector changes), then a communicator they are members of, whose collectors
    come after all others; another run's pathmap is refused, and the node keeps its own."""
    server, _, _ = node
    space = NodeSpace.of(server)
    before = space.catalogue.entries
    joined = add_ranks(server.pathmap, [("h2", "default"), ("h2", "default")])
    assert [n.name for n in joined.nodes] == ["r0", "r1", "r2", "r3"] and joined.node("r3").host == "h2"
    assert [(t.name, t.node) for t in joined.threads[2:]] == [("r2", "r2"), ("r3", "r3")]
    with pytest.raises(ValueError, match="is not run grow grown"):
        space.adopt(add_ranks(grown(WORLD, name="another"), [("h2", "default")]))
    space.adopt(joined)
    assert server.pathmap is joined and space.catalogue.entries == before
    spawned = Communicator(1, (0, 2, 3), "Spawn, intercommunicator: groups of 1 and 2")
    extension = add_communicator(server.pathmap, spawned)
    space.extend(extension.pathmap, extension.part)
    assert space.catalogue.entries[:len(before)] == before
    assert sorted((x.thread, x.role) for x in space.catalogue.entries[len(before):]) == [
        (rank, role) for rank in ("r0", "r2", "r3") for role in ("contribute", "source")]


def test_a_scope_reads_what_blocked_operations_wait_for(node):
    server, run, _ = node
    space = NodeSpace.of(server)
    cid = next(x.id for x in space.catalogue if x.thread == "r0" and x.role == "source")
    other = next(x.id for x in space.catalogue if x.thread == "r0" and x.role == "contribute")
    (page, at), (other_page, other_at) = space.table.place(cid), space.table.place(other)
    page.marks[at], page.starts[at] = (e.RECV, e.PICKLED, 1, 7, 0), 123   # an MPI collector's mark
    other_page.starts[other_at] = 456    # a collector that leaves no mark
    with EventScope(run, "node:r0") as scope:
        starts, missing = scope.in_flight()
        marks, _ = scope.in_flight_marks()
    assert starts == {cid: 123, other: 456} and not missing
    assert marks == {cid: Mark(123, e.RECV, e.PICKLED, 1, 7, 0), other: Mark(456, 0, 0, 0, 0, 0)}
    page.starts[at] = other_page.starts[other_at] = 0


def test_an_archive_extends_its_catalogue_as_the_run_grows(tmp_path):
    small, large = Catalogue(grown(WORLD)), Catalogue(grown(WORLD, SPLIT))
    new = large.entries[len(small):][0]
    with Archive(tmp_path / "a.sqlite", small) as archive:
        assert archive.extend(large) == len(large) - len(small)
        archive.append(trace.decode(trace.RECORD.pack(e.SEND, 0, new.id, 1, 3, 8, 1, 2)))
        assert archive.extend(large) == 0
        with pytest.raises(ArchiveError, match="does not begin with the archive's"):
            archive.extend(Catalogue(grown(Communicator(0, (1, 0), "other"))))
    with Archive.open(tmp_path / "a.sqlite") as archive:
        assert archive.catalogue.entries == large.entries
        _, rows = archive.query("SELECT thread, element_name, op_name FROM events")
    assert rows == [(new.thread, "comm1", "MPI_Send")]
