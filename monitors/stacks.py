"""Stacks: the Python stack of every thread of a live run, identical ones merged, each with the operation it is in."""

from __future__ import annotations

from dataclasses import dataclass, field

from eventspace.catalogue import Catalogue
from eventspace.mpi import encoding as e
from eventspace.scope import look, resolve
from eventspace.view import View
from pastset import Fanout
from paths.stack import DEPTH, from_the_program

from .classes import names


@dataclass
class StackGroup:
    """Threads whose stacks are the same (from the program's first frame on): the frames, outermost
    first, as `file.py:12 in func`; the threads, in the pathmap's order; the program's innermost
    frame (`where`); the operation each of them is in now (`in_flight`: thread -> `MPI_Recv from
    r3 tag 7 on comm 0`, or a PATHS operation's collector); and how many outer frames the depth
    left out at most."""

    frames: tuple[str, ...]
    threads: list[str]
    where: str
    in_flight: dict[str, str] = field(default_factory=dict)
    omitted: int = 0

    def as_dict(self) -> dict:
        return {"threads": self.threads, "where": self.where, "stack": list(self.frames),
                "in_flight": dict(self.in_flight), "omitted": self.omitted}


@dataclass(frozen=True)
class StacksReport:
    """Every selected thread's stack, merged (the largest group first); the threads that ended by
    raising (`failed`: thread -> "ZeroDivisionError: ... at worker.py:41 in work"); the nodes that did
    not answer (`not_answering`: a rank in a C call that holds the GIL cannot; `gone`: its process
    ended); the threads of answering nodes that are not running (`ended`); every thread of the run
    in the pathmap's order (`order`, how runs of threads are named: `T0..T4`)."""

    threads: list[str]
    groups: list[StackGroup]
    failed: dict[str, str] = field(default_factory=dict)
    not_answering: list[str] = field(default_factory=list)
    gone: list[str] = field(default_factory=list)
    ended: list[str] = field(default_factory=list)
    order: list[str] = field(default_factory=list, repr=False, compare=False)

    def as_dict(self) -> dict:
        return {"threads": self.threads, "groups": [g.as_dict() for g in self.groups], "failed": dict(self.failed),
                "not_answering": self.not_answering, "gone": self.gone, "ended": self.ended}


class StacksMon:
    """Reads the stacks of the threads of `view` in a live run (`read()`): their nodes are asked, in one
    round, where their threads are (paths.stack: nothing is captured until asked) and what operations
    their collectors time now. No scope tree is built and nothing is installed on the nodes: a stack
    report costs one request per node."""

    def __init__(self, run, view: str = "all", *, depth: int = DEPTH, timeout: float = 2.0):
        pathmap, endpoints = resolve(run)
        self.catalogue = Catalogue(pathmap)
        self.entries = View.parse(view).select(self.catalogue)
        self.depth, self.timeout = depth, timeout
        self._fanout = Fanout(endpoints)
        self.order = [t.name for t in pathmap.threads]
        self.threads = sorted({x.thread for x in self.entries if x.thread}, key=self.order.index)

    def read(self) -> StacksReport:
        found = look(self._fanout, self.catalogue.pathmap, self.entries, self.timeout, marks=True, threads=True,
                     stacks=True, depth=self.depth)
        states, missing = found.threads, found.missing
        doing = self._in_flight(found.marks)
        node_of = {t.name: t.node for t in self.catalogue.pathmap.threads}
        groups: dict[tuple[str, ...], StackGroup] = {}
        failed = {}
        for thread in self.threads:
            state = states.get(thread)
            if state is None:
                continue
            if state.failed:
                failed[thread] = state.failed + (f" at {state.where}" if state.where else "")
                continue
            if state.cpu_ns is None and not state.frames:
                continue   # ended
            frames = tuple(f.text for f in from_the_program(state.frames))
            group = groups.setdefault(frames, StackGroup(frames, [], state.where))
            group.threads.append(thread)
            group.omitted = max(group.omitted, state.omitted)
            if thread in doing:
                group.in_flight[thread] = doing[thread]
        gone = self._fanout.gone(missing)
        answered = {node_of[t] for t in self.threads} - missing
        ended = [t for t in self.threads if node_of[t] in answered and t not in states]
        return StacksReport(self.threads, sorted(groups.values(), key=lambda g: -len(g.threads)), failed,
                            sorted(missing - gone), sorted(gone), ended, self.order)

    def close(self) -> None:
        self._fanout.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _in_flight(self, marks) -> dict[str, str]:
        """{thread: the operation it is in}, from the collectors' marks (MPI calls say what and with whom)."""
        catalogue = self.catalogue
        doing = {}
        for cid, mark in sorted(marks.items(), key=lambda item: item[1].t_start):
            entry = catalogue[cid]
            if entry.thread is None or entry.thread in doing:
                continue
            if e.is_mpi(mark.op):
                doing[entry.thread] = e.describe(mark.op, mark.flags, mark.element, mark.arg, e.comm_of(entry))
            else:
                doing[entry.thread] = entry.describe()
        return doing


def group_title(group: StackGroup, order: list[str]) -> str:
    """`r0..r3 (4 threads) at heat.py:88 in exchange`."""
    count = f" ({len(group.threads)} threads)" if len(group.threads) > 1 else ""
    return f"{names(group.threads, order)}{count}" + (f" at {group.where}" if group.where else "")
