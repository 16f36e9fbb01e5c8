/* Part of the compiled collector (module.c includes it after mpi_call.c): the traced Request's completions.
 *
 * Relies on: mpi_arguments.c (marks, the Status readers, record_refused), appender.c (ring_append),
 * table.c (the channel's TableSlot: its switch, in-flight start, mark and drain bound);
 * from Python, the layout eventspace/mpi/interpose.py and collector.py give a traced request and its
 * collector: a request's `info` slot (collector, op, flags, peer, tag, nbytes, t_start) and the
 * MpiCollector's slots, found by name (slot_offset) when a RequestWait is made. Requests of a subclass
 * of the traced Request (interpose.Prequest, persistent: Python makes them inactive once complete)
 * are left to Python. */

/* -- Request.Wait ------------------------------------------------------------------------------
 *
 * RequestWait(call, fallback, request_class, channel_class, op, request_flag, cancelled_flag,
 *             empty_flag, error, receives, status_class, test=False, statuses=THREAD_STATUS): Wait
 * (or wait; with `test`, Test or test) of the traced Request class (eventspace/mpi/interpose.py);
 * RequestWaitall(the same, outcome=O_*) its class methods on many requests (Waitall, Testall,
 * Waitany, Testany, Waitsome, Testsome and their pickle-form twins):
 * the hot path of its Python method `fallback` (interpose._one, _many), which stays the reference
 * and takes every other case: a request of a channel that does not run compiled, a cancelled one,
 * keyword arguments, a tuple of requests. A method descriptor: request.Wait(status) calls it with
 * the request first; Waitall is bound to the class.
 * It reads the request's info (channel, op, flags, peer, tag, nbytes, t_start) and the channel's
 * slots at their offsets, marks the wait in flight, calls mpi4py's `call`, and appends the
 * request's record (a receive's source, tag and count from the Status) and the Wait's own. */

enum { CH_COMPILED, CH_CID, CH_APPEND, CH_SLOT, CH_SPILL, CH_PEERS, CH_STATUS, CH_OFFSET, CH_OWNER, CH_SLOTS };
static const char *channel_slots[CH_SLOTS] = {"compiled", "cid", "append", "slot", "spill", "peers", "status",
                                              "offset_ns", "owner"};

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
    PyObject *statuses;             /* THREAD_STATUS: the Status of a thread other than the channel's owner */
} RequestWait;

/* One record through the channel's appender, then its spill() once its slot's drain bound is reached. */
static int
channel_append(PyObject **field, const uint64_t v[8])
{
    Py_ssize_t last;
    RingAppender *ring = (RingAppender *)field[CH_APPEND];
    if (record_refused(ring, v) || ring_append(ring, v, &last) < 0)
        return -1;
    return last >= *((TableSlot *)field[CH_SLOT])->bound ? call_void(field[CH_SPILL]) : 0;
}

/* The channel's in-flight start: 0, the wait is over. */
static inline void
clear_start(PyObject **field)
{
    *((TableSlot *)field[CH_SLOT])->start = 0;
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
           && Py_IS_TYPE(field[CH_SLOT], &TableSlotType) && PyList_CheckExact(field[CH_PEERS])
           && PyLong_CheckExact(field[CH_CID]) && PyLong_CheckExact(field[CH_OFFSET])
           && PyLong_CheckExact(field[CH_OWNER]) && !(post[1] & self->cancelled_flag);
}

/* Whether a traced request is still to be completed with its channel collecting: 1, 0, or -1 with
 * an error set. */
static int
pending(PyObject *request, PyObject **field)
{
    return *((TableSlot *)field[CH_SLOT])->on ? PyObject_IsTrue(request) : 0;
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
    fill_mark(mark, post[0], post[1] | self->request_flag, post[2], post[3], post[4]);
    int rc = slot_mark((TableSlot *)field[CH_SLOT], (PyObject *)mark, t0);
    Py_DECREF(mark);   /* the slot's marks hold it */
    return rc;
}

/* The completion call failed (as collector._fail): its record with the error flag, `given`
 * requests; then its exception again. */
static PyObject *
completion_failed(RequestWait *self, PyObject **field, Py_ssize_t cid, uint64_t given, int64_t t0, int64_t offset)
{
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    uint64_t v[8] = {self->op, self->error, (uint64_t)cid, given & U32, 0, 0, (uint64_t)t0, (uint64_t)now(offset)};
    clear_start(field);
    if (channel_append(field, v) < 0) {
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
    PyObject *st = status;
    if (status == Py_None && is_receive(self, post[0])) {
        unsigned long owner = PyLong_AsUnsignedLong(field[CH_OWNER]);
        if ((owner == (unsigned long)-1 && PyErr_Occurred())
            || (st = thread_status(field[CH_STATUS], owner, self->statuses)) == NULL)
            return NULL;
    }
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
    clear_start(field);
    if ((done && request_record(self, field, post, t_post, st, t1) < 0)
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
            /* not ours: MPI completes it, nothing to record; ours but for Python (a persistent request,
             * of a subclass of the traced Request, always is): Python takes the call */
            leave = PyObject_TypeCheck(request, self->request_type) && *slot(request, self->info_at) != NULL;
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
    clear_start(first);
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
                            "statuses", NULL};
    PyObject *call, *fallback, *request_class, *channel_class, *receives, *status_class, *statuses = Py_None;
    PyObject *u16_args[5];
    uint64_t u16[5];   /* op, request_flag, cancelled_flag, empty_flag, error: the record's u16 fields */
    static const char *u16_names[5] = {"op", "request_flag", "cancelled_flag", "empty_flag", "error"};
    int all = PyType_IsSubtype(type, &RequestWaitallType);
    int test = 0, outcome = O_ALWAYS;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OOOOOOOOOOO|piO:RequestWait", names, &call, &fallback, &request_class,
                                     &channel_class, &u16_args[0], &u16_args[1], &u16_args[2], &u16_args[3],
                                     &u16_args[4], &receives, &status_class, &test, &outcome, &statuses))
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
        || PyTuple_GET_SIZE(receives) > 8 || !PyType_Check(status_class) || statuses == Py_None) {
        PyErr_SetString(PyExc_TypeError, "RequestWait needs the request, channel and status classes, a tuple "
                        "of at most 8 receive ops, and `statuses`, where each thread keeps its Status");
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
                          (PyObject **)&self->channel_type, &self->status_class, &self->statuses};
    PyObject *values[] = {call, fallback, request_class, channel_class, status_class, statuses};
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
    Py_VISIT(self->statuses);
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
    Py_CLEAR(self->statuses);
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


