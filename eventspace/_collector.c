/* The compiled event collector: the hot path of eventspace.collector.Collector, in C.
 *
 * The types:
 *   RingAppender(element, single_writer)  appends one trace tuple (=HHIIIIQQ, 36 bytes) to a
 *       pastset BinaryElement's ring: the C form of BinaryElement.appender for the trace format,
 *       with exactly its semantics (see pastset/element.py, _APPEND, _LOCKED, _SINGLE_WRITER):
 *       the record, then `_last` past it, then `_first` up to `keep` behind; waiters woken
 *       under the element's mutex. Locked unless single_writer. Callable from Python as
 *       append(op, flags, collector, element, arg, nbytes, t_start, t_end) -> index.
 *   Collect(next, switches, inflight, cid, eid, flags, failed, size_of, append, offset_ns,
 *           move, observe, collectives)
 *       the collecting callable a linked path calls as stage(code, args) (vectorcall): the
 *       semantics of the pure closure in eventspace/collector.py, which stays the reference.
 *   TypedSize(kinds, fallback)  the msgpack size of a typed template's tuple (what a collector
 *       records as nbytes), in C for int, float, str, bytes and bool fields.
 *   MpiCall(kind, comm, call, fallback, append, ...)
 *       the hot path of an MPI collector closure (eventspace/mpi/collector.py) for sends, Recv,
 *       Sendrecv, the nonblocking posts and collectives, buffer and pickle forms, in their common
 *       form; every other form goes to the closure.
 *   RequestWait, RequestWaitall(call, fallback, request_class, channel_class, ...)
 *       Wait and Test, and Waitall, Testall, Waitany, Testany, Waitsome and Testsome (outcome=O_*),
 *       of the traced Request class (eventspace/mpi/interpose.py).
 * And the collectors' clock (clock_ns: the TSC scaled to CLOCK_MONOTONIC where the kernel's is).
 *
 * Self-contained on purpose: the ring's layout is pastset's (a row of a RingSlab or a bytearray
 * of `_cap` records); nothing here depends on where that Python code lives.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <structmember.h>   /* T_OBJECT_EX, READONLY: the element's slots */

#define RECORD 36
#define U32 0xFFFFFFFFull

static PyObject *s_last, *s_first, *s_sleepers, *s_parked, *s_signal_change, *s_template, *s_mismatch,
    *s_ring, *s_cap, *s_size, *s_keep, *s_mutex, *s_acquire, *s_release;

/* Field limits of =HHIIIIQQ, in order. */
static const uint64_t LIMIT[8] = {0xFFFF, 0xFFFF, U32, U32, U32, U32, UINT64_MAX, UINT64_MAX};

static inline void
pack(char *slot, const uint64_t v[8])
{
    uint16_t h[2] = {(uint16_t)v[0], (uint16_t)v[1]};
    uint32_t i[4] = {(uint32_t)v[2], (uint32_t)v[3], (uint32_t)v[4], (uint32_t)v[5]};
    memcpy(slot, h, 4);
    memcpy(slot + 4, i, 16);
    memcpy(slot + 20, &v[6], 8);
    memcpy(slot + 28, &v[7], 8);
}

/* An exact int within 0..limit: 0 with it in *out, 1 (no exception set) if it is not. */
static inline int
exact_value(PyObject *v, uint64_t limit, uint64_t *out)
{
    unsigned long long x = PyLong_AsUnsignedLongLong(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 1;
    }
    if (x > limit)
        return 1;
    *out = x;
    return 0;
}

/* One field as struct.pack_into takes it: an int, or an object with __index__ (a numpy integer),
 * within 0..limit. 0 with the value in *out; 1, no exception set, when it does not fit (no
 * __index__, out of range, or an __index__ that raised TypeError: struct's error, which pastset
 * turns into TemplateMismatch); -1 with the exception any other __index__ raised, as struct lets
 * it through. */
static inline int
field_value(PyObject *obj, uint64_t limit, uint64_t *out)
{
    if (PyLong_CheckExact(obj))   /* the common case */
        return exact_value(obj, limit, out);
    if (!PyIndex_Check(obj))
        return 1;
    PyObject *index = PyNumber_Index(obj);   /* an exact int: no second round */
    if (index == NULL) {
        if (!PyErr_ExceptionMatches(PyExc_TypeError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    int rc = exact_value(index, limit, out);
    Py_DECREF(index);
    return rc;
}

/* obj.name as an index (an int, or an object with __index__); -1 with an error set for anything
 * else, or out of Py_ssize_t's range. */
static int
get_ssize(PyObject *obj, PyObject *name, Py_ssize_t *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL)
        return -1;
    *out = PyNumber_AsSsize_t(v, PyExc_OverflowError);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* The element's cursors and waiter counts (_last, _first, _sleepers, _parked) are slots of
 * pastset's Element (its __slots__): read and written here at their offsets in the object, the
 * same values `element._last` reads, without a lookup by name (a dict lookup each was a third of
 * an append). */
enum { A_LAST, A_FIRST, A_SLEEPERS, A_PARKED, A_COUNT };

/* The offset of slot `name` of `type` (a member descriptor holding an object, of `type` or a base
 * of it: a descriptor of another class, set as a class attribute, holds another layout's offset),
 * or -1 with an error set. */
static Py_ssize_t
slot_offset(PyTypeObject *type, PyObject *name)
{
    PyObject *d = _PyType_Lookup(type, name);  /* borrowed */
    if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type) && PyType_IsSubtype(type, PyDescr_TYPE(d))) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY))
            return m->offset;
    }
    PyErr_Format(PyExc_TypeError, "%s's %U must be a slot (in its __slots__)", type->tp_name, name);
    return -1;
}

static inline PyObject **
slot(PyObject *obj, Py_ssize_t offset)
{
    return (PyObject **)((char *)obj + offset);
}

static PyObject *
attr(PyObject *obj, Py_ssize_t offset, PyObject *name)
{
    PyObject *v = *slot(obj, offset);  /* borrowed */
    if (v == NULL)
        PyErr_Format(PyExc_AttributeError, "the trace element has no attribute %U", name);
    return v;
}

/* Cursors beyond this either way are refused: no ring's reach it (2^62 appends, a century at one a
 * nanosecond), and within it a cursor plus or minus a ring's size never overflows. */
#define CURSOR_MAX ((Py_ssize_t)1 << 62)

/* cursor() for a value other than an int an element keeps itself: one with __index__ (a numpy
 * integer), or an error set (none, no index, beyond CURSOR_MAX). */
static int
odd_cursor(PyObject *v, PyObject *name, Py_ssize_t *out)
{
    if (v == NULL) {
        PyErr_Format(PyExc_AttributeError, "the trace element has no attribute %U", name);
        return -1;
    }
    Py_INCREF(v);   /* its __index__ may run Python code that rebinds the slot */
    Py_ssize_t x = PyNumber_AsSsize_t(v, PyExc_OverflowError);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_OverflowError))
        return -1;
    if (PyErr_Occurred() || x < -CURSOR_MAX || x > CURSOR_MAX) {
        PyErr_Clear();
        PyErr_Format(PyExc_OverflowError, "the trace element's %U is beyond the +-2^62 records a ring counts: "
                     "it was set from outside", name);
        return -1;
    }
    *out = x;
    return 0;
}

/* A cursor of the element (slot `offset`: `_last` or `_first`) as the pure append takes it: an
 * int, or an object with __index__ (a numpy integer); -1 with an error set for anything else, or
 * beyond CURSOR_MAX. */
static inline int
cursor(PyObject *obj, Py_ssize_t offset, PyObject *name, Py_ssize_t *out)
{
    PyObject *v = *slot(obj, offset);  /* borrowed */
    if (v != NULL && PyLong_CheckExact(v)) {
        Py_ssize_t x = PyLong_AsSsize_t(v);
        if (x >= 0 && x <= CURSOR_MAX) {   /* every cursor an element keeps itself */
            *out = x;
            return 0;
        }
    }
    return odd_cursor(v, name, out);
}

/* Set slot `offset` of `obj` to the int `value`. An append moves `_last` (and `_first`) on by one:
 * when the int the slot holds is held by nobody else (no reader has it: the GIL is held, and a
 * reader holds a reference while it uses one) and one digit holds the new value, its digit is
 * rewritten in place instead of allocating a new int and freeing the old (a fifth of an append).
 * Nothing can tell the difference: no other reference to it exists. CPython 3.11's int layout
 * only; other versions allocate. */
static int
set_attr_ssize(PyObject *obj, Py_ssize_t offset, Py_ssize_t value)
{
    PyObject **at = slot(obj, offset), *old = *at;
#if PY_VERSION_HEX >= 0x030B0000 && PY_VERSION_HEX < 0x030C0000
    if (old != NULL && Py_REFCNT(old) == 1 && PyLong_CheckExact(old) && Py_SIZE(old) == 1
        && value > 0 && value < ((Py_ssize_t)1 << PyLong_SHIFT)) {
        ((PyLongObject *)old)->ob_digit[0] = (digit)value;
        return 0;
    }
#endif
    PyObject *v = PyLong_FromSsize_t(value);
    if (v == NULL)
        return -1;
    *at = v;
    Py_XDECREF(old);
    return 0;
}

static PyObject *zero;   /* the int 0 (CPython's cached one): also a waiter count of none */

/* 1 when the element has waiters (threads sleeping on it, or parked remote requests), 0 if not. */
static int
has_waiters(PyObject *obj, const Py_ssize_t *offsets)
{
    for (int a = A_SLEEPERS; a <= A_PARKED; a++) {
        PyObject *v = attr(obj, offsets[a], a == A_SLEEPERS ? s_sleepers : s_parked);
        if (v == NULL)
            return -1;
        if (v != zero) {
            Py_INCREF(v);   /* its __bool__ may run Python code that rebinds the slot */
            int truth = PyObject_IsTrue(v);
            Py_DECREF(v);
            if (truth)
                return truth;
        }
    }
    return 0;
}

/* -- RingAppender --------------------------------------------------------------------------- */

/* What an append reads comes first (the element, its slots' offsets, cap, keep, single_writer: the
 * object's first two cache lines, which a collector prefetches; see Collect's `ahead`). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *element;
    Py_ssize_t offsets[A_COUNT];  /* of the element's slots _last, _first, _sleepers, _parked */
    Py_ssize_t cap, keep;
    int single_writer;
    Py_buffer ring;
    PyObject *ring_owner;
    PyObject *acquire, *release;  /* the element's mutex, bound */
} RingAppender;

static PyTypeObject RingAppenderType;

static int
call_void(PyObject *fn)
{
    PyObject *r = PyObject_CallNoArgs(fn);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

static int
signal_change(RingAppender *self)
{
    PyObject *r = PyObject_CallMethodNoArgs(self->element, s_signal_change);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* What an append does (pastset's _APPEND), with the mutex held or by the single writer: 0 with
 * the record's index in *index, or -1 with an exception set. The slot is `_last` modulo the
 * ring's slots in Python's sense (never before the ring, whatever `_last` holds). */
static inline int
append_body(RingAppender *self, const uint64_t v[8], Py_ssize_t *index)
{
    Py_ssize_t last, first;
    PyObject *e = self->element;
    const Py_ssize_t *at = self->offsets;
    if (cursor(e, at[A_LAST], s_last, &last) < 0 || cursor(e, at[A_FIRST], s_first, &first) < 0)
        return -1;   /* both read first: a cursor refused leaves the ring as it was */
    Py_ssize_t slot = last % self->cap;
    if (slot < 0)
        slot += self->cap;
    pack((char *)self->ring.buf + slot * RECORD, v);
    if (set_attr_ssize(e, at[A_LAST], last + 1) < 0)
        return -1;
    if (first < last + 1 - self->keep && set_attr_ssize(e, at[A_FIRST], last + 1 - self->keep) < 0)
        return -1;
    *index = last;
    return 0;
}

/* Append one record: 0 with its index in *index, or -1 with an exception set. */
static int
ring_append(RingAppender *self, const uint64_t v[8], Py_ssize_t *index)
{
    int waiters;
    if (self->single_writer) {
        /* Lock-free: waiters count themselves before they check `last` (Element._block), so one
         * that this writer does not see has seen the record. */
        if (append_body(self, v, index) < 0)
            return -1;
        waiters = has_waiters(self->element, self->offsets);
        if (waiters < 0)
            return -1;
        if (waiters) {
            if (call_void(self->acquire) < 0)
                return -1;
            int rc = signal_change(self);
            if (call_void(self->release) < 0 || rc < 0)
                return -1;
        }
        return 0;
    }
    if (call_void(self->acquire) < 0)
        return -1;
    int rc = append_body(self, v, index);
    if (rc == 0) {
        waiters = has_waiters(self->element, self->offsets);
        if (waiters < 0 || (waiters && signal_change(self) < 0))
            rc = -1;
    }
    if (rc < 0) {
        /* release, keeping the exception that made us stop */
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (call_void(self->release) < 0)
            PyErr_Clear();
        PyErr_Restore(type, value, tb);
        return -1;
    }
    return call_void(self->release);
}

/* Raise the element's TemplateMismatch for `values` (as pastset's append does). */
static void
raise_mismatch(PyObject *element, PyObject *const *values, Py_ssize_t n)
{
    PyObject *tuple = PyTuple_New(n);
    if (tuple == NULL)
        return;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(values[i]);
        PyTuple_SET_ITEM(tuple, i, values[i]);
    }
    PyObject *template = PyObject_GetAttr(element, s_template);
    if (template != NULL) {
        PyObject *exc = PyObject_CallMethodOneArg(template, s_mismatch, tuple);
        if (exc != NULL) {
            PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
            Py_DECREF(exc);
        }
        Py_DECREF(template);
    }
    Py_DECREF(tuple);
}

static PyObject *
appender_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    RingAppender *self = (RingAppender *)callable;
    Py_ssize_t n = PyVectorcall_NARGS(nargsf);
    if (n != 8 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_Format(PyExc_TypeError, "append() takes 8 positional arguments (op, flags, collector, "
                     "element, arg, nbytes, t_start, t_end) but %zd were given", n);
        return NULL;
    }
    uint64_t v[8];
    for (int i = 0; i < 8; i++) {   /* in order: the first field that does not fit is the one named */
        int rc = field_value(args[i], LIMIT[i], &v[i]);
        if (rc > 0)
            raise_mismatch(self->element, args, 8);
        if (rc != 0)
            return NULL;
    }
    Py_ssize_t last;
    return ring_append(self, v, &last) < 0 ? NULL : PyLong_FromSsize_t(last);
}

static PyObject *
appender_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"element", "single_writer", NULL};
    PyObject *element;
    int single_writer = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "O|p:RingAppender", names, &element, &single_writer))
        return NULL;
    RingAppender *self = (RingAppender *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = appender_vectorcall;
    self->single_writer = single_writer;
    Py_INCREF(element);
    self->element = element;
    Py_ssize_t size;
    PyObject *delta = NULL;
    PyObject *mutex = NULL;
    if (get_ssize(element, s_cap, &self->cap) < 0 || get_ssize(element, s_keep, &self->keep) < 0
        || get_ssize(element, s_size, &size) < 0)
        goto fail;
    PyObject *slot_names[A_COUNT] = {s_last, s_first, s_sleepers, s_parked};
    for (int a = 0; a < A_COUNT; a++)
        if ((self->offsets[a] = slot_offset(Py_TYPE(element), slot_names[a])) < 0)
            goto fail;
    if ((delta = PyObject_GetAttrString(element, "_delta")) == NULL)
        goto fail;
    Py_DECREF(delta);
    if (size != RECORD || self->cap <= self->keep || self->keep <= 0 || delta != Py_None) {
        PyErr_Format(PyExc_ValueError, "RingAppender needs a bounded ring of %d-byte records with a spare "
                     "slot and no delta (record %zd bytes, %zd slots, keep %zd)", RECORD, size, self->cap, self->keep);
        goto fail;
    }
    self->ring_owner = PyObject_GetAttr(element, s_ring);
    if (self->ring_owner == NULL
        || PyObject_GetBuffer(self->ring_owner, &self->ring, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0) {
        Py_CLEAR(self->ring_owner);
        goto fail;
    }
    if (self->ring.len / RECORD < self->cap) {   /* divided: cap * RECORD may overflow */
        PyErr_Format(PyExc_ValueError, "the ring holds %zd bytes, not %zd slots of %d", self->ring.len,
                     self->cap, RECORD);
        goto fail;
    }
    mutex = PyObject_GetAttr(element, s_mutex);
    if (mutex == NULL)
        goto fail;
    self->acquire = PyObject_GetAttr(mutex, s_acquire);
    self->release = PyObject_GetAttr(mutex, s_release);
    Py_DECREF(mutex);
    if (self->acquire == NULL || self->release == NULL)
        goto fail;
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static void
appender_dealloc(RingAppender *self)
{
    PyObject_GC_UnTrack(self);
    if (self->ring_owner != NULL) {
        PyBuffer_Release(&self->ring);
        Py_CLEAR(self->ring_owner);
    }
    Py_CLEAR(self->element);
    Py_CLEAR(self->acquire);
    Py_CLEAR(self->release);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
appender_traverse(RingAppender *self, visitproc visit, void *arg)
{
    Py_VISIT(self->element);
    Py_VISIT(self->ring_owner);
    Py_VISIT(self->acquire);
    Py_VISIT(self->release);
    return 0;
}

static PyTypeObject RingAppenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "eventspace._collector.RingAppender",
    .tp_doc = PyDoc_STR("RingAppender(element, single_writer=False): append(op, flags, collector, element, "
                        "arg, nbytes, t_start, t_end) -> index, into a trace element's ring (see "
                        "pastset BinaryElement.appender)."),
    .tp_basicsize = sizeof(RingAppender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(RingAppender, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = appender_new,
    .tp_dealloc = (destructor)appender_dealloc,
    .tp_traverse = (traverseproc)appender_traverse,
};

/* -- TypedSize ------------------------------------------------------------------------------ */

/* The bytes one tuple of a typed template takes on the wire (msgpack), as the template's Python
 * size function computes it (pastset.template.Template.sizer), for fields int, float, str, bytes
 * and bool: a collector calls it for every tuple it records. A value of another type than its
 * field's usual one (a memoryview, a str subclass, values that are neither a tuple nor a list...)
 * is measured by the Python function, which stays the reference. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;   /* the template's Python size function */
    PyObject *kinds;      /* bytes: one of "ifsb?" per field */
    uint64_t fixed;       /* the array header and the bool fields */
} TypedSize;

static PyTypeObject TypedSizeType;

static inline uint64_t
int_size(long long x)
{
    return (-32 <= x && x < 128) ? 1 : (-128 <= x && x < 256) ? 2 : (-32768 <= x && x < 65536) ? 3
           : (-2147483648LL <= x && x < 4294967296LL) ? 5 : 9;
}

static inline uint64_t
head(Py_ssize_t n, int text)
{
    /* str: fixstr below 32 bytes; str and bin alike: 8, 16 or 32-bit lengths */
    return (text && n < 32) ? 1 : n < 256 ? 2 : n < 65536 ? 3 : 5;
}

/* 0 with the size in *out; 1: a value the Python function must measure; -1 with an exception. */
static int
typed_size(TypedSize *self, PyObject *values, uint64_t *out)
{
    if (!PyTuple_CheckExact(values) && !PyList_CheckExact(values))
        return 1;
    Py_ssize_t count = PyBytes_GET_SIZE(self->kinds);
    if (PySequence_Fast_GET_SIZE(values) != count)
        return 1;
    PyObject **items = PySequence_Fast_ITEMS(values);
    const char *kinds = PyBytes_AS_STRING(self->kinds);
    uint64_t total = self->fixed;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *v = items[i];
        switch (kinds[i]) {
        case '?':
            break;
        case 'f':
            if (PyFloat_Check(v)) {   /* numpy.float64 too: msgpack packs it as a float64 */
                total += 9;
                break;
            }
            /* an int in a float field: as an int */
            /* fall through */
        case 'i': {
            if (!PyLong_CheckExact(v) && !PyBool_Check(v))   /* an int subclass may compare its own way */
                return 1;
            int overflow;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (x == -1 && PyErr_Occurred())
                return -1;
            total += overflow ? 9 : int_size(x);
            break;
        }
        case 's': {
            if (!PyUnicode_CheckExact(v))
                return 1;
            Py_ssize_t n;
            if (PyUnicode_IS_ASCII(v))
                n = PyUnicode_GET_LENGTH(v);
            else if (PyUnicode_AsUTF8AndSize(v, &n) == NULL) {
                PyErr_Clear();   /* not encodable: the Python function raises what it raises */
                return 1;
            }
            total += (uint64_t)n + head(n, 1);
            break;
        }
        case 'b': {
            Py_ssize_t n;
            if (PyBytes_CheckExact(v))
                n = PyBytes_GET_SIZE(v);
            else if (PyByteArray_CheckExact(v))
                n = PyByteArray_GET_SIZE(v);
            else
                return 1;
            total += (uint64_t)n + head(n, 0);
            break;
        }
        default:
            return 1;
        }
    }
    *out = total;
    return 0;
}

static PyObject *
typedsize_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    TypedSize *self = (TypedSize *)callable;
    uint64_t n;
    if (kwnames == NULL && PyVectorcall_NARGS(nargsf) == 1) {
        int rc = typed_size(self, args[0], &n);
        if (rc < 0)
            return NULL;
        if (rc == 0)
            return PyLong_FromUnsignedLongLong(n);
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *
typedsize_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"kinds", "fallback", NULL};
    PyObject *kinds, *fallback;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "SO:TypedSize", names, &kinds, &fallback))
        return NULL;
    Py_ssize_t count = PyBytes_GET_SIZE(kinds);
    const char *k = PyBytes_AS_STRING(kinds);
    uint64_t fixed = count < 16 ? 1 : count < 65536 ? 3 : 5;   /* the array header */
    for (Py_ssize_t i = 0; i < count; i++) {
        if (k[i] == '?')
            fixed += 1;
        else if (strchr("ifsb", k[i]) == NULL || k[i] == '\0') {
            PyErr_SetString(PyExc_ValueError, "kinds are i (int), f (float), s (str), b (bytes) or ? (bool)");
            return NULL;
        }
    }
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "fallback is the template's size function");
        return NULL;
    }
    TypedSize *self = (TypedSize *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = typedsize_vectorcall;
    Py_INCREF(kinds);
    self->kinds = kinds;
    Py_INCREF(fallback);
    self->fallback = fallback;
    self->fixed = fixed;
    return (PyObject *)self;
}

static int
typedsize_traverse(TypedSize *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fallback);
    return 0;
}

static int
typedsize_clear(TypedSize *self)
{
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->kinds);
    return 0;
}

static void
typedsize_dealloc(TypedSize *self)
{
    PyObject_GC_UnTrack(self);
    typedsize_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject TypedSizeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "eventspace._collector.TypedSize",
    .tp_basicsize = sizeof(TypedSize),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = PyDoc_STR("TypedSize(kinds, fallback): size(values) -> the msgpack bytes of a typed template's "
                        "tuple, as `fallback` (the template's Python size function) computes them"),
    .tp_vectorcall_offset = offsetof(TypedSize, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = typedsize_new,
    .tp_dealloc = (destructor)typedsize_dealloc,
    .tp_traverse = (traverseproc)typedsize_traverse,
    .tp_clear = (inquiry)typedsize_clear,
};

/* -- Collect ------------------------------------------------------------------------------- */

/* The memory a record touches besides the collector itself, prefetched (`ahead`) when a switched-on
 * collector starts an operation, so that it arrives while the operation runs instead of stalling the
 * record after it, and again when the operation returns (so that what a waiting operation lost is
 * fetched at once, not one miss after another): in a running application each collector's
 * objects, its trace element and its
 * ring's next slot are out of the caches by the time its next operation comes (a wind tunnel step
 * touches 1,841 of them), and the record read them one after the other, each a miss (about 7 a
 * record; docs/RESULTS.md). Addresses only: one that went stale costs a miss, never a wrong record. */
enum {
    AH_APPENDER,            /* the RingAppender's first two lines */
    AH_SIZE = 2,            /* the TypedSize, and its kinds */
    AH_SLOTS = 4,           /* the element's slots _last, _first, _sleepers, _parked */
    AH_CURSORS = AH_SLOTS + A_COUNT,   /* the ints in _last and _first */
    AH_RECORD = AH_CURSORS + 2,        /* the next record's first and last byte (written) */
    AHEAD = AH_RECORD + 2
};

/* The fields every call reads first, then those a record reads: the object's first lines. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *next;             /* the next stage: next(code, args) */
    const volatile char *on;    /* this collector's byte of the node's switches */
    volatile int64_t *inflight; /* this collector's slot of the node's in-flight table */
    int64_t offset_ns;
    const void *ahead[AHEAD];   /* what the next record touches (see AH_*), refreshed by each record */
    RingAppender *ring;         /* `append` when it is a RingAppender (called without Python) */
    PyObject *size_of;          /* size_of(tuple) -> bytes on the wire; NULL: always `fixed_size` */
    uint64_t fixed_size;
    uint64_t cid, eid, flags, failed;
    long move, observe;
    uint64_t collectives;       /* bit c set: code c is a collective operation */
    uint64_t rounds;            /* collectives seen (read and bumped with the GIL held) */
    PyObject *append;           /* append(op, flags, collector, element, arg, nbytes, t0, t1) */
    /* move, observe and collectives again, as ints and a frozenset: for codes that are not exact
     * ints (last: the fields above are the ones every call reads) */
    PyObject *move_code, *observe_code, *collective_codes;
    PyObject *switches_owner, *inflight_owner;
    Py_buffer switches, inflight_table;
} Collect;

#if defined(__GNUC__) || defined(__clang__)
#define PREFETCH(address) __builtin_prefetch((address), 0, 3)
#define PREFETCH_WRITE(address) __builtin_prefetch((address), 1, 3)
#else
#define PREFETCH(address) ((void)(address))
#define PREFETCH_WRITE(address) ((void)(address))
#endif

/* Ask for the collector's own lines past the first, and for what its record will touch (a prefetch
 * never faults, whatever the address). */
static inline void
ahead(Collect *self)
{
    const char *me = (const char *)self;
    for (int line = 1; line * 64 < (int)offsetof(Collect, append); line++)
        PREFETCH(me + line * 64);
    for (int i = 0; i < AH_RECORD; i++)
        PREFETCH(self->ahead[i]);
    PREFETCH_WRITE(self->ahead[AH_RECORD]);
    PREFETCH_WRITE(self->ahead[AH_RECORD + 1]);
}

/* Note where the next record goes (after a record, when all of it is in the caches). */
static void
aim(Collect *self)
{
    const void **a = self->ahead;
    for (int i = 0; i < AHEAD; i++)
        a[i] = self;
    if (self->size_of != NULL && Py_IS_TYPE(self->size_of, &TypedSizeType)) {
        a[AH_SIZE] = self->size_of;
        a[AH_SIZE + 1] = PyBytes_AS_STRING(((TypedSize *)self->size_of)->kinds);
    }
    RingAppender *r = self->ring;
    if (r == NULL)
        return;
    a[AH_APPENDER] = r;
    a[AH_APPENDER + 1] = (const char *)r + 64;
    for (int k = 0; k < A_COUNT; k++)
        a[AH_SLOTS + k] = slot(r->element, r->offsets[k]);
    PyObject *last = *slot(r->element, r->offsets[A_LAST]), *first = *slot(r->element, r->offsets[A_FIRST]);
    if (last != NULL)
        a[AH_CURSORS] = last;
    if (first != NULL)
        a[AH_CURSORS + 1] = first;
    if (last != NULL && PyLong_CheckExact(last)) {
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(last, &overflow);
        if (!overflow && x >= 0) {
            const char *record = (const char *)r->ring.buf + (x % r->cap) * RECORD;
            a[AH_RECORD] = record;
            a[AH_RECORD + 1] = record + RECORD - 1;
        }
    }
}

static PyObject *u32_mask;

/* A constructor's argument `name` as an unsigned int of at most `limit` (an int, or an object with
 * __index__): 0, or -1 with a ValueError saying what it must be (a TypeError for what has no
 * __index__). */
static int
unsigned_arg(PyObject *obj, uint64_t limit, const char *name, uint64_t *out)
{
    PyObject *index = PyNumber_Index(obj);
    if (index == NULL)
        return -1;
    unsigned long long v = PyLong_AsUnsignedLongLong(index);
    Py_DECREF(index);
    if ((v == (unsigned long long)-1 && PyErr_Occurred()) || v > limit) {
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s is an int from 0 to %llu, not %R", name, (unsigned long long)limit, obj);
        return -1;
    }
    *out = v;
    return 0;
}

/* The clock offsets a collector takes: with them, a time (the clock's reading, below 2^62, plus
 * the offset) never overflows. 2^62 ns is 146 years. */
#define OFFSET_MAX ((int64_t)1 << 62)

static int
check_offset(long long offset_ns)
{
    if (offset_ns < -OFFSET_MAX || offset_ns > OFFSET_MAX) {
        PyErr_Format(PyExc_ValueError, "a clock offset of %lld ns is beyond +-2^62 ns (146 years): set the node's "
                     "clock_offset_ns in the pathmap to one its clock can be shifted by", offset_ns);
        return -1;
    }
    return 0;
}

/* -- the clock ------------------------------------------------------------------------------
 *
 * CLOCK_MONOTONIC, as time.monotonic_ns (eventspace.clock.monotonic_clock): the pure and the
 * compiled collectors' records are on one clock. Every collected call reads it twice, and
 * clock_gettime costs 21 ns here (vDSO), half of what a compiled MPI collector adds to a call.
 * Where the kernel itself keeps CLOCK_MONOTONIC on the TSC (its clocksource is "tsc": it found
 * the counter constant-rate and in step across CPUs), the time is the TSC (9 ns) scaled to
 * nanoseconds from an anchor: a CLOCK_MONOTONIC reading taken at least every millisecond, so
 * that the two never part by more than a millisecond's worth of the rate's error (about 2 ppm
 * after calibration: a few ns), and the rate itself measured again each second (it follows
 * NTP's slewing of CLOCK_MONOTONIC). Until the first 10 ms have calibrated the rate, and where
 * the clocksource is not the TSC, every reading is clock_gettime's. The time handed out never
 * goes back (a new anchor may be a few ns behind the scaled TSC): a call's end is never before
 * its start. All of it runs with the GIL held, which serialises the shared state. */

#define MS 1000000LL

static struct {
    int tsc;                    /* read the TSC (the kernel's clocksource is the TSC) */
    int calibrated;             /* `mult` measured: the TSC is read, else clock_gettime */
    uint64_t cal_tsc;           /* the pair that starts the window the rate is measured over */
    int64_t cal_ns;
    uint64_t anchor_tsc;        /* the latest CLOCK_MONOTONIC reading and the TSC's then */
    int64_t anchor_ns;
    uint64_t mult;              /* ns per tick, 32.32 fixed point */
    uint64_t reanchor;          /* ticks between anchors (a millisecond's) */
    int64_t last;               /* the latest time handed out */
} clk;

static inline int64_t
monotonic_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <x86intrin.h>
#define TSC_READ() __rdtsc()

/* Whether the kernel keeps its clocks on the TSC (Linux: the current clocksource). */
static int
kernel_clock_is_tsc(void)
{
    char name[32] = {0};
    FILE *f = fopen("/sys/devices/system/clocksource/clocksource0/current_clocksource", "r");
    if (f == NULL)
        return 0;
    int ok = fgets(name, sizeof name, f) != NULL && strcmp(name, "tsc\n") == 0;
    fclose(f);
    return ok;
}

/* A CLOCK_MONOTONIC reading and the TSC at it: the middle of the TSC read before and after, of
 * the tightest of a few tries (a process switched out between them, on a loaded machine, would
 * put the middle milliseconds off; a reading takes some 50 ticks). */
static int64_t
clock_pair(uint64_t *tsc)
{
    uint64_t best = UINT64_MAX;
    int64_t ns = 0;
    for (int i = 0; i < 8 && best > 2000; i++) {
        uint64_t before = TSC_READ();
        int64_t read = monotonic_ns();
        uint64_t window = TSC_READ() - before;
        if (window < best) {
            best = window;
            ns = read;
            *tsc = before + window / 2;
        }
    }
    return ns;
}

/* The slow path, taken at most once a millisecond once calibrated: a new anchor, and each
 * second (10 ms for the first) the rate over the window since the last. */
static int64_t
tsc_anchor(void)
{
    uint64_t tsc = 0;
    int64_t ns = clock_pair(&tsc);
    if (clk.cal_ns == 0) {
        clk.cal_ns = ns;
        clk.cal_tsc = tsc;
    } else if (ns - clk.cal_ns >= (clk.calibrated ? 1000 * MS : 10 * MS) && tsc > clk.cal_tsc) {
        clk.mult = (uint64_t)(((unsigned __int128)(ns - clk.cal_ns) << 32) / (tsc - clk.cal_tsc));
        clk.reanchor = clk.mult ? (uint64_t)(((unsigned __int128)MS << 32) / clk.mult) : 0;
        clk.calibrated = clk.mult != 0 && clk.reanchor != 0;
        clk.cal_ns = ns;
        clk.cal_tsc = tsc;
    }
    clk.anchor_ns = ns;
    clk.anchor_tsc = tsc;
    return ns;
}

static inline int64_t
clock_ns(void)
{
    int64_t t;
    if (clk.calibrated) {
        uint64_t ticks = TSC_READ() - clk.anchor_tsc;   /* before the anchor (another CPU's TSC a
                                                           tick behind): wraps, so re-anchors */
        t = ticks < clk.reanchor ? clk.anchor_ns + (int64_t)((ticks * clk.mult) >> 32) : tsc_anchor();
    } else {
        t = clk.tsc ? tsc_anchor() : monotonic_ns();
    }
    if (t < clk.last)
        t = clk.last;
    clk.last = t;
    return t;
}
#else
static int
kernel_clock_is_tsc(void)
{
    return 0;
}

static inline int64_t
clock_ns(void)
{
    return monotonic_ns();
}
#endif

static inline int64_t
now(int64_t offset_ns)
{
    return clock_ns() + offset_ns;
}

/* _collector.clock_ns(): the collectors' clock, for tests and for what compares with it. */
static PyObject *
py_clock_ns(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLongLong(clock_ns());
}

/* _collector.clock_source(): "tsc" or "clock_gettime", what the collectors read now. */
static PyObject *
py_clock_source(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(ignored))
{
    return PyUnicode_FromString(clk.calibrated ? "tsc" : "clock_gettime");
}

/* x & 0xFFFFFFFF, as Python computes it: for an exact int, its value in *out (*obj NULL); for
 * anything else, what its `&` gave in *obj (a numpy integer, say), which emit packs as the pure
 * collector's append packs it (or refuses). -1 with the error `&` raised. */
static int
masked(PyObject *x, uint64_t *out, PyObject **obj)
{
    if (PyLong_CheckExact(x)) {
        *out = PyLong_AsUnsignedLongLongMask(x) & U32;
        return 0;
    }
    *obj = PyNumber_And(x, u32_mask);
    return *obj == NULL ? -1 : 0;
}

/* seq[i], as Python's subscript gives it (a new reference). */
static PyObject *
item(PyObject *seq, Py_ssize_t i)
{
    if (PyTuple_CheckExact(seq) && i < PyTuple_GET_SIZE(seq)) {
        PyObject *v = PyTuple_GET_ITEM(seq, i);
        Py_INCREF(v);
        return v;
    }
    PyObject *key = PyLong_FromSsize_t(i);
    if (key == NULL)
        return NULL;
    PyObject *v = PyObject_GetItem(seq, key);
    Py_DECREF(key);
    return v;
}

/* The bytes `value` takes on the wire: `fixed_size`, or size_of(value) (a new reference in *obj). */
static int
size_of(Collect *self, PyObject *value, uint64_t *fixed, PyObject **obj)
{
    if (self->size_of == NULL) {
        *fixed = self->fixed_size;
        *obj = NULL;
        return 0;
    }
    PyObject *fn = self->size_of;
    if (Py_IS_TYPE(fn, &TypedSizeType)) {   /* a typed template's: in C, no call */
        int rc = typed_size((TypedSize *)fn, value, fixed);
        if (rc <= 0) {
            *obj = NULL;
            return rc;
        }
        fn = ((TypedSize *)fn)->fallback;   /* measured once: straight to the template's function */
    }
    *obj = PyObject_CallOneArg(fn, value);
    return *obj == NULL ? -1 : 0;
}

/* Write one record. `arg_obj` and `nbytes_obj` (when not NULL) stand for arg and nbytes: what a
 * stage's result gave and size_of's result, packed as they are. The common case goes straight into
 * the ring; anything a ring could not take as it is (an op code, index or size out of range, a
 * clock before 0, an append that is not a RingAppender) is handed to `append` as Python values,
 * which packs it, or raises what pastset raises for it. The fields are read in the order struct
 * packs them, so that the first that does not fit is the one the pure collector's append names. */
static int
emit(Collect *self, PyObject *code, uint64_t flags, uint64_t arg, PyObject *arg_obj, uint64_t nbytes,
     PyObject *nbytes_obj, int64_t t0, int64_t t1)
{
    if (self->ring != NULL && t0 >= 0 && t1 >= 0 && nbytes <= U32) {
        uint64_t v[8] = {0, flags, self->cid, self->eid, arg, nbytes, (uint64_t)t0, (uint64_t)t1};
        int rc = field_value(code, 0xFFFF, &v[0]);
        if (rc == 0 && arg_obj != NULL)
            rc = field_value(arg_obj, U32, &v[4]);
        if (rc == 0 && nbytes_obj != NULL)
            rc = field_value(nbytes_obj, U32, &v[5]);
        if (rc == 0) {
            Py_ssize_t index;
            if (ring_append(self->ring, v, &index) < 0)
                return -1;
            aim(self);
            return 0;
        }
        if (rc < 0)
            return -1;
    }
    PyObject *values[8] = {code, NULL, NULL, NULL, arg_obj, nbytes_obj, NULL, NULL};
    PyObject *made[7] = {NULL};
    int m = 0, rc = -1;
    if ((values[1] = made[m++] = PyLong_FromUnsignedLongLong(flags)) == NULL
        || (values[2] = made[m++] = PyLong_FromUnsignedLongLong(self->cid)) == NULL
        || (values[3] = made[m++] = PyLong_FromUnsignedLongLong(self->eid)) == NULL
        || (arg_obj == NULL && (values[4] = made[m++] = PyLong_FromUnsignedLongLong(arg)) == NULL)
        || (nbytes_obj == NULL && (values[5] = made[m++] = PyLong_FromUnsignedLongLong(nbytes)) == NULL)
        || (values[6] = made[m++] = PyLong_FromLongLong(t0)) == NULL
        || (values[7] = made[m++] = PyLong_FromLongLong(t1)) == NULL)
        goto done;
    PyObject *r = PyObject_Vectorcall(self->append, values, 8, NULL);
    if (r != NULL) {
        Py_DECREF(r);
        rc = 0;
    }
done:
    for (int i = 0; i < m; i++)
        Py_XDECREF(made[i]);
    return rc;
}

/* Whether `code` is a collective, as `code in COLLECTIVES` says: 1, 0, or -1 with the error its hash
 * or comparison raised. */
static inline int
is_collective(Collect *self, PyObject *code)
{
    if (PyLong_CheckExact(code)) {
        int overflow;
        long long c = PyLong_AsLongLongAndOverflow(code, &overflow);
        return !overflow && c >= 0 && c < 64 && (self->collectives >> c) & 1;
    }
    return PySet_Contains(self->collective_codes, code);
}

enum { OP_OTHER, OP_MOVE, OP_OBSERVE, OP_COLLECTIVE };

/* What `code` is as the pure collector tells (code == MOVE, code == OBSERVE, code in COLLECTIVES):
 * an exact int compared in C; anything else (a numpy integer, a float, an object with an __eq__ of
 * its own) by Python's own comparisons. -1 with the error a comparison or hash raised. */
static int
operation_of(Collect *self, PyObject *code)
{
    if (PyLong_CheckExact(code)) {
        int overflow;
        long long c = PyLong_AsLongLongAndOverflow(code, &overflow);
        if (overflow)
            return OP_OTHER;   /* no operation is that big */
        return c == self->move ? OP_MOVE : c == self->observe ? OP_OBSERVE
               : c >= 0 && c < 64 && (self->collectives >> c) & 1 ? OP_COLLECTIVE : OP_OTHER;
    }
    int is = PyObject_RichCompareBool(code, self->move_code, Py_EQ);
    if (is != 0)
        return is < 0 ? -1 : OP_MOVE;
    if ((is = PyObject_RichCompareBool(code, self->observe_code, Py_EQ)) != 0)
        return is < 0 ? -1 : OP_OBSERVE;
    if ((is = is_collective(self, code)) != 0)
        return is < 0 ? -1 : OP_COLLECTIVE;
    return OP_OTHER;
}

/* The record of a finished operation: arg and nbytes by operation, as the pure collector. */
static int
emit_done(Collect *self, PyObject *code, PyObject *const *args, PyObject *result, int64_t t0, int64_t t1)
{
    uint64_t arg = 0, nbytes = 0;
    PyObject *arg_obj = NULL, *value = NULL, *sized = NULL;
    int rc = -1, operation = operation_of(self, code);
    if (operation < 0)
        return -1;
    if (operation == OP_MOVE) {
        int truth = PyObject_IsTrue(result);  /* (result or 0) & 0xFFFFFFFF */
        if (truth < 0 || (truth && masked(result, &arg, &arg_obj) < 0))
            return -1;
        if ((value = item(args[1], 0)) == NULL || size_of(self, value, &nbytes, &sized) < 0)
            goto done;
    }
    else if (operation == OP_OBSERVE) {
        PyObject *index = item(result, 0);
        if (index == NULL)
            return -1;
        rc = masked(index, &arg, &arg_obj);
        Py_DECREF(index);
        if (rc < 0)
            return -1;
        rc = -1;
        if ((value = item(result, 1)) == NULL || size_of(self, value, &nbytes, &sized) < 0)
            goto done;
    }
    else if (operation == OP_COLLECTIVE) {
        arg = (self->rounds++) & U32;
    }
    rc = emit(self, code, self->flags, arg, arg_obj, nbytes, sized, t0, t1);
done:
    Py_XDECREF(arg_obj);
    Py_XDECREF(value);
    Py_XDECREF(sized);
    return rc;
}

static PyObject *
collect_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Collect *self = (Collect *)callable;
    if (PyVectorcall_NARGS(nargsf) != 2 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames))) {
        PyErr_SetString(PyExc_TypeError, "a collector takes two positional arguments: (code, args)");
        return NULL;
    }
    if (!*self->on) {
        /* Rounds are counted while switched off too, so that they stay aligned across members. */
        int collective = is_collective(self, args[0]);
        if (collective < 0)
            return NULL;
        self->rounds += (uint64_t)collective;
        return PyObject_Vectorcall(self->next, args, nargsf, NULL);
    }
    ahead(self);
    int64_t t0 = now(self->offset_ns);
    *self->inflight = t0;
    PyObject *result = PyObject_Vectorcall(self->next, args, nargsf, NULL);
    if (result == NULL) {
        /* recorded with the error flag, then re-raised (an error of the append chained to it) */
        *self->inflight = 0;
        int64_t t1 = now(self->offset_ns);
        PyObject *type, *value, *tb;
        PyErr_Fetch(&type, &value, &tb);
        if (emit(self, args[0], self->failed, 0, NULL, 0, NULL, t0, t1) < 0) {
            _PyErr_ChainExceptions(type, value, tb);
            return NULL;
        }
        PyErr_Restore(type, value, tb);
        return NULL;
    }
    int64_t t1 = now(self->offset_ns);
    ahead(self);   /* again: an operation that waited (an observe) may have lost them meanwhile */
    *self->inflight = 0;
    if (emit_done(self, args[0], args, result, t0, t1) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

static int
one_slot(PyObject *owner, Py_buffer *view, Py_ssize_t itemsize, uint64_t index, const char *what)
{
    if (PyObject_GetBuffer(owner, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if ((uint64_t)(view->len / itemsize) <= index) {
        PyBuffer_Release(view);
        view->obj = NULL;
        PyErr_Format(PyExc_ValueError, "collector %llu has no slot in the %s (%zd bytes)",
                     (unsigned long long)index, what, view->len);
        return -1;
    }
    return 0;
}

static PyObject *
collect_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"next", "switches", "inflight", "cid", "eid", "flags", "failed", "size_of",
                            "append", "offset_ns", "move", "observe", "collectives", NULL};
    PyObject *next, *switches, *inflight, *size, *append, *cid_arg, *eid_arg, *flags_arg, *failed_arg, *collectives_arg;
    uint64_t cid, eid, flags, failed, collectives;
    long long offset_ns;
    long move, observe;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOOOLllO:Collect", names, &next, &switches, &inflight,
                                     &cid_arg, &eid_arg, &flags_arg, &failed_arg, &size, &append, &offset_ns, &move,
                                     &observe, &collectives_arg))
        return NULL;
    if (unsigned_arg(cid_arg, U32, "the collector id", &cid) < 0 || unsigned_arg(eid_arg, U32, "the element id", &eid) < 0
        || unsigned_arg(flags_arg, 0xFFFF, "flags", &flags) < 0 || unsigned_arg(failed_arg, 0xFFFF, "failed", &failed) < 0
        || unsigned_arg(collectives_arg, UINT64_MAX, "collectives", &collectives) < 0 || check_offset(offset_ns) < 0)
        return NULL;
    Collect *self = (Collect *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = collect_vectorcall;
    Py_INCREF(next);
    self->next = next;
    Py_INCREF(append);
    self->append = append;
    if (Py_IS_TYPE(append, &RingAppenderType))
        self->ring = (RingAppender *)append;
    if (!PyCallable_Check(size)) {   /* every tuple's size, as the pure collector takes one */
        int rc = field_value(size, U32, &self->fixed_size);
        if (rc != 0) {
            if (rc > 0)
                PyErr_Format(PyExc_ValueError, "a fixed size_of is a u32, not %R", size);
            goto fail;
        }
    }
    else {
        Py_INCREF(size);
        self->size_of = size;
    }
    self->cid = cid;
    self->eid = eid;
    self->flags = flags;
    self->failed = failed;
    self->offset_ns = offset_ns;
    self->move = move;
    self->observe = observe;
    self->collectives = collectives;
    if ((self->move_code = PyLong_FromLong(move)) == NULL || (self->observe_code = PyLong_FromLong(observe)) == NULL
        || (self->collective_codes = PyFrozenSet_New(NULL)) == NULL)
        goto fail;
    for (int c = 0; c < 64; c++) {
        if (!((collectives >> c) & 1))
            continue;
        PyObject *code = PyLong_FromLong(c);
        int rc = code == NULL ? -1 : PySet_Add(self->collective_codes, code);   /* brand new: may be filled */
        Py_XDECREF(code);
        if (rc < 0)
            goto fail;
    }
    if (one_slot(switches, &self->switches, 1, cid, "switches") < 0)
        goto fail;
    Py_INCREF(switches);
    self->switches_owner = switches;
    self->on = (const char *)self->switches.buf + cid;
    if (one_slot(inflight, &self->inflight_table, sizeof(int64_t), cid, "in-flight table") < 0)
        goto fail;
    if (self->inflight_table.itemsize != sizeof(int64_t) || (uintptr_t)self->inflight_table.buf % sizeof(int64_t)) {
        PyBuffer_Release(&self->inflight_table);
        PyErr_SetString(PyExc_ValueError, "the in-flight table holds int64 (array('q'))");
        goto fail;
    }
    Py_INCREF(inflight);
    self->inflight_owner = inflight;
    self->inflight = (int64_t *)self->inflight_table.buf + cid;
    aim(self);
    return (PyObject *)self;
fail:
    Py_DECREF(self);
    return NULL;
}

static void
collect_dealloc(Collect *self)
{
    PyObject_GC_UnTrack(self);
    if (self->switches_owner != NULL) {
        PyBuffer_Release(&self->switches);
        Py_CLEAR(self->switches_owner);
    }
    if (self->inflight_owner != NULL) {
        PyBuffer_Release(&self->inflight_table);
        Py_CLEAR(self->inflight_owner);
    }
    Py_CLEAR(self->next);
    Py_CLEAR(self->append);
    Py_CLEAR(self->size_of);
    Py_CLEAR(self->move_code);
    Py_CLEAR(self->observe_code);
    Py_CLEAR(self->collective_codes);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
collect_traverse(Collect *self, visitproc visit, void *arg)
{
    Py_VISIT(self->next);
    Py_VISIT(self->append);
    Py_VISIT(self->size_of);
    Py_VISIT(self->switches_owner);
    Py_VISIT(self->inflight_owner);
    return 0;
}

static PyTypeObject CollectType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "eventspace._collector.Collect",
    .tp_doc = PyDoc_STR("The compiled collecting callable of eventspace.collector.Collector: "
                        "collect(code, args) -> what the next stage returns."),
    .tp_basicsize = sizeof(Collect),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(Collect, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = collect_new,
    .tp_dealloc = (destructor)collect_dealloc,
    .tp_traverse = (traverseproc)collect_traverse,
};

/* -- MpiCall -------------------------------------------------------------------------------- */

/* The hot path of one MPI collector closure (eventspace/mpi/collector.py), for the calls a program
 * makes in its inner loops with buffers: a blocking buffer send (Send, Ssend, Rsend, Bsend), a
 * buffer Recv, and the buffer collectives. It handles the common form of the call (positional
 * arguments; a numpy array, bytes or bytearray where bytes are counted; int ranks and tags) and
 * writes exactly what the closure writes: the mark in `marks[cid]` while the call runs, then the
 * record, then spill() when the drain's bound is reached. Any other form of the call goes to the
 * closure (`fallback`), which stays the reference. */

enum { K_SEND = 0, K_RECV = 1, K_COLLECTIVE = 2, K_IRECV = 3, K_SENDRECV = 4 };
enum { S_NONE = 0, S_SEND = 1, S_ROOT = 2, S_PICKLED = 3 };   /* what a collective sends: see COLLECTIVES */
#define PEER_NONE 0xFFFFFFFFull

/* An MpiCall's mark: what a Mark tuple of eventspace.space holds (t_start, op, flags, element,
 * arg, nbytes), as a sequence of six ints, rewritten in place by each call (no allocation on the
 * hot path); it stands in the node's marks while a call runs. */
typedef struct {
    PyObject_HEAD
    int64_t t0;
    uint64_t fields[5];
} MpiMark;

static Py_ssize_t
mark_length(PyObject *self)
{
    return 6;
}

static PyObject *
mark_item(PyObject *self, Py_ssize_t i)
{
    MpiMark *m = (MpiMark *)self;
    if (i == 0)
        return PyLong_FromLongLong(m->t0);
    if (i > 0 && i < 6)
        return PyLong_FromUnsignedLongLong(m->fields[i - 1]);
    PyErr_SetString(PyExc_IndexError, "a mark has six fields");
    return NULL;
}

static PySequenceMethods mark_sequence = {.sq_length = mark_length, .sq_item = mark_item};

static PyTypeObject MpiMarkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "eventspace._collector.MpiMark",
    .tp_doc = PyDoc_STR("(t_start, op, flags, element, arg, nbytes) of the MPI call under way."),
    .tp_basicsize = sizeof(MpiMark),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_as_sequence = &mark_sequence,
};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    MpiMark *mark;
    int kind, sends;
    Py_ssize_t root_at;           /* a collective's root parameter, or -1 */
    long long rank;               /* this rank in the communicator (is it the root?) */
    PyObject *comm, *call, *fallback;
    RingAppender *ring;
    PyObject *on, *bound, *spill, *marks, *peers, *status, *rounds;
    uint32_t *peer_table;         /* peers, as u32s (peer_of) */
    Py_ssize_t npeers;
    PyObject *bound_seen;         /* the bound's int last read (a reference), and its value */
    Py_ssize_t bound_value;
    PyObject *get_count, *get_source, *get_tag;   /* MPI.Status's, unbound: what a receive got */
    PyObject *params, *defaults;  /* the method's parameter names after self, and the defaults of the
                                     last of them (mpi4py's): where keyword arguments go, or NULL */
    PyTypeObject *ndarray;
    PyObject *request_class;      /* a nonblocking post's: wraps its request, which gets `info` */
    PyObject *channel;            /* the closure's Channel, first in a request's info */
    Py_ssize_t info_at;           /* where a request keeps its info (slot_offset), or -1 */
    long long any_source, any_tag;
    Py_ssize_t cid;
    uint64_t op, flags, error, any_source_flag, any_tag_flag;
    uint64_t recv_op;             /* Sendrecv's receive half (its send half is `op`) */
    PyObject *dumped;             /* [bytes mpi4py has pickled so far] (S_PICKLED: what a call sent) */
    PyObject *datatypes;          /* ((Datatype, size), ...): the predefined datatypes a message spec
                                     ([buf, count, datatype]) is sized by in C, or NULL */
    int64_t offset_ns;
} MpiCall;

static PyObject *s_nbytes, *s_get_count, *s_get_source, *s_get_tag;

/* Bytes of a plain buffer (a numpy array, bytes or bytearray): 0, or -1 (no error set) for anything else. */
static int
plain_size(MpiCall *self, PyObject *buf, uint64_t *n)
{
    if (Py_IS_TYPE(buf, self->ndarray)) {
        PyObject *v = PyObject_GetAttr(buf, s_nbytes);
        if (v == NULL) {
            PyErr_Clear();
            return -1;
        }
        unsigned long long k = PyLong_AsUnsignedLongLong(v);
        Py_DECREF(v);
        if (k == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            return -1;
        }
        *n = k < U32 ? k : U32;
        return 0;
    }
    if (PyBytes_CheckExact(buf) || PyByteArray_CheckExact(buf)) {
        Py_ssize_t k = PyBytes_CheckExact(buf) ? PyBytes_GET_SIZE(buf) : PyByteArray_GET_SIZE(buf);
        *n = (uint64_t)k < U32 ? (uint64_t)k : U32;
        return 0;
    }
    return -1;
}

/* The size of `datatype` if it is one of the predefined datatypes the call was given (by identity:
 * their size never changes), else 0. */
static uint64_t
datatype_size(MpiCall *self, PyObject *datatype)
{
    if (self->datatypes == NULL)
        return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(self->datatypes); i++) {
        PyObject *pair = PyTuple_GET_ITEM(self->datatypes, i);
        if (PyTuple_GET_ITEM(pair, 0) == datatype)
            return (uint64_t)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pair, 1));   /* checked when made */
    }
    return 0;
}

static int small_int(PyObject *obj, long long *out);

/* Bytes of a send buffer as eventspace.mpi.message.buffer_bytes counts them: a plain buffer, or a
 * message spec of one: [buf, count, datatype], [buf, (count, displ), datatype], [buf, count, displ,
 * datatype] (a list or a tuple) with an int count and a predefined datatype (count x its size), or
 * [plain buf, datatype] (the whole datatypes the buffer holds). 0, or -1 (no error set) for
 * anything else, which the closure reads. */
static int
buffer_size(MpiCall *self, PyObject *buf, uint64_t *n)
{
    if (!PyList_CheckExact(buf) && !PyTuple_CheckExact(buf))
        return plain_size(self, buf, n);
    Py_ssize_t len = PySequence_Fast_GET_SIZE(buf);
    PyObject **items = PySequence_Fast_ITEMS(buf);
    if (len < 2 || len > 4)
        return -1;
    uint64_t size = datatype_size(self, items[len - 1]);
    if (size == 0)
        return -1;
    if (len == 2) {   /* [buf, datatype]: as many whole datatypes as the buffer holds */
        uint64_t whole;
        if (plain_size(self, items[0], &whole) < 0 || whole >= U32)
            return -1;
        *n = whole / size * size;
        return 0;
    }
    PyObject *count = items[1];
    if (len == 3 && PyTuple_CheckExact(count) && PyTuple_GET_SIZE(count) > 0)   /* (count, displ) */
        count = PyTuple_GET_ITEM(count, 0);
    long long k;
    if (small_int(count, &k) < 0 || k < 0)
        return -1;
    *n = (uint64_t)k >= U32 ? U32 : (uint64_t)k * size < U32 ? (uint64_t)k * size : U32;
    return 0;
}

/* An exact int's value; 0, or -1 (no error set) for anything else or out of range. */
static int
small_int(PyObject *obj, long long *out)
{
    if (!PyLong_CheckExact(obj))
        return -1;
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* peers[rank] as a u32 (the communicator rank's world rank, or PEER_NONE/PEER_ANY for the special
 * ranks, which index the table from its end), PEER_NONE when it has none. The table is the
 * channel's list of world ranks (fixed for the communicator), copied to C when the call is made. */
static uint64_t
peer_of(MpiCall *self, long long rank)
{
    Py_ssize_t n = self->npeers;
    if (rank < 0)
        rank += n;
    if (rank < 0 || rank >= n)
        return PEER_NONE;
    return self->peer_table[rank];
}

/* The copy of `peers` (a list of world ranks) peer_of reads; -1 with an error set. An entry that
 * is no u32 reads as PEER_NONE, as the closure's lookup gives for it. */
static int
copy_peers(MpiCall *self, PyObject *peers)
{
    Py_ssize_t n = PyList_GET_SIZE(peers);
    self->peer_table = PyMem_New(uint32_t, n > 0 ? n : 1);
    if (self->peer_table == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        unsigned long long v = PyLong_AsUnsignedLongLong(PyList_GET_ITEM(peers, i));
        if (v == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            v = PEER_NONE;
        }
        self->peer_table[i] = (uint32_t)(v & U32);
    }
    self->npeers = n;
    return 0;
}

/* marks[cid] = this call's mark, or 0 (mark NULL). */
static int
set_mark(MpiCall *self, MpiMark *mark)
{
    if (self->cid >= PyList_GET_SIZE(self->marks)) {
        PyErr_SetString(PyExc_IndexError, "the node's marks hold no slot for this collector");
        return -1;
    }
    PyObject *v = mark == NULL ? zero : (PyObject *)mark;
    Py_INCREF(v);
    return PyList_SetItem(self->marks, self->cid, v);  /* steals v */
}

static void
fill_mark(MpiMark *m, int64_t t0, uint64_t op, uint64_t flags, uint64_t peer, uint64_t arg, uint64_t n)
{
    m->t0 = t0;
    m->fields[0] = op;
    m->fields[1] = flags;
    m->fields[2] = peer;
    m->fields[3] = arg;
    m->fields[4] = n;
}

/* This collector's mark: a call `op` under way since t0 (mark_start: the call's own op). */
static int
mark_as(MpiCall *self, uint64_t op, int64_t t0, uint64_t flags, uint64_t peer, uint64_t arg, uint64_t n)
{
    fill_mark(self->mark, t0, op, flags, peer, arg, n);
    return set_mark(self, self->mark);
}

static int
mark_start(MpiCall *self, int64_t t0, uint64_t flags, uint64_t peer, uint64_t arg, uint64_t n)
{
    return mark_as(self, self->op, t0, flags, peer, arg, n);
}

/* list[0] of a one-item list a collector shares with Python (its switch, the drain's bound, the
 * bytes pickled so far): borrowed, or NULL with the IndexError `list[0]` raises once it is empty. */
static PyObject *
first_item(PyObject *list)
{
    if (PyList_GET_SIZE(list) < 1) {
        PyErr_SetString(PyExc_IndexError, "list index out of range");
        return NULL;
    }
    return PyList_GET_ITEM(list, 0);
}

/* 0 when a record fits the trace tuple (ids and counts read from Python within their fields, times
 * not before the clock's 0); else 1, with the TemplateMismatch the trace element raises for it, as
 * the closures' appends raise it. */
static int
record_refused(RingAppender *ring, const uint64_t v[8])
{
    int fits = (int64_t)v[6] >= 0 && (int64_t)v[7] >= 0;
    for (int i = 0; i < 6 && fits; i++)
        fits = v[i] <= LIMIT[i];
    if (fits)
        return 0;
    PyObject *values[8] = {NULL};
    int i = 0;
    for (; i < 8; i++) {
        values[i] = i < 6 ? PyLong_FromUnsignedLongLong(v[i]) : PyLong_FromLongLong((int64_t)v[i]);
        if (values[i] == NULL)
            break;
    }
    if (i == 8)
        raise_mismatch(ring->element, values, 8);
    while (i-- > 0)
        Py_DECREF(values[i]);
    return 1;
}

/* The drain's bound, as a comparison of an index with it says (clipped): -1 with an error set for
 * what has no __index__. */
static int
bound_of(PyObject *bound_list, Py_ssize_t *out)
{
    PyObject *bound = first_item(bound_list);
    if (bound == NULL)
        return -1;
    *out = PyNumber_AsSsize_t(bound, NULL);
    return *out == -1 && PyErr_Occurred() ? -1 : 0;
}

/* The record of `op`, then spill() when the drain's bound is reached; -1 with an exception set
 * (record: of the call's own op). */
static int
record_as(MpiCall *self, uint64_t op, uint64_t flags, uint64_t peer, uint64_t arg, uint64_t n, int64_t t0, int64_t t1)
{
    uint64_t v[8] = {op, flags, (uint64_t)self->cid, peer, arg, n, (uint64_t)t0, (uint64_t)t1};
    Py_ssize_t last;
    if (record_refused(self->ring, v) || ring_append(self->ring, v, &last) < 0)
        return -1;
    PyObject *bound = first_item(self->bound);
    if (bound == NULL)
        return -1;
    if (bound != self->bound_seen) {   /* the drain moved it (rarely): read the new one */
        Py_ssize_t b = PyNumber_AsSsize_t(bound, NULL);   /* clipped: as a comparison with it says */
        if (b == -1 && PyErr_Occurred())
            return -1;
        Py_INCREF(bound);
        Py_XSETREF(self->bound_seen, bound);
        self->bound_value = b;
    }
    return last >= self->bound_value ? call_void(self->spill) : 0;
}

static int
record(MpiCall *self, uint64_t flags, uint64_t peer, uint64_t arg, uint64_t n, int64_t t0, int64_t t1)
{
    return record_as(self, self->op, flags, peer, arg, n, t0, t1);
}

/* Call `op` failed: its record with the error flag, then the call's exception again (failed: the
 * call's own op). */
static PyObject *
failed_as(MpiCall *self, uint64_t op, uint64_t flags, uint64_t peer, uint64_t arg, int64_t t0)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (set_mark(self, NULL) < 0
        || record_as(self, op, flags | self->error, peer, arg, 0, t0, now(self->offset_ns)) < 0) {
        _PyErr_ChainExceptions(type, value, tb);
        return NULL;
    }
    PyErr_Restore(type, value, tb);
    return NULL;
}

static PyObject *
failed(MpiCall *self, uint64_t flags, uint64_t peer, uint64_t arg, int64_t t0)
{
    return failed_as(self, self->op, flags, peer, arg, t0);
}

static PyObject *
to_fallback(MpiCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static int
collecting(MpiCall *self)
{
    PyObject *on = first_item(self->on);
    return on == NULL ? -1 : PyObject_IsTrue(on);
}

static PyObject *s_info;

/* Bytes mpi4py has pickled in this process so far (interpose.count_pickled keeps the count) in
 * *out: S_PICKLED, a call's bytes are the growth during it (`pickled_since`). -1 with an error set
 * when the count is gone or no int. */
static int
pickled_so_far(MpiCall *self, uint64_t *out)
{
    PyObject *count = first_item(self->dumped);
    if (count == NULL)
        return -1;
    *out = PyLong_AsUnsignedLongLongMask(count);
    return *out == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
}

/* What mpi4py pickled since `before` (pickled_so_far before a call), as a record's u32 nbytes. */
static int
pickled_since(MpiCall *self, uint64_t before, uint64_t *n)
{
    uint64_t now_count;
    if (pickled_so_far(self, &now_count) < 0)
        return -1;
    *n = now_count - before < U32 ? now_count - before : U32;
    return 0;
}

/* A nonblocking post's request wrapped in the request class, its `info` set as the closure sets it:
 * (channel, op, flags, peer, tag, nbytes, t_start), what its completion records (interpose.py). */
static PyObject *
posted(MpiCall *self, PyObject *request, uint64_t flags, uint64_t peer, uint64_t tag, uint64_t n, int64_t t0)
{
    PyObject *wrapped = PyObject_CallOneArg(self->request_class, request);
    Py_DECREF(request);
    if (wrapped == NULL)
        return NULL;
    PyObject *info = PyTuple_New(7);
    if (info == NULL) {
        Py_DECREF(wrapped);
        return NULL;
    }
    uint64_t fields[5] = {self->op, flags, peer, tag, n};
    Py_INCREF(self->channel);
    PyTuple_SET_ITEM(info, 0, self->channel);
    for (int i = 0; i < 5; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(fields[i]);
        if (v == NULL)
            goto fail;
        PyTuple_SET_ITEM(info, i + 1, v);
    }
    PyObject *start = PyLong_FromLongLong(t0);
    if (start == NULL)
        goto fail;
    PyTuple_SET_ITEM(info, 6, start);
    if (self->info_at > 0 && Py_TYPE(wrapped) == (PyTypeObject *)self->request_class) {
        PyObject **slot = (PyObject **)((char *)wrapped + self->info_at);   /* the slot, as Python sets it */
        Py_XSETREF(*slot, info);
        return wrapped;
    }
    if (PyObject_SetAttr(wrapped, s_info, info) == 0) {
        Py_DECREF(info);
        return wrapped;
    }
fail:
    Py_DECREF(info);
    Py_DECREF(wrapped);
    return NULL;
}

/* Send(buf, dest, tag=0), and the nonblocking sends (Isend...) with a request class; with S_PICKLED
 * their pickle forms (send(obj, dest, tag=0), isend...), whose bytes are what mpi4py pickled */
static PyObject *
mpi_send(MpiCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    long long dest, tag = 0;
    uint64_t n = 0;
    int pickled = self->sends == S_PICKLED;
    if (kwnames != NULL || nargs < 2 || nargs > 3 || small_int(args[1], &dest) < 0
        || (nargs == 3 && (small_int(args[2], &tag) < 0 || tag < 0 || (uint64_t)tag > U32))
        || (!pickled && buffer_size(self, args[0], &n) < 0))
        return to_fallback(self, args, nargsf, kwnames);
    PyObject *call_args[4] = {self->comm, args[0], args[1], nargs == 3 ? args[2] : zero};
    int on = collecting(self);
    if (on <= 0)
        return on < 0 ? NULL : PyObject_Vectorcall(self->call, call_args, 4, NULL);
    uint64_t peer = peer_of(self, dest), before = 0;
    if (pickled && pickled_so_far(self, &before) < 0)
        return NULL;
    int64_t t0 = now(self->offset_ns);
    if (mark_start(self, t0, self->flags, peer, (uint64_t)tag, n) < 0)
        return NULL;
    PyObject *result = PyObject_Vectorcall(self->call, call_args, 4, NULL);
    if (result == NULL)
        return failed(self, self->flags, peer, (uint64_t)tag, t0);
    int64_t t1 = now(self->offset_ns);
    /* then what mpi4py pickled during the call */
    if (set_mark(self, NULL) < 0 || (pickled && pickled_since(self, before, &n) < 0)) {
        Py_DECREF(result);
        return NULL;
    }
    if (self->request_class != NULL
        && (result = posted(self, result, self->flags, peer, (uint64_t)tag, n, t0)) == NULL)
        return NULL;
    if (record(self, self->flags, peer, (uint64_t)tag, n, t0, t1) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

/* A receive's (buf, source=ANY_SOURCE, tag=ANY_TAG, ...) of at most `most` arguments: the source
 * and tag it wants, and the flags that says (ANY_SOURCE, ANY_TAG); -1 for another form. */
static int
wanted(MpiCall *self, PyObject *const *args, Py_ssize_t nargs, Py_ssize_t most, long long *source,
       long long *tag, uint64_t *flags)
{
    *source = self->any_source;
    *tag = self->any_tag;
    if (nargs < 1 || nargs > most || (nargs > 1 && small_int(args[1], source) < 0)
        || (nargs > 2 && small_int(args[2], tag) < 0))
        return -1;
    *flags = self->flags | (*source == self->any_source ? self->any_source_flag : 0)
             | (*tag == self->any_tag ? self->any_tag_flag : 0);
    return 0;
}

/* Irecv(buf, source=ANY_SOURCE, tag=ANY_TAG): the post's record (no bytes yet: its completion
 * records what came) and its request, wrapped, with the post's info; with S_PICKLED irecv, whose
 * buf may be left out too. */
static PyObject *
mpi_irecv(MpiCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    long long source, tag;
    uint64_t f;
    PyObject *no_buf[1] = {Py_None};
    if (nargs == 0 && kwnames == NULL && self->sends == S_PICKLED) {
        args = no_buf;
        nargs = 1;
    }
    if (kwnames != NULL || wanted(self, args, nargs, 3, &source, &tag, &f) < 0)
        return to_fallback(self, args, nargsf, kwnames);
    PyObject *call_args[4] = {self->comm, args[0], nargs > 1 ? args[1] : NULL, nargs > 2 ? args[2] : NULL};
    int on = collecting(self);
    if (on <= 0)
        return on < 0 ? NULL : PyObject_Vectorcall(self->call, call_args, 1 + nargs, NULL);
    uint64_t want = peer_of(self, source), wanted_tag = (uint64_t)tag & U32;
    int64_t t0 = now(self->offset_ns);
    if (mark_start(self, t0, f, want, wanted_tag, 0) < 0)
        return NULL;
    PyObject *result = PyObject_Vectorcall(self->call, call_args, 1 + nargs, NULL);
    if (result == NULL)
        return failed(self, f, want, wanted_tag, t0);
    if ((result = posted(self, result, f, want, wanted_tag, 0, t0)) == NULL)
        return failed(self, f, want, wanted_tag, t0);
    int64_t t1 = now(self->offset_ns);
    if (set_mark(self, NULL) < 0 || record(self, f, want, wanted_tag, 0, t0, t1) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

/* What Status method `get` (unbound: MPI.Status.Get_count, Get_source or Get_tag, called without
 * a property or attribute lookup) says of `status`. */
static int
status_field(PyObject *get, PyObject *status, long long *out)
{
    PyObject *v = PyObject_Vectorcall(get, &status, 1, NULL);
    if (v == NULL)
        return -1;
    *out = PyLong_AsLongLong(v);
    Py_DECREF(v);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

/* MPI_Get_count on a Status's MPI_Status, called here instead of through Status.Get_count (17 ns
 * a call, a fifth of what a collected Recv adds): set by use_mpi_status from mpi4py's C API
 * (PyMPIStatus_Get), the MPI library's MPI_Get_count and MPI_BYTE's handle, which is an int (MPICH)
 * or a pointer (Open MPI). NULL: Status.Get_count. */
typedef void *(*MPI_Status_of)(PyObject *);
static MPI_Status_of status_of;
static void *get_count_fn;
static intptr_t mpi_byte;
static int mpi_handle_size;
static Py_ssize_t source_at = -1, tag_at = -1;   /* MPI_SOURCE's and MPI_TAG's offsets in MPI_Status */

/* MPI_SOURCE (`at` source_at) or MPI_TAG (tag_at) of a Status, read from its MPI_Status, else as
 * its method `get` (Get_source, Get_tag) says. */
static int
status_int(PyObject *get, PyObject *status, Py_ssize_t at, long long *out)
{
    if (at >= 0) {
        char *st = status_of(status);
        if (st != NULL) {
            int v;
            memcpy(&v, st + at, sizeof v);
            *out = v;
            return 0;
        }
        PyErr_Clear();
    }
    return status_field(get, status, out);
}

/* The bytes a receive got, as Status.Get_count() says (MPI_BYTE); `get_count` the unbound method. */
static int
received_bytes_of(PyObject *get_count, PyObject *status, long long *count)
{
    if (get_count_fn != NULL) {
        void *st = status_of(status);
        int c = -1, rc = -1;
        if (st == NULL)
            PyErr_Clear();
        else if (mpi_handle_size == 4)
            rc = ((int (*)(void *, int, int *))get_count_fn)(st, (int)mpi_byte, &c);
        else
            rc = ((int (*)(void *, void *, int *))get_count_fn)(st, (void *)mpi_byte, &c);
        if (rc == 0 && c >= 0) {   /* else MPI_UNDEFINED (over 2 GiB) or an error: mpi4py says */
            *count = c;
            return 0;
        }
    }
    return status_field(get_count, status, count);
}

/* _collector.use_mpi_status(capsule, get_count, byte, handle_size, source_at=-1, tag_at=-1,
 * status_size=0) -> bool: have compiled receives read a Status's count with MPI_Get_count (address
 * `get_count`) on MPI_BYTE (handle `byte`, of `handle_size` bytes), the Status's MPI_Status (of
 * `status_size` bytes) found by mpi4py's PyMPIStatus_Get (`capsule`, refused unless it is that), and
 * its source and tag at those byte offsets in it (-1, or not inside it: Get_source, Get_tag).
 * False, and the Status's methods stay, for a handle size other than an int's or a pointer's. */
static PyObject *
py_use_mpi_status(PyObject *Py_UNUSED(module), PyObject *args)
{
    PyObject *capsule;
    unsigned long long address;
    long long byte;
    int size;
    Py_ssize_t source = -1, tag = -1, status_size = 0;
    if (!PyArg_ParseTuple(args, "OKLi|nnn:use_mpi_status", &capsule, &address, &byte, &size, &source, &tag,
                          &status_size))
        return NULL;
    if ((size != 4 && size != (int)sizeof(void *)) || address == 0)
        Py_RETURN_FALSE;
    void *of = PyCapsule_GetPointer(capsule, "MPI_Status *(PyObject *)");   /* mpi4py's, and no other */
    if (of == NULL)
        return NULL;
    status_of = (MPI_Status_of)of;
    mpi_byte = (intptr_t)byte;
    mpi_handle_size = size;
    get_count_fn = (void *)(uintptr_t)address;   /* trusted: MPI_Get_count, as the caller found it */
    /* an int's offset inside the MPI_Status (of status_size bytes), else the Status's methods */
    source_at = source >= 0 && source % 4 == 0 && source + 4 <= status_size ? source : -1;
    tag_at = tag >= 0 && tag % 4 == 0 && tag + 4 <= status_size ? tag : -1;
    Py_RETURN_TRUE;
}

/* Recv(buf, source=ANY_SOURCE, tag=ANY_TAG, status=None); with S_PICKLED recv, whose buf may be left
 * out too (the count is still the Status's: the pickle's bytes) */
static PyObject *
mpi_recv(MpiCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    long long source, tag;
    uint64_t f;
    PyObject *no_buf[1] = {Py_None};
    if (nargs == 0 && kwnames == NULL && self->sends == S_PICKLED) {
        args = no_buf;
        nargs = 1;
    }
    if (kwnames != NULL || wanted(self, args, nargs, 4, &source, &tag, &f) < 0)
        return to_fallback(self, args, nargsf, kwnames);
    PyObject *status = nargs > 3 && args[3] != Py_None ? args[3] : self->status;
    PyObject *source_obj = nargs > 1 ? args[1] : NULL, *tag_obj = nargs > 2 ? args[2] : NULL;
    PyObject *made[2] = {NULL, NULL};
    if (source_obj == NULL && (source_obj = made[0] = PyLong_FromLongLong(source)) == NULL)
        return NULL;
    if (tag_obj == NULL && (tag_obj = made[1] = PyLong_FromLongLong(tag)) == NULL) {
        Py_DECREF(made[0]);
        return NULL;
    }
    PyObject *result = NULL;
    PyObject *call_args[5] = {self->comm, args[0], source_obj, tag_obj, status};
    int on = collecting(self);
    if (on <= 0) {
        if (on == 0)
            result = PyObject_Vectorcall(self->call, call_args, 4 + (nargs > 3), NULL);
        goto done;
    }
    uint64_t want = peer_of(self, source), wanted_tag = (uint64_t)tag & U32;
    int64_t t0 = now(self->offset_ns);
    if (mark_start(self, t0, f, want, wanted_tag, 0) < 0)
        goto done;
    result = PyObject_Vectorcall(self->call, call_args, 5, NULL);
    if (result == NULL) {
        failed(self, f, want, wanted_tag, t0);
        goto done;
    }
    int64_t t1 = now(self->offset_ns);
    /* A receive from a named rank with a named tag matched exactly those: the Status is read for
     * them only when the program left one open (or named MPI.PROC_NULL, whose tag is ANY_TAG). */
    long long got_source = source, got_tag = tag, count;
    int named = source >= 0 && tag >= 0;
    if (set_mark(self, NULL) < 0 || (!named && status_int(self->get_source, status, source_at, &got_source) < 0)
        || (!named && status_int(self->get_tag, status, tag_at, &got_tag) < 0)
        || received_bytes_of(self->get_count, status, &count) < 0
        || record(self, f, peer_of(self, got_source), (uint64_t)got_tag & U32,
                  count < 0 ? 0 : (uint64_t)count < U32 ? (uint64_t)count : U32, t0, t1) < 0)
        Py_CLEAR(result);
done:
    Py_XDECREF(made[0]);
    Py_XDECREF(made[1]);
    return result;
}

/* Sendrecv(sendbuf, dest, sendtag=0, recvbuf=None, source=ANY_SOURCE, recvtag=ANY_TAG, status=None):
 * two records with the call's times, its send half (`op`) and its receive half (`recv_op`: what
 * came, from the Status), marked meanwhile as waiting in the receive. With S_PICKLED, sendrecv
 * (sendobj, ...): the send half's bytes are what mpi4py pickled during the call, the receive
 * half's the Status's (the pickle that came). */
static PyObject *
mpi_sendrecv(MpiCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    long long dest, sendtag = 0, source = self->any_source, recvtag = self->any_tag;
    uint64_t n = 0;
    int pickled = self->sends == S_PICKLED;
    if (kwnames != NULL || nargs < 2 || nargs > 7 || small_int(args[1], &dest) < 0
        || (nargs > 2 && (small_int(args[2], &sendtag) < 0 || sendtag < 0 || (uint64_t)sendtag > U32))
        || (nargs > 4 && small_int(args[4], &source) < 0) || (nargs > 5 && small_int(args[5], &recvtag) < 0)
        || (!pickled && buffer_size(self, args[0], &n) < 0))
        return to_fallback(self, args, nargsf, kwnames);
    PyObject *status = nargs > 6 && args[6] != Py_None ? args[6] : self->status;
    PyObject *made[2] = {NULL, NULL};
    PyObject *call_args[8] = {self->comm, args[0], args[1], nargs > 2 ? args[2] : zero, nargs > 3 ? args[3] : Py_None,
                              nargs > 4 ? args[4] : NULL, nargs > 5 ? args[5] : NULL, status};
    PyObject *result = NULL;
    if ((call_args[5] == NULL && (call_args[5] = made[0] = PyLong_FromLongLong(source)) == NULL)
        || (call_args[6] == NULL && (call_args[6] = made[1] = PyLong_FromLongLong(recvtag)) == NULL))
        goto done;
    int on = collecting(self);
    if (on <= 0) {
        if (on == 0)
            result = PyObject_Vectorcall(self->call, call_args, 8, NULL);
        goto done;
    }
    uint64_t f = self->flags | (source == self->any_source ? self->any_source_flag : 0)
                 | (recvtag == self->any_tag ? self->any_tag_flag : 0);
    uint64_t peer = peer_of(self, dest), want = peer_of(self, source), wanted_tag = (uint64_t)recvtag & U32;
    uint64_t before = 0;
    if (pickled && pickled_so_far(self, &before) < 0)
        goto done;
    int64_t t0 = now(self->offset_ns);
    if (mark_as(self, self->recv_op, t0, f, want, wanted_tag, 0) < 0)   /* waiting in the receive half */
        goto done;
    result = PyObject_Vectorcall(self->call, call_args, 8, NULL);
    if (result == NULL) {   /* as the closure: the receive half's record, failed */
        failed_as(self, self->recv_op, f, want, wanted_tag, t0);
        goto done;
    }
    int64_t t1 = now(self->offset_ns);
    long long got_source, got_tag, count;
    Py_ssize_t index;
    if (set_mark(self, NULL) < 0 || (pickled && pickled_since(self, before, &n) < 0))   /* pickled during the call */
        goto fail;
    uint64_t send_half[8] = {self->op, self->flags, (uint64_t)self->cid, peer, (uint64_t)sendtag, n, (uint64_t)t0,
                             (uint64_t)t1};
    if (record_refused(self->ring, send_half) || ring_append(self->ring, send_half, &index) < 0
        || status_int(self->get_source, status, source_at, &got_source) < 0
        || status_int(self->get_tag, status, tag_at, &got_tag) < 0
        || received_bytes_of(self->get_count, status, &count) < 0)
        goto fail;
    if (record_as(self, self->recv_op, f, peer_of(self, got_source), (uint64_t)got_tag & U32,
                  count < 0 ? 0 : (uint64_t)count < U32 ? (uint64_t)count : U32, t0, t1) < 0)
        goto fail;
    goto done;
fail:
    Py_CLEAR(result);
done:
    Py_XDECREF(made[0]);
    Py_XDECREF(made[1]);
    return result;
}

/* A buffer collective (Barrier, Bcast, Allreduce, Reduce, Gather, ...), or a pickle-form one
 * (S_PICKLED: allreduce, bcast, ...): numbered by the communicator's round counter, which the
 * closure shares. */
static PyObject *
mpi_collective(MpiCall *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    long long root = 0;
    uint64_t n = 0;
    PyObject *stack[16];
    if (kwnames != NULL || nargs + 1 > 16   /* cannot be: collectives take few arguments */
        || (self->root_at >= 0 && self->root_at < nargs && small_int(args[self->root_at], &root) < 0))
        return to_fallback(self, args, nargsf, kwnames);
    /* a rooted send buffer counts at the root only (elsewhere it is often None) */
    int counted = self->sends == S_SEND || (self->sends == S_ROOT && root == self->rank);
    if (counted && (nargs < 1 || buffer_size(self, args[0], &n) < 0))
        return to_fallback(self, args, nargsf, kwnames);
    PyObject *next = PyIter_Next(self->rounds);
    if (next == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "the round counter ended");
        return NULL;
    }
    unsigned long long counted_round = PyLong_AsUnsignedLongLongMask(next);   /* next(rounds) & U32, as the closure */
    Py_DECREF(next);
    if (counted_round == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    uint64_t round = counted_round & U32;
    stack[0] = self->comm;
    for (Py_ssize_t i = 0; i < nargs; i++)
        stack[i + 1] = args[i];
    int on = collecting(self);
    if (on <= 0)
        return on < 0 ? NULL : PyObject_Vectorcall(self->call, stack, nargs + 1, NULL);
    uint64_t peer = self->root_at < 0 ? PEER_NONE : peer_of(self, root);
    uint64_t before = 0;
    if (self->sends == S_PICKLED && pickled_so_far(self, &before) < 0)
        return NULL;
    int64_t t0 = now(self->offset_ns);
    if (mark_start(self, t0, self->flags, peer, round, n) < 0)
        return NULL;
    PyObject *result = PyObject_Vectorcall(self->call, stack, nargs + 1, NULL);
    if (result == NULL)
        return failed(self, self->flags, peer, round, t0);
    int64_t t1 = now(self->offset_ns);
    if (set_mark(self, NULL) < 0 || (self->sends == S_PICKLED && pickled_since(self, before, &n) < 0)
        || record(self, self->flags, peer, round, n, t0, t1) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

#define MAX_PARAMS 8

/* The call's arguments all by position in `stack` (their count; -1 for another form): keyword
 * arguments moved to their parameters' places, and a parameter left out before one given filled
 * with mpi4py's default. An unknown name, one given twice, a required one missing or a signature
 * not known: -1, and the closure takes the call (and raises as mpi4py would). */
static Py_ssize_t
by_position(MpiCall *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames, PyObject **stack)
{
    if (self->params == NULL)
        return -1;
    Py_ssize_t nparams = PyTuple_GET_SIZE(self->params), nkw = PyTuple_GET_SIZE(kwnames);
    Py_ssize_t first_default = nparams - PyTuple_GET_SIZE(self->defaults);
    if (nargs > nparams || nparams > MAX_PARAMS)
        return -1;
    for (Py_ssize_t i = 0; i < nparams; i++)
        stack[i] = i < nargs ? args[i] : NULL;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *name = PyTuple_GET_ITEM(kwnames, k);
        Py_ssize_t at = -1;
        for (Py_ssize_t j = nargs; j < nparams && at < 0; j++) {
            PyObject *param = PyTuple_GET_ITEM(self->params, j);
            if (param == name || PyUnicode_Compare(param, name) == 0)
                at = j;
        }
        if (PyErr_Occurred())
            PyErr_Clear();
        if (at < 0 || stack[at] != NULL)
            return -1;
        stack[at] = args[nargs + k];
    }
    Py_ssize_t n = nparams;
    while (n > 0 && stack[n - 1] == NULL)
        n--;   /* left out at the end: the call gets mpi4py's defaults as a positional call would */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (stack[i] == NULL) {
            if (i < first_default)
                return -1;
            stack[i] = PyTuple_GET_ITEM(self->defaults, i - first_default);
        }
    }
    return n;
}

static PyObject *
mpicall_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    MpiCall *self = (MpiCall *)callable;
    PyObject *stack[MAX_PARAMS];
    if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) != 0) {
        /* comm.Send(buf, dest=1, tag=7), as mpi4py's tutorial writes it: the same compiled path */
        Py_ssize_t n = by_position(self, args, PyVectorcall_NARGS(nargsf), kwnames, stack);
        if (n < 0)
            return to_fallback(self, args, nargsf, kwnames);
        args = stack;
        nargsf = (size_t)n;
    }
    kwnames = NULL;
    switch (self->kind) {
    case K_SEND:
        return mpi_send(self, args, nargsf, kwnames);
    case K_RECV:
        return mpi_recv(self, args, nargsf, kwnames);
    case K_IRECV:
        return mpi_irecv(self, args, nargsf, kwnames);
    case K_SENDRECV:
        return mpi_sendrecv(self, args, nargsf, kwnames);
    default:
        return mpi_collective(self, args, nargsf, kwnames);
    }
}

static PyObject *
mpicall_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"kind", "comm", "call", "fallback", "append", "on", "bound", "spill", "marks",
                            "peers", "status", "rounds", "ndarray", "cid", "op", "flags", "error",
                            "any_source", "any_tag", "any_source_flag", "any_tag_flag", "offset_ns",
                            "sends", "root_at", "rank", "params", "defaults", "request_class", "channel",
                            "recv_op", "dumped", "datatypes", NULL};
    int kind, sends = S_NONE;
    PyObject *comm, *call, *fallback, *append, *on, *bound, *spill, *marks, *peers, *status, *rounds,
        *ndarray;
    Py_ssize_t cid, root_at = -1;
    PyObject *op_arg, *flags_arg, *error_arg, *any_source_flag_arg, *any_tag_flag_arg, *recv_op_arg = zero;
    uint64_t op, flags, error, any_source_flag, any_tag_flag, recv_op;
    long long any_source, any_tag, offset_ns, rank = 0;
    PyObject *params = Py_None, *defaults = Py_None, *request_class = Py_None, *channel = Py_None;
    PyObject *dumped = Py_None, *datatypes = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iOOOOOOOOOOOOnOOOLLOOL|inLOOOOOOO:MpiCall", names, &kind, &comm, &call,
                                     &fallback, &append, &on, &bound, &spill, &marks, &peers, &status, &rounds,
                                     &ndarray, &cid, &op_arg, &flags_arg, &error_arg, &any_source, &any_tag,
                                     &any_source_flag_arg, &any_tag_flag_arg, &offset_ns, &sends, &root_at, &rank,
                                     &params, &defaults, &request_class, &channel, &recv_op_arg, &dumped,
                                     &datatypes))
        return NULL;
    if (datatypes != Py_None) {
        int ok = PyTuple_CheckExact(datatypes);
        for (Py_ssize_t i = 0; ok && i < PyTuple_GET_SIZE(datatypes); i++) {
            PyObject *pair = PyTuple_GET_ITEM(datatypes, i);
            ok = PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2 && PyLong_CheckExact(PyTuple_GET_ITEM(pair, 1));
            if (ok) {
                unsigned long long size = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(pair, 1));
                if (size == (unsigned long long)-1 && PyErr_Occurred())
                    PyErr_Clear();
                ok = size > 0 && size < 0x10000;
            }
        }
        if (!ok) {
            PyErr_SetString(PyExc_TypeError, "datatypes is a tuple of (datatype, size) pairs, each size an int from 1 "
                            "to 65535");
            return NULL;
        }
    }
    /* op codes and flags are the record's u16 fields */
    if (unsigned_arg(op_arg, 0xFFFF, "op", &op) < 0 || unsigned_arg(flags_arg, 0xFFFF, "flags", &flags) < 0
        || unsigned_arg(error_arg, 0xFFFF, "error", &error) < 0
        || unsigned_arg(any_source_flag_arg, 0xFFFF, "any_source_flag", &any_source_flag) < 0
        || unsigned_arg(any_tag_flag_arg, 0xFFFF, "any_tag_flag", &any_tag_flag) < 0
        || unsigned_arg(recv_op_arg, 0xFFFF, "recv_op", &recv_op) < 0 || check_offset(offset_ns) < 0)
        return NULL;
    int posts = request_class != Py_None;
    if ((kind == K_IRECV && !posts) || (posts && ((kind != K_SEND && kind != K_IRECV) || channel == Py_None
                                                  || !PyCallable_Check(request_class)))) {
        PyErr_SetString(PyExc_TypeError, "a nonblocking post (Isend..., kind 0; Irecv, kind 3) needs its request "
                        "class and channel; nothing else takes them");
        return NULL;
    }
    if ((params == Py_None) != (defaults == Py_None)
        || (params != Py_None && (!PyTuple_CheckExact(params) || !PyTuple_CheckExact(defaults)
                                  || PyTuple_GET_SIZE(defaults) > PyTuple_GET_SIZE(params)))) {
        PyErr_SetString(PyExc_TypeError, "params and defaults are both tuples (names, and the defaults of the "
                        "last of them) or both None");
        return NULL;
    }
    if (params != Py_None) {
        for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(params); i++) {
            if (!PyUnicode_Check(PyTuple_GET_ITEM(params, i))) {
                PyErr_SetString(PyExc_TypeError, "params are names (str)");
                return NULL;
            }
        }
    }
    if (kind < K_SEND || kind > K_SENDRECV || sends < S_NONE || sends > S_PICKLED
        || (sends == S_PICKLED && (!PyList_CheckExact(dumped) || PyList_GET_SIZE(dumped) != 1))) {
        PyErr_SetString(PyExc_ValueError, "kind is 0 (send), 1 (recv), 2 (collective), 3 (irecv) or 4 (sendrecv); "
                        "sends 0, 1, 2 or 3 (a pickle form, with `dumped`); recv_op a u16");
        return NULL;
    }
    if (!Py_IS_TYPE(append, &RingAppenderType) || !PyList_CheckExact(on) || PyList_GET_SIZE(on) != 1
        || !PyList_CheckExact(bound) || PyList_GET_SIZE(bound) != 1 || !PyList_CheckExact(marks)
        || !PyList_CheckExact(peers) || !PyType_Check(ndarray) || cid < 0
        || (kind == K_COLLECTIVE && !PyIter_Check(rounds))) {
        PyErr_SetString(PyExc_TypeError, "MpiCall needs a RingAppender, one-item lists for on and bound, lists "
                        "for marks and peers, the ndarray type, and for a collective its round iterator");
        return NULL;
    }
    if ((uint64_t)cid > U32) {
        PyErr_SetString(PyExc_ValueError, "the collector id is a u32");
        return NULL;
    }
    MpiCall *self = (MpiCall *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = mpicall_vectorcall;
    self->mark = PyObject_New(MpiMark, &MpiMarkType);
    if (self->mark == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->kind = kind;
    self->sends = sends;
    self->root_at = root_at;
    self->rank = rank;
    PyObject **slots[] = {&self->comm, &self->call, &self->fallback, (PyObject **)&self->ring, &self->on,
                          &self->bound, &self->spill, &self->marks, &self->peers, &self->status, &self->rounds,
                          (PyObject **)&self->ndarray};
    PyObject *values[] = {comm, call, fallback, append, on, bound, spill, marks, peers, status, rounds, ndarray};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        Py_INCREF(values[i]);
        *slots[i] = values[i];
    }
    if (params != Py_None) {
        Py_INCREF(params);
        Py_INCREF(defaults);
        self->params = params;
        self->defaults = defaults;
    }
    if (request_class != Py_None) {
        Py_INCREF(request_class);
        Py_INCREF(channel);
        self->request_class = request_class;
        self->channel = channel;
        self->info_at = PyType_Check(request_class) ? slot_offset((PyTypeObject *)request_class, s_info) : -1;
        if (self->info_at < 0)
            PyErr_Clear();   /* then set by name */
    }
    PyObject *status_type = (PyObject *)Py_TYPE(status);
    if (copy_peers(self, peers) < 0 || (self->get_count = PyObject_GetAttr(status_type, s_get_count)) == NULL
        || (self->get_source = PyObject_GetAttr(status_type, s_get_source)) == NULL
        || (self->get_tag = PyObject_GetAttr(status_type, s_get_tag)) == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->cid = cid;
    self->op = op;
    self->flags = flags;
    self->error = error;
    self->any_source = any_source;
    self->any_tag = any_tag;
    self->any_source_flag = any_source_flag;
    self->any_tag_flag = any_tag_flag;
    self->offset_ns = offset_ns;
    self->recv_op = recv_op;
    if (sends == S_PICKLED) {
        Py_INCREF(dumped);
        self->dumped = dumped;
    }
    if (datatypes != Py_None) {
        Py_INCREF(datatypes);
        self->datatypes = datatypes;
    }
    return (PyObject *)self;
}

static int
mpicall_traverse(MpiCall *self, visitproc visit, void *arg)
{
    Py_VISIT(self->comm);
    Py_VISIT(self->call);
    Py_VISIT(self->fallback);
    Py_VISIT(self->ring);
    Py_VISIT(self->on);
    Py_VISIT(self->bound);
    Py_VISIT(self->spill);
    Py_VISIT(self->marks);
    Py_VISIT(self->peers);
    Py_VISIT(self->status);
    Py_VISIT(self->rounds);
    Py_VISIT(self->ndarray);
    Py_VISIT(self->get_count);
    Py_VISIT(self->get_source);
    Py_VISIT(self->get_tag);
    Py_VISIT(self->params);
    Py_VISIT(self->defaults);
    Py_VISIT(self->request_class);
    Py_VISIT(self->channel);
    Py_VISIT(self->dumped);
    Py_VISIT(self->datatypes);
    return 0;
}

static int
mpicall_clear(MpiCall *self)
{
    Py_CLEAR(self->comm);
    Py_CLEAR(self->call);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->ring);
    Py_CLEAR(self->on);
    Py_CLEAR(self->bound);
    Py_CLEAR(self->spill);
    Py_CLEAR(self->marks);
    Py_CLEAR(self->peers);
    Py_CLEAR(self->status);
    Py_CLEAR(self->rounds);
    Py_CLEAR(self->ndarray);
    Py_CLEAR(self->mark);
    Py_CLEAR(self->bound_seen);
    Py_CLEAR(self->get_count);
    Py_CLEAR(self->get_source);
    Py_CLEAR(self->get_tag);
    Py_CLEAR(self->params);
    Py_CLEAR(self->defaults);
    Py_CLEAR(self->request_class);
    Py_CLEAR(self->channel);
    Py_CLEAR(self->dumped);
    Py_CLEAR(self->datatypes);
    return 0;
}

static void
mpicall_dealloc(MpiCall *self)
{
    PyObject_GC_UnTrack(self);
    mpicall_clear(self);
    PyMem_Free(self->peer_table);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject MpiCallType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "eventspace._collector.MpiCall",
    .tp_doc = PyDoc_STR("The compiled hot path of an MPI collector closure (eventspace/mpi/collector.py): "
                        "a buffer send, Recv or collective on one communicator; other forms of the "
                        "call go to the closure."),
    .tp_basicsize = sizeof(MpiCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(MpiCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = mpicall_new,
    .tp_dealloc = (destructor)mpicall_dealloc,
    .tp_traverse = (traverseproc)mpicall_traverse,
    .tp_clear = (inquiry)mpicall_clear,
};

/* -- Request.Wait ------------------------------------------------------------------------------
 *
 * RequestWait(call, fallback, request_class, channel_class, op, request_flag, cancelled_flag,
 *             empty_flag, error, receives, status_class, test=False): Wait (or wait; with `test`, Test
 * or test) of the traced Request class (eventspace/mpi/interpose.py); RequestWaitall(the same,
 * outcome=O_*) its class methods on many requests (Waitall, Testall, Waitany, Testany, Waitsome,
 * Testsome and their pickle-form twins):
 * the hot path of its Python method `fallback` (interpose._one, _many), which stays the reference
 * and takes every other case: a request of a channel that does not run compiled, a cancelled one,
 * keyword arguments, a tuple of requests. A method descriptor: request.Wait(status) calls it with
 * the request first; Waitall is bound to the class.
 * It reads the request's info (channel, op, flags, peer, tag, nbytes, t_start) and the channel's
 * slots at their offsets, marks the wait in flight, calls mpi4py's `call`, and appends the
 * request's record (a receive's source, tag and count from the Status) and the Wait's own. */

enum { CH_COMPILED, CH_CID, CH_APPEND, CH_ON, CH_BOUND, CH_SPILL, CH_INFLIGHT, CH_PEERS, CH_STATUS, CH_OFFSET,
       CH_SLOTS };
static const char *channel_slots[CH_SLOTS] = {"compiled", "cid", "append", "on", "bound", "spill", "inflight",
                                              "peers", "status", "offset_ns"};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *call, *fallback;
    PyTypeObject *request_type, *channel_type;
    Py_ssize_t info_at, at[CH_SLOTS];
    uint64_t op, request_flag, cancelled_flag, empty_flag, error;
    uint64_t receives[8];
    int nreceives, all, test;       /* all: Waitall (a class method); test: Test (done when it says) */
    int outcome;                    /* RequestWaitall: how its call's result says which completed (O_*) */
    PyObject *status_class, *get_source, *get_tag, *get_count;   /* MPI.Status and its methods, unbound */
} RequestWait;

/* One record through the channel's appender, then its spill() once the drain's bound is reached. */
static int
channel_append(PyObject **field, const uint64_t v[8])
{
    Py_ssize_t last, bound;
    if (record_refused((RingAppender *)field[CH_APPEND], v) || ring_append((RingAppender *)field[CH_APPEND], v, &last) < 0
        || bound_of(field[CH_BOUND], &bound) < 0)
        return -1;
    return last >= bound ? call_void(field[CH_SPILL]) : 0;
}

/* inflight[cid] = v (a new reference, stolen). */
static int
set_inflight(PyObject **field, Py_ssize_t cid, PyObject *v)
{
    if (cid >= PyList_GET_SIZE(field[CH_INFLIGHT])) {
        Py_DECREF(v);
        PyErr_SetString(PyExc_IndexError, "the node's marks hold no slot for this collector");
        return -1;
    }
    return PyList_SetItem(field[CH_INFLIGHT], cid, v);
}

/* A traced request's post, from its info (channel, op, flags, peer, tag, nbytes, t_start): 1, with
 * the channel's fields in `field`, the op, flags, peer, tag and nbytes in `post`, t_start in
 * `t_post`; 0 for a request the compiled path leaves to Python (not one of ours, its channel not
 * compiled, cancelled, its info not as a post writes it). */
static int
traced_post(RequestWait *self, PyObject *request, PyObject **field, uint64_t post[5], int64_t *t_post)
{
    if (Py_TYPE(request) != self->request_type)
        return 0;
    PyObject *info = *slot(request, self->info_at);
    if (info == NULL || !PyTuple_CheckExact(info) || PyTuple_GET_SIZE(info) != 7
        || Py_TYPE(PyTuple_GET_ITEM(info, 0)) != self->channel_type || !PyLong_CheckExact(PyTuple_GET_ITEM(info, 6)))
        return 0;
    PyObject *ch = PyTuple_GET_ITEM(info, 0);
    for (int i = 0; i < CH_SLOTS; i++) {
        if ((field[i] = *slot(ch, self->at[i])) == NULL)
            return 0;
    }
    for (int i = 0; i < 5; i++) {
        PyObject *v = PyTuple_GET_ITEM(info, i + 1);
        if (!PyLong_CheckExact(v))
            return 0;
        post[i] = PyLong_AsUnsignedLongLongMask(v);
    }
    *t_post = PyLong_AsLongLong(PyTuple_GET_ITEM(info, 6));
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return field[CH_COMPILED] != Py_None && Py_IS_TYPE(field[CH_APPEND], &RingAppenderType)
           && PyList_CheckExact(field[CH_ON]) && PyList_GET_SIZE(field[CH_ON]) == 1
           && PyList_CheckExact(field[CH_BOUND]) && PyList_GET_SIZE(field[CH_BOUND]) == 1
           && PyList_CheckExact(field[CH_INFLIGHT]) && PyList_CheckExact(field[CH_PEERS])
           && PyLong_CheckExact(field[CH_CID]) && PyLong_CheckExact(field[CH_OFFSET])
           && !(post[1] & self->cancelled_flag);
}

/* Whether a traced request is still to be completed with its channel collecting: 1, 0, or -1 with
 * an error set. */
static int
pending(PyObject *request, PyObject **field)
{
    PyObject *switch_on = first_item(field[CH_ON]);
    int on = switch_on == NULL ? -1 : PyObject_IsTrue(switch_on);
    return on > 0 ? PyObject_IsTrue(request) : on;
}

static int
is_receive(RequestWait *self, uint64_t op)
{
    for (int i = 0; i < self->nreceives; i++) {
        if (op == self->receives[i])
            return 1;
    }
    return 0;
}

/* The mark of a completion call under way: waiting, since t0, for the request posted as `post`. */
static int
mark_waiting(RequestWait *self, PyObject **field, Py_ssize_t cid, int64_t t0, const uint64_t post[5])
{
    MpiMark *mark = PyObject_New(MpiMark, &MpiMarkType);
    if (mark == NULL)
        return -1;
    fill_mark(mark, t0, post[0], post[1] | self->request_flag, post[2], post[3], post[4]);
    return set_inflight(field, cid, (PyObject *)mark);
}

/* The completion call failed (as collector._fail): its record with the error flag, `given`
 * requests; then its exception again. */
static PyObject *
completion_failed(RequestWait *self, PyObject **field, Py_ssize_t cid, uint64_t given, int64_t t0, int64_t offset)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    Py_INCREF(zero);
    uint64_t v[8] = {self->op, self->error, (uint64_t)cid, given & U32, 0, 0, (uint64_t)t0, (uint64_t)now(offset)};
    if (set_inflight(field, cid, zero) < 0 || channel_append(field, v) < 0) {
        _PyErr_ChainExceptions(type, value, tb);
        return NULL;
    }
    PyErr_Restore(type, value, tb);
    return NULL;
}

/* The channel's collector id (a u32) and its clock's offset: -1 with an error set for others. */
static int
channel_ids(PyObject **field, Py_ssize_t *cid, int64_t *offset)
{
    *cid = PyLong_AsSsize_t(field[CH_CID]);
    long long at = PyLong_AsLongLong(field[CH_OFFSET]);
    if (PyErr_Occurred())
        return -1;
    if (*cid < 0 || (uint64_t)*cid > U32) {
        PyErr_Format(PyExc_ValueError, "the channel's collector id is %zd, not a u32", *cid);
        return -1;
    }
    *offset = at;
    return check_offset(at);
}

/* The request record of a completed request (collector.request_done): a receive's source, tag
 * and bytes from its Status `st` (not read when None), the post's otherwise. */
static int
request_record(RequestWait *self, PyObject **field, const uint64_t post[5], int64_t t_post, PyObject *st, int64_t t1)
{
    uint64_t peer = post[2], tag = post[3], n = post[4];
    if (st != Py_None && is_receive(self, post[0])) {
        long long source, got_tag, count;
        PyObject *p;
        if (status_int(self->get_source, st, source_at, &source) < 0 || status_int(self->get_tag, st, tag_at, &got_tag) < 0
            || received_bytes_of(self->get_count, st, &count) < 0
            || (p = PySequence_GetItem(field[CH_PEERS], (Py_ssize_t)source)) == NULL)
            return -1;
        peer = PyLong_AsUnsignedLongLongMask(p);
        Py_DECREF(p);
        if (PyErr_Occurred())
            return -1;
        tag = (uint64_t)got_tag & U32;
        n = count < 0 ? 0 : (uint64_t)count < U32 ? (uint64_t)count : U32;
    }
    Py_ssize_t cid;
    int64_t offset;
    if (channel_ids(field, &cid, &offset) < 0)
        return -1;
    uint64_t v[8] = {post[0], post[1] | self->request_flag, (uint64_t)cid, peer, tag, n, (uint64_t)t_post, (uint64_t)t1};
    return channel_append(field, v);
}

/* The completion call's own record (collector.completion_call): given, completed. */
static int
completion_record(RequestWait *self, PyObject **field, Py_ssize_t cid, uint64_t given, uint64_t completed,
                  int64_t t0, int64_t t1)
{
    uint64_t v[8] = {self->op, completed ? 0 : self->empty_flag, (uint64_t)cid, given & U32, completed, 0,
                     (uint64_t)t0, (uint64_t)t1};
    return channel_append(field, v);
}

/* Wait(status=None), wait, Test or test on request args[0] (interpose._one). */
static PyObject *
wait_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    RequestWait *self = (RequestWait *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    PyObject *field[CH_SLOTS];
    uint64_t post[5];
    int64_t t_post;
    if (kwnames != NULL || nargs < 1 || nargs > 2 || !traced_post(self, args[0], field, post, &t_post))
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *request = args[0], *status = nargs > 1 ? args[1] : Py_None;
    /* Sends need no Status (unless cancelled, which Python took): MPI then fills none. */
    PyObject *st = status != Py_None || !is_receive(self, post[0]) ? status : field[CH_STATUS];
    PyObject *call_args[2] = {request, st};
    int active = pending(request, field);
    if (active <= 0)
        return active < 0 ? NULL : PyObject_Vectorcall(self->call, call_args, 2, NULL);
    Py_ssize_t cid;
    int64_t offset;
    if (channel_ids(field, &cid, &offset) < 0)
        return NULL;
    int64_t t0 = now(offset);
    if (mark_waiting(self, field, cid, t0, post) < 0)
        return NULL;
    PyObject *result = PyObject_Vectorcall(self->call, call_args, 2, NULL);
    if (result == NULL)
        return completion_failed(self, field, cid, 1, t0, offset);
    int64_t t1 = now(offset);
    /* Wait completes it; Test says whether it did: a bool (Test), or (flag, object) (test) */
    int done = 1;
    if (self->test && (done = PyObject_IsTrue(PyBool_Check(result) || !PyTuple_Check(result) || PyTuple_GET_SIZE(result) < 1
                                              ? result : PyTuple_GET_ITEM(result, 0))) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    Py_INCREF(zero);
    if (set_inflight(field, cid, zero) < 0 || (done && request_record(self, field, post, t_post, st, t1) < 0)
        || completion_record(self, field, cid, 1, (uint64_t)done, t0, t1) < 0) {
        Py_DECREF(result);
        return NULL;
    }
    return result;
}

/* How a completion call on many requests says which completed (interpose._OUTCOMES): all of them
 * always (Waitall); all or none, its result or its result's first item true (Testall, testall); the
 * index of one, its result or its first item (Waitany, waitany), or the first item where the second
 * is true (Testany, testany); the indices of some, a list or None, its result or its first item
 * (Waitsome and Testsome, waitsome and testsome). */
enum { O_ALWAYS, O_FLAG, O_FLAG_FIRST, O_INDEX, O_INDEX_FIRST, O_FOUND, O_SOME, O_SOME_FIRST, O_KINDS };

/* result[i], or result itself for i < 0: a new reference */
static PyObject *
outcome_item(PyObject *result, Py_ssize_t i)
{
    if (i < 0) {
        Py_INCREF(result);
        return result;
    }
    return PySequence_GetItem(result, i);
}

/* The pending request at index `i` of the call's list: its place among the pending, or -1. */
static Py_ssize_t
pending_at(const Py_ssize_t *index, Py_ssize_t npending, Py_ssize_t i)
{
    for (Py_ssize_t k = 0; k < npending; k++) {
        if (index[k] == i)
            return k;
    }
    return -1;
}

/* The request record of pending request `k`, completed with the Status `used` (at < 0: a call on
 * many requests that fills one, Waitany's), or statuses[at] (used: the statuses, or None). */
static int
completed_record(RequestWait *self, PyObject **fields, const uint64_t *posts, const int64_t *t_posts,
                 Py_ssize_t k, PyObject *used, Py_ssize_t at, int64_t t1)
{
    PyObject *st = at < 0 || used == Py_None ? Py_NewRef(used) : PySequence_GetItem(used, at);
    if (st == NULL)
        return -1;
    int rc = request_record(self, fields + k * CH_SLOTS, posts + k * 5, t_posts[k], st, t1);
    Py_DECREF(st);
    return rc;
}

/* The request records of what a completion call on many requests completed (`result` read as
 * self->outcome says): how many, or -1 with an error set. `used` is the Status (Waitany, Testany) or
 * the statuses (None, or one per request; Waitsome's and Testsome's in the order of the indices). */
static Py_ssize_t
completed_records(RequestWait *self, PyObject *result, PyObject *used, const Py_ssize_t *index, Py_ssize_t npending,
                  PyObject **fields, const uint64_t *posts, const int64_t *t_posts, int64_t t1)
{
    int outcome = self->outcome;
    if (outcome <= O_FLAG_FIRST) {   /* all or none */
        int all = 1;
        if (outcome != O_ALWAYS) {
            PyObject *flag = outcome_item(result, outcome == O_FLAG ? -1 : 0);
            all = flag == NULL ? -1 : PyObject_IsTrue(flag);
            Py_XDECREF(flag);
        }
        if (all <= 0)
            return all;
        for (Py_ssize_t k = 0; k < npending; k++) {
            if (completed_record(self, fields, posts, t_posts, k, used, index[k], t1) < 0)
                return -1;
        }
        return npending;
    }
    if (outcome <= O_FOUND) {   /* one, or none */
        if (outcome == O_FOUND) {
            PyObject *found = outcome_item(result, 1);
            int yes = found == NULL ? -1 : PyObject_IsTrue(found);
            Py_XDECREF(found);
            if (yes <= 0)
                return yes;
        }
        PyObject *said = outcome_item(result, outcome == O_INDEX ? -1 : 0);
        Py_ssize_t i = said == NULL ? -1 : PyLong_AsSsize_t(said);
        Py_XDECREF(said);
        if (i == -1 && PyErr_Occurred())
            return -1;
        Py_ssize_t k = pending_at(index, npending, i);
        if (k < 0)
            return 0;
        return completed_record(self, fields, posts, t_posts, k, used, -1, t1) < 0 ? -1 : 1;
    }
    PyObject *said = outcome_item(result, outcome == O_SOME ? -1 : 0);   /* some: their indices, or None */
    if (said == NULL)
        return -1;
    Py_ssize_t completed = 0, n = said == Py_None ? 0 : PySequence_Size(said);
    for (Py_ssize_t j = 0; j < n && completed >= 0; j++) {
        PyObject *item = PySequence_GetItem(said, j);
        Py_ssize_t i = item == NULL ? -1 : PyLong_AsSsize_t(item);
        Py_XDECREF(item);
        if (i == -1 && PyErr_Occurred()) {
            completed = -1;
            break;
        }
        Py_ssize_t k = pending_at(index, npending, i);
        if (k < 0)
            continue;
        completed = completed_record(self, fields, posts, t_posts, k, used, j, t1) < 0 ? -1 : completed + 1;
    }
    Py_DECREF(said);
    return n < 0 ? -1 : completed;
}

/* Waitall(requests, statuses=None), Waitany(requests, status=None), ... (class methods: args[0] is
 * the class; interpose._many): the traced requests among `requests` that the call completed each get
 * their request record, the call one record on the channel of the first traced one. A request
 * Python would take makes Python take the call. */
static PyObject *
waitall_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    RequestWait *self = (RequestWait *)callable;
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    if (kwnames != NULL || nargs < 2 || nargs > 3 || !PyList_CheckExact(args[1]))
        return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
    PyObject *requests = args[1], *statuses = nargs > 2 ? args[2] : Py_None;
    int any = self->outcome >= O_INDEX && self->outcome <= O_FOUND;
    Py_ssize_t n = PyList_GET_SIZE(requests), npending = 0;
    /* per traced request still to complete: its post, t_start, channel fields and index, in one
     * block (a word each, the 8-byte ones first), on the stack for the few requests most calls give */
    enum { WORDS = 1 + CH_SLOTS + 5 + 1, ON_STACK = 8 };
    uint64_t local[WORDS * ON_STACK];
    uint64_t *block = n + 1 <= ON_STACK ? local : PyMem_Malloc(sizeof(uint64_t) * WORDS * (size_t)(n + 1));
    PyObject *used = NULL, *result = NULL;
    int receives = 0, leave = 0;
    if (block == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    uint64_t *posts = block;
    int64_t *t_posts = (int64_t *)(posts + (n + 1) * 5);
    PyObject **fields = (PyObject **)(t_posts + n + 1);
    Py_ssize_t *index = (Py_ssize_t *)(fields + (n + 1) * CH_SLOTS);
    for (Py_ssize_t i = 0; i < n && !leave; i++) {
        PyObject *request = PyList_GET_ITEM(requests, i), **field = fields + npending * CH_SLOTS;
        uint64_t *post = posts + npending * 5;
        if (!traced_post(self, request, field, post, t_posts + npending)) {
            /* not ours: MPI completes it, nothing to record; ours but for Python: Python takes the call */
            leave = Py_TYPE(request) == self->request_type && *slot(request, self->info_at) != NULL;
            continue;
        }
        int active = pending(request, field);
        if (active < 0)
            goto done;
        if (active) {
            index[npending++] = i;
            receives |= is_receive(self, post[0]);
        }
    }
    if (leave) {
        result = PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
        goto done;
    }
    if (npending == 0) {
        PyObject *call_args[2] = {requests, statuses};
        result = PyObject_Vectorcall(self->call, call_args, 2, NULL);
        goto done;
    }
    if (statuses == Py_None && receives) {   /* to read the receives' actual sources */
        if (any) {   /* the one that completes */
            if ((used = PyObject_CallNoArgs(self->status_class)) == NULL)
                goto done;
        } else {
            if ((used = PyList_New(n)) == NULL)
                goto done;
            for (Py_ssize_t i = 0; i < n; i++) {
                PyObject *st = PyObject_CallNoArgs(self->status_class);
                if (st == NULL)
                    goto done;
                PyList_SET_ITEM(used, i, st);
            }
        }
    } else {
        Py_INCREF(statuses);
        used = statuses;
    }
    PyObject **first = fields;
    Py_ssize_t cid;
    int64_t offset;
    if (channel_ids(first, &cid, &offset) < 0)
        goto done;
    int64_t t0 = now(offset);
    if (mark_waiting(self, first, cid, t0, posts) < 0)
        goto done;
    PyObject *call_args[2] = {requests, used};
    result = PyObject_Vectorcall(self->call, call_args, 2, NULL);
    if (result == NULL) {
        completion_failed(self, first, cid, (uint64_t)n, t0, offset);
        goto done;
    }
    int64_t t1 = now(offset);
    Py_INCREF(zero);
    if (set_inflight(first, cid, zero) < 0)
        goto failed;
    Py_ssize_t completed = completed_records(self, result, used, index, npending, fields, posts, t_posts, t1);
    if (completed < 0 || completion_record(self, first, cid, (uint64_t)n, (uint64_t)completed, t0, t1) < 0)
        goto failed;
    goto done;
failed:
    Py_CLEAR(result);
done:
    Py_XDECREF(used);
    if (block != local)
        PyMem_Free(block);
    return result;
}

static PyObject *
wait_descr_get(PyObject *self, PyObject *obj, PyObject *type)
{
    if (((RequestWait *)self)->all)   /* RequestWaitall, a class method: bound to the class */
        return PyMethod_New(self, type != NULL ? type : (PyObject *)Py_TYPE(obj));
    if (obj == NULL || obj == Py_None) {
        Py_INCREF(self);
        return self;
    }
    return PyMethod_New(self, obj);
}

/* Waitall's type: RequestWait's, named apart and no method descriptor (one read from its class must
 * be itself; a class method is bound to the class), copied from it at module start. */
static PyTypeObject RequestWaitallType;

static PyObject *
wait_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"call", "fallback", "request_class", "channel_class", "op", "request_flag",
                            "cancelled_flag", "empty_flag", "error", "receives", "status_class", "test", "outcome",
                            NULL};
    PyObject *call, *fallback, *request_class, *channel_class, *receives, *status_class;
    PyObject *u16_args[5];
    uint64_t u16[5];   /* op, request_flag, cancelled_flag, empty_flag, error: the record's u16 fields */
    static const char *u16_names[5] = {"op", "request_flag", "cancelled_flag", "empty_flag", "error"};
    int all = PyType_IsSubtype(type, &RequestWaitallType);
    int test = 0, outcome = O_ALWAYS;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOOOOO|pi:RequestWait", names, &call, &fallback, &request_class,
                                     &channel_class, &u16_args[0], &u16_args[1], &u16_args[2], &u16_args[3],
                                     &u16_args[4], &receives, &status_class, &test, &outcome))
        return NULL;
    for (int i = 0; i < 5; i++) {
        if (unsigned_arg(u16_args[i], 0xFFFF, u16_names[i], &u16[i]) < 0)
            return NULL;
    }
    uint64_t op = u16[0], request_flag = u16[1], cancelled_flag = u16[2], empty_flag = u16[3], error = u16[4];
    if (outcome < 0 || outcome >= O_KINDS) {
        PyErr_Format(PyExc_ValueError, "RequestWaitall's outcome is one of 0..%d, got %d", O_KINDS - 1, outcome);
        return NULL;
    }
    if (!PyType_Check(request_class) || !PyType_Check(channel_class) || !PyTuple_CheckExact(receives)
        || PyTuple_GET_SIZE(receives) > 8 || !PyType_Check(status_class)) {
        PyErr_SetString(PyExc_TypeError, "RequestWait needs the request, channel and status classes and a tuple "
                        "of at most 8 receive ops");
        return NULL;
    }
    RequestWait *self = (RequestWait *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = all ? waitall_vectorcall : wait_vectorcall;
    self->all = all;
    self->test = test && !all;
    self->outcome = all ? outcome : O_ALWAYS;
    if ((self->info_at = slot_offset((PyTypeObject *)request_class, s_info)) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    for (int i = 0; i < CH_SLOTS; i++) {
        PyObject *name = PyUnicode_InternFromString(channel_slots[i]);
        self->at[i] = name == NULL ? -1 : slot_offset((PyTypeObject *)channel_class, name);
        Py_XDECREF(name);
        if (self->at[i] < 0) {
            Py_DECREF(self);
            return NULL;
        }
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(receives); i++)
        self->receives[i] = PyLong_AsUnsignedLongLongMask(PyTuple_GET_ITEM(receives, i));
    self->nreceives = (int)PyTuple_GET_SIZE(receives);
    PyObject **slots[] = {&self->call, &self->fallback, (PyObject **)&self->request_type,
                          (PyObject **)&self->channel_type, &self->status_class};
    PyObject *values[] = {call, fallback, request_class, channel_class, status_class};
    for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
        Py_INCREF(values[i]);
        *slots[i] = values[i];
    }
    self->op = op;
    self->request_flag = request_flag;
    self->cancelled_flag = cancelled_flag;
    self->empty_flag = empty_flag;
    self->error = error;
    if (PyErr_Occurred() || (self->get_count = PyObject_GetAttr(status_class, s_get_count)) == NULL
        || (self->get_source = PyObject_GetAttr(status_class, s_get_source)) == NULL
        || (self->get_tag = PyObject_GetAttr(status_class, s_get_tag)) == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
wait_traverse(RequestWait *self, visitproc visit, void *arg)
{
    Py_VISIT(self->call);
    Py_VISIT(self->fallback);
    Py_VISIT(self->request_type);
    Py_VISIT(self->channel_type);
    Py_VISIT(self->status_class);
    Py_VISIT(self->get_count);
    Py_VISIT(self->get_source);
    Py_VISIT(self->get_tag);
    return 0;
}

static int
wait_clear(RequestWait *self)
{
    Py_CLEAR(self->call);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->request_type);
    Py_CLEAR(self->channel_type);
    Py_CLEAR(self->status_class);
    Py_CLEAR(self->get_count);
    Py_CLEAR(self->get_source);
    Py_CLEAR(self->get_tag);
    return 0;
}

static void
wait_dealloc(RequestWait *self)
{
    PyObject_GC_UnTrack(self);
    wait_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject RequestWaitType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "eventspace._collector.RequestWait",
    .tp_doc = PyDoc_STR("The compiled Wait of the traced Request class (eventspace/mpi/interpose.py)."),
    .tp_basicsize = sizeof(RequestWait),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_vectorcall_offset = offsetof(RequestWait, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_descr_get = wait_descr_get,
    .tp_new = wait_new,
    .tp_dealloc = (destructor)wait_dealloc,
    .tp_traverse = (traverseproc)wait_traverse,
    .tp_clear = (inquiry)wait_clear,
};


/* -- the module ----------------------------------------------------------------------------- */

static PyMethodDef functions[] = {
    {"clock_ns", py_clock_ns, METH_NOARGS, "clock_ns() -> int: the collectors' clock (CLOCK_MONOTONIC, ns)"},
    {"use_mpi_status", py_use_mpi_status, METH_VARARGS,
     "use_mpi_status(capsule, get_count, byte, handle_size, source_at=-1, tag_at=-1, status_size=0) -> bool: "
     "receives read counts with MPI_Get_count"},
    {"clock_source", py_clock_source, METH_NOARGS,
     "clock_source() -> str: 'tsc' (the TSC, scaled to CLOCK_MONOTONIC) or 'clock_gettime'"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "eventspace._collector",
    .m_doc = "The compiled event collector (see eventspace/collector.py, which holds the pure reference).",
    .m_size = -1,
    .m_methods = functions,
};

PyMODINIT_FUNC
PyInit__collector(void)
{
    struct { PyObject **slot; const char *text; } strings[] = {
        {&s_last, "_last"}, {&s_first, "_first"}, {&s_sleepers, "_sleepers"}, {&s_parked, "_parked"},
        {&s_signal_change, "_signal_change"}, {&s_template, "template"}, {&s_mismatch, "_mismatch"},
        {&s_ring, "_ring"}, {&s_cap, "_cap"}, {&s_size, "_size"}, {&s_keep, "keep"}, {&s_mutex, "mutex"},
        {&s_acquire, "acquire"}, {&s_release, "release"}, {&s_nbytes, "nbytes"}, {&s_get_count, "Get_count"},
        {&s_get_source, "Get_source"}, {&s_get_tag, "Get_tag"}, {&s_info, "info"},
    };
    for (size_t i = 0; i < sizeof(strings) / sizeof(strings[0]); i++) {
        if (*strings[i].slot == NULL && (*strings[i].slot = PyUnicode_InternFromString(strings[i].text)) == NULL)
            return NULL;
    }
    if (u32_mask == NULL && (u32_mask = PyLong_FromUnsignedLongLong(U32)) == NULL)
        return NULL;
    if (zero == NULL && (zero = PyLong_FromLong(0)) == NULL)
        return NULL;
    clk.tsc = kernel_clock_is_tsc();
    if (RequestWaitallType.tp_name == NULL) {   /* copied before RequestWait is readied */
        RequestWaitallType = RequestWaitType;
        RequestWaitallType.tp_name = "eventspace._collector.RequestWaitall";
        RequestWaitallType.tp_doc = "The compiled Waitall, Testall, Waitany, ... of the traced Request class "
            "(eventspace/mpi/interpose.py).";
        RequestWaitallType.tp_flags &= ~Py_TPFLAGS_METHOD_DESCRIPTOR;
    }
    if (PyType_Ready(&RingAppenderType) < 0 || PyType_Ready(&CollectType) < 0 || PyType_Ready(&MpiCallType) < 0
        || PyType_Ready(&MpiMarkType) < 0 || PyType_Ready(&TypedSizeType) < 0 || PyType_Ready(&RequestWaitType) < 0
        || PyType_Ready(&RequestWaitallType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "RECORD_SIZE", RECORD) < 0
        || PyModule_AddObjectRef(m, "RingAppender", (PyObject *)&RingAppenderType) < 0
        || PyModule_AddObjectRef(m, "Collect", (PyObject *)&CollectType) < 0
        || PyModule_AddObjectRef(m, "MpiCall", (PyObject *)&MpiCallType) < 0
        || PyModule_AddObjectRef(m, "TypedSize", (PyObject *)&TypedSizeType) < 0
        || PyModule_AddObjectRef(m, "RequestWait", (PyObject *)&RequestWaitType) < 0
        || PyModule_AddObjectRef(m, "RequestWaitall", (PyObject *)&RequestWaitallType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
