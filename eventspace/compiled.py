"""Which collector hot path a node runs: the compiled one (eventspace/collector_c/) or the pure-Python reference."""

from __future__ import annotations

import os
import sys
import warnings

from pastset import ring

try:
    from ._collector import Collect  # noqa: F401 - the module is what callers get (collector_module)
    _built, _NOT_BUILT = sys.modules[f"{__package__}._collector"], ""
except ImportError as exc:  # the optional extension was not built (no compiler or headers at install)
    _built, _NOT_BUILT = None, str(exc)
if _built is not None and ring.CONTRACT_VERSION is None:   # it appends through pastset's C ring append
    _built, _NOT_BUILT = None, "pastset's ring appender (pastset._ring) is not built"

PURE = "EVENTSPACE_PURE"   # set to 1: collectors run in pure Python even where the compiled one is built
_warned = False


def collector_module():
    """The compiled collector module (`Collect`, `RingAppender`), or None for the pure-Python collector.

    None when the environment asks for it (EVENTSPACE_PURE=1), or when the extension was not built;
    then, once per process, a RuntimeWarning says so and how to build it (read at node start).
    """
    global _warned
    if os.environ.get(PURE) == "1":
        return None
    if _built is None and not _warned:
        _warned = True
        warnings.warn(f"eventspace: the compiled collector is not built ({_NOT_BUILT}); collectors run in "
                      "pure Python, several times slower per event. Build it with a C compiler and the "
                      "Python headers: `pip install -e .` (or `make .venv/.installed`). "
                      f"Set {PURE}=1 to choose the pure collector and silence this.",
                      RuntimeWarning, stacklevel=2)
    return _built
