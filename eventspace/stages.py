"""The stages of an event scope's gather tree: what each join does to the records on their way up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from paths.expression import Expression, ExpressionError
from paths.registry import load_reference

from . import trace
from .catalogue import Catalogue

GROUPS = ("all", "collector", "thread", "node", "cluster", "element", "path", "tree", "role")
NUMERIC = ("op", "flags", "collector", "element", "arg", "nbytes", "t_start", "t_end")
SYMBOLS = {"op": trace.OP_CODES}   # filters may name ops: op == move, op in ("observe", move)


class StageError(ValueError):
    """A scope stage that does not parse, or names a function that may not be loaded."""


@dataclass(frozen=True)
class ScopeStage:
    """One stage, as text: `latest`, `gather`, `filter:EXPR`, `sort:FIELD`, `convert:records`, or
    `reduce:HOW[@GROUP]` with HOW one of `max_t_end`, `min_t_start`, `max:FIELD`, `min:FIELD`
    (the record with the greatest/least FIELD per group), `count`, `sum` (one summary record per
    group: flag SUMMARY, `arg` = events it stands for, `nbytes` summed, t_start the least,
    t_end the greatest), or `module:function` from an allowed module (a function of a record
    array and the catalogue, returning a record array). GROUP is one of all (the default),
    collector, thread, node, cluster, element, path, tree, role.

    Every stage but `convert` maps records to records and is associative, so it can run at
    every level of a tree; `convert:records` turns the result into dicts, in the monitor only.
    """

    text: str
    kind: str
    arg: str = ""
    group: str = "all"

    @classmethod
    def parse(cls, text: str, allow_modules=()) -> ScopeStage:
        kind, _, rest = text.strip().partition(":")
        if kind in ("latest", "gather") and not rest:
            return cls(text, kind)
        if kind == "filter":
            try:
                Expression(rest, NUMERIC, SYMBOLS)
            except ExpressionError as exc:
                raise StageError(f"stage {text!r}: {exc}") from None
            return cls(text, kind, rest)
        if kind == "sort":
            field = rest or "t_start"
            if field not in NUMERIC:
                raise StageError(f"stage {text!r}: unknown field {field!r}; sort by one of {', '.join(NUMERIC)}")
            return cls(text, kind, field)
        if kind == "convert":
            if rest != "records":
                raise StageError(f"stage {text!r}: the only conversion is convert:records")
            return cls(text, kind, rest)
        if kind == "reduce":
            how, _, group = rest.partition("@")
            group = group or "all"
            if group not in GROUPS:
                raise StageError(f"stage {text!r}: unknown group {group!r}; use one of {', '.join(GROUPS)}")
            _reducer(how, text, allow_modules)  # fails here, not at the first pull
            return cls(text, kind, how, group)
        raise StageError(f"unknown scope stage {text!r}; use latest, gather, filter:EXPR, sort:FIELD, "
                         "reduce:max_t_end|min_t_start|max:FIELD|min:FIELD|count|sum[@GROUP] or "
                         "module:function, convert:records")

    def __str__(self) -> str:
        return self.text


def compile_stages(stages, catalogue: Catalogue) -> Callable[[np.ndarray], np.ndarray]:
    """One function applying every record stage in order (convert is left to the caller)."""
    steps = []
    for stage in stages:
        if stage.kind in ("gather", "convert"):
            continue
        if stage.kind == "latest":
            steps.append(lambda r: _pick(r, r["collector"].astype(np.int64), r["t_end"], True))
        elif stage.kind == "filter":
            expression = Expression(stage.arg, NUMERIC, SYMBOLS)
            steps.append(lambda r, e=expression: r[e.mask(r)] if len(r) else r)
        elif stage.kind == "sort":
            steps.append(lambda r, f=stage.arg: r[np.argsort(r[f], kind="stable")])
        else:
            reducer = _reducer(stage.arg, stage.text, catalogue.pathmap.allow_modules)
            column = catalogue.column(stage.group)
            steps.append(lambda r, fn=reducer, c=column: fn(r, c, catalogue) if len(r) else r)

    def apply(records: np.ndarray) -> np.ndarray:
        for step in steps:
            records = step(records)
        return records

    return apply


def _reducer(how: str, text: str, allow_modules):
    """fn(records, group column by collector id, catalogue) -> records."""
    if how in ("max_t_end", "max"):
        return lambda r, c, cat: _pick(r, c[r["collector"]], r["t_end"], True)
    if how in ("min_t_start", "min"):
        return lambda r, c, cat: _pick(r, c[r["collector"]], r["t_start"], False)
    if how.startswith(("max:", "min:")):
        field = how[4:]
        if field not in NUMERIC:
            raise StageError(f"stage {text!r}: unknown field {field!r}; use one of {', '.join(NUMERIC)}")
        biggest = how.startswith("max:")
        return lambda r, c, cat: _pick(r, c[r["collector"]], r[field], biggest)
    if how in ("count", "sum"):
        return lambda r, c, cat: _summarise(r, c[r["collector"]])
    if ":" in how:
        try:
            fn = load_reference(how, allow_modules, "eventspace.reducers", "reduce function")
        except (LookupError, ImportError) as exc:
            raise StageError(f"stage {text!r}: {exc}") from None
        return lambda r, c, cat: np.asarray(fn(r, cat), dtype=trace.DTYPE)
    raise StageError(f"stage {text!r}: unknown reduction {how!r}; use max_t_end, min_t_start, max:FIELD, "
                     "min:FIELD, count, sum or module:function")


def _pick(records: np.ndarray, groups: np.ndarray, values: np.ndarray, biggest: bool) -> np.ndarray:
    """Per group, the record with the greatest (or least) value; groups in ascending order."""
    if not len(records):
        return records
    order = np.lexsort((values if biggest else -values.astype(np.int64), groups))
    sorted_groups = groups[order]
    last = np.flatnonzero(np.append(sorted_groups[1:] != sorted_groups[:-1], True))
    return records[order[last]]


def _summarise(records: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """One SUMMARY record per group (associative: a summary counts as its `arg` events)."""
    uniq, inverse = np.unique(groups, return_inverse=True)
    count = np.where(records["flags"] & trace.SUMMARY, records["arg"], 1).astype(np.uint64)
    out = np.zeros(len(uniq), dtype=trace.DTYPE)
    out["arg"] = np.minimum(np.bincount(inverse, weights=count, minlength=len(uniq)), 0xFFFFFFFF)
    out["nbytes"] = np.minimum(np.bincount(inverse, weights=records["nbytes"].astype(np.float64),
                                           minlength=len(uniq)), 0xFFFFFFFF)
    out["flags"] = trace.SUMMARY
    big = np.iinfo(np.uint64).max
    t_start = np.full(len(uniq), big, dtype=np.uint64)
    np.minimum.at(t_start, inverse, records["t_start"])
    t_end = np.zeros(len(uniq), dtype=np.uint64)
    np.maximum.at(t_end, inverse, records["t_end"])
    collector = np.full(len(uniq), 0xFFFFFFFF, dtype=np.uint32)
    np.minimum.at(collector, inverse, records["collector"])
    out["t_start"], out["t_end"], out["collector"] = t_start, t_end, collector
    op_min = np.full(len(uniq), 0xFFFF, dtype=np.uint16)
    np.minimum.at(op_min, inverse, records["op"])
    op_max = np.zeros(len(uniq), dtype=np.uint16)
    np.maximum.at(op_max, inverse, records["op"])
    out["op"] = np.where(op_min == op_max, op_min, 0)
    return out
