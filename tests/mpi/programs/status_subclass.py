"""Receives into a Status of the program's own class, which overrides Get_source and Get_tag (the
program numbers ranks and tags its own way): rank 0 sends "x" (tag 4) and a 3-byte buffer (tag 5) to
rank 1, and "y" (tag 6) with isend; rank 1 receives each, by position and by keyword, with recv, Recv,
irecv + wait, a probe first, and Waitall, and prints what its Status says."""

from mpi4py import MPI


class Labelled(MPI.Status):
    """A Status that gives the source and tag as the program labels them."""

    def Get_source(self):  # noqa: N802 - mpi4py's name
        return 1000 + super().Get_source()

    def Get_tag(self):  # noqa: N802
        return -super().Get_tag()


comm = MPI.COMM_WORLD
if comm.Get_rank() == 0:
    for tag in (4, 7):
        comm.send("x", 1, tag=tag)
    comm.Send(bytearray(b"abc"), 1, tag=5)
    comm.isend("y", 1, tag=6).wait()
    comm.send("z", 1, tag=8)
elif comm.Get_rank() == 1:
    st, seen = Labelled(), []
    comm.recv(source=MPI.ANY_SOURCE, tag=4, status=st)
    seen.append((st.source, st.tag))
    comm.recv(None, 0, 7, st)
    seen.append((st.source, st.tag))
    comm.Probe(0, 5, st)
    comm.Recv(bytearray(3), 0, 5, st)
    seen.append((st.source, st.tag, st.Get_count()))
    comm.irecv(source=0, tag=6).wait(st)
    seen.append((st.source, st.tag))
    statuses = [Labelled()]
    MPI.Request.waitall([comm.irecv(source=0, tag=8)], statuses)
    seen.append((statuses[0].source, statuses[0].tag))
    print(seen, flush=True)
