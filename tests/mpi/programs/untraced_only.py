"""Only calls that are not traced (and queries): the run collects nothing and says what was called."""

from mpi4py import MPI

comm = MPI.COMM_WORLD
comm.Set_name(f"world of {comm.Get_size()}")
keyval = comm.Create_keyval()
comm.Free_keyval(keyval)
