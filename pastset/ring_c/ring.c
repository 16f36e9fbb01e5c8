/* pastset._ring: the one ring append of pastset's binary elements, and the contract through which C
 * code outside pastset uses it (pastset_ring.h, version PASTSET_RING_VERSION; read it first).
 *
 * Holds:
 *   Cursors   a base type of pastset.ring.BinaryElement: its cursors (_first, _last: machine ints, ints
 *             to Python) and waiter counts (_sleepers, _parked: object slots), at a layout C can rely
 *             on (PastsetCursors).
 *   Appender  Appender(element, mode, fields, pack_into, ring, cap, size, keep, mutex, signal,
 *             mismatch): what BinaryElement appends with. Called from Python as append(*values)
 *             (one value per field, packed with the template's pack_into); from C through its
 *             `contract` capsule (PastsetRing.append: a record already packed). Both run
 *             `ring_append`, the one place an append is written in C; pastset/ring.py's `_APPEND`
 *             is the same steps in Python, the reference, and what runs when this is not built.
 * Relies on: nothing of pastset's Python but what ring.py hands the constructor; the caller holds
 * the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <structmember.h>
#include "pastset_ring.h"

/* -- Cursors --------------------------------------------------------------------------------- */

/* The waiter counts are object slots, as a Python class's __slots__ are (Python code sets them to what
 * it counts with); the cursors are machine ints (an append from C moves them without making an int),
 * read and set from Python as ints through `cursors_getset`. */
static PyMemberDef cursors_members[] = {
    {"_sleepers", T_OBJECT_EX, offsetof(PastsetCursors, sleepers), 0, "threads waiting on the element"},
    {"_parked", T_OBJECT_EX, offsetof(PastsetCursors, parked), 0, "requests a node server parked on it"},
    {NULL},
};

static PyObject *
cursor_get(PastsetCursors *self, void *offset)
{
    return PyLong_FromSsize_t(*(Py_ssize_t *)((char *)self + (size_t)offset));
}

/* A cursor is set to an int (or what has __index__: a numpy integer) within +-PASTSET_CURSOR_MAX;
 * anything else is refused as it is set, and the cursor keeps its value. */
static int
cursor_set(PastsetCursors *self, PyObject *value, void *offset)
{
    const char *name = (size_t)offset == offsetof(PastsetCursors, first) ? "_first" : "_last";
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "an element's %s cannot be deleted", name);
        return -1;
    }
    Py_ssize_t x = PyNumber_AsSsize_t(value, PyExc_OverflowError);
    if (x == -1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;   /* a TypeError: not an index */
        PyErr_Clear();
        x = PASTSET_CURSOR_MAX + 1;
    }
    if (x < -PASTSET_CURSOR_MAX || x > PASTSET_CURSOR_MAX) {
        PyErr_Format(PyExc_OverflowError, "an element's %s is within the +-2^62 records a ring counts, not %R",
                     name, value);
        return -1;
    }
    *(Py_ssize_t *)((char *)self + (size_t)offset) = x;
    return 0;
}

static PyGetSetDef cursors_getset[] = {
    {"_first", (getter)cursor_get, (setter)cursor_set, "index of the oldest record held",
     (void *)offsetof(PastsetCursors, first)},
    {"_last", (getter)cursor_get, (setter)cursor_set, "index the next append gets",
     (void *)offsetof(PastsetCursors, last)},
    {NULL},
};

static int
cursors_traverse(PastsetCursors *self, visitproc visit, void *arg)
{
    Py_VISIT(self->sleepers);
    Py_VISIT(self->parked);
    return 0;
}

static int
cursors_clear(PastsetCursors *self)
{
    Py_CLEAR(self->sleepers);
    Py_CLEAR(self->parked);
    return 0;
}

static void
cursors_dealloc(PastsetCursors *self)
{
    PyObject_GC_UnTrack(self);
    cursors_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* object.__new__, given no arguments (a subclass's __init__ takes them): it lays out a subclass's
 * instance dict as for any class (PyType_GenericNew would leave it to be made on first use, and every
 * attribute of the element would be read from a dict the interpreter cannot specialise for). */
static PyObject *empty;

static PyObject *
cursors_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    return PyBaseObject_Type.tp_new(type, empty, NULL);
}

static PyTypeObject CursorsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pastset._ring.Cursors",
    .tp_doc = PyDoc_STR("An element's cursors and waiter counts, at the layout pastset_ring.h names."),
    .tp_basicsize = sizeof(PastsetCursors),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_new = cursors_new,
    .tp_members = cursors_members,
    .tp_getset = cursors_getset,
    .tp_traverse = (traverseproc)cursors_traverse,
    .tp_clear = (inquiry)cursors_clear,
    .tp_dealloc = (destructor)cursors_dealloc,
};

static PyObject *zero;   /* the int 0 (CPython's cached one): a waiter count of none */

/* 1 when the element has waiters (threads sleeping on it, or parked remote requests), 0 if not, -1
 * with an error set. */
static int
has_waiters(PastsetCursors *c)
{
    PyObject *counts[2] = {c->sleepers, c->parked};
    for (int i = 0; i < 2; i++) {
        PyObject *v = counts[i];
        if (v == zero)
            continue;
        if (v == NULL) {
            PyErr_Format(PyExc_AttributeError, "the element has no attribute %s", i ? "_parked" : "_sleepers");
            return -1;
        }
        Py_INCREF(v);   /* its __bool__ may run Python code that rebinds the slot */
        int truth = PyObject_IsTrue(v);
        Py_DECREF(v);
        if (truth)
            return truth;
    }
    return 0;
}

/* -- Appender -------------------------------------------------------------------------------- */

/* The kinds of append (as ring.py's _HELD, _LOCKED, _SINGLE_WRITER): under the mutex the caller
 * holds (`move`), which then signals waiters itself; taking the mutex; lock-free for one writer. */
enum { HELD, LOCKED, SINGLE_WRITER };

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PastsetRing ring;            /* what the contract hands out */
    int mode;
    Py_ssize_t fields;
    PyObject *element, *ring_owner, *pack_into, *acquire, *release, *signal, *mismatch;
    Py_buffer view;
} Appender;

static PyTypeObject AppenderType;
static PyObject *struct_error;

static int
call_void(PyObject *fn)
{
    PyObject *r = PyObject_CallNoArgs(fn);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* How a record gets into its slot: packed from Python values, or copied. */
typedef int (*write_fn)(Appender *self, Py_ssize_t slot, const void *what);

/* Release the mutex, keeping the exception (if any) that made us stop. */
static int
release_keeping(Appender *self, int rc)
{
    if (rc == 0)
        return call_void(self->release);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (call_void(self->release) < 0)
        PyErr_Clear();
    PyErr_Restore(type, value, tb);
    return -1;
}

/* What an append does, mutex held or by the single writer: the record, then `last` past it, then
 * `first` up to `keep` behind. 0 with the record's index, or -1 with an exception set and, if the
 * cursors are refused, nothing written. */
static inline int
append_body(Appender *self, write_fn write, const void *what, Py_ssize_t *index)
{
    PastsetCursors *c = self->ring.cursors;
    Py_ssize_t last = c->last, cap = self->ring.cap, keep = self->ring.keep;
    if (last >= PASTSET_CURSOR_MAX) {   /* set so from Python: no ring counts that far */
        PyErr_SetString(PyExc_OverflowError, "the element's _last is at the 2^62 records a ring counts");
        return -1;
    }
    Py_ssize_t slot = last % cap;
    if (slot < 0)
        slot += cap;
    if (write(self, slot, what) < 0)
        return -1;
    c->last = last + 1;
    if (c->first < last + 1 - keep)
        c->first = last + 1 - keep;
    *index = last;
    return 0;
}

/* One append, of the appender's kind: 0 with the record's index in *index, or -1 with an exception. */
static int
ring_append(Appender *self, write_fn write, const void *what, Py_ssize_t *index)
{
    PastsetCursors *c = self->ring.cursors;
    int waiters;
    if (self->mode == HELD)
        return append_body(self, write, what, index);
    if (self->mode == SINGLE_WRITER) {
        /* Waiters count themselves before they check `last` (Element._block), so one that this
         * writer does not see has seen the record. */
        if (append_body(self, write, what, index) < 0 || (waiters = has_waiters(c)) < 0)
            return -1;
        if (!waiters)
            return 0;
        if (call_void(self->acquire) < 0)
            return -1;
        return release_keeping(self, call_void(self->signal));
    }
    if (call_void(self->acquire) < 0)
        return -1;
    int rc = append_body(self, write, what, index);
    if (rc == 0 && (waiters = has_waiters(c)) != 0)
        rc = waiters < 0 ? -1 : call_void(self->signal);
    return release_keeping(self, rc);
}

/* Set the element's TemplateMismatch for `values` (a tuple); -1. */
static int
refuse(const PastsetRing *ring, PyObject *values)
{
    Appender *self = (Appender *)((char *)ring - offsetof(Appender, ring));
    PyObject *exc = PyObject_CallOneArg(self->mismatch, values);
    if (exc != NULL) {
        PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
        Py_DECREF(exc);
    }
    return -1;
}

static int
write_copy(Appender *self, Py_ssize_t slot, const void *record)
{
    memcpy((char *)self->ring.ring + slot * self->ring.record_size, record, self->ring.record_size);
    return 0;
}

static int
contract_append(const PastsetRing *ring, const char *record, Py_ssize_t *index)
{
    Appender *self = (Appender *)((char *)ring - offsetof(Appender, ring));
    return ring_append(self, write_copy, record, index);
}

/* pack_into(ring, offset, *values): TemplateMismatch for what it refuses (TypeError, struct.error),
 * as ring.py's _APPEND raises it; any other exception as it is. */
static int
write_packed(Appender *self, Py_ssize_t slot, const void *values)
{
    PyObject *const *v = (PyObject *const *)values;
    Py_ssize_t n = self->fields;
    PyObject *small[18], **args = n + 2 <= 18 ? small : PyMem_New(PyObject *, n + 2);
    if (args == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *offset = PyLong_FromSsize_t(slot * self->ring.record_size), *r = NULL;
    if (offset != NULL) {
        args[0] = self->ring_owner;
        args[1] = offset;
        memcpy(args + 2, v, n * sizeof(PyObject *));
        r = PyObject_Vectorcall(self->pack_into, args, n + 2, NULL);
        Py_DECREF(offset);
    }
    if (args != small)
        PyMem_Free(args);
    if (r != NULL) {
        Py_DECREF(r);
        return 0;
    }
    if (offset != NULL && (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(struct_error))) {
        PyErr_Clear();
        PyObject *tuple = PyTuple_New(n);
        if (tuple == NULL)
            return -1;
        for (Py_ssize_t i = 0; i < n; i++) {
            Py_INCREF(v[i]);
            PyTuple_SET_ITEM(tuple, i, v[i]);
        }
        refuse(&self->ring, tuple);
        Py_DECREF(tuple);
    }
    return -1;
}

static PyObject *
appender_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Appender *self = (Appender *)callable;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != self->fields || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_Format(PyExc_TypeError, "append() takes %zd positional arguments but %zd were given", self->fields, n);
        return NULL;
    }
    Py_ssize_t index;
    return ring_append(self, write_packed, args, &index) < 0 ? NULL : PyLong_FromSsize_t(index);
}

static PyObject *
appender_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"element", "mode", "fields", "pack_into", "ring", "cap", "size", "keep", "mutex",
                            "signal", "mismatch", NULL};
    PyObject *element, *pack_into, *ring, *mutex, *signal, *mismatch;
    int mode;
    Py_ssize_t fields, cap, size, keep;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O!inOOnnnOOO:Appender", names, &CursorsType, &element, &mode,
                                     &fields, &pack_into, &ring, &cap, &size, &keep, &mutex, &signal, &mismatch))
        return NULL;
    /* Under a held mutex (`move`) the caller keeps the slot written free (flow control, or a ring that
     * grows); the others rely on the spare slot. */
    if (mode < HELD || mode > SINGLE_WRITER || fields < 0 || size <= 0 || keep <= 0 || cap <= 0
        || (mode != HELD && cap <= keep)) {
        PyErr_Format(PyExc_ValueError, "Appender needs a ring with a spare slot (%zd-byte records, %zd slots, "
                     "keep %zd) and a mode 0..2 (%d)", size, cap, keep, mode);
        return NULL;
    }
    Appender *self = (Appender *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = appender_vectorcall;
    self->mode = mode;
    self->fields = fields;
    self->element = Py_NewRef(element);
    self->pack_into = Py_NewRef(pack_into);
    self->signal = Py_NewRef(signal);
    self->mismatch = Py_NewRef(mismatch);
    if (mode != HELD && ((self->acquire = PyObject_GetAttrString(mutex, "acquire")) == NULL
                         || (self->release = PyObject_GetAttrString(mutex, "release")) == NULL))
        goto fail;
    if (PyObject_GetBuffer(ring, &self->view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        goto fail;
    self->ring_owner = Py_NewRef(ring);
    if (self->view.len / size < cap) {   /* divided: cap * size may overflow */
        PyErr_Format(PyExc_ValueError, "the ring holds %zd bytes, not %zd slots of %zd", self->view.len, cap, size);
        goto fail;
    }
    self->ring = (PastsetRing){
        .version = PASTSET_RING_VERSION, .ring = self->view.buf, .record_size = size, .cap = cap, .keep = keep,
        .single_writer = mode == SINGLE_WRITER, .cursors = (PastsetCursors *)element,
        .append = contract_append, .refuse = refuse,
    };
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

/* No tp_clear: the cycle an appender is in (element -> its __dict__ -> appender -> element) is broken
 * by clearing the element's __dict__, and the ring a contract handed out stays usable until then. */
static int
appender_traverse(Appender *self, visitproc visit, void *arg)
{
    Py_VISIT(self->element);
    Py_VISIT(self->ring_owner);
    Py_VISIT(self->pack_into);
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    Py_VISIT(self->signal);
    Py_VISIT(self->mismatch);
    return 0;
}

static void
appender_dealloc(Appender *self)
{
    PyObject_GC_UnTrack(self);
    if (self->ring_owner != NULL) {
        PyBuffer_Release(&self->view);
        Py_CLEAR(self->ring_owner);
    }
    Py_CLEAR(self->element);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_CLEAR(self->pack_into);
    Py_CLEAR(self->signal);
    Py_CLEAR(self->mismatch);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static void
release_contract(PyObject *capsule)
{
    Py_XDECREF((PyObject *)PyCapsule_GetContext(capsule));
}

static PyObject *
appender_contract(Appender *self, void *closure)
{
    if (self->mode == HELD) {   /* its caller holds the mutex: no one else may use it */
        PyErr_SetString(PyExc_ValueError, "move's own appender has no contract: use element.appender()");
        return NULL;
    }
    PyObject *capsule = PyCapsule_New(&self->ring, PASTSET_RING_CAPSULE, release_contract);
    if (capsule == NULL)
        return NULL;
    if (PyCapsule_SetContext(capsule, Py_NewRef(self)) < 0) {
        Py_DECREF(self);
        Py_DECREF(capsule);
        return NULL;
    }
    return capsule;
}

static PyGetSetDef appender_getset[] = {
    {"contract", (getter)appender_contract, NULL,
     "A PyCapsule named '" PASTSET_RING_CAPSULE "' holding this appender's PastsetRing (pastset_ring.h)", NULL},
    {NULL},
};

static PyTypeObject AppenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "pastset._ring.Appender",
    .tp_doc = PyDoc_STR("append(*values) -> index: one record into a binary element's ring (see "
                        "BinaryElement.appender); `contract` hands the same append to C (pastset_ring.h)."),
    .tp_basicsize = sizeof(Appender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Appender, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = appender_new,
    .tp_dealloc = (destructor)appender_dealloc,
    .tp_traverse = (traverseproc)appender_traverse,
    .tp_getset = appender_getset,
};

/* -- the module ------------------------------------------------------------------------------ */

/* cursors(elements, lasts, firsts): each element's _last and _first into the int64 buffers (as many
 * items as elements): what a slab's read of every element's newest record starts with, one call
 * instead of an int made per cursor. */
static PyObject *
gather_cursors(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "cursors() takes 3 arguments (elements, lasts, firsts), not %zd", nargs);
        return NULL;
    }
    PyObject *seq = PySequence_Fast(args[0], "cursors() takes a sequence of elements");
    if (seq == NULL)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    PyObject **items = PySequence_Fast_ITEMS(seq);
    Py_buffer out[2];
    int got = 0;
    for (; got < 2; got++) {
        if (PyObject_GetBuffer(args[1 + got], &out[got], PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
            goto done;
        if (out[got].itemsize != sizeof(int64_t) || out[got].len != n * (Py_ssize_t)sizeof(int64_t)
            || out[got].format == NULL || strchr("qlL", out[got].format[strlen(out[got].format) - 1]) == NULL) {
            PyErr_Format(PyExc_ValueError, "cursors() writes %zd int64 items into each of lasts and firsts", n);
            got++;
            goto done;
        }
    }
    int64_t *lasts = out[0].buf, *firsts = out[1].buf;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyObject_TypeCheck(items[i], &CursorsType)) {
            PyErr_Format(PyExc_TypeError, "cursors() reads pastset elements, not %.100s", Py_TYPE(items[i])->tp_name);
            goto done;
        }
        PastsetCursors *c = (PastsetCursors *)items[i];
        lasts[i] = c->last;
        firsts[i] = c->first;
    }
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&out[i]);
    Py_DECREF(seq);
    Py_RETURN_NONE;
done:
    for (int i = 0; i < got; i++)
        PyBuffer_Release(&out[i]);
    Py_DECREF(seq);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"cursors", (PyCFunction)(void (*)(void))gather_cursors, METH_FASTCALL,
     "cursors(elements, lasts, firsts): each element's _last and _first into two int64 buffers"},
    {NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "pastset._ring",
    .m_doc = "The ring append of pastset's binary elements, and its C contract (pastset/ring_c/pastset_ring.h).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__ring(void)
{
    if (struct_error == NULL) {
        PyObject *st = PyImport_ImportModule("struct");
        if (st == NULL)
            return NULL;
        struct_error = PyObject_GetAttrString(st, "error");
        Py_DECREF(st);
        if (struct_error == NULL)
            return NULL;
    }
    if ((zero == NULL && (zero = PyLong_FromLong(0)) == NULL) || (empty == NULL && (empty = PyTuple_New(0)) == NULL))
        return NULL;
    if (PyType_Ready(&CursorsType) < 0 || PyType_Ready(&AppenderType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "CONTRACT_VERSION", PASTSET_RING_VERSION) < 0
        || PyModule_AddIntConstant(m, "HELD", HELD) < 0 || PyModule_AddIntConstant(m, "LOCKED", LOCKED) < 0
        || PyModule_AddIntConstant(m, "SINGLE_WRITER", SINGLE_WRITER) < 0
        || PyModule_AddObjectRef(m, "Cursors", (PyObject *)&CursorsType) < 0
        || PyModule_AddObjectRef(m, "Appender", (PyObject *)&AppenderType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
