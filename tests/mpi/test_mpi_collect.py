"""What the collectors write: exact records of a program whose calls are known, and no loss."""

from __future__ import annotations

import json
import os
import pickle
from collections import Counter

import pytest

from eventspace import compiled, trace
from eventspace.archive import Archive
from eventspace.mpi import encoding as e
from jobs import mpirun, ours, requires_mpi
from paths.runfile import run_dir

pytestmark = requires_mpi

COLUMNS = ("thread", "op", "flags", "element", "arg", "nbytes", "t_start", "t_end", "element_name", "tree")


def records(path):
    with Archive.open(path) as archive:
        _, rows = archive.query(f"SELECT {', '.join(COLUMNS)} FROM events ORDER BY t_start, seq")
        _, members = archive.query("SELECT tree, thread FROM catalogue WHERE role = 'contribute'")
        info = archive.info
    trees: dict[str, set] = {}
    for tree, thread in members:
        trees.setdefault(tree, set()).add(thread)
    return [dict(zip(COLUMNS, row)) for row in rows], trees, info


def test_every_call_of_a_known_program_is_one_exact_record(tmp_path):
    archive = tmp_path / "calls.sqlite"
    result = mpirun("-n", 3, "--archive", archive, "calls.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows, trees, info = records(archive)
    assert info.discarded == 0 and info.tuples == len(rows)
    assert f"archive {archive}: {len(rows)} events from 3 ranks, 0 discarded" in " ".join(ours(result.stderr))

    # Communicators: 0 is COMM_WORLD; the split's two halves and the duplicate come after.
    assert trees["comm0"] == {"r0", "r1", "r2"}
    label = {"comm0": "world"}
    for tree, members in trees.items():
        if tree != "comm0":
            label[tree] = {frozenset({"r0", "r2"}): "pair", frozenset({"r1"}): "single",
                           frozenset({"r0", "r1", "r2"}): "dup"}[frozenset(members)]
    assert sorted(label.values()) == ["dup", "pair", "single", "world"]
    # The archive keeps what analyses need beside the catalogue: hosts, clusters, communicators.
    communicators = {f"comm{c['id']}": c for c in json.loads(info.extra["communicators"])}
    assert communicators["comm0"] == {"id": 0, "members": [0, 1, 2], "how": "COMM_WORLD"}
    pair = next(c for c in communicators.values() if label[f"comm{c['id']}"] == "pair")
    assert pair["members"] == [2, 0] and pair["how"] == "Split (color 0) of comm 0"
    assert set(json.loads(info.extra["hosts"])) == {"r0", "r1", "r2"}
    assert set(json.loads(info.extra["clusters"]).values()) == {"default"}

    def key(row):
        comm = label[row["element_name"] or row["tree"]]
        return row["thread"], e.NAMES[row["op"]], bool(row["flags"] & e.REQUEST), comm

    expected = Counter()
    for rank in ("r0", "r1", "r2"):
        for op, n in (("MPI_Isend", 2), ("MPI_Irecv", 2), ("MPI_Waitall", 1), ("MPI_Wait", 2),
                      ("MPI_Sendrecv.send", 1), ("MPI_Sendrecv.recv", 1)):
            expected[rank, op, False, "world"] += n
        expected[rank, "MPI_Isend", True, "world"] += 2
        expected[rank, "MPI_Irecv", True, "world"] += 2
        for op, n in (("MPI_Bcast", 1), ("MPI_Allreduce", 2), ("MPI_Barrier", 1), ("MPI_Gather", 1)):
            expected[rank, op, False, "world"] += n
        expected[rank, "MPI_Bcast", False, "dup"] += 1
        half = "single" if rank == "r1" else "pair"
        expected[rank, "MPI_Allreduce", False, half] += 1
        expected[rank, "MPI_Barrier", False, half] += 1
    expected["r0", "MPI_Send", False, "world"] += 3
    expected["r1", "MPI_Recv", False, "world"] += 2
    expected["r1", "MPI_Probe", False, "world"] += 1
    expected["r2", "MPI_Recv", False, "world"] += 1
    for rank in ("r0", "r2"):
        expected[rank, "MPI_Send", False, "pair"] += 1
        expected[rank, "MPI_Recv", False, "pair"] += 1
    assert Counter(key(row) for row in rows) == expected

    def only(thread, op, where="world", request=False, **fields):
        found = [r for r in rows if r["thread"] == thread and e.NAMES[r["op"]] == op
                 and bool(r["flags"] & e.REQUEST) == request and label[r["element_name"] or r["tree"]] == where
                 and all(r[k] == v for k, v in fields.items())]
        assert len(found) == 1, (thread, op, fields, found)
        return found[0]

    obj = {"payload": list(range(10))}
    pickled = len(pickle.dumps(obj, 5))
    # Blocking sends and receives: peers as world ranks, ANY_SOURCE / ANY_TAG resolved.
    assert only("r0", "MPI_Send", arg=5)["flags"] == e.PICKLED
    assert only("r0", "MPI_Send", arg=5)["element"] == 1 and only("r0", "MPI_Send", arg=5)["nbytes"] == pickled
    assert (only("r0", "MPI_Send", arg=6)["flags"], only("r0", "MPI_Send", arg=6)["element"],
            only("r0", "MPI_Send", arg=6)["nbytes"]) == (0, 2, 128)
    first = only("r1", "MPI_Recv", arg=5)
    assert (first["flags"], first["element"], first["nbytes"]) == (e.PICKLED | e.ANY_SOURCE | e.ANY_TAG, 0, pickled)
    got = only("r2", "MPI_Recv")
    assert (got["flags"], got["element"], got["arg"], got["nbytes"]) == (e.ANY_SOURCE, 0, 6, 128)
    probe = only("r1", "MPI_Probe")
    assert (probe["element"], probe["arg"], probe["nbytes"]) == (0, 11, len(pickle.dumps("hi", 5)))

    for rank in range(3):
        thread, right, left = f"r{rank}", (rank + 1) % 3, (rank - 1) % 3
        # Posts, then the requests' records from post to completion, the receive's actual source.
        post = only(thread, "MPI_Isend", arg=7)
        assert (post["element"], post["nbytes"]) == (right, 64)
        done = only(thread, "MPI_Isend", request=True, arg=7)
        assert done["t_start"] == post["t_start"] and done["t_end"] > post["t_end"]
        assert (only(thread, "MPI_Irecv", arg=7)["element"], only(thread, "MPI_Irecv", arg=7)["nbytes"]) == (left, 0)
        received = only(thread, "MPI_Irecv", request=True, arg=7)
        assert (received["element"], received["nbytes"]) == (left, 64)
        assert only(thread, "MPI_Irecv", request=True, arg=8)["nbytes"] == len(pickle.dumps(left, 5))
        assert only(thread, "MPI_Isend", arg=8)["nbytes"] == len(pickle.dumps(rank, 5))
        waitall = only(thread, "MPI_Waitall")
        assert (waitall["element"], waitall["arg"]) == (2, 2)
        assert (only(thread, "MPI_Sendrecv.send")["element"], only(thread, "MPI_Sendrecv.send")["nbytes"]) == (right, 32)
        assert (only(thread, "MPI_Sendrecv.recv")["element"], only(thread, "MPI_Sendrecv.recv")["arg"]) == (left, 9)
        # Collectives on COMM_WORLD: rounds 0..4 in call order, roots as world ranks.
        coll = [r for r in rows if r["thread"] == thread and r["tree"] == "comm0"]
        assert [e.NAMES[r["op"]] for r in coll] == ["MPI_Bcast", "MPI_Allreduce", "MPI_Barrier", "MPI_Allreduce",
                                                     "MPI_Gather"]
        assert [r["arg"] for r in coll] == [0, 1, 2, 3, 4]
        assert [r["element"] for r in coll] == [1, e.PEER_NONE, e.PEER_NONE, e.PEER_NONE, 2]
        assert coll[0]["nbytes"] == (pickled if rank == 1 else 0)
        # An object allreduce is mpi4py's own algorithm over pickles: it may pickle more than once.
        assert coll[1]["nbytes"] >= len(pickle.dumps(rank, 5)) and coll[3]["nbytes"] == 128
        assert coll[3]["flags"] == 0 and coll[1]["flags"] == e.PICKLED
    # The split's pair: world 2 is its rank 0; peers are world ranks.
    assert only("r0", "MPI_Send", where="pair")["element"] == 2
    assert only("r2", "MPI_Send", where="pair")["element"] == 0
    pair_recv = only("r0", "MPI_Recv", where="pair")
    assert (pair_recv["flags"], pair_recv["element"], pair_recv["arg"]) == (e.PICKLED | e.ANY_SOURCE, 2, 3)


@pytest.mark.slow
@pytest.mark.timeout(360)   # its own wait: 300 s for the job
def test_a_tight_loop_of_200000_sends_is_archived_whole_in_under_16_bytes_an_event(tmp_path):
    """Every rank records into a file of its own, in blocks, and rank 0 builds the archive from the files
    when the run ends: exact counts, every rank's account in the closing line, and a compact archive
    (an archive of one row per event took 109 bytes an event)."""
    archive = tmp_path / "sends.sqlite"
    result = mpirun("-n", 2, "--archive", archive, "sends.py", 200_000, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr
    with Archive.open(archive) as db:
        info = db.info
        _, counts = db.query("SELECT thread, op, count(*), sum(nbytes) FROM events GROUP BY thread, op")
    assert info.discarded == 0
    assert sorted(counts) == [("r0", e.SEND, 200_000, 200_000), ("r1", e.RECV, 200_000, 200_000)]
    assert info.tuples == 400_000
    assert archive.stat().st_size / info.tuples <= 16
    closing = [line for line in ours(result.stderr) if line.startswith("eventspace.mpi: archive")]
    assert closing == [line for line in closing if
                       "400,000 events from 2 ranks, 0 discarded (r0: made 200,000, written 200,000, discarded 0; "
                       "r1: made 200,000, written 200,000, discarded 0)" in line] and len(closing) == 1
    assert not list(run_dir().glob("sends*.recording*")), "the ranks' files stay after the archive was built"


def test_every_wrapped_call_and_constructor_is_collected(tmp_path):
    archive = tmp_path / "everything.sqlite"
    result = mpirun("-n", 2, "--archive", archive, "everything.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    with Archive.open(archive) as db:
        _, ops = db.query("SELECT DISTINCT op FROM events")
        _, comms = db.query("SELECT DISTINCT coalesce(element_name, tree) FROM events")
        _, ended = db.query(f"SELECT thread, op, flags FROM events WHERE arg IN (98, 99) AND flags & {e.REQUEST}")
        info = db.info
    assert info.discarded == 0
    expected = set(e.NAMES) - {e.PROBE, e.IMPROBE, e.IMRECV, e.IBSEND, e.IRSEND, e.TESTANY, e.TESTSOME}
    # nonblocking and persistent calls: tests/mpi/test_mpi_nonblocking.py
    expected -= e.POSTED_COLLECTIVES | {e.SEND_INIT, e.BSEND_INIT, e.SSEND_INIT, e.RSEND_INIT, e.RECV_INIT,
                                        e.NEIGHBOR_ALLGATHER, e.NEIGHBOR_ALLGATHERV, e.NEIGHBOR_ALLTOALL,
                                        e.NEIGHBOR_ALLTOALLV, e.NEIGHBOR_ALLTOALLW}
    expected -= e.WINDOWS   # one-sided calls: tests/mpi/test_mpi_rma.py, on 3 ranks
    assert {e.NAMES[op] for (op,) in ops} == {e.NAMES[op] for op in expected}
    # COMM_WORLD, six communicators made from it, a Cartesian one and its Sub (the loop's
    # barriers and the Sub's; the Cartesian parent makes no call).
    assert {c for (c,) in comms} == {f"comm{i}" for i in (0, 1, 2, 3, 4, 5, 6, 8)}
    assert sorted(ended) == [("r0", e.ISEND, e.REQUEST | e.FREED), ("r0", e.IRECV, e.REQUEST | e.CANCELLED),
                             ("r1", e.ISEND, e.REQUEST | e.FREED), ("r1", e.IRECV, e.REQUEST | e.CANCELLED)]


@pytest.mark.slow   # 6-7 s: make test-fast stays within its 3 minutes
def test_compiled_collectors_write_what_the_pure_ones_write(tmp_path):
    """Buffer sends, Recv, buffer collectives, posts and the completions of their requests run
    compiled where the extension is built (eventspace/collector_c/: MpiCall, RequestWait,
    RequestWaitall); each form of those calls gives the same records as the pure-Python closures,
    which stay the reference (EVENTSPACE_PURE=1)."""
    fields = ("thread", "op", "flags", "element", "arg", "nbytes", "coalesce(element_name, tree)")
    seen = {}
    for how, env in (("compiled", {}), ("pure", {"EVENTSPACE_PURE": "1"})):
        archive = tmp_path / f"{how}.sqlite"
        result = mpirun("-n", 2, "--archive", archive, "compiled.py", cwd=tmp_path,
                        env={**os.environ, "PYTHONWARNINGS": "ignore", **env})
        assert result.returncode == 0, result.stderr
        seen[how] = result.stdout
        with Archive.open(archive) as db:
            _, rows = db.query(f"SELECT {', '.join(fields)} FROM events")
            assert db.info.discarded == 0
        seen[how, "rows"] = Counter(rows)
    if compiled.collector_module() is not None:
        # receives read the count with MPI_Get_count in C: the short messages below (7 and 8
        # bytes into 16-byte buffers) have the pure collectors' counts
        assert ("collector MpiCall MpiCall MpiCall, pickled MpiCall MpiCall MpiCall MpiCall, posts MpiCall, waits "
                "RequestWait RequestWaitall RequestWaitall, receives count with MPI_Get_count, source and tag from "
                "MPI_Status" in seen["compiled"])
    assert ("collector function function function, pickled function function function function, posts function, "
            "waits "
            "function classmethod classmethod, receives count with Status.Get_count" in seen["pure"])
    assert seen["compiled", "rows"] == seen["pure", "rows"]
    rows = seen["pure", "rows"]
    # The forms each path takes are all there: the sends' bytes, the failed send, receives of
    # every source and tag, the rooted collectives' bytes at the root only.
    assert rows["r0", e.SEND, 0, 1, 0, 7, "comm0"] == 1
    assert rows["r0", e.SEND, trace.ERROR, e.PEER_NONE, 7, 0, "comm0"] == 1
    assert rows["r1", e.RECV, e.ANY_SOURCE | e.ANY_TAG, 0, 0, 7, "comm0"] == 1
    assert rows["r1", e.RECV, e.ANY_SOURCE, 0, 2, 8, "comm0"] == 1
    # Keyword forms, in any order, with a parameter left out before one given.
    assert rows["r0", e.SEND, 0, 1, 9, 16, "comm0"] == rows["r1", e.RECV, e.ANY_SOURCE, 0, 9, 16, "comm0"] == 1
    assert rows["r1", e.REDUCE, 0, 1, 7, 16, "comm0"] == 1   # round 7: the second Reduce
    assert rows["r1", e.RECV, 0, e.PEER_NONE, e.TAG_ANY, 0, "comm0"] == 1
    assert rows["r1", e.BCAST, 0, 1, 1, 16, "comm0"] == rows["r0", e.BCAST, 0, 1, 1, 0, "comm0"] == 1
    assert sum(n for (thread, op, flags, *_), n in rows.items() if op == e.ALLREDUCE and not flags & e.PICKLED) == 6
    # Nonblocking posts and their requests' completions: a post's record, then its request's,
    # with what came (the ANY_SOURCE receive: from r0, 8 bytes).
    assert rows["r0", e.ISEND, 0, 1, 12, 16, "comm0"] == rows["r0", e.ISSEND, 0, 1, 13, 8, "comm0"] == 1
    assert rows["r0", e.ISEND, e.REQUEST, 1, 11, 16, "comm0"] == 1
    assert rows["r1", e.IRECV, e.ANY_SOURCE, e.PEER_ANY, 13, 0, "comm0"] == 1
    assert rows["r1", e.IRECV, e.ANY_SOURCE | e.REQUEST, 0, 13, 8, "comm0"] == 1
    assert rows["r1", e.IRECV, e.REQUEST, 0, 12, 16, "comm0"] == 1
    assert rows["r1", e.IRECV, e.ANY_SOURCE | e.ANY_TAG | e.REQUEST, 0, 15, 3, "comm0"] == 1
    assert rows["r1", e.IRECV, e.CANCELLED | e.REQUEST, 0, 99, 0, "comm0"] == 1
    # Wait records: given one request, which completed (r0: 4 Wait or wait; r1: 6, one cancelled)
    assert rows["r0", e.WAIT, 0, 1, 1, 0, "comm0"] == 4 and rows["r1", e.WAIT, 0, 1, 1, 0, "comm0"] == 6
    # Waitall records: given n requests, n completed (r0: [Isend, Issend], 2 isends, the tuple's Isend)
    assert rows["r0", e.WAITALL, 0, 2, 2, 0, "comm0"] == 2 and rows["r0", e.WAITALL, 0, 1, 1, 0, "comm0"] == 1
    assert rows["r1", e.IRECV, e.ANY_SOURCE | e.REQUEST, 0, 17, 16, "comm0"] == 1
    # Pickle-form collectives: flag PICKLED, the bytes pickled (the bcast's dict at its root only)
    pickled = {(thread, op, arg, n) for (thread, op, flags, element, arg, n, _), k in rows.items() if flags & e.PICKLED
               and op in (e.ALLREDUCE, e.BCAST, e.REDUCE, e.GATHER)}
    assert {op for _, op, _, _ in pickled} == {e.ALLREDUCE, e.BCAST, e.REDUCE, e.GATHER}
    assert [n for thread, op, _, n in pickled if op == e.BCAST and thread == "r1"][0] > 0
    assert [n for thread, op, _, n in pickled if op == e.BCAST and thread == "r0"] == [0]
    # Sendrecv: its send half and its receive half (what came: ANY_SOURCE, ANY_TAG from r0, 4 bytes)
    assert rows["r0", e.SENDRECV_SEND, 0, 1, 31, 2, "comm0"] == rows["r1", e.SENDRECV_RECV, 0, 0, 31, 2, "comm0"] == 1
    assert rows["r1", e.SENDRECV_RECV, e.ANY_SOURCE | e.ANY_TAG, 0, 32, 4, "comm0"] == 1
    # sendrecv, the pickle form: each rank's send half carries the bytes the other's receive half got
    for tag, got_flags in ((33, 0), (34, 0), (35, e.ANY_SOURCE | e.ANY_TAG)):
        for sender, receiver in (("r0", "r1"), ("r1", "r0")):
            sent = [n for (thread, o, flags, _peer, arg, n, _where), k in rows.items() if thread == sender
                    and o == e.SENDRECV_SEND and flags == e.PICKLED and arg == tag for _ in range(k)]
            got = [n for (thread, o, flags, _peer, arg, n, _where), k in rows.items() if thread == receiver
                   and o == e.SENDRECV_RECV and flags == e.PICKLED | got_flags and arg == tag for _ in range(k)]
            assert len(sent) == 1 and sent == got and sent[0] > 0, (tag, sender, sent, got)
    # ... and to and from PROC_NULL: nothing pickled, nothing came (MPI's PROC_NULL Status: ANY_TAG)
    assert rows["r0", e.SENDRECV_SEND, e.PICKLED, e.PEER_NONE, 36, 0, "comm0"] == 1
    assert rows["r0", e.SENDRECV_RECV, e.PICKLED, e.PEER_NONE, e.TAG_ANY, 0, "comm0"] == 1
    # Test: done at once (r0, to PROC_NULL: Test and test), and not yet (r1, EMPTY, nothing completed)
    assert rows["r0", e.TEST, 0, 1, 1, 0, "comm0"] == 2 and rows["r1", e.TEST, e.EMPTY, 1, 0, 0, "comm0"] == 1
    assert rows["r1", e.IRECV, e.REQUEST, 0, 18, 16, "comm0"] == 1
    # The other calls on many requests: given n (REQUEST_NULL too), how many of ours completed; done
    # at once (r0, to PROC_NULL), one of two (Waitany), and not yet (r1, EMPTY), their requests then
    # completed by a Waitall of three; what came by Waitany and Waitsome from ANY_SOURCE or ANY_TAG
    for op in (e.TESTALL, e.TESTANY, e.TESTSOME):
        assert rows["r0", op, 0, 1, 1, 0, "comm0"] == 1 + (op != e.TESTALL)
        assert rows["r1", op, e.EMPTY, 1, 0, 0, "comm0"] == 1
    assert rows["r0", e.TESTALL, 0, 2, 1, 0, "comm0"] == 1
    assert rows["r0", e.WAITANY, 0, 2, 1, 0, "comm0"] == rows["r1", e.WAITANY, 0, 2, 1, 0, "comm0"] == 1
    assert rows["r0", e.WAITSOME, 0, 1, 1, 0, "comm0"] == rows["r1", e.WAITSOME, 0, 1, 1, 0, "comm0"] == 2
    assert rows["r1", e.IRECV, e.ANY_SOURCE | e.REQUEST, 0, 41, 16, "comm0"] == 1
    assert rows["r1", e.IRECV, e.ANY_TAG | e.REQUEST, 0, 43, 3, "comm0"] == 1
    assert rows["r1", e.WAITALL, 0, 3, 3, 0, "comm0"] == 1
    # Pickle-form point-to-point: the bytes pickled at the send, the same bytes received
    for tag, sent_flags, got_flags in ((50, 0, e.ANY_SOURCE | e.ANY_TAG), (51, 0, 0), (52, 0, 0), (53, 0, e.ANY_SOURCE)):
        op = e.SSEND if tag == 52 else e.SEND
        sent = [n for (thread, o, flags, _peer, arg, n, _where), k in rows.items()
                if thread == "r0" and o == op and flags == e.PICKLED | sent_flags and arg == tag for _ in range(k)]
        got = [n for (thread, o, flags, _peer, arg, n, _where), k in rows.items()
               if thread == "r1" and o == e.RECV and flags == e.PICKLED | got_flags and arg == tag for _ in range(k)]
        assert len(sent) == 1 and sent == got and sent[0] > 0, (tag, sent, got)
    assert [n for (thread, o, flags, _peer, arg, n, _where), k in rows.items() if thread == "r1" and o == e.IRECV
            and flags == e.PICKLED | e.ANY_SOURCE | e.ANY_TAG | e.REQUEST and arg == 54] == \
        [n for (thread, o, flags, _peer, arg, n, _where), k in rows.items() if thread == "r0" and o == e.ISEND
         and flags == e.PICKLED | e.REQUEST and arg == 54]


@pytest.mark.parametrize("how", ["compiled", "pure"])
def test_a_program_with_a_status_class_of_its_own_runs_as_without_eventspace(tmp_path, how):
    """A Status subclass whose Get_source and Get_tag say something else than MPI (the program's own
    labels): the program sees its labels, and the records MPI's source and tag (the run aborted with
    IndexError when the collector read the source through the subclass)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore", **({"EVENTSPACE_PURE": "1"} if how == "pure" else {})}
    archive = tmp_path / "status.sqlite"
    result = mpirun("-n", 2, "--archive", archive, "status_subclass.py", cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[(1000, -4), (1000, -7), (1000, -5, 3), (1000, -6), (1000, -8)]"
    with Archive.open(archive) as db:
        _, rows = db.query("SELECT op, element, arg FROM events WHERE thread = 'r1' AND op IN "
                           f"({e.RECV}, {e.IRECV}, {e.PROBE}) AND (op != {e.IRECV} OR flags & {e.REQUEST})")
    assert sorted(rows) == sorted([(e.RECV, 0, 4), (e.RECV, 0, 7), (e.PROBE, 0, 5), (e.RECV, 0, 5),
                                   (e.IRECV, 0, 6), (e.IRECV, 0, 8)])
