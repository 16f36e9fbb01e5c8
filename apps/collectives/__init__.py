"""The collectives micro-benchmark: allreduce, barrier and broadcast over PATHS trees of any shape."""

from apps.collectives.cli import OpLatency, Summary, run_collectives
from apps.collectives.program import OPS

__all__ = ["OPS", "OpLatency", "Summary", "run_collectives"]
