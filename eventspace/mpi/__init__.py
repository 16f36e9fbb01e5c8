"""Unmodified mpi4py programs as PATHS runs: each rank a node, collectors on its MPI calls."""
