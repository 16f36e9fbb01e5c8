"""colop on an MPI run: rounds of a communicator's collectives, the late rank, the worst round, an open round."""

from __future__ import annotations

from jobs import monitor, requires_mpi, start, stop, until_live

pytestmark = requires_mpi


def test_colop_names_the_late_rank_the_worst_round_and_whom_an_open_round_waits_for(tmp_path):
    release = tmp_path / "release"
    job = start(tmp_path, 3, "rounds", "rounds.py", release)
    try:
        until_live("rounds", job)
        seen = []
        for _ in range(10):   # until rank 2 holds up the Barrier (round 30) and the 30 rounds are in
            seen = monitor("colop", "--run", "rounds", "--interval", 0.5, "--duration", 1.2, cwd=tmp_path)
            if seen and seen[-1]["open"] and seen[-1]["ops"] and seen[-1]["ops"][0]["rounds"] == 30:
                break
        release.touch()
        out, err = job.communicate(timeout=60)
    finally:
        stop(job)
    assert job.returncode == 0, err
    report = seen[-1]
    assert report["tree"] == "comm0" and report["joins"] == []
    (allreduce,) = report["ops"]
    assert (allreduce["op"], allreduce["rounds"]) == ("MPI_Allreduce", 30)
    assert allreduce["slowest"] == "r1" and allreduce["slowest_share"] >= 0.5
    assert (allreduce["worst_member"], allreduce["worst_round"]) == ("r2", 20)
    assert 150_000 <= allreduce["worst_lateness_us"] < 2_000_000
    assert report["open"]["round"] == 30
    assert (report["open"]["arrived"], report["open"]["waiting_for"]) == (["r0", "r1"], ["r2"])
