/* The trace record (=HHIIIIQQ, 36 bytes) and the checks of the fields a collector writes into it; the
 * names the parts look up, interned once by the module; how the parts reach the slots of eventspace's
 * own classes (the traced Request, the MpiCollector, the PickleCount). Included first by module.c.
 *
 * Relies on: pastset's ring appender contract (pastset_ring.h, from pastset/ring_c/) for the ring a
 * record goes into, and on nothing else of pastset.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <structmember.h>   /* T_OBJECT_EX, READONLY: slots of eventspace's own classes */
#include "pastset_ring.h"

#define RECORD 36
#define U32 0xFFFFFFFFull


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

static PyObject *zero;   /* the int 0 (CPython's cached one) */

static int
call_void(PyObject *fn)
{
    PyObject *r = PyObject_CallNoArgs(fn);
    if (r == NULL)
        return -1;
    Py_DECREF(r);
    return 0;
}

/* The offset of slot `name` of `type`, one of eventspace's own classes (a member descriptor holding
 * an object, of `type` or a base of it: a descriptor of another class, set as a class attribute,
 * holds another layout's offset), or -1 with an error set. */
static Py_ssize_t
slot_offset(PyTypeObject *type, PyObject *name)
{
    PyObject *d = PyObject_GetAttr((PyObject *)type, name);   /* a member descriptor is itself, on its class */
    if (d == NULL)
        PyErr_Clear();
    Py_ssize_t offset = -1;
    if (d != NULL && Py_IS_TYPE(d, &PyMemberDescr_Type) && PyType_IsSubtype(type, PyDescr_TYPE(d))) {
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type == T_OBJECT_EX && !(m->flags & READONLY))
            offset = m->offset;
    }
    Py_XDECREF(d);
    if (offset < 0)
        PyErr_Format(PyExc_TypeError, "%s's %U must be a slot (in its __slots__)", type->tp_name, name);
    return offset;
}

static inline PyObject **
slot(PyObject *obj, Py_ssize_t offset)
{
    return (PyObject **)((char *)obj + offset);
}
