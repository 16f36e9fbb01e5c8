/* Part of the compiled collector (module.c includes it after clock.c): RingAppender, one trace record
 * appended to a pastset binary element's ring.
 *
 * Relies on pastset's ring appender contract (pastset/ring_c/pastset_ring.h, version
 * PASTSET_RING_VERSION) and nothing else of pastset: the element hands out its appender
 * (`element.appender(single_writer)`, public), whose `contract` capsule holds the ring, its cursors
 * and pastset's own append, which this calls with a packed record. The append, its locking and its
 * waking of waiters are pastset's, written once there; this only checks and packs the fields.
 */

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    const PastsetRing *ring;     /* the contract: what an append reads first */
    PyObject *contract;          /* the capsule holding it (and, through it, the element) */
} RingAppender;

static PyTypeObject RingAppenderType;

/* Append one record: 0 with its index in *index, or -1 with an exception set. */
static inline int
ring_append(RingAppender *self, const uint64_t v[8], Py_ssize_t *index)
{
    char record[RECORD];
    pack(record, v);
    return self->ring->append(self->ring, record, index);
}

/* Raise the element's TemplateMismatch for `values` (as pastset's append does). */
static void
raise_mismatch(RingAppender *self, PyObject *const *values, Py_ssize_t n)
{
    PyObject *tuple = PyTuple_New(n);
    if (tuple == NULL)
        return;
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_INCREF(values[i]);
        PyTuple_SET_ITEM(tuple, i, values[i]);
    }
    self->ring->refuse(self->ring, tuple);
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
            raise_mismatch(self, args, 8);
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
    PyObject *append = PyObject_CallMethod(element, "appender", "O", single_writer ? Py_True : Py_False);
    if (append == NULL)
        return NULL;
    PyObject *contract = PyObject_GetAttrString(append, "contract");
    Py_DECREF(append);
    if (contract == NULL || !PyCapsule_IsValid(contract, PASTSET_RING_CAPSULE)) {
        Py_XDECREF(contract);
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "RingAppender needs an element whose appender hands out pastset's ring "
                        "contract (" PASTSET_RING_CAPSULE "): a binary element bounded by keep alone, with "
                        "pastset's compiled part built");
        return NULL;
    }
    const PastsetRing *ring = PyCapsule_GetPointer(contract, PASTSET_RING_CAPSULE);
    if (ring->version != PASTSET_RING_VERSION || ring->record_size != RECORD) {
        PyErr_Format(PyExc_ValueError, "RingAppender needs pastset's ring contract version %d for %d-byte records, "
                     "not version %u for %zd-byte ones", PASTSET_RING_VERSION, RECORD, ring->version,
                     ring->record_size);
        Py_DECREF(contract);
        return NULL;
    }
    RingAppender *self = (RingAppender *)type->tp_alloc(type, 0);
    if (self == NULL) {
        Py_DECREF(contract);
        return NULL;
    }
    self->vectorcall = appender_vectorcall;
    self->ring = ring;
    self->contract = contract;
    return (PyObject *)self;
}

static void
appender_dealloc(RingAppender *self)
{
    PyObject_GC_UnTrack(self);
    Py_CLEAR(self->contract);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
appender_traverse(RingAppender *self, visitproc visit, void *arg)
{
    Py_VISIT(self->contract);
    return 0;
}

static PyTypeObject RingAppenderType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "eventspace._collector.RingAppender",
    .tp_doc = PyDoc_STR("RingAppender(element, single_writer=False): append(op, flags, collector, element, "
                        "arg, nbytes, t_start, t_end) -> index, into a trace element's ring, through "
                        "pastset's ring appender contract (pastset/ring_c/pastset_ring.h)."),
    .tp_basicsize = sizeof(RingAppender),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(RingAppender, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = appender_new,
    .tp_dealloc = (destructor)appender_dealloc,
    .tp_traverse = (traverseproc)appender_traverse,
};
