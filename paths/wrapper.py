"""Wrappers: the stages of a path. Each receives an operation, may act before and after, and forwards it."""

from __future__ import annotations

import threading
from typing import Any, Protocol

from . import operation as op
from .errors import PathsError


class StageHost(Protocol):
    """What a stage may ask of the node process it runs in (a paths.NodeServer)."""

    name: str

    def element(self, name: str) -> Any: ...          # a local pastset Element
    def remote_stage(self, stage_id: str) -> Any: ...  # a callable reaching a stage on another node
    def function(self, dotted: str) -> Any: ...        # a user function from an allowed module


class Wrapper:
    """A stage on a path.

    The contract is one method: calling the stage, `stage(code, args)` (`__call__`), receives
    an operation (a code from `paths.operation` and its argument tuple) and returns its result,
    normally by calling `self.next(code, args)` with code of its own before and after. Subclasses
    register by `type_name`; `params` are the stage's parameters from the pathmap (plain values).
    `node` is the StageHost it runs in.
    """

    type_name = ""

    def __init__(self, stage_id: str, params: dict, node: StageHost):
        self.id = stage_id
        self.params = params
        self.node = node
        self.next: Wrapper | None = None

    def __call__(self, code: int, args: tuple):
        return self.next(code, args)

    def entry(self):
        """The callable that enters this stage once the path is linked (`self.next` is final).

        The default is the stage itself; a hot stage (the event collector) returns a closure
        that holds what it needs in local cells instead of looking attributes up per call.
        """
        return self

    def close(self) -> None:
        """Release what the stage holds (flush buffers); called when its node stops."""

    def abort(self, why: str) -> None:
        """The run is stopping because `why` (a thread failed): a stage where threads wait (a tree's
        join) lets them go at once, each raising PathsError(why)."""

    def __repr__(self):
        return f"<{type(self).__name__} {self.id}>"


class ElementStage(Wrapper):
    """The end of a path: the operation is carried out on the local element."""

    type_name = "element"

    def __init__(self, stage_id, params, node):
        super().__init__(stage_id, params, node)
        e = node.element(params["element"])
        self.element = e
        self._ops = {
            op.MOVE: e.move, op.OBSERVE: e.observe_indexed, op.FIRST: e.first, op.LAST: e.last,
            op.DELTA: e.delta, op.AXE: e.axe, op.READ_RANGE: e.read_range, op.LATEST: e.latest,
            op.MOVE_MANY: self._move_many,
        }

    def __call__(self, code, args):
        try:
            return self._ops[code](*args)
        except KeyError:
            raise PathsError(f"stage {self.id}: element {self.element.name} has no operation "
                             f"{op.NAMES.get(code, code)}") from None

    def _move_many(self, values, timeout=None):
        index = None
        for v in values:
            index = self.element.move(v, timeout)
        return index


class Remote(Wrapper):
    """Continues the path on another node server: the next stage runs there (the node links
    `next` to `StageHost.remote_stage` of it)."""

    type_name = "remote"


class Buffer(Wrapper):
    """Batches moves: forwards them `size` at a time as one move_many (one hop, not `size`).

    A buffered move returns None (its index is known only at the flush). Any other
    operation flushes first, so a thread always reads its own moves.
    """

    type_name = "buffer"

    def __init__(self, stage_id, params, node):
        super().__init__(stage_id, params, node)
        self.size = int(params.get("size", 16))
        if self.size < 1:
            raise PathsError(f"stage {stage_id}: buffer size must be at least 1")
        self._pending: list = []
        self._mutex = threading.Lock()  # held while _pending changes or is flushed

    def __call__(self, code, args):
        if code == op.MOVE:
            with self._mutex:
                self._pending.append(args[0])
                if len(self._pending) < self.size:
                    return None
                return self._flush(args[1])
        with self._mutex:
            self._flush(None)
        return self.next(code, args)

    def _flush(self, timeout):
        batch, self._pending = self._pending, []
        if batch:
            return self.next(op.MOVE_MANY, (batch, timeout))
        return None

    def close(self):
        with self._mutex:
            self._flush(None)


class Filter(Wrapper):
    """Forwards only the moves whose tuple satisfies `where` (fields f0, f1, ... or `fields:` names).

    A dropped move returns None. Other operations pass untouched.
    """

    type_name = "filter"

    def __init__(self, stage_id, params, node):
        super().__init__(stage_id, params, node)
        from .expression import ExpressionError

        if not isinstance(params.get("where"), str):
            raise PathsError(f"stage {stage_id}: a filter needs `where: <expression>`")
        try:
            self.expression = self.parse(params)
        except ExpressionError as exc:
            raise PathsError(f"stage {stage_id}: {exc}") from None

    @staticmethod
    def parse(params: dict):
        """The Expression of a filter stage's `where` (a str) over its fields; ExpressionError if bad.

        Validation (paths.rules) runs this same parse, so a pathmap that validates builds.
        """
        from .expression import Expression

        return Expression(params["where"], params.get("fields") or [f"f{i}" for i in range(16)])

    def __call__(self, code, args):
        if code == op.MOVE and not self.expression.matches(args[0]):
            return None
        if code == op.MOVE_MANY:
            kept = [v for v in args[0] if self.expression.matches(v)]
            return self.next(code, (kept, *args[1:])) if kept else None
        return self.next(code, args)


class Sort(Wrapper):
    """Sorts what comes back as a list (gathered contributions, typed batches) by field `key`."""

    type_name = "sort"

    def __init__(self, stage_id, params, node):
        super().__init__(stage_id, params, node)
        self.key = params.get("key", 0)

    def __call__(self, code, args):
        result = self.next(code, args)
        key = self.key
        if code in (op.READ_RANGE, op.LATEST) and isinstance(result[1], list):
            return result[0], sorted(result[1], key=lambda t: t[key])
        if code == op.GATHER and isinstance(result, list):
            return sorted(result, key=lambda t: t[1][key] if isinstance(t[1], (list, tuple)) else t[1])
        return result


class Convert(Wrapper):
    """Applies a function from an allowed module (`fn: module:function`) to every result."""

    type_name = "convert"

    def __init__(self, stage_id, params, node):
        super().__init__(stage_id, params, node)
        fn = params.get("fn")
        if not isinstance(fn, str):
            raise PathsError(f"stage {stage_id}: convert needs `fn: module:function`")
        self.fn = node.function(fn)

    def __call__(self, code, args):
        return self.fn(self.next(code, args))


BUILTIN = {cls.type_name: cls for cls in (ElementStage, Remote, Buffer, Filter, Sort, Convert)}
