/* The compiled event collector, eventspace._collector: the hot path of eventspace.collector.Collector
 * and of the MPI collectors, in C. Its parts, in this directory, are compiled as one translation unit
 * (this file includes them, in order) so that a collector's call inlines the clock read and the append:
 *   record.h       the 36-byte trace tuple (=HHIIIIQQ) and the checks of its fields; interned names
 *   clock.c        the collectors' clock (clock_ns: the TSC scaled to CLOCK_MONOTONIC where the kernel's is)
 *   appender.c     RingAppender: one record appended to a pastset element's ring, through pastset's
 *                  ring appender contract (pastset/ring_c/pastset_ring.h), the only part of pastset used
 *   typed_size.c   TypedSize: the msgpack size of a typed template's tuple
 *   table.c        TableSlot: a collector's slot in its node's collector table (eventspace/table.py):
 *                  its switch, in-flight start, mark and drain bound, which every collector reads there
 *   collect.c      Collect: the collecting stage a linked path calls
 *   mpi_arguments.c, mpi_call.c  MpiCall: an MPI collector closure's hot path, one routine applying
 *                  a row of the call table (eventspace/mpi/collector.py, CallSpec); PickleCount
 *   mpi_wait.c     RequestWait, RequestWaitall: the traced Request class's completions
 * Each part's header says what it holds and what it relies on.
 *
 * The types:
 *   RingAppender(element, single_writer)  appends one trace tuple (=HHIIIIQQ, 36 bytes) to a
 *       pastset BinaryElement's ring with pastset's own append, through the contract its appender
 *       hands out (pastset/ring_c/pastset_ring.h): the record, then `_last` past it, then `_first`
 *       up to `keep` behind; waiters woken under the element's mutex; locked unless single_writer.
 *       Callable from Python as append(op, flags, collector, element, arg, nbytes, t_start, t_end)
 *       -> index; the other types call it without Python.
 *   TableSlot(page, at)  slot `at` of a page of the node's collector table, held by a compiled
 *       collector: pointers to its switch, in-flight start and drain bound, and the page's marks.
 *   Collect(next, slot, cid, eid, flags, failed, size_of, append, offset_ns, move, observe, collectives)
 *       the collecting callable a linked path calls as stage(code, args) (vectorcall): the
 *       semantics of the pure closure in eventspace/collector.py, which stays the reference.
 *   TypedSize(kinds, fallback)  the msgpack size of a typed template's tuple (what a collector
 *       records as nbytes), in C for int, float, str, bytes and bool fields.
 *   MpiCall(row, comm, call, fallback, append, ...)
 *       the hot path of an MPI collector closure (eventspace/mpi/collector.py) for the rows of the
 *       call table with a compiled form (sends, Recv, Sendrecv, the nonblocking posts and
 *       collectives, buffer and pickle forms), in their common form; every other form goes to the
 *       closure.
 *   PickleCount()  `total`: the bytes mpi4py has pickled in the calling thread (a C thread-local,
 *       which MpiCall reads in place), what a pickle form's record counts; `counted(dumps)`, the
 *       pickle hook that adds to it.
 *   RequestWait, RequestWaitall(call, fallback, request_class, channel_class, ...)
 *       Wait and Test, and Waitall, Testall, Waitany, Testany, Waitsome and Testsome (outcome=O_*),
 *       of the traced Request class (eventspace/mpi/interpose.py).
 */
#include "record.h"
#include "clock.c"
#include "appender.c"
#include "typed_size.c"
#include "table.c"
#include "collect.c"
#include "mpi_arguments.c"
#include "mpi_call.c"
#include "mpi_wait.c"

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
        {&s_nbytes, "nbytes"}, {&s_get_count, "Get_count"},
        {&s_get_source, "Get_source"}, {&s_get_tag, "Get_tag"}, {&s_info, "info"},
        {&s_status, "status"},
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
    if (PyType_Ready(&RingAppenderType) < 0 || PyType_Ready(&TableSlotType) < 0 || PyType_Ready(&CollectType) < 0
        || PyType_Ready(&MpiCallType) < 0
        || PyType_Ready(&MpiMarkType) < 0 || PyType_Ready(&TypedSizeType) < 0 || PyType_Ready(&RequestWaitType) < 0
        || PyType_Ready(&RequestWaitallType) < 0 || PyType_Ready(&PickleCountType) < 0
        || PyType_Ready(&CountedDumpsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddIntConstant(m, "RECORD_SIZE", RECORD) < 0
        || PyModule_AddObjectRef(m, "RingAppender", (PyObject *)&RingAppenderType) < 0
        || PyModule_AddObjectRef(m, "TableSlot", (PyObject *)&TableSlotType) < 0
        || PyModule_AddObjectRef(m, "Collect", (PyObject *)&CollectType) < 0
        || PyModule_AddObjectRef(m, "MpiCall", (PyObject *)&MpiCallType) < 0
        || PyModule_AddObjectRef(m, "TypedSize", (PyObject *)&TypedSizeType) < 0
        || PyModule_AddObjectRef(m, "RequestWait", (PyObject *)&RequestWaitType) < 0
        || PyModule_AddObjectRef(m, "RequestWaitall", (PyObject *)&RequestWaitallType) < 0
        || PyModule_AddObjectRef(m, "PickleCount", (PyObject *)&PickleCountType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
