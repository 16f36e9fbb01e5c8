"""Never touches MPI."""

print(f"no MPI here {sum(range(10))}")   # one write: mpiexec sets PYTHONUNBUFFERED, ranks share stdout
