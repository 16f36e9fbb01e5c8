# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test test-fast bench clean

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

bench: $(VENV)/.installed
	$(BIN)/python benchmarks/pastset_bench.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache
