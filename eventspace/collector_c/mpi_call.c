/* Part of the compiled collector (module.c includes it after mpi_arguments.c): MpiCall's calls. */

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

