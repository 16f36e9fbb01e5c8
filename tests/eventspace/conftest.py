"""Collector tests run over both implementations: the compiled one and the pure-Python reference."""

import pytest

from eventspace import compiled


@pytest.fixture(params=["compiled", "pure"])
def implementation(request, monkeypatch):
    """'compiled' or 'pure': node servers made in the test (and processes it starts) run that collector
    (EVENTSPACE_PURE, read by each node's event space when it starts)."""
    if request.param == "pure":
        monkeypatch.setenv(compiled.PURE, "1")
    else:
        monkeypatch.delenv(compiled.PURE, raising=False)
        if compiled._built is None:
            pytest.fail(f"the compiled collector is not built ({compiled._NOT_BUILT}): "
                        "`make .venv/.installed` builds it")
    return request.param
