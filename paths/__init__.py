"""PATHS: pathmaps (paths and trees of wrapper stages from threads to elements), their generators, and the runtime.

Its names are imported when first used (`from paths import RunFile` reads run files without loading
the generators, networkx or the runtime): a monitor says it found its run before the rest is loaded.
"""

from importlib import import_module

# name -> the module that defines it
_WHERE = {
    "Context": "context", "PathHandle": "context", "PathmapError": "document", "Problem": "document",
    "generate": "generate", "AppMap": "inputs", "ClusterMap": "inputs", "Placement": "inputs",
    "CollectorPoint": "instrument", "NodeDied": "launch", "NodeNotAnswering": "launch", "ProgramFailed": "launch",
    "Run": "launch", "attach": "launch", "launch": "launch", "NodeServer": "node", "Pathmap": "pathmap",
    "RunError": "runfile", "RunFile": "runfile", "DEFAULT_KEEP": "sections", "Clock": "sections",
    "ElementSpec": "sections", "Instrument": "sections", "Liveness": "sections", "Node": "sections",
    "Path": "sections", "SecuritySpec": "sections", "Selector": "sections", "Stage": "sections",
    "Thread": "sections", "Tree": "sections", "TreePoints": "sections", "Shape": "shapes",
    "PathsError": "wrapper", "Wrapper": "wrapper",
}

__all__ = [
    "Pathmap", "PathmapError", "Problem", "Node", "Thread", "ElementSpec", "Stage", "Path", "Tree",
    "TreePoints", "Instrument", "Selector", "CollectorPoint", "Clock", "SecuritySpec", "Liveness",
    "generate", "AppMap", "ClusterMap", "Placement", "Shape",
    "launch", "attach", "Run", "RunFile", "RunError", "NodeDied", "NodeNotAnswering", "ProgramFailed",
    "NodeServer", "Context", "PathHandle", "Wrapper", "PathsError", "DEFAULT_KEEP",
]


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'paths' has no attribute {name!r}")
    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
