"""The rules of a valid pathmap, checked on the typed model, so that generated pathmaps are checked too."""

from __future__ import annotations

from ..document import Key
from . import instrument, keys, nodes, paths, settings, stages, trees
from .checker import Checker


def check(pathmap) -> list[tuple[Key, str]]:
    """Every rule `pathmap` (a paths.Pathmap) breaks, as (key path, "what is wrong; what to do"),
    in pathmap order."""
    checker = Checker(pathmap)
    keys.check(checker)  # the bounds of the schema (paths.sections) first: the rules below rely on them
    settings.check(checker)
    nodes.check(checker)
    stages.check(checker)
    trees.check(checker)  # before the paths, which must not pass through a tree's stages
    paths.check(checker)
    instrument.check(checker)
    return checker.problems
