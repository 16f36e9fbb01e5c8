"""One program run to its end on a pathmap's nodes: launch them, start it, follow its progress, wait, stop."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .launch import launch
from .pathmap import Pathmap


@dataclass
class Execution:
    """What one run of a program gave: every thread's result (what `program(ctx)` returned), the
    run's name, and the wall time in seconds from the start to the last thread's end."""

    pathmap: Pathmap
    program: str
    run: str
    results: dict[str, object]
    wall_seconds: float


def execute(pathmap: Pathmap | str | os.PathLike, program: str, args: dict | Callable[[], dict] | None = None, *,
            run_dir: str | os.PathLike | None = None, path: Iterable[str | os.PathLike] = (),
            env: dict[str, str] | None = None, on_progress: Callable[[dict[str, dict]], None] | None = None,
            poll: float = 0.2, grace: float | None = None, mpiexec: list[str] | None = None,
            archive: str | os.PathLike | None = None, record: str | None = None) -> Execution:
    """Launch the pathmap's nodes (`paths.launch`), run `program` in every thread, stop them all.

    `program` is a name of the `eventspace.programs` entry-point group or `module:function` from a
    module in the pathmap's allow_modules (found on the nodes through `path`, the working directory
    and PYTHONPATH). `args` (or a callable giving them, called once the nodes are up, e.g. for a
    deadline) become `ctx.args`. `on_progress({thread: what it last passed to ctx.report})` is
    called every `poll` seconds while the program runs, and once when it has ended. Raises
    paths.ProgramFailed naming the threads that raised, paths.NodeDied naming a node that died (or,
    after `grace` seconds, default the pathmap's liveness.grace, did not answer). `mpiexec`: start
    the nodes as MPI ranks (`paths.launch`'s option of that name). `archive` and `record`: the run is
    recorded (`paths.launch`'s options of those names).
    """
    pm = pathmap if isinstance(pathmap, Pathmap) else Pathmap.load(pathmap)
    with launch(pm, run_dir=run_dir, env=env, path=path, grace=grace, mpiexec=mpiexec, archive=archive,
                record=record) as run:
        started = time.perf_counter()
        run.start(program, args() if callable(args) else (args or {}))
        follow = None if on_progress is None else (lambda r: on_progress(r.progress()))
        results = run.wait(on_poll=follow, poll=poll)
        wall = time.perf_counter() - started
        if follow is not None:
            follow(run)  # the last reports, also of a program that ended before the first poll
    return Execution(pm, program, run.name, results, wall)


def slowest(progress: dict[str, dict], key: str = "step") -> int:
    """The smallest `key` the threads reported (0 before any did): how far the slowest one is."""
    return min((values.get(key, 0) for values in progress.values()), default=0)
