/* Part of the compiled collector (module.c includes it after clock.c). */

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

