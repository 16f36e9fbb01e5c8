"""Joined trees: stages that wait for one contribution per child, combine them, and forward one operation."""

from __future__ import annotations

import threading
from time import monotonic

from pastset import Timeout

from . import operation as op
from .errors import PathsError
from .wrapper import Wrapper

BUILTIN_FUNCTIONS = {
    "sum": sum,
    "min": min,
    "max": max,
    "count": sum,  # members contribute 1; inner stages add the counts up
}


def combine(code: int, how: str, values: list, function):
    """One value standing for `values`, as the collective `code` defines it.

    Reductions apply `how` (sum/min/max/count or a user function of a list, which must be
    associative, since trees apply it level by level); broadcast keeps the root member's
    [True, value]; gather concatenates lists of [member, value]; barrier has nothing to carry.
    """
    if code in (op.REDUCE, op.ALLREDUCE):
        return function(how)(values)
    if code == op.BROADCAST:
        for value in values:
            if value[0]:
                return value
        return [False, None]
    if code == op.GATHER:
        return [pair for value in values for pair in value]
    return None


class CollectiveJoin(Wrapper):
    """The inner stage of a joined tree (reduce, allreduce, barrier, broadcast, gather).

    Each round it waits for `fan_in` contributions (one per child: a member thread or a
    stage below), combines them, forwards one operation to its parent (or, at the root,
    keeps the combined value) and hands the result back to every child. The last child to
    arrive does the forwarding, so no thread of its own is needed.

    A round whose children disagree on the operation raises PathsError in all of them. A
    child that waits longer than its timeout gets Timeout, and the stage is then broken:
    later rounds raise PathsError, since the members are out of step.
    """

    type_name = "reduce"

    def __init__(self, stage_id, params, node):
        super().__init__(stage_id, params, node)
        self.fan_in = int(params.get("fan_in", 0))
        if self.fan_in < 1:
            raise PathsError(f"stage {stage_id}: a tree stage needs fan_in >= 1 (children), got {self.fan_in}")
        # The condition's lock must be held whenever the round state below changes.
        self._cond = threading.Condition()
        self._round = 0
        self._contributions: list = []
        self._results: dict[int, tuple[bool, object]] = {}
        self._readers: dict[int, int] = {}
        self._broken: str | None = None

    def __call__(self, code, args):
        if code not in op.COLLECTIVES:
            raise PathsError(f"stage {self.id} joins a tree; it takes collectives, not {op.NAMES.get(code, code)}")
        value, how, timeout = args
        with self._cond:
            if self._broken:
                raise PathsError(self._broken)
            this_round = self._round
            self._contributions.append((code, how, value))
            if len(self._contributions) < self.fan_in:
                return self._await(this_round, timeout)
            contributions, self._contributions = self._contributions, []
            self._round += 1
        outcome = self._lead(contributions, timeout)
        with self._cond:
            if self.fan_in > 1:
                self._results[this_round] = outcome
                self._readers[this_round] = self.fan_in - 1
                self._cond.notify_all()
        return _unwrap(outcome)

    def _lead(self, contributions, timeout):
        """Combine and forward one round (called by its last contributor, outside the lock)."""
        code, how, _ = contributions[0]
        try:
            for other_code, other_how, _ in contributions:
                if (other_code, other_how) != (code, how):
                    raise PathsError(
                        f"stage {self.id}: members disagree in one round: {op.NAMES[code]}({how}) "
                        f"vs {op.NAMES[other_code]}({other_how})"
                    )
            combined = combine(code, how, [v for _, _, v in contributions], self._function)
            if self.next is None:
                return True, combined
            return True, self.next(code, (combined, how, timeout))
        except Exception as exc:  # every child of the round must learn of it, not only the leader
            return False, exc

    def _await(self, this_round, timeout):
        deadline = None if timeout is None else monotonic() + timeout
        while this_round not in self._results:
            remaining = None if deadline is None else deadline - monotonic()
            if remaining is not None and remaining <= 0:
                self._broken = (f"tree stage {self.id} is broken: round {this_round} timed out "
                                f"waiting for {self.fan_in - len(self._contributions)} of {self.fan_in} children")
                self._cond.notify_all()
                raise Timeout(self._broken)
            if self._broken:
                raise PathsError(self._broken)
            self._cond.wait(remaining)
        outcome = self._results[this_round]
        self._readers[this_round] -= 1
        if not self._readers[this_round]:
            del self._results[this_round], self._readers[this_round]
        return _unwrap(outcome)

    def close(self) -> None:
        """The node is stopping: every child still waiting for a round is told so at once."""
        self.abort(f"tree stage {self.id} closed: its node server is stopping")

    def abort(self, why: str) -> None:
        """Every child waiting for a round, and every later one, raises PathsError(why)."""
        with self._cond:
            self._broken = why
            self._cond.notify_all()

    def _function(self, how):
        fn = BUILTIN_FUNCTIONS.get(how)
        return fn if fn is not None else self.node.function(how)


def _unwrap(outcome):
    ok, value = outcome
    if not ok:
        raise value
    return value


class Gather(CollectiveJoin):
    type_name = "gather"


class Barrier(CollectiveJoin):
    type_name = "barrier"


class Broadcast(CollectiveJoin):
    type_name = "broadcast"


BUILTIN = {cls.type_name: cls for cls in (CollectiveJoin, Gather, Barrier, Broadcast)}
