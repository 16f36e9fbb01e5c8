/* Part of the compiled collector (module.c includes it after table.c): Collect, the collecting
 * stage a linked path calls. Uses the clock, the appender and its TableSlot (table.c: its switch and
 * in-flight start in the node's collector table); relies for prefetching only on the fields of
 * pastset's ring appender contract (pastset_ring.h), never on what they point to being current. */

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
    AH_APPENDER,            /* the RingAppender, and the ring contract it holds */
    AH_SIZE = 2,            /* the TypedSize, and its kinds */
    AH_CURSORS = 4,         /* the element's cursors and waiter counts (one line) */
    AH_RECORD = AH_CURSORS + 1,        /* the next record's first and last byte (written) */
    AHEAD = AH_RECORD + 2
};

/* The fields every call reads first, then those a record reads: the object's first lines. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *next;             /* the next stage: next(code, args) */
    const volatile char *on;    /* this collector's switch (its TableSlot's, copied to the first line) */
    volatile int64_t *inflight; /* this collector's in-flight start (its TableSlot's) */
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
    TableSlot *slot;            /* its slot in the node's collector table, which `on` and `inflight` point into */
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
    const PastsetRing *ring = r->ring;
    PastsetCursors *cursors = ring->cursors;
    a[AH_APPENDER] = r;
    a[AH_APPENDER + 1] = ring;
    a[AH_CURSORS] = &cursors->first;
    if (cursors->last >= 0) {
        const char *record = ring->ring + (cursors->last % ring->cap) * ring->record_size;
        a[AH_RECORD] = record;
        a[AH_RECORD + 1] = record + RECORD - 1;
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

static PyObject *
collect_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"next", "slot", "cid", "eid", "flags", "failed", "size_of", "append", "offset_ns",
                            "move", "observe", "collectives", NULL};
    PyObject *next, *slot, *size, *append, *cid_arg, *eid_arg, *flags_arg, *failed_arg, *collectives_arg;
    uint64_t cid, eid, flags, failed, collectives;
    long long offset_ns;
    long move, observe;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OO!OOOOOOLllO:Collect", names, &next, &TableSlotType, &slot,
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
    Py_INCREF(slot);
    self->slot = (TableSlot *)slot;
    self->on = self->slot->on;
    self->inflight = self->slot->start;
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
    Py_CLEAR(self->slot);
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
    Py_VISIT(self->slot);
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

