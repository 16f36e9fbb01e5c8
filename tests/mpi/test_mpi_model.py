"""The parts of eventspace.mpi that need no MPI: encoding, topology, the run's pathmap."""

from __future__ import annotations

import pytest

from eventspace import trace
from eventspace.catalogue import Catalogue
from eventspace.mpi import encoding as e
from eventspace.mpi.generate import Communicator, add_communicator, collector_ids, run_pathmap
from eventspace.mpi.options import INSTRUMENT
from eventspace.mpi.topology import Topology
from paths import PathmapError
from paths import operation as paths_op


def test_mpi_op_codes_extend_the_trace_name_space_without_collisions():
    assert not set(e.NAMES) & set(paths_op.NAMES)
    assert all(trace.OP_NAMES[code] == name for code, name in e.NAMES.items())
    assert trace.OP_CODES["MPI_Allreduce"] == e.ALLREDUCE and not e.is_mpi(paths_op.ALLREDUCE)
    assert e.SENDS.isdisjoint(e.RECEIVES) and e.ROOTED <= e.ROUNDS
    assert e.NAMES[e.IALLREDUCE] == "MPI_Iallreduce"
    assert e.NAMES[e.REDUCE_SCATTER_BLOCK_INIT] == "MPI_Reduce_scatter_block_init"


def test_records_and_marks_read_as_phrases():
    assert e.describe(e.RECV, e.PICKLED, 3, 7, 0) == "MPI_Recv from r3 tag 7 on comm 0"
    assert e.describe(e.RECV, e.ANY_SOURCE | e.ANY_TAG, e.PEER_ANY, e.TAG_ANY) == "MPI_Recv from any source any tag"
    assert e.describe(e.ALLREDUCE, 0, e.PEER_NONE, 41, 0) == "MPI_Allreduce on comm 0, round 41"
    assert e.describe(e.BCAST, 0, 2, 3, 1) == "MPI_Bcast from r2 on comm 1, round 3"
    assert e.describe(e.IBCAST, e.REQUEST, 2, 4, 1) == "MPI_Ibcast from r2 on comm 1, round 4"
    assert e.describe(e.SEND_INIT, 0, 1, 3, 0) == "MPI_Send_init to r1 tag 3 on comm 0"
    assert e.describe(e.IRECV, e.REQUEST, 1, 4, 2) == "request MPI_Irecv from r1 tag 4 on comm 2"
    assert e.describe(e.SEND, 0, 5, 0) == "MPI_Send to r5 tag 0"


def test_a_topology_places_hosts_by_name_or_pattern():
    topology = Topology.loads("clusters:\n  rack1: [node01, node02]\n  rack2: ['node1*']\n")
    assert topology.cluster_of(["node01", "node12", "node02"]) == {"node01": "rack1", "node12": "rack2",
                                                                    "node02": "rack1"}
    assert Topology().cluster_of(["a", "b"]) == {"a": "default", "b": "default"}
    with pytest.raises(ValueError, match=r"t.yaml: no cluster holds host zeta; add it under clusters"):
        Topology.loads("clusters: {rack1: [node01]}\n", "t.yaml").cluster_of(["node01", "zeta"])


@pytest.mark.parametrize("text, where", [
    ("clusters:\n  rack1: {hosts: [a]}\n", "t.yaml:2: clusters.rack1: expected a list"),
    ("clusters: [a, b]\n", "t.yaml:1: clusters: expected a mapping"),
    ("racks: {a: [b]}\n", "t.yaml:1: racks: unknown key 'racks'"),
    ("clusters:\n  rack1: []\n", "t.yaml:2: clusters.rack1: no hosts"),
    ("clusters: {a: [b\n", "t.yaml:2: (yaml): YAML syntax error"),
])
def test_a_bad_topology_is_named_by_file_line_and_key(text, where):
    with pytest.raises(PathmapError) as err:
        Topology.loads(text, "t.yaml")
    assert str(err.value).startswith(where)


def test_communicators_declared_later_append_collectors_and_keep_every_id():
    hosts, clusters = ["h0", "h0", "h1"], {"h0": "c0", "h1": "c1"}
    world = Communicator(0, (0, 1, 2), "COMM_WORLD")
    before = Catalogue(run_pathmap("r", hosts, clusters, [world]))
    split = Communicator(1, (2, 0), "Split (color 0) of comm 0")
    after = Catalogue(run_pathmap("r", hosts, clusters, [world, split]))
    assert after.entries[:len(before)] == before.entries
    assert [(x.role, x.thread, x.element or x.tree) for x in after.entries[len(before):]] == [
        ("source", "r0", "comm1"), ("source", "r2", "comm1"), ("contribute", "r2", "comm1"),
        ("contribute", "r0", "comm1")]
    assert collector_ids(after, 1, 2) == (len(before) + 2, len(before) + 3)
    assert collector_ids(after, 1, 1) == (0, 0)
    entry = after[collector_ids(after, 0, 2)[0]]
    assert (entry.node, entry.cluster, entry.trace_node, entry.path) == ("r2", "c1", "r2", "r2/comm0")
    only_p2p = Catalogue(run_pathmap("r", hosts, clusters, [world, split], instrument="p2p"))
    assert {x.role for x in only_p2p} == {"source"} and collector_ids(only_p2p, 1, 0)[1] == 0
    assert not Catalogue(run_pathmap("r", hosts, clusters, [world], instrument="none")).entries


@pytest.mark.parametrize("instrument", INSTRUMENT)
def test_a_communicator_added_to_a_run_gives_what_making_the_run_again_gives(instrument):
    """Issue 34: a run's pathmap grows by each communicator (add_communicator) and its catalogue by
    its collectors (Catalogue.extended), sharing what they held; the pathmap, the entries and every
    id are those run_pathmap gives for the longer list, whatever the members and where they run."""
    hosts, clusters = ["h0", "h0", "h1", "h1", "h2"], {"h0": "c0", "h1": "c0", "h2": "c1"}
    comms = [Communicator(0, (0, 1, 2, 3, 4), "COMM_WORLD"), Communicator(1, (3, 1), "Split (color 1) of comm 0"),
             Communicator(2, (4, 3, 2, 1, 0), "Split (key -rank) of comm 0"), Communicator(3, (2,), "Split of comm 1"),
             Communicator(4, (4, 0, 2), "Create of comm 0"), Communicator(5, (0, 1, 2, 3, 4), "Dup of comm 2")]
    pathmap = run_pathmap("r", hosts, clusters, comms[:1], instrument, keep=64)
    catalogue = Catalogue(pathmap)
    for n, comm in enumerate(comms[1:], 2):
        grown = add_communicator(pathmap, comm, instrument)
        made = run_pathmap("r", hosts, clusters, comms[:n], instrument, keep=64)
        assert grown.pathmap == made
        assert all(path in made.paths for path in grown.part.paths)
        assert all(a is b for a, b in zip(pathmap.elements, grown.pathmap.elements))   # shared, not made again
        extended = catalogue.extended(grown.pathmap, grown.part)
        again = Catalogue(made)
        assert extended.entries == again.entries and extended.trees == again.trees
        assert extended.entries[:len(catalogue)] == catalogue.entries
        for c in comms[:n]:
            for rank in range(len(hosts)):
                ids = collector_ids(extended, c.id, rank)
                thread, name = f"r{rank}", f"comm{c.id}"
                assert ids == (next((x.id for x in again if x.role == "source" and x.path == f"{thread}/{name}"), 0),
                               next((x.id for x in again if x.role == "contribute" and x.tree == name
                                     and x.thread == thread), 0))
        pathmap, catalogue = grown.pathmap, extended
    with pytest.raises(ValueError, match="not the next"):
        add_communicator(pathmap, Communicator(2, (0,), "late"), instrument)
    first = add_communicator(run_pathmap("r", hosts, clusters, comms[:1], instrument, keep=64), comms[1], instrument)
    with pytest.raises(ValueError, match="may only append collectors"):   # not this run's pathmap grown
        catalogue.extended(first.pathmap, first.part)
