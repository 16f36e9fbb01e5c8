"""The rules of the paths section: each thread's one route to an element, stage by stage, node by node."""

from __future__ import annotations

from ..document import Key
from .checker import Checker


def check(c: Checker) -> None:
    c.unique(c.pm.paths, "paths", "name")
    routes: dict[tuple[str, str], str] = {}
    nexts: dict[str, tuple[str, str]] = {}  # stage -> (next stage, path that says so)
    for path in c.pm.paths:
        key = ("paths", path.name)
        thread = c.threads.get(path.thread)
        element = c.elements.get(path.element)
        if thread is None:
            c.unknown(key + ("thread",), "thread", path.thread, c.threads)
        if element is None:
            c.unknown(key + ("element",), "element", path.element, c.elements)
        if thread and element:
            other = routes.setdefault((path.thread, path.element), path.name)
            if other != path.name:
                c.add(key, f"thread {path.thread} already reaches element {path.element} by "
                           f"path {other}; a thread has one path per element: remove one")
        if not path.stages:
            c.add(key + ("stages",), "no stages; a path ends at its element's stage, e.g. "
                                     f"stages: [{path.element}/element]")
            continue
        stages = _path_stages(c, path, key)
        _check_path_nodes(c, path, key, thread, element, stages)
        for i, (a, b) in enumerate(zip(path.stages, path.stages[1:])):
            if stages[i] is None or stages[i + 1] is None:
                continue
            then, said = nexts.setdefault(a, (b, path.name))
            if then != b:
                c.add(key + ("stages", i), f"stage {a} leads to {b} here but to {then} in "
                                           f"path {said}; a stage has one next stage: give "
                                           "this path a stage of its own")


def _path_stages(c: Checker, path, key: Key) -> list:
    """The path's stages, each None where it is unknown or may not be on the path (told)."""
    stages = []
    for i, sid in enumerate(path.stages):
        skey = key + ("stages", i)
        stage = c.stages.get(sid)
        if stage is None:
            c.unknown(skey, "stage", sid, c.stages)
        elif sid in path.stages[:i]:
            c.add(skey, f"stage {sid} appears twice; a path passes each stage once")
            stage = None
        elif sid in c.tree_of:
            c.add(skey, f"stage {sid} belongs to tree {c.tree_of[sid]}; a path does "
                        "not pass through a tree's stages: give it a stage of its own")
        elif stage.type == "element" and i < len(path.stages) - 1:
            c.add(skey, f"{sid} is an element stage, which ends a path; move it to the end")
        stages.append(stage)
    return stages


def _check_path_nodes(c: Checker, path, key: Key, thread, element, stages: list) -> None:
    first, last = stages[0], stages[-1]
    if first is not None and thread is not None and c.placed(first, thread) and first.node != thread.node:
        c.add(key + ("stages", 0), f"the path starts at {first.id} on node {first.node}, but "
                                   f"thread {thread.name} runs on {thread.node}; start with a "
                                   f"stage on {thread.node} (a remote stage to cross)")
    for i in range(len(stages) - 1):
        a, b = stages[i], stages[i + 1]
        if (a is not None and b is not None and c.placed(a, b) and a.node != b.node
                and a.type != "remote" and a.id not in c.bad_type):
            c.add(key + ("stages", i + 1), f"the path goes from node {a.node} ({a.id}) to "
                                           f"node {b.node} ({b.id}) without a remote stage; "
                                           f"insert a remote stage on {a.node} before {b.id}")
    if last is not None and element is not None and (
            last.type != "element" or last.params.get("element") != element.name):
        c.add(key + ("stages", len(stages) - 1),
              f"the path ends at {last.id}, which is not the element stage of {element.name}; "
              f"end it with a stage {{type: element, node: {element.node}, params: "
              f"{{element: {element.name}}}}}")
