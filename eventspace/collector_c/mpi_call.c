/* Part of the compiled collector (module.c includes it after mpi_arguments.c): MpiCall's one routine,
 * `mpi_traced`, which applies the call's row (CallRow) to a call; the placing of keyword arguments; the
 * type. Relies on mpi_arguments.c (the row, the readers of arguments, marks, records) and on the row
 * being the one eventspace/mpi/collector.py's closure applies (compiled_call makes it from the CallSpec). */

#define MAX_PARAMS 8

/* The round of a collective: next(rounds) & U32, as the closure counts it. */
static int
next_round(MpiCall *self, uint64_t *round)
{
    PyObject *next = PyIter_Next(self->rounds);
    if (next == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "the round counter ended");
        return -1;
    }
    unsigned long long counted = PyLong_AsUnsignedLongLongMask(next);
    Py_DECREF(next);
    if (counted == (unsigned long long)-1 && PyErr_Occurred())
        return -1;
    *round = counted & U32;
    return 0;
}

/* An int argument at `at` among `args` into *out (left as it is where the call leaves it out): 0, or
 * -1 for another form (no int, or out of range). */
static int
int_argument(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t at, long long *out)
{
    return at < 0 || at >= nargs ? 0 : small_int(args[at], out);
}

/* The call, as its row says (see CallRow): Send, Isend, Recv, Irecv, Sendrecv, the collectives, and
 * their pickle forms. Its arguments by position (mpicall_vectorcall has placed keywords); `holds` is
 * row->holds, given as a constant by mpi_traced so that each kind of record gets its own copy. */
static Py_ALWAYS_INLINE inline PyObject *
traced_as(MpiCall *self, PyObject *const *args, Py_ssize_t nargs, const int holds)
{
    const CallRow *row = &self->row;
    long long peer_rank = 0, tag = 0, source = self->any_source, recv_tag = self->any_tag;
    uint64_t n = 0, round = 0;
    PyObject *stack[MAX_PARAMS + 1];
    if (nargs < row->least || (row->most >= 0 && nargs > row->most) || nargs > MAX_PARAMS
        || int_argument(args, nargs, row->peer_at, &peer_rank) < 0
        || int_argument(args, nargs, row->tag_at, &tag) < 0 || tag < 0 || (uint64_t)tag > U32
        || int_argument(args, nargs, row->source_at, &source) < 0
        || int_argument(args, nargs, row->recv_tag_at, &recv_tag) < 0)
        return to_fallback(self, args, (size_t)nargs, NULL);
    /* a rooted send buffer counts at the root only (elsewhere it is often None) */
    int counted = row->sends == S_SEND || (row->sends == S_ROOT && peer_rank == self->rank);
    if (counted && (nargs < 1 || buffer_size(self, args[0], &n) < 0))
        return to_fallback(self, args, (size_t)nargs, NULL);
    if (row->rounds && next_round(self, &round) < 0)   /* counted even while switched off */
        return NULL;
    stack[0] = self->comm;
    for (Py_ssize_t i = 0; i < nargs; i++)
        stack[i + 1] = args[i];
    if (!collecting(self))
        return PyObject_Vectorcall(self->call, stack, (size_t)nargs + 1, NULL);
    /* the arguments left out, as the closure passes them: the defaults its reader has */
    Py_ssize_t given = row->most >= 0 ? row->most : nargs;
    for (Py_ssize_t i = nargs; i < given; i++) {
        stack[i + 1] = i == row->tag_at ? zero : i == row->source_at ? self->any_source_int
                       : i == row->recv_tag_at ? self->any_tag_int : Py_None;
    }
    PyObject *status = NULL;
    if (row->status_at >= 0) {
        if (stack[row->status_at + 1] == Py_None
            && (stack[row->status_at + 1] = thread_status(self->status, self->owner, self->statuses)) == NULL)
            return NULL;
        status = stack[row->status_at + 1];
    }
    uint64_t f = self->flags, want = PEER_NONE, wanted_tag = 0;
    if (row->source_at >= 0) {
        f |= (source == self->any_source ? self->any_source_flag : 0) | (recv_tag == self->any_tag ? self->any_tag_flag : 0);
        want = peer_of(self, source);
        wanted_tag = (uint64_t)recv_tag & U32;
    }
    uint64_t peer = row->peer_at >= 0 ? peer_of(self, peer_rank) : want;
    uint64_t arg = row->rounds ? round : row->tag_at >= 0 ? (uint64_t)tag : wanted_tag;
    /* the mark (and the record of a failure): what was asked; a receive's, what it waits for */
    const int asked = holds == H_ASKED;
    uint64_t mark_op = holds == H_SENT_RECEIVED ? self->recv_op : self->op;
    uint64_t mark_peer = asked ? peer : want, mark_arg = asked ? arg : wanted_tag, mark_n = asked ? n : 0;
    uint64_t before = row->sends == S_PICKLED ? pickled_here : 0;
    int64_t t0 = now(self->offset_ns);
    if (mark_as(self, mark_op, t0, f, mark_peer, mark_arg, mark_n) < 0)
        return NULL;
    PyObject *result = PyObject_Vectorcall(self->call, stack, (size_t)given + 1, NULL);
    if (result == NULL)
        return failed_as(self, mark_op, f, mark_peer, mark_arg, t0);
    int64_t t1 = now(self->offset_ns);
    *self->start = 0;
    if (row->sends == S_PICKLED)
        n = pickled_since(before);
    if (asked) {
        /* a request not wrapped: the call failed, as the closure says */
        if (self->request_class != NULL && (result = posted(self, result, f, peer, arg, n, t0)) == NULL)
            return failed_as(self, mark_op, f, mark_peer, mark_arg, t0);
        if (record(self, f, peer, arg, n, t0, t1) < 0)
            goto fail;
        return result;
    }
    if (holds == H_SENT_RECEIVED) {   /* the send half first; the drain's bound is checked after the pair */
        uint64_t send_half[8] = {self->op, self->flags, (uint64_t)self->cid, peer, (uint64_t)tag, n, (uint64_t)t0,
                                 (uint64_t)t1};
        Py_ssize_t index;
        if (record_refused(self->ring, send_half) || ring_append(self->ring, send_half, &index) < 0)
            goto fail;
    }
    /* A receive from a named rank with a named tag matched exactly those: the Status is read for
     * them only when the program left one open (or named MPI.PROC_NULL, whose tag is ANY_TAG). */
    long long got_source = source, got_tag = recv_tag, count;
    int named = source >= 0 && recv_tag >= 0;
    if ((!named && status_int(self->get_source, status, source_at, &got_source) < 0)
        || (!named && status_int(self->get_tag, status, tag_at, &got_tag) < 0)
        || received_bytes_of(self->get_count, status, &count) < 0
        || record_as(self, mark_op, f, peer_of(self, got_source), (uint64_t)got_tag & U32,
                     count < 0 ? 0 : (uint64_t)count < U32 ? (uint64_t)count : U32, t0, t1) < 0)
        goto fail;
    return result;
fail:
    Py_DECREF(result);
    return NULL;
}

static PyObject *
mpi_traced(MpiCall *self, PyObject *const *args, Py_ssize_t nargs)
{
    switch (self->row.holds) {   /* one routine, compiled once for each kind of record */
    case H_ASKED:
        return traced_as(self, args, nargs, H_ASKED);
    case H_RECEIVED:
        return traced_as(self, args, nargs, H_RECEIVED);
    default:
        return traced_as(self, args, nargs, H_SENT_RECEIVED);
    }
}

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
    return mpi_traced(self, args, PyVectorcall_NARGS(nargsf));
}

static PyObject *
mpicall_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"row", "comm", "call", "fallback", "append", "slot", "spill", "peers", "status",
                            "rounds", "ndarray", "cid", "op", "flags", "error",
                            "any_source", "any_tag", "any_source_flag", "any_tag_flag", "offset_ns",
                            "sends", "rank", "params", "defaults", "request_class", "channel",
                            "recv_op", "dumped", "datatypes", "owner", "statuses", NULL};
    PyObject *row_arg;
    int sends = S_NONE;
    PyObject *comm, *call, *fallback, *append, *table_slot, *spill, *peers, *status, *rounds, *ndarray;
    Py_ssize_t cid;
    CallRow row;
    PyObject *op_arg, *flags_arg, *error_arg, *any_source_flag_arg, *any_tag_flag_arg, *recv_op_arg = zero;
    uint64_t op, flags, error, any_source_flag, any_tag_flag, recv_op;
    long long any_source, any_tag, offset_ns, rank = 0;
    PyObject *params = Py_None, *defaults = Py_None, *request_class = Py_None, *channel = Py_None;
    PyObject *dumped = Py_None, *datatypes = Py_None, *statuses = Py_None;
    unsigned long owner = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOOOOOnOOOLLOOL|iLOOOOOOOkO:MpiCall", names, &row_arg, &comm, &call,
                                     &fallback, &append, &table_slot, &spill, &peers, &status, &rounds,
                                     &ndarray, &cid, &op_arg, &flags_arg, &error_arg, &any_source, &any_tag,
                                     &any_source_flag_arg, &any_tag_flag_arg, &offset_ns, &sends, &rank,
                                     &params, &defaults, &request_class, &channel, &recv_op_arg, &dumped,
                                     &datatypes, &owner, &statuses))
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
    if (!PyArg_ParseTuple(row_arg, "nnnnnnnip:MpiCall's row", &row.least, &row.most, &row.peer_at, &row.tag_at,
                          &row.source_at, &row.recv_tag_at, &row.status_at, &row.holds, &row.rounds))
        return NULL;
    row.sends = sends;
    Py_ssize_t places[5] = {row.peer_at, row.tag_at, row.source_at, row.recv_tag_at, row.status_at};
    int placed = row.least >= 0 && row.least <= MAX_PARAMS && row.most >= -1 && row.most <= MAX_PARAMS
                 && (row.most < 0 || row.least <= row.most);
    for (int i = 0; i < 5 && placed; i++)
        placed = places[i] >= -1 && places[i] < MAX_PARAMS && (row.most < 0 || places[i] < row.most);
    if (!placed || row.holds < H_ASKED || row.holds > H_SENT_RECEIVED
        || (row.holds != H_ASKED && (row.status_at < 0 || row.source_at < 0))
        || (row.status_at >= 0 && row.most < 0)) {
        PyErr_SetString(PyExc_ValueError, "row is (least, most, peer_at, tag_at, source_at, recv_tag_at, status_at, "
                        "holds, rounds): argument places below most (at most 8), -1 for none; holds 0 (asked), 1 "
                        "(received) or 2 (sent and received), the last two with a source and a Status");
        return NULL;
    }
    if (posts && (row.holds != H_ASKED || channel == Py_None || !PyCallable_Check(request_class))) {
        PyErr_SetString(PyExc_TypeError, "a nonblocking post (Isend, Irecv...) needs its request class and channel, "
                        "and its record holds what was asked");
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
    if (sends < S_NONE || sends > S_PICKLED) {
        PyErr_SetString(PyExc_ValueError, "sends is 0, 1, 2 or 3");
        return NULL;
    }
    /* a pickle form's bytes are what this module's thread-local count grew by: the hook must add to it */
    if (sends == S_PICKLED && !Py_IS_TYPE(dumped, &PickleCountType)) {
        PyErr_SetString(PyExc_TypeError, "a pickle form's `dumped` is the PickleCount the pickle hook adds to");
        return NULL;
    }
    if (statuses == Py_None) {
        PyErr_SetString(PyExc_TypeError, "MpiCall needs `statuses`, where each thread keeps its Status");
        return NULL;
    }
    if (!Py_IS_TYPE(append, &RingAppenderType) || !Py_IS_TYPE(table_slot, &TableSlotType)
        || !PyList_CheckExact(peers) || !PyType_Check(ndarray) || cid < 0
        || (row.rounds && !PyIter_Check(rounds))) {
        PyErr_SetString(PyExc_TypeError, "MpiCall needs a RingAppender, a TableSlot, a list for peers, the ndarray "
                        "type, and for a collective its round iterator");
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
    self->row = row;
    self->rank = rank;
    self->on = ((TableSlot *)table_slot)->on;
    self->start = ((TableSlot *)table_slot)->start;
    self->bound = ((TableSlot *)table_slot)->bound;
    PyObject **slots[] = {&self->comm, &self->call, &self->fallback, (PyObject **)&self->ring,
                          (PyObject **)&self->slot, &self->spill, &self->peers, &self->status, &self->rounds,
                          (PyObject **)&self->ndarray};
    PyObject *values[] = {comm, call, fallback, append, table_slot, spill, peers, status, rounds, ndarray};
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
    if ((self->any_source_int = PyLong_FromLongLong(any_source)) == NULL
        || (self->any_tag_int = PyLong_FromLongLong(any_tag)) == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    self->any_source_flag = any_source_flag;
    self->any_tag_flag = any_tag_flag;
    self->offset_ns = offset_ns;
    self->recv_op = recv_op;
    self->owner = owner;
    Py_INCREF(statuses);
    self->statuses = statuses;
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
    Py_VISIT(self->any_source_int);
    Py_VISIT(self->any_tag_int);
    Py_VISIT(self->ring);
    Py_VISIT(self->slot);
    Py_VISIT(self->spill);
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
    Py_VISIT(self->statuses);
    Py_VISIT(self->datatypes);
    return 0;
}

static int
mpicall_clear(MpiCall *self)
{
    Py_CLEAR(self->comm);
    Py_CLEAR(self->call);
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->any_source_int);
    Py_CLEAR(self->any_tag_int);
    Py_CLEAR(self->ring);
    Py_CLEAR(self->slot);
    Py_CLEAR(self->spill);
    Py_CLEAR(self->peers);
    Py_CLEAR(self->status);
    Py_CLEAR(self->rounds);
    Py_CLEAR(self->ndarray);
    Py_CLEAR(self->mark);
    Py_CLEAR(self->get_count);
    Py_CLEAR(self->get_source);
    Py_CLEAR(self->get_tag);
    Py_CLEAR(self->params);
    Py_CLEAR(self->defaults);
    Py_CLEAR(self->request_class);
    Py_CLEAR(self->channel);
    Py_CLEAR(self->statuses);
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
                        "one row of the call table (a send, receive, post, Sendrecv or collective) on one "
                        "communicator; other forms of the call go to the closure."),
    .tp_basicsize = sizeof(MpiCall),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(MpiCall, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = mpicall_new,
    .tp_dealloc = (destructor)mpicall_dealloc,
    .tp_traverse = (traverseproc)mpicall_traverse,
    .tp_clear = (inquiry)mpicall_clear,
};

