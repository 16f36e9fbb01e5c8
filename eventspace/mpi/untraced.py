"""MPI calls a run does not trace, counted so that the run's end names them: nothing is silent.

Every public method of an interposed mpi4py class (a traced communicator's, Request, Prequest,
Message, and any class added later) that makes an MPI call and is not traced gets a counting
wrapper: on the traced instance's __dict__ (`counting`, as the collector closures are put there),
or on our own subclass (`count_on_class`), never on a traced call. A wrapper adds one to its call's
tally and calls mpi4py's method. `totals()` is this process's {MPI name: calls}; the run's end sums
them over the ranks and rank 0 says `not traced: 120 calls of MPI_Comm_connect, ...` once
(eventspace.mpi.rank).

Not counted (`counted`): queries, which ask MPI about local state and communicate nothing (names
beginning Get_ or Is_, and Compare, Shift, Cart_map, Graph_map), and handle conversions (py2f,
f2py, toint, fromint, fromhandle). Counted as MPI names them: a communicator's management calls
are MPI_Comm_* (Set_name is MPI_Comm_set_name, Create_keyval MPI_Comm_create_keyval), its
communication calls MPI_* (Neighbor_alltoall is MPI_Neighbor_alltoall; a pickle form, such as
neighbor_alltoall, the call it makes). A class method reached through the class itself
(`MPI.Comm.Create_keyval()`) passes no instance and is not counted; through an instance
(`comm.Create_keyval()`) it is.

A class added later (one-sided windows, MPI.Win) gets it by one line where its traced instance's
closures are put in its __dict__: `methods.update(untraced.counting(win, MPI.Win, methods, "Win",
own))` (`own`: our classes between the instance's and MPI.Win, whose methods are ours), or, for a
class whose instances have no __dict__, `untraced.count_on_class(Ours, MPI.Win, "Win")` once.
Tallies are plain ints: calls made from several threads at once may miss a count.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Mapping

QUERY_PREFIXES = ("get_", "is_")
NO_CALL = frozenset({("free", "Message")})   # mpi4py's own, which calls no MPI function
QUERIES = frozenset({"Compare", "Shift", "Cart_map", "Graph_map", "py2f", "f2py", "toint", "fromint", "fromhandle"})
# A communicator's management calls: MPI_Comm_<name> (the others are MPI_<Name>).
COMM_SCOPED = frozenset({
    "accept", "ack_failed", "agree", "attach_buffer", "call_errhandler", "connect", "create_errhandler",
    "create_from_group", "create_keyval", "delete_attr", "detach_buffer", "disconnect", "flush_buffer", "free",
    "free_keyval", "iagree", "idup", "idup_with_info", "iflush_buffer", "ishrink", "join", "revoke", "set_attr",
    "set_errhandler", "set_info", "set_name", "shrink", "spawn", "spawn_multiple", "dup", "dup_with_info",
    "clone", "create", "split", "split_type", "create_group", "abort",
})
RENAMED = {"Create_intercomm": "MPI_Intercomm_create", "Parrived": "MPI_Parrived", "Pready": "MPI_Pready",
           "Pready_list": "MPI_Pready_list", "Pready_range": "MPI_Pready_range"}


class Tally:
    """Calls of one untraced MPI method in this process (`calls`); `name`, MPI's name for it."""

    __slots__ = ("name", "calls")

    def __init__(self, name: str):
        self.name, self.calls = name, 0


# MPI name -> its Tally, in this process (shared by every instance and class counted).
TALLIES: dict[str, Tally] = {}


def counted(name: str, cls=None) -> bool:
    """Whether a public method of an interposed class is counted when untraced (see the module)."""
    return not (name.startswith("_") or name.lower().startswith(QUERY_PREFIXES) or name in QUERIES
                or (name, getattr(cls, "__name__", None)) in NO_CALL)


def mpi_name(name: str, prefix: str) -> str:
    """MPI's name for mpi4py method `name` of class `prefix` (Comm, Request, Win...): a Comm's
    communication call MPI_<Name>, any other MPI_<prefix>_<name>."""
    if name in RENAMED:
        return RENAMED[name]
    if prefix != "Comm" or name.lower() in COMM_SCOPED:
        return f"MPI_{prefix}_{name.lower()}"
    return "MPI_" + name[0].upper() + name[1:]


def _tally(name: str, prefix: str) -> Tally:
    full = mpi_name(name, prefix)
    tally = TALLIES.get(full)
    if tally is None:
        tally = TALLIES[full] = Tally(full)
    return tally


def untraced_names(cls, traced: Mapping | set, own=()) -> list[str]:
    """The counted public methods of mpi4py class `cls` that are neither in `traced` nor defined by
    our subclass (`own`: the classes between it and `cls`, whose methods are ours)."""
    ours = set(traced)
    for klass in own:
        ours.update(klass.__dict__)
    return [name for name in dir(cls) if counted(name, cls) and name not in ours and callable(getattr(cls, name, None))]


def counting(obj, cls, traced: Mapping, prefix: str, own=()) -> dict:
    """Counting wrappers for `obj`'s untraced MPI methods (of mpi4py class `cls`, by MPI name
    MPI_<prefix>_...), to put in its __dict__ beside the traced closures `traced` (and the methods
    of our classes `own`): each adds one to its tally and calls mpi4py's method on `obj` (a class
    method on its class)."""
    return {name: _counter(cls, name, tally, obj)
            for name, tally in _untraced(cls, frozenset(traced), tuple(own), prefix)}


@functools.lru_cache(maxsize=None)
def _untraced(cls, traced: frozenset, own: tuple, prefix: str) -> tuple:
    """((name, its Tally), ...) of `untraced_names`: the same for every communicator of a kind."""
    return tuple((name, _tally(name, prefix)) for name in untraced_names(cls, traced, own))


def count_on_class(ours, cls, prefix: str) -> None:
    """Counting wrappers for the untraced MPI methods of our subclass `ours` of mpi4py class `cls`,
    set on `ours` itself (its instances have no __dict__): class methods stay class methods."""
    own = [k for k in ours.__mro__ if k not in cls.__mro__]
    for name in untraced_names(cls, (), own):
        counter = _counter(cls, name, _tally(name, prefix))
        setattr(ours, name, classmethod(_on_class(counter)) if _is_class_method(cls, name) else counter)


def _is_class_method(cls, name: str) -> bool:
    return isinstance(inspect.getattr_static(cls, name), (classmethod, staticmethod))


def _counter(cls, name: str, tally: Tally, obj=None):
    """A function that adds one to `tally` and calls method `name` of mpi4py class `cls`: on `obj`,
    or (None) on the instance it is given first; a class method on its class."""
    call = getattr(cls, name)
    if _is_class_method(cls, name) or obj is None:
        def method(*args, **kwargs):
            tally.calls += 1
            return call(*args, **kwargs)
    else:
        def method(*args, **kwargs):
            tally.calls += 1
            return call(obj, *args, **kwargs)
    method.__name__ = method.__qualname__ = name
    return method


def _on_class(counter):
    def method(klass, *args, **kwargs):
        return counter(*args, **kwargs)

    method.__name__ = method.__qualname__ = counter.__name__
    return method


def totals() -> dict[str, int]:
    """{MPI name: calls} of this process's untraced calls, those made at least once."""
    return {t.name: t.calls for t in TALLIES.values() if t.calls}


def summed(per_rank) -> dict[str, int]:
    """Every rank's `totals()` added up."""
    out: dict[str, int] = {}
    for counts in per_rank:
        for name, calls in (counts or {}).items():
            out[name] = out.get(name, 0) + calls
    return out


def line(counts: Mapping[str, int]) -> str:
    """`not traced: 120 calls of MPI_Comm_connect, 1 call of MPI_Comm_set_name` (most first), or ""."""
    if not counts:
        return ""
    items = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return "not traced: " + ", ".join(f"{n:,} call{'s' if n != 1 else ''} of {name}" for name, n in items)
