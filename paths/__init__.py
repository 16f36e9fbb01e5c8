"""PATHS: pathmaps (paths and trees of wrapper stages from threads to elements) and their generators."""

from .document import PathmapError, Problem
from .generate import generate
from .inputs import AppMap, ClusterMap, Placement
from .instrument import CollectorPoint, Instrument, Selector
from .pathmap import Clock, ElementSpec, Node, Path, Pathmap, Stage, Thread, Tree, TreePoints
from .shapes import Shape

__all__ = [
    "Pathmap", "PathmapError", "Problem", "Node", "Thread", "ElementSpec", "Stage", "Path", "Tree",
    "TreePoints", "Instrument", "Selector", "CollectorPoint", "Clock",
    "generate", "AppMap", "ClusterMap", "Placement", "Shape",
]
