"""Rank 1 raises; the others wait in a barrier that it never reaches."""

from mpi4py import MPI

comm = MPI.COMM_WORLD
if comm.Get_rank() == 1:
    raise ZeroDivisionError("rank 1 divides by zero")
comm.Barrier()
