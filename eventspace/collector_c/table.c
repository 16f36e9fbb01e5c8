/* Part of the compiled collector (module.c includes it after typed_size.c): TableSlot, one collector's
 * slot in its node's collector table, as every compiled collector (Collect, MpiCall, RequestWait) reads
 * and writes it: its switch, its in-flight start, its mark, its drain bound.
 *
 * Relies on: eventspace/table.py's Page (a bytearray `switches`, array('q') `starts` and `bounds`, a
 * list `marks`, each of the same length, that never grows or moves); a TableSlot holds a buffer on
 * each array for as long as it lives, so that no one can resize one under it. */

/* -- TableSlot ------------------------------------------------------------------------------ */

typedef struct {
    PyObject_HEAD
    const volatile char *on;       /* switches[at]: nonzero collects */
    volatile int64_t *start;       /* starts[at]: the operation under way's start (ns), 0 when none */
    volatile int64_t *bound;       /* bounds[at]: the trace element's index at which to spill */
    PyObject *marks;               /* the page's marks (a list): marks[at] the mark while start is not 0 */
    Py_ssize_t at;
    PyObject *page;
    Py_buffer switches, starts, bounds;
} TableSlot;

static PyTypeObject TableSlotType;

/* A buffer on `owner` (writable, contiguous, of `itemsize`-byte items: a bytearray, an array('q')) with
 * an item at `at`: 0, or -1 with an error saying what it should be. */
static int
page_buffer(PyObject *owner, Py_buffer *view, Py_ssize_t itemsize, Py_ssize_t at, const char *what)
{
    if (PyObject_GetBuffer(owner, view, PyBUF_WRITABLE | PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0)
        return -1;
    if (view->itemsize != itemsize || (uintptr_t)view->buf % (uintptr_t)itemsize || view->len / itemsize <= at) {
        PyErr_Format(PyExc_ValueError, "a page's %s holds %zd-byte items, aligned, with one at %zd", what, itemsize,
                     at);
        PyBuffer_Release(view);
        view->obj = NULL;
        return -1;
    }
    return 0;
}

/* mark (a sequence of op, flags, element, arg, nbytes) as this collector's, then t0 as its start:
 * the mark first, so that a reader who finds the start unchanged after the mark has read it. */
static inline int
slot_mark(TableSlot *slot, PyObject *mark, int64_t t0)
{
    if (PyList_GET_SIZE(slot->marks) <= slot->at) {   /* someone shortened the page's list */
        PyErr_SetString(PyExc_IndexError, "the page's marks hold no slot for this collector");
        return -1;
    }
    PyObject **item = ((PyListObject *)slot->marks)->ob_item + slot->at;
    if (*item != mark) {   /* another call of the collector's marked last */
        Py_INCREF(mark);
        Py_SETREF(*item, mark);
    }
    *slot->start = t0;
    return 0;
}

static PyObject *
tableslot_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"page", "at", NULL};
    PyObject *page;
    Py_ssize_t at;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "On:TableSlot", names, &page, &at))
        return NULL;
    if (at < 0) {
        PyErr_Format(PyExc_ValueError, "a slot's index is 0 or more, not %zd", at);
        return NULL;
    }
    TableSlot *self = (TableSlot *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->at = at;
    Py_INCREF(page);
    self->page = page;
    PyObject *switches = PyObject_GetAttrString(page, "switches");
    PyObject *starts = switches == NULL ? NULL : PyObject_GetAttrString(page, "starts");
    PyObject *bounds = starts == NULL ? NULL : PyObject_GetAttrString(page, "bounds");
    self->marks = bounds == NULL ? NULL : PyObject_GetAttrString(page, "marks");
    int rc = -1;
    if (self->marks != NULL && !PyList_CheckExact(self->marks))
        PyErr_SetString(PyExc_TypeError, "a page's marks are a list");
    else if (self->marks != NULL && PyList_GET_SIZE(self->marks) <= at)
        PyErr_Format(PyExc_ValueError, "a page's marks hold no slot at %zd", at);
    else if (self->marks != NULL && page_buffer(switches, &self->switches, 1, at, "switches") == 0) {
        if (page_buffer(starts, &self->starts, sizeof(int64_t), at, "starts") == 0) {
            if (page_buffer(bounds, &self->bounds, sizeof(int64_t), at, "bounds") == 0)
                rc = 0;
        }
    }
    Py_XDECREF(switches);
    Py_XDECREF(starts);
    Py_XDECREF(bounds);
    if (rc < 0) {
        Py_DECREF(self);
        return NULL;
    }
    self->on = (const char *)self->switches.buf + at;
    self->start = (int64_t *)self->starts.buf + at;
    self->bound = (int64_t *)self->bounds.buf + at;
    return (PyObject *)self;
}

static void
tableslot_dealloc(TableSlot *self)
{
    PyObject_GC_UnTrack(self);
    Py_buffer *views[] = {&self->switches, &self->starts, &self->bounds};
    for (int i = 0; i < 3; i++) {
        if (views[i]->obj != NULL)
            PyBuffer_Release(views[i]);
    }
    Py_CLEAR(self->marks);
    Py_CLEAR(self->page);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static int
tableslot_traverse(TableSlot *self, visitproc visit, void *arg)
{
    Py_VISIT(self->page);
    Py_VISIT(self->marks);
    return 0;
}

static PyTypeObject TableSlotType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "eventspace._collector.TableSlot",
    .tp_doc = PyDoc_STR("TableSlot(page, at): slot `at` of a page of the node's collector table "
                        "(eventspace/table.py), as compiled collectors read and write it."),
    .tp_basicsize = sizeof(TableSlot),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = tableslot_new,
    .tp_dealloc = (destructor)tableslot_dealloc,
    .tp_traverse = (traverseproc)tableslot_traverse,
};
