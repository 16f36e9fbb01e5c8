"""PATHS: pathmaps (paths and trees of wrapper stages from threads to elements), their generators, and the runtime."""

from .context import Context, PathHandle
from .document import PathmapError, Problem
from .generate import generate
from .inputs import AppMap, ClusterMap, Placement
from .instrument import CollectorPoint
from .launch import NodeDied, NodeNotAnswering, ProgramFailed, Run, attach, launch
from .node import NodeServer
from .pathmap import Pathmap
from .runfile import RunError, RunFile
from .sections import (DEFAULT_KEEP, Clock, ElementSpec, Instrument, Liveness, Node, Path, SecuritySpec, Selector,
                       Stage, Thread, Tree, TreePoints)
from .shapes import Shape
from .errors import PathsError
from .wrapper import Wrapper

__all__ = [
    "Pathmap", "PathmapError", "Problem", "Node", "Thread", "ElementSpec", "Stage", "Path", "Tree",
    "TreePoints", "Instrument", "Selector", "CollectorPoint", "Clock", "SecuritySpec", "Liveness",
    "generate", "AppMap", "ClusterMap", "Placement", "Shape",
    "launch", "attach", "Run", "RunFile", "RunError", "NodeDied", "NodeNotAnswering", "ProgramFailed",
    "NodeServer", "Context", "PathHandle", "Wrapper", "PathsError", "DEFAULT_KEEP",
]
