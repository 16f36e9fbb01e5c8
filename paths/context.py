"""What an application thread holds: location-transparent element handles and the collectives of its trees."""

from __future__ import annotations

from pastset import as_batch

from . import operation as op
from .errors import PathsError

# Which tree kinds a collective looks for when the caller names no tree.
_KINDS_FOR = {
    op.ALLREDUCE: ("allreduce", "reduce"), op.REDUCE: ("reduce", "allreduce"),
    op.BARRIER: ("barrier",), op.BROADCAST: ("broadcast",), op.GATHER: ("gather",),
}


class PathHandle:
    """An element as one thread reaches it: the PastSet element API, forwarded along the thread's path.

    Every operation enters the path's first stage (and so passes its collectors), wherever the
    element lives. Blocking and errors are the element's (see `pastset.Element`): a stage on a
    node that is gone raises `pastset.ServerGone`.
    """

    __slots__ = ("name", "path", "_enter")

    def __init__(self, name: str, path: str, enter):
        self.name = name
        self.path = path
        self._enter = enter

    def move(self, values, timeout: float | None = None) -> int | None:
        """Append one tuple; its index (None when a buffer or filter stage held it back)."""
        return self._enter(op.MOVE, (values, timeout))

    def move_many(self, batch, timeout: float | None = None) -> int | None:
        """Append tuples in order in one operation; the index of the last."""
        return self._enter(op.MOVE_MANY, (batch, timeout))

    def observe(self, index: int | None = None, timeout: float | None = None) -> tuple:
        """Read one tuple (consuming without an index); see `pastset.Element.observe`."""
        return tuple(self._enter(op.OBSERVE, (index, timeout))[1])

    def observe_indexed(self, index: int | None = None, timeout: float | None = None) -> tuple[int, tuple]:
        """As observe, with the index of the tuple read: (index, tuple)."""
        found, values = self._enter(op.OBSERVE, (index, timeout))
        return found, tuple(values)

    def first(self) -> int:
        return self._enter(op.FIRST, ())

    def last(self) -> int:
        return self._enter(op.LAST, ())

    def delta(self, n: int | None = None) -> int | None:
        return self._enter(op.DELTA, (n,))

    def axe(self, index: int) -> int:
        return self._enter(op.AXE, (index,))

    def read_range(self, lo: int, hi: int):
        return as_batch(self._enter(op.READ_RANGE, (lo, hi)))

    def latest(self, n: int = 1):
        return as_batch(self._enter(op.LATEST, (n,)))

    def __repr__(self):
        return f"<PathHandle {self.path}>"


class Context:
    """Given to each application thread: who it is, where it runs, and how it reaches things.

    `ctx.path(element)` returns a PathHandle by the pathmap's path from this thread to the
    element; `ctx.allreduce`, `reduce`, `broadcast`, `barrier`, `gather` run a collective over
    one of the thread's trees (named by `tree=`, or the only one of a fitting kind). Moving a
    thread or an element is a pathmap edit: the program does not change.

    `node` is the paths.NodeServer the thread runs in; `args` the program's arguments.
    """

    def __init__(self, node, thread: str, args: dict):
        self._node = node
        self.thread = thread
        self.node = node.name
        self.pathmap = node.pathmap
        self.args = args
        self._handles: dict[str, PathHandle] = {}
        self._trees = tuple(t for t in node.pathmap.trees if thread in t.members)

    def report(self, **values) -> None:
        """Publish this thread's progress (plain values, e.g. step=12); the launcher's
        `Run.progress()` reads the latest of every thread. Cheap: a dict store, no message."""
        self._node.progress[self.thread] = values

    @property
    def elements(self) -> tuple[str, ...]:
        """The elements this thread has a path to, in pathmap order."""
        return tuple(p.element for p in self.pathmap.paths_of(self.thread))

    def path(self, element: str) -> PathHandle:
        """The handle by which this thread reaches `element`; PathsError if it has no path there."""
        handle = self._handles.get(element)
        if handle is None:
            try:
                path = self.pathmap.path_to(self.thread, element)
            except KeyError:
                mine = ", ".join(self.elements) or "(none)"
                raise PathsError(f"thread {self.thread} has no path to element {element!r}; its "
                                 f"elements: {mine}") from None
            handle = PathHandle(element, path.name, self._node.path_entry[path.name])
            self._handles[element] = handle
        return handle

    # -- collectives ---------------------------------------------------------------------------

    def allreduce(self, value, op_name: str = "sum", tree: str | None = None, timeout: float | None = None):
        """Combine every member's value with `op_name` (sum, min, max, count or an allowed
        `module:function` of a list); every member gets the result."""
        value = 1 if op_name == "count" else value
        return self._collective(op.ALLREDUCE, value, op_name, tree, timeout)

    def reduce(self, value, op_name: str = "sum", tree: str | None = None, timeout: float | None = None):
        """As allreduce, but only the tree's root member (its first member) gets the result; others get None."""
        name = self._tree(op.REDUCE, tree).name
        value = 1 if op_name == "count" else value
        result = self._collective(op.REDUCE, value, op_name, name, timeout)
        return result if self._is_root(name) else None

    def broadcast(self, value=None, tree: str | None = None, timeout: float | None = None):
        """Every member gets the value the tree's root member (its first member) passes."""
        name = self._tree(op.BROADCAST, tree).name
        flagged = [self._is_root(name), value if self._is_root(name) else None]
        return self._collective(op.BROADCAST, flagged, "root", name, timeout)[1]

    def barrier(self, tree: str | None = None, timeout: float | None = None) -> None:
        """Return once every member of the tree has arrived."""
        self._collective(op.BARRIER, None, "barrier", tree, timeout)

    def gather(self, value, tree: str | None = None, timeout: float | None = None) -> dict:
        """Every member's value, by member name, at every member."""
        pairs = self._collective(op.GATHER, [[self.thread, value]], "gather", tree, timeout)
        return {member: v for member, v in pairs}

    def _is_root(self, tree: str) -> bool:
        return next(iter(self.pathmap.tree(tree).members)) == self.thread

    def _tree(self, code: int, name: str | None):
        if name is not None:
            for tree in self._trees:
                if tree.name == name:
                    return tree
            try:
                members = ", ".join(self.pathmap.tree(name).members)
            except KeyError:
                known = ", ".join(t.name for t in self.pathmap.trees) or "(none)"
                raise PathsError(f"no tree {name!r} in pathmap {self.pathmap.name}; trees: {known}") from None
            raise PathsError(f"thread {self.thread} is not a member of tree {name} (members: {members})")
        fitting = [t for t in self._trees if t.kind in _KINDS_FOR[code]] or list(self._trees)
        if len(fitting) == 1:
            return fitting[0]
        if not fitting:
            raise PathsError(f"thread {self.thread} is a member of no tree; add it to a tree in the pathmap")
        raise PathsError(f"thread {self.thread} is a member of trees {', '.join(t.name for t in fitting)}; "
                         f"name one with tree=")

    def _collective(self, code: int, value, how: str, tree: str | None, timeout):
        name = self._tree(code, tree).name
        enter = self._node.member_entry[(name, self.thread)]
        return enter(code, (value, how, timeout))
