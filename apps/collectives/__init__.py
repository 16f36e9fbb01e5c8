"""The collectives micro-benchmark: allreduce, barrier and broadcast over PATHS trees of any shape."""

from apps.collectives.cli import CollectivesSummary, OpLatency, run_collectives
from apps.collectives.program import OPS

__all__ = ["OPS", "CollectivesSummary", "OpLatency", "run_collectives"]
