"""The collectives benchmark's application map for any thread count (`pathmap generate collectives`)."""

from __future__ import annotations

from paths import AppMap
from paths.inputs import AppTree

from .program import TREE


def app_map(threads: int) -> AppMap:
    """Threads T0..T{n-1}, no elements, and one tree, `ops` (kind allreduce, every thread a
    member, T0 its root member): allreduce, barrier and broadcast all run over it."""
    if threads < 1:
        raise ValueError(f"the collectives benchmark needs at least one thread, got {threads}")
    names = tuple(f"T{i}" for i in range(threads))
    return AppMap(names, (), (AppTree(TREE, "allreduce", names),))
