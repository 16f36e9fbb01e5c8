/* pastset's ring appender contract: how C code outside pastset appends to a binary element's ring.
 *
 * Version 2. A binary element of pastset (pastset/ring.py, BinaryElement) keeps its records packed
 * in a ring of `cap` slots of `record_size` bytes; record i is in slot i mod cap (in Python's sense:
 * never before the ring). Its cursors `_first` and `_last` (the oldest record held, and the index
 * the next append gets) are machine ints in the element object itself, and its waiter counts
 * `_sleepers` and `_parked` are object slots there, at the layout struct PastsetCursors below gives.
 * Python reads and sets the cursors as ints (attributes of those names); setting one to what is no
 * index, or beyond +-PASTSET_CURSOR_MAX, is refused then (TypeError, OverflowError), so a cursor C
 * reads is always in range. Only the append writes them from C; a reader outside pastset
 * (prefetching, say) may read them, GIL held.
 *
 * How to get one: `element.appender(single_writer)` returns, for a ring bounded by `keep` alone (no
 * `delta`), a pastset._ring.Appender when pastset's C part is built; its attribute `contract` is a
 * PyCapsule named PASTSET_RING_CAPSULE whose pointer is a `const PastsetRing *`. Check `version`
 * (== PASTSET_RING_VERSION: a later pastset raises it when this struct changes incompatibly) and
 * `record_size` before using it. The struct lives as long as the capsule: keep a reference to it.
 *
 * What an append does, the one place it is written (pastset/ring_c/ring.c, `ring_append`; the
 * Python form in pastset/ring.py, `_APPEND`, is the reference and the fallback when the C part is
 * not built): the record, then `_last` past it, then `_first` up to `keep` behind; then, if any
 * thread sleeps on the element or a node server parked a request on it, the element's change is
 * signalled under its mutex. The slot written never holds a kept record (cap > keep), so a record
 * that fails half way damages nothing.
 *
 * Locking: with `single_writer` 0 the append takes the element's mutex (a threading.Lock) for all of
 * the above; with 1 it takes it only to signal waiters, and the caller promises to be the only one
 * appending to the element (a collector on one thread's path): a second concurrent appender would
 * lose records. Either way the caller holds the GIL: an append never releases it, so no Python code
 * runs between the record and its cursors (but a waiter's wake-up, which runs after them).
 *
 * What a reader of the ring may assume: a record below `_last` is whole (it is written before `_last`
 * moves past it). A reader without the mutex (pastset's RingSlab.newest) may see a record newer than
 * `_last` says if the ring wraps meanwhile; a reader under the mutex that races a single writer
 * checks `_first` again after copying (pastset's Element._read_held) and copies again if it moved.
 *
 * Cursors within +-PASTSET_CURSOR_MAX only: no ring reaches them (2^62 appends are a century at
 * one a nanosecond); an append at `_last` == PASTSET_CURSOR_MAX refuses (OverflowError, nothing
 * written).
 *
 * Cost: an append from C moves two machine ints and makes no Python object (version 1 kept the
 * cursors as Python ints, and every append made one or two); Python pays instead, an int made per
 * read of a cursor (about 10 ns).
 */
#ifndef PASTSET_RING_H
#define PASTSET_RING_H

#include <Python.h>

#define PASTSET_RING_VERSION 2
#define PASTSET_RING_CAPSULE "pastset._ring.contract"
#define PASTSET_CURSOR_MAX ((Py_ssize_t)1 << 62)

/* The head of every binary element of pastset (BinaryElement): its cursors (the attributes _first and
 * _last, 0 until set) and waiter counts (_sleepers and _parked; NULL before the element sets them). */
typedef struct {
    PyObject_HEAD
    Py_ssize_t first, last;
    PyObject *sleepers, *parked;
} PastsetCursors;

typedef struct PastsetRing {
    unsigned version;            /* PASTSET_RING_VERSION */
    char *ring;                  /* cap slots of record_size bytes, writable */
    Py_ssize_t record_size, cap, keep;   /* 0 < keep < cap */
    int single_writer;
    PastsetCursors *cursors;     /* the element (its cursors and waiter counts): read only */
    /* Append one record of record_size bytes: 0 with its index in *index, or -1 with an exception
     * set (OverflowError at `_last` == PASTSET_CURSOR_MAX, what waking a waiter raised). */
    int (*append)(const struct PastsetRing *ring, const char *record, Py_ssize_t *index);
    /* Set the TemplateMismatch the element raises for these field values (a tuple); returns -1. */
    int (*refuse)(const struct PastsetRing *ring, PyObject *values);
} PastsetRing;

#endif
