/* The trace record (=HHIIIIQQ, 36 bytes) and the checks of the fields a collector writes into it; the
 * names the parts look up, interned once by the module. Included first by module.c.
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

