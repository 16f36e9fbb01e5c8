/* Part of the compiled collector (module.c includes it after collect.c): MpiCall's type, its row of the
 * call table, marks, and the readers of an MPI call's arguments (buffers, datatypes, peers, statuses),
 * used by mpi_call.c.
 *
 * Relies on: record.h (the record's fields), clock.c (now), appender.c (RingAppender, ring_append,
 * raise_mismatch), table.c (the collector's TableSlot: switch, in-flight start, mark, drain bound);
 * from Python, the row as eventspace/mpi/collector.py's CallSpec and its extractor say it (compiled_call),
 * its THREAD_STATUS (a threading.local whose `status` is each thread's MPI.Status), and mpi4py's
 * public C API function PyMPIStatus_Get, handed over as its capsule (eventspace/mpi/mpi4py_access.py;
 * use_mpi_status checks its signature as mpi4py.h does).
 */

/* -- PickleCount ---------------------------------------------------------------------------- */

/* Bytes mpi4py has pickled in this thread: interpose.count_pickled's hook adds each pickle's size to
 * `total`, and a pickle-form call's bytes are the growth of its own thread's count while it runs,
 * whatever other threads (an MPI_THREAD_MULTIPLE program's) pickle meanwhile. One count per thread,
 * a C thread-local that MpiCall reads in place; every PickleCount is a view of the same counts.
 * eventspace/mpi/collector.py's PickleCount (a threading.local) is its Python reference. */
static _Thread_local uint64_t pickled_here;

static PyObject *
pickle_count_get(PyObject *self, void *closure)
{
    return PyLong_FromUnsignedLongLong(pickled_here);
}

static int
pickle_count_set(PyObject *self, PyObject *value, void *closure)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a PickleCount's total is kept for every thread: it cannot be deleted");
        return -1;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(value);
    if (v == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    pickled_here = v;
    return 0;
}

static PyGetSetDef pickle_count_getset[] = {
    {"total", pickle_count_get, pickle_count_set, "bytes mpi4py has pickled in the calling thread", NULL},
    {NULL},
};

/* The pickle hook PickleCount.counted(dumps) makes: dumps called with what it is given, the size of
 * what it returns added to the calling thread's count (as the Python reference's closure does, with
 * no Python frame and no attribute lookup of its own). */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *dumps;
} CountedDumps;

static PyObject *
counted_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *data = PyObject_Vectorcall(((CountedDumps *)callable)->dumps, args, nargsf, kwnames);
    if (data == NULL)
        return NULL;
    Py_ssize_t n = PyBytes_CheckExact(data) ? PyBytes_GET_SIZE(data) : PyObject_Size(data);
    if (n < 0) {
        Py_DECREF(data);
        return NULL;
    }
    pickled_here += (uint64_t)n;
    return data;
}

static void
counted_dealloc(CountedDumps *self)
{
    Py_XDECREF(self->dumps);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject CountedDumpsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "eventspace._collector.CountedDumps",
    .tp_doc = PyDoc_STR("dumps, counting what it pickles into the calling thread's PickleCount."),
    .tp_basicsize = sizeof(CountedDumps),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(CountedDumps, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_dealloc = (destructor)counted_dealloc,
};

static PyObject *
pickle_count_counted(PyObject *self, PyObject *dumps)
{
    if (!PyCallable_Check(dumps)) {
        PyErr_SetString(PyExc_TypeError, "counted(dumps): dumps is what pickles (pickle.dumps)");
        return NULL;
    }
    CountedDumps *counted = PyObject_New(CountedDumps, &CountedDumpsType);
    if (counted == NULL)
        return NULL;
    counted->vectorcall = counted_vectorcall;
    Py_INCREF(dumps);
    counted->dumps = dumps;
    return (PyObject *)counted;
}

static PyMethodDef pickle_count_methods[] = {
    {"counted", pickle_count_counted, METH_O,
     "counted(dumps) -> dumps, adding the size of each pickle it makes to the calling thread's count"},
    {NULL},
};

static PyTypeObject PickleCountType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "eventspace._collector.PickleCount",
    .tp_doc = PyDoc_STR("PickleCount(): `total`, the bytes mpi4py has pickled in the calling thread."),
    .tp_basicsize = sizeof(PyObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = PyType_GenericNew,
    .tp_getset = pickle_count_getset,
    .tp_methods = pickle_count_methods,
};

/* -- MpiCall -------------------------------------------------------------------------------- */

/* The hot path of one MPI collector closure (eventspace/mpi/collector.py, traced_method), for the
 * calls a program makes in its inner loops: one generic routine (mpi_call.c, mpi_traced) that
 * applies the call's row of the call table, read once when the MpiCall is made: where its peer,
 * tag, source, tag wanted and Status are among its arguments, how its bytes are read, what its
 * record holds, whether it posts a request. It handles the common form of the call (positional
 * arguments; a numpy array, bytes or bytearray where bytes are counted; int ranks and tags) and
 * writes exactly what the closure writes: the mark and start in its slot of the node's collector
 * table while the call runs, then the record, then spill() when the slot's drain bound is reached.
 * Any other form of the call goes to the closure (`fallback`), which stays the reference. */

/* What the record holds (collector.py: ASKED, RECEIVED, SENT_RECEIVED) */
enum { H_ASKED = 0, H_RECEIVED = 1, H_SENT_RECEIVED = 2 };
/* How its bytes are read: none, the buffer (argument 0), the buffer at the root only, what mpi4py
 * pickled during the call (collector.py: _COMPILED_SENDS) */
enum { S_NONE = 0, S_SEND = 1, S_ROOT = 2, S_PICKLED = 3 };

/* A row of the call table, as the MpiCall reads it: its arguments' places (-1: it has none) */
typedef struct {
    Py_ssize_t least, most;       /* positional arguments; most -1: any number, passed on as given */
    Py_ssize_t peer_at;           /* the destination, or a collective's root (0 when left out) */
    Py_ssize_t tag_at;            /* the tag sent (0 when left out; 0..2**32-1) */
    Py_ssize_t source_at, recv_tag_at;   /* the source and tag wanted (ANY_SOURCE, ANY_TAG when left out) */
    Py_ssize_t status_at;         /* the Status (the collector's own when left out or None) */
    int holds, sends, rounds;     /* H_*, S_*, a collective numbered by the round counter */
} CallRow;
#define PEER_NONE 0xFFFFFFFFull

/* An MpiCall's mark: what a Mark of eventspace.space holds after its start (op, flags, element,
 * arg, nbytes), as a sequence of five ints, rewritten in place by each call (no allocation on the
 * hot path); it stands in its slot's marks (eventspace/table.py, Page) while the slot's start says
 * a call runs. */
typedef struct {
    PyObject_HEAD
    uint64_t fields[5];
} MpiMark;

static Py_ssize_t
mark_length(PyObject *self)
{
    return 5;
}

static PyObject *
mark_item(PyObject *self, Py_ssize_t i)
{
    MpiMark *m = (MpiMark *)self;
    if (i >= 0 && i < 5)
        return PyLong_FromUnsignedLongLong(m->fields[i]);
    PyErr_SetString(PyExc_IndexError, "a mark has five fields");
    return NULL;
}

static PySequenceMethods mark_sequence = {.sq_length = mark_length, .sq_item = mark_item};

static PyTypeObject MpiMarkType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "eventspace._collector.MpiMark",
    .tp_doc = PyDoc_STR("(op, flags, element, arg, nbytes) of the MPI call under way."),
    .tp_basicsize = sizeof(MpiMark),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_as_sequence = &mark_sequence,
};

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    MpiMark *mark;
    CallRow row;
    long long rank;               /* this rank in the communicator (is it the root?) */
    PyObject *comm, *call, *fallback;
    PyObject *any_source_int, *any_tag_int;   /* ANY_SOURCE and ANY_TAG, for arguments left out */
    RingAppender *ring;
    const volatile char *on;      /* the switch, in-flight start and drain bound of its TableSlot */
    volatile int64_t *start, *bound;
    TableSlot *slot;
    PyObject *spill, *peers, *status, *rounds;
    unsigned long owner;          /* the thread that made the collector, whose receives read `status` */
    PyObject *statuses;           /* THREAD_STATUS: any other thread's Status (thread_status) */
    uint32_t *peer_table;         /* peers, as u32s (peer_of) */
    Py_ssize_t npeers;
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

static void
fill_mark(MpiMark *m, uint64_t op, uint64_t flags, uint64_t peer, uint64_t arg, uint64_t n)
{
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
    fill_mark(self->mark, op, flags, peer, arg, n);
    return slot_mark(self->slot, (PyObject *)self->mark, t0);
}

static int
mark_start(MpiCall *self, int64_t t0, uint64_t flags, uint64_t peer, uint64_t arg, uint64_t n)
{
    return mark_as(self, self->op, t0, flags, peer, arg, n);
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
        raise_mismatch(ring, values, 8);
    while (i-- > 0)
        Py_DECREF(values[i]);
    return 1;
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
    return last >= *self->bound ? call_void(self->spill) : 0;
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
    *self->start = 0;
    if (record_as(self, op, flags | self->error, peer, arg, 0, t0, now(self->offset_ns)) < 0) {
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

static inline int
collecting(MpiCall *self)
{
    return *self->on != 0;
}

static PyObject *s_info, *s_status;

/* What mpi4py pickled in this thread since `before` (pickled_here before a call), as a record's u32 nbytes. */
static inline uint64_t
pickled_since(uint64_t before)
{
    return pickled_here - before < U32 ? pickled_here - before : U32;
}

/* The Status a traced receive reads what came with where the program gives none: `own` (its
 * collector's) in the thread that made the collector (`owner`), else the calling thread's own
 * (`statuses`, THREAD_STATUS: a threading.local), never one another thread's receive fills
 * meanwhile. Borrowed: `statuses` keeps each thread's Status for the thread's life. NULL with an
 * error set. */
static PyObject *
thread_status(PyObject *own, unsigned long owner, PyObject *statuses)
{
    if (PyThread_get_thread_ident() == owner)
        return own;
    PyObject *st = PyObject_GetAttr(statuses, s_status);
    Py_XDECREF(st);
    return st;
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

