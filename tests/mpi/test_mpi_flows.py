"""Each MPI send matched to the receive that got it, and drawn as a flow in the exported traces."""

from __future__ import annotations

import json
import sys

from eventspace.archive import Archive
from eventspace.mpi import encoding as e
from eventspace.mpi.matching import message_pairs
from jobs import mpirun, requires_mpi, run
from monitors.perfetto import validate

pytestmark = requires_mpi


def test_sends_match_their_receives_also_from_any_source_and_with_any_tag(tmp_path):
    archive = tmp_path / "messages.sqlite"
    result = mpirun("-n", 3, "--archive", archive, "messages.py", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "['bb', 'a', 'ccc', b'dddd']\n"
    with Archive.open(archive) as db:
        records, catalogue = db.records(), db.catalogue
    pairs = message_pairs(records, catalogue)

    def end(i):
        rec = records[i]
        any_of = "".join(name for flag, name in ((e.ANY_SOURCE, " any source"), (e.ANY_TAG, " any tag"))
                         if rec["flags"] & flag)
        return catalogue[int(rec["collector"])].thread, e.NAMES[int(rec["op"])] + any_of, int(rec["arg"])

    found = sorted((end(s), end(r)[:2]) for s, r in pairs)
    ring = [(("r0", "MPI_Sendrecv.send", 3), ("r1", "MPI_Sendrecv.recv")),
            (("r1", "MPI_Sendrecv.send", 3), ("r2", "MPI_Sendrecv.recv")),
            (("r2", "MPI_Sendrecv.send", 3), ("r0", "MPI_Sendrecv.recv"))] * 2
    assert found == sorted([
        (("r1", "MPI_Send", 5), ("r0", "MPI_Recv any source")),
        (("r1", "MPI_Send", 6), ("r0", "MPI_Recv")),
        (("r2", "MPI_Send", 5), ("r0", "MPI_Recv any source")),
        (("r2", "MPI_Isend", 9), ("r0", "MPI_Irecv any source any tag")),
        *ring])
    for s, r in pairs:
        # The receive names the sender and the send the receiver; both carry the message's tag and bytes.
        assert records[r]["element"] == int(catalogue[int(records[s]["collector"])].thread[1:])
        assert records[s]["element"] == int(catalogue[int(records[r]["collector"])].thread[1:])
        assert (records[s]["arg"], records[s]["nbytes"]) == (records[r]["arg"], records[r]["nbytes"])
    # Non-overtaking: a channel's first send is its first receive's (the ring's two rounds).
    firsts = {}
    for s, r in sorted(pairs, key=lambda p: records[p[0]]["t_start"]):
        firsts.setdefault(end(s), []).append(int(records[r]["t_start"]))
    assert all(got == sorted(got) for got in firsts.values())

    # Both exporters draw them: a flow from the send's track to the receive's.
    out = tmp_path / "messages.json"
    exported = run([sys.executable, "-m", "eventspace.cli", "archive", "export", archive, "--perfetto", out], tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert f", {len(pairs)} flows," in exported.stdout
    doc = json.loads(out.read_text())
    assert validate(doc) == []
    names = {(ev["pid"], ev["tid"]): ev["args"]["name"] for ev in doc["traceEvents"] if ev.get("name") == "thread_name"}
    ends = {}
    for ev in doc["traceEvents"]:
        if ev["ph"] in ("s", "f"):
            ends.setdefault(ev["id"], {})[ev["ph"]] = names[(ev["pid"], ev["tid"])]
    assert sorted((f["s"], f["f"]) for f in ends.values()) == sorted((end(s)[0], end(r)[0]) for s, r in pairs)
    native = run([sys.executable, "-m", "eventspace.cli", "archive", "export", archive, "--perfetto",
                  tmp_path / "messages.pftrace"], tmp_path)
    assert native.returncode == 0, native.stderr
    assert f", {len(pairs)} flows," in native.stdout
