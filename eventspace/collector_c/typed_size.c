/* Part of the compiled collector (module.c includes it after appender.c): TypedSize, the msgpack size
 * of a typed template's tuple. Relies on: msgpack's encoding rules, and the template's Python size
 * function (pastset.template.Template.sizer, public) as the reference and the fallback. */

/* -- TypedSize ------------------------------------------------------------------------------ */

/* The bytes one tuple of a typed template takes on the wire (msgpack), as the template's Python
 * size function computes it (pastset.template.Template.sizer), for fields int, float, str, bytes
 * and bool: a collector calls it for every tuple it records. A value of another type than its
 * field's usual one (a memoryview, a str subclass, values that are neither a tuple nor a list...)
 * is measured by the Python function, which stays the reference. */
typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    PyObject *fallback;   /* the template's Python size function */
    PyObject *kinds;      /* bytes: one of "ifsb?" per field */
    uint64_t fixed;       /* the array header and the bool fields */
} TypedSize;

static PyTypeObject TypedSizeType;

static inline uint64_t
int_size(long long x)
{
    return (-32 <= x && x < 128) ? 1 : (-128 <= x && x < 256) ? 2 : (-32768 <= x && x < 65536) ? 3
           : (-2147483648LL <= x && x < 4294967296LL) ? 5 : 9;
}

static inline uint64_t
head(Py_ssize_t n, int text)
{
    /* str: fixstr below 32 bytes; str and bin alike: 8, 16 or 32-bit lengths */
    return (text && n < 32) ? 1 : n < 256 ? 2 : n < 65536 ? 3 : 5;
}

/* 0 with the size in *out; 1: a value the Python function must measure; -1 with an exception. */
static int
typed_size(TypedSize *self, PyObject *values, uint64_t *out)
{
    if (!PyTuple_CheckExact(values) && !PyList_CheckExact(values))
        return 1;
    Py_ssize_t count = PyBytes_GET_SIZE(self->kinds);
    if (PySequence_Fast_GET_SIZE(values) != count)
        return 1;
    PyObject **items = PySequence_Fast_ITEMS(values);
    const char *kinds = PyBytes_AS_STRING(self->kinds);
    uint64_t total = self->fixed;
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *v = items[i];
        switch (kinds[i]) {
        case '?':
            break;
        case 'f':
            if (PyFloat_Check(v)) {   /* numpy.float64 too: msgpack packs it as a float64 */
                total += 9;
                break;
            }
            /* an int in a float field: as an int */
            /* fall through */
        case 'i': {
            if (!PyLong_CheckExact(v) && !PyBool_Check(v))   /* an int subclass may compare its own way */
                return 1;
            int overflow;
            long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
            if (x == -1 && PyErr_Occurred())
                return -1;
            total += overflow ? 9 : int_size(x);
            break;
        }
        case 's': {
            if (!PyUnicode_CheckExact(v))
                return 1;
            Py_ssize_t n;
            if (PyUnicode_IS_ASCII(v))
                n = PyUnicode_GET_LENGTH(v);
            else if (PyUnicode_AsUTF8AndSize(v, &n) == NULL) {
                PyErr_Clear();   /* not encodable: the Python function raises what it raises */
                return 1;
            }
            total += (uint64_t)n + head(n, 1);
            break;
        }
        case 'b': {
            Py_ssize_t n;
            if (PyBytes_CheckExact(v))
                n = PyBytes_GET_SIZE(v);
            else if (PyByteArray_CheckExact(v))
                n = PyByteArray_GET_SIZE(v);
            else
                return 1;
            total += (uint64_t)n + head(n, 0);
            break;
        }
        default:
            return 1;
        }
    }
    *out = total;
    return 0;
}

static PyObject *
typedsize_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    TypedSize *self = (TypedSize *)callable;
    uint64_t n;
    if (kwnames == NULL && PyVectorcall_NARGS(nargsf) == 1) {
        int rc = typed_size(self, args[0], &n);
        if (rc < 0)
            return NULL;
        if (rc == 0)
            return PyLong_FromUnsignedLongLong(n);
    }
    return PyObject_Vectorcall(self->fallback, args, nargsf, kwnames);
}

static PyObject *
typedsize_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *names[] = {"kinds", "fallback", NULL};
    PyObject *kinds, *fallback;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "SO:TypedSize", names, &kinds, &fallback))
        return NULL;
    Py_ssize_t count = PyBytes_GET_SIZE(kinds);
    const char *k = PyBytes_AS_STRING(kinds);
    uint64_t fixed = count < 16 ? 1 : count < 65536 ? 3 : 5;   /* the array header */
    for (Py_ssize_t i = 0; i < count; i++) {
        if (k[i] == '?')
            fixed += 1;
        else if (strchr("ifsb", k[i]) == NULL || k[i] == '\0') {
            PyErr_SetString(PyExc_ValueError, "kinds are i (int), f (float), s (str), b (bytes) or ? (bool)");
            return NULL;
        }
    }
    if (!PyCallable_Check(fallback)) {
        PyErr_SetString(PyExc_TypeError, "fallback is the template's size function");
        return NULL;
    }
    TypedSize *self = (TypedSize *)type->tp_alloc(type, 0);
    if (self == NULL)
        return NULL;
    self->vectorcall = typedsize_vectorcall;
    Py_INCREF(kinds);
    self->kinds = kinds;
    Py_INCREF(fallback);
    self->fallback = fallback;
    self->fixed = fixed;
    return (PyObject *)self;
}

static int
typedsize_traverse(TypedSize *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fallback);
    return 0;
}

static int
typedsize_clear(TypedSize *self)
{
    Py_CLEAR(self->fallback);
    Py_CLEAR(self->kinds);
    return 0;
}

static void
typedsize_dealloc(TypedSize *self)
{
    PyObject_GC_UnTrack(self);
    typedsize_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyTypeObject TypedSizeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "eventspace._collector.TypedSize",
    .tp_basicsize = sizeof(TypedSize),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_doc = PyDoc_STR("TypedSize(kinds, fallback): size(values) -> the msgpack bytes of a typed template's "
                        "tuple, as `fallback` (the template's Python size function) computes them"),
    .tp_vectorcall_offset = offsetof(TypedSize, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_new = typedsize_new,
    .tp_dealloc = (destructor)typedsize_dealloc,
    .tp_traverse = (traverseproc)typedsize_traverse,
    .tp_clear = (inquiry)typedsize_clear,
};

