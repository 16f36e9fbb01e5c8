"""The wind tunnel's application map, for any thread count: what `pathmap generate windtunnel` builds from."""

from __future__ import annotations

from paths import AppMap
from paths.inputs import AppElement, AppTree

from .program import GROUPS, TREE


def app_map(threads: int) -> AppMap:
    """Threads T0..T{n-1} in a ring of row slices. Thread i moves into up{g}_{i} (its top row, group
    g of the matrices, for thread i-1) and down{g}_{i} (its bottom row, for i+1), and observes
    up{g}_{i+1} and down{g}_{i-1}: twelve elements per thread, each with one producer and one
    consumer and flow control delta 2. All threads join the `count` allreduce."""
    if threads < 1:
        raise ValueError(f"the wind tunnel needs at least one thread, got {threads}")
    names = tuple(f"T{i}" for i in range(threads))
    elements = []
    for i in range(threads):
        for g in range(len(GROUPS)):
            elements.append(AppElement(f"up{g}_{i}", ("int", "bytes"), (names[i], names[(i - 1) % threads]), delta=2))
            elements.append(AppElement(f"down{g}_{i}", ("int", "bytes"), (names[i], names[(i + 1) % threads]), delta=2))
    return AppMap(names, tuple(elements), (AppTree(TREE, "allreduce", names),))
