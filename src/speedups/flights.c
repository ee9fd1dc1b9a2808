/* purelink._speedups: Flights, the in-flight ledger's datagrams by packet
 * number (recovery.InFlight.flights) in a ring instead of a dict.
 *
 * Why: a link sends one datagram for every ~20 small records, and each used
 * to cost the ledger a dict entry and an int key made for it (and another
 * int made to find it again when it was acked): the insertion, the lookup,
 * the deletion and four allocations per datagram.  Packet numbers only grow
 * (every transmission takes the next one), so the flights in flight are a
 * window of packet numbers with holes: a ring indexed by the packet number
 * itself (its low bits) holds them with no key and no hashing, in the order a
 * dict keeps them (the order they were put in, which is their packet
 * numbers' order).
 *
 * To Python it is a mapping of int -> flight with the dict methods the
 * product uses (len, in, [], del, get, keys, values, items, iteration,
 * clear; the views are lists).  One rule a dict does not have: a packet
 * number is put in above every one the ring holds, or over one it holds
 * (which keeps its place, as in a dict); anything else is a ValueError, since
 * a ring keeps the numbers' order, where a dict would keep the order of
 * insertion.  The packer (pack.c) and the ledger's loops (ledger.c) work on
 * it directly (pl_flights_*, flight.h).
 */
#include "flight.h"

struct PlFlights {
    PyObject_HEAD
    PyObject **slot;         /* cap entries: the flight of pn at slot[pn & (cap - 1)] */
    Py_ssize_t cap;          /* a power of two, or 0 */
    unsigned long long base; /* the lowest pn held (when count) */
    unsigned long long end;  /* above the highest pn held, not always just above (when count) */
    Py_ssize_t count;        /* flights held; slots outside [base, end) are NULL */
};

static void flights_dealloc(PyObject *self);

PlFlights *
pl_flights(PyObject *o)
{
    if (PyType_GetSlot(Py_TYPE(o), Py_tp_dealloc) == (void *)flights_dealloc) {
        return (PlFlights *)o;
    }
    return NULL;
}

Py_ssize_t
pl_flights_len(const PlFlights *r)
{
    return r->count;
}

static PyObject **
at(const PlFlights *r, unsigned long long pn)
{
    return &r->slot[pn & (unsigned long long)(r->cap - 1)];
}

PyObject *
pl_flights_get(const PlFlights *r, unsigned long long pn)
{
    if (!r->count || pn < r->base || pn >= r->end) {
        return NULL;
    }
    return *at(r, pn);
}

#define MIN_CAP 64 /* slots a ring keeps while it holds anything */

/* The flights held into a new array of cap slots (a power of two, at least
 * the span held); 0, or -1 with an exception (the ring as it was). */
static int
resize(PlFlights *r, Py_ssize_t cap)
{
    PyObject **slot = PyMem_Calloc((size_t)cap, sizeof(PyObject *));
    if (slot == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    if (r->count) {
        for (unsigned long long p = r->base; p < r->end; p++) {
            slot[p & (unsigned long long)(cap - 1)] = *at(r, p);
        }
    }
    PyMem_Free(r->slot);
    r->slot = slot;
    r->cap = cap;
    return 0;
}

/* Room for pns base .. pn; 0, or -1 with an exception. */
static int
grow(PlFlights *r, unsigned long long pn)
{
    unsigned long long span = r->count ? pn - r->base + 1 : 1;
    if (span <= (unsigned long long)r->cap) {
        return 0;
    }
    if (span > (unsigned long long)PY_SSIZE_T_MAX / sizeof(PyObject *) / 2) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t cap = r->cap ? r->cap : MIN_CAP;
    while ((unsigned long long)cap < span) {
        cap *= 2;
    }
    return resize(r, cap);
}

/* The slots let go when nothing is held, or fewer of them when the span held
 * is under a quarter of them: the memory follows the span, not its peak. */
static void
shrink(PlFlights *r)
{
    if (r->cap <= MIN_CAP) {
        return;
    }
    if (!r->count) {
        PyMem_Free(r->slot);
        r->slot = NULL;
        r->cap = 0;
        return;
    }
    unsigned long long span = r->end - r->base;
    if (span >= (unsigned long long)r->cap / 4) {
        return;
    }
    Py_ssize_t cap = MIN_CAP;
    while ((unsigned long long)cap < 2 * span) {
        cap *= 2;
    }
    if (resize(r, cap) < 0) {
        PyErr_Clear(); /* no memory for fewer slots: the ones there serve */
    }
}

int
pl_flights_put(PlFlights *r, unsigned long long pn, PyObject *f)
{
    if (pn >= PL_PN_LIMIT) { /* (so that end = pn + 1, and a walk's pn++, never wrap) */
        PyErr_SetString(PyExc_ValueError, "Flights: a packet number is below 2**63");
        return -1;
    }
    if (r->count && pn < r->end) {
        PyObject **s = pn >= r->base ? at(r, pn) : NULL;
        if (s != NULL && *s != NULL) {
            PyObject *old = *s;
            *s = Py_NewRef(f);
            Py_DECREF(old);
            return 0;
        }
        /* end is not brought down when the highest is taken (which would scan
         * every gap below it again and again): pn may still be above every one
         * held; then end comes down to it */
        for (unsigned long long p = pn + 1; s != NULL && p < r->end; p++) {
            if (*at(r, p) != NULL) {
                s = NULL;
            }
        }
        if (s == NULL) {
            PyErr_SetString(PyExc_ValueError,
                            "Flights: a packet number goes in above every one held");
            return -1;
        }
        r->end = pn;
    }
    if (grow(r, pn) < 0) {
        return -1;
    }
    if (!r->count) {
        r->base = pn;
    }
    *at(r, pn) = Py_NewRef(f);
    r->end = pn + 1;
    r->count++;
    return 0;
}

/* Take the flight of pn out; its reference is the caller's (NULL: none). */
static PyObject *
take(PlFlights *r, unsigned long long pn)
{
    if (!r->count || pn < r->base || pn >= r->end) {
        return NULL;
    }
    PyObject **s = at(r, pn);
    PyObject *f = *s;
    if (f == NULL) {
        return NULL;
    }
    *s = NULL;
    if (--r->count == 0) {
        r->base = r->end = 0;
    } else {
        while (*at(r, r->base) == NULL) {
            r->base++;
        }
        /* (end stays: see pl_flights_put) */
    }
    shrink(r);
    return f;
}

int
pl_flights_del(PlFlights *r, unsigned long long pn)
{
    PyObject *f = take(r, pn);
    if (f == NULL) {
        PyObject *key = PyLong_FromUnsignedLongLong(pn);
        if (key != NULL) {
            PyErr_SetObject(PyExc_KeyError, key);
            Py_DECREF(key);
        }
        return -1;
    }
    Py_DECREF(f);
    return 0;
}

int
pl_flights_next(const PlFlights *r, unsigned long long *pn, PyObject **f)
{
    if (!r->count) {
        return 0;
    }
    unsigned long long p = *pn < r->base ? r->base : *pn;
    for (; p < r->end; p++) {
        PyObject *x = *at(r, p);
        if (x != NULL) {
            *pn = p;
            *f = x;
            return 1;
        }
    }
    return 0;
}

static void
clear_all(PlFlights *r)
{
    /* emptied first, the flights let go after: letting one go may run Python
     * code (a __del__) that sees the ring, which is consistent whenever it does */
    Py_ssize_t n = r->count;
    PyObject **held = n ? PyMem_Malloc((size_t)n * sizeof(PyObject *)) : NULL;
    Py_ssize_t k = 0;
    if (held == NULL) { /* no memory for the list: one by one, each out before it goes */
        while (r->count) {
            Py_DECREF(take(r, r->base));
        }
        return;
    }
    if (r->count) {
        for (unsigned long long p = r->base; p < r->end; p++) {
            PyObject **s = at(r, p);
            if (*s != NULL) {
                held[k++] = *s;
                *s = NULL;
            }
        }
    }
    r->count = 0;
    r->base = r->end = 0;
    shrink(r);
    for (Py_ssize_t i = 0; i < k; i++) {
        Py_DECREF(held[i]);
    }
    PyMem_Free(held);
}

/* ------------------------------------------------------------ Python side */

/* A key as a packet number: 1, 0 (not one: no such key), -1 with an exception. */
static int
key_pn(PyObject *key, unsigned long long *pn)
{
    if (!PyLong_Check(key)) {
        return 0;
    }
    *pn = PyLong_AsUnsignedLongLong(key);
    if (*pn == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError)) {
            return -1;
        }
        PyErr_Clear(); /* negative, or too large: held by no ring */
        return 0;
    }
    return 1;
}

static PyObject *
flights_new(PyTypeObject *tp, PyObject *args, PyObject *kwargs)
{
    if (!PyArg_ParseTuple(args, ":Flights") || (kwargs != NULL && PyDict_Size(kwargs))) {
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_TypeError, "Flights() takes no arguments");
        }
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
    return alloc(tp, 0); /* zeroed: empty, no slots */
}

static int
flights_traverse(PyObject *self, visitproc visit, void *arg)
{
    PlFlights *r = (PlFlights *)self;
    Py_VISIT(Py_TYPE(self));
    if (r->count) {
        for (unsigned long long p = r->base; p < r->end; p++) {
            Py_VISIT(*at(r, p));
        }
    }
    return 0;
}

static int
flights_clear(PyObject *self)
{
    clear_all((PlFlights *)self);
    return 0;
}

static void
flights_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    clear_all((PlFlights *)self);
    PyMem_Free(((PlFlights *)self)->slot);
    freefunc free_ = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    free_(self);
    Py_DECREF(tp);
}

static Py_ssize_t
flights_length(PyObject *self)
{
    return ((PlFlights *)self)->count;
}

static PyObject *
flights_subscript(PyObject *self, PyObject *key)
{
    unsigned long long pn;
    int rc = key_pn(key, &pn);
    if (rc < 0) {
        return NULL;
    }
    PyObject *f = rc ? pl_flights_get((PlFlights *)self, pn) : NULL;
    if (f == NULL) {
        PyErr_SetObject(PyExc_KeyError, key);
        return NULL;
    }
    return Py_NewRef(f);
}

static int
flights_ass_subscript(PyObject *self, PyObject *key, PyObject *value)
{
    PlFlights *r = (PlFlights *)self;
    unsigned long long pn;
    int rc = key_pn(key, &pn);
    if (rc < 0) {
        return -1;
    }
    if (value != NULL) {
        if (rc == 0) {
            PyErr_SetString(PyExc_TypeError, "Flights: a key is a packet number (an int >= 0)");
            return -1;
        }
        return pl_flights_put(r, pn, value);
    }
    PyObject *f = rc ? take(r, pn) : NULL;
    if (f == NULL) {
        PyErr_SetObject(PyExc_KeyError, key);
        return -1;
    }
    Py_DECREF(f);
    return 0;
}

static int
flights_contains(PyObject *self, PyObject *key)
{
    unsigned long long pn;
    int rc = key_pn(key, &pn);
    return rc <= 0 ? rc : pl_flights_get((PlFlights *)self, pn) != NULL;
}

static PyObject *
flights_get(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "get(key, default=None)");
        return NULL;
    }
    unsigned long long pn;
    int rc = key_pn(args[0], &pn);
    if (rc < 0) {
        return NULL;
    }
    PyObject *f = rc ? pl_flights_get((PlFlights *)self, pn) : NULL;
    if (f == NULL) {
        f = nargs == 2 ? args[1] : Py_None;
    }
    return Py_NewRef(f);
}

enum { KEYS, VALUES, ITEMS };

/* A list of the keys, values or (key, value) pairs, in packet number order. */
static PyObject *
listing(PyObject *self, int what)
{
    PlFlights *r = (PlFlights *)self;
    PyObject *out = PyList_New(0);
    unsigned long long pn = 0;
    PyObject *f;
    while (out != NULL && pl_flights_next(r, &pn, &f)) {
        PyObject *key = what == VALUES ? NULL : PyLong_FromUnsignedLongLong(pn);
        PyObject *item = what == KEYS    ? key
                         : what == VALUES ? Py_NewRef(f)
                         : key != NULL    ? PyTuple_Pack(2, key, f)
                                          : NULL;
        if (what == ITEMS) {
            Py_XDECREF(key);
        }
        if (item == NULL || PyList_Append(out, item) < 0) {
            Py_CLEAR(out);
        }
        Py_XDECREF(item);
        pn++;
    }
    return out;
}

static PyObject *
flights_keys(PyObject *self, PyObject *unused)
{
    (void)unused;
    return listing(self, KEYS);
}

static PyObject *
flights_values(PyObject *self, PyObject *unused)
{
    (void)unused;
    return listing(self, VALUES);
}

static PyObject *
flights_items(PyObject *self, PyObject *unused)
{
    (void)unused;
    return listing(self, ITEMS);
}

static PyObject *
flights_iter(PyObject *self)
{
    PyObject *keys = listing(self, KEYS);
    if (keys == NULL) {
        return NULL;
    }
    PyObject *it = PyObject_GetIter(keys);
    Py_DECREF(keys);
    return it;
}

static PyObject *
flights_sizeof(PyObject *self, PyObject *unused)
{
    (void)unused;
    return PyLong_FromSize_t(sizeof(PlFlights) +
                             (size_t)((PlFlights *)self)->cap * sizeof(PyObject *));
}

static PyObject *
flights_clear_method(PyObject *self, PyObject *unused)
{
    (void)unused;
    clear_all((PlFlights *)self);
    Py_RETURN_NONE;
}

static PyMethodDef flights_methods[] = {
    {"get", (PyCFunction)(void (*)(void))flights_get, METH_FASTCALL,
     "get(pn, default=None): the flight of packet number pn, or default."},
    {"keys", flights_keys, METH_NOARGS, "keys() -> a list of the packet numbers, in order."},
    {"values", flights_values, METH_NOARGS, "values() -> a list of the flights, in order."},
    {"items", flights_items, METH_NOARGS, "items() -> a list of (pn, flight), in order."},
    {"__sizeof__", flights_sizeof, METH_NOARGS, "The ring's size in memory, in bytes."},
    {"clear", flights_clear_method, METH_NOARGS, "clear(): no flight is held any more."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot flights_slots[] = {
    {Py_tp_doc, "Flights(): the datagrams in flight by packet number, in a ring (a mapping "
                "of int -> flight with a dict's methods; packet numbers go in ascending)."},
    {Py_tp_new, flights_new},
    {Py_tp_dealloc, flights_dealloc},
    {Py_tp_traverse, flights_traverse},
    {Py_tp_clear, flights_clear},
    {Py_tp_iter, flights_iter},
    {Py_tp_methods, flights_methods},
    {Py_mp_length, flights_length},
    {Py_mp_subscript, flights_subscript},
    {Py_mp_ass_subscript, flights_ass_subscript},
    {Py_sq_length, flights_length},
    {Py_sq_contains, flights_contains},
    {0, NULL},
};

static PyType_Spec flights_spec = {
    .name = "purelink._speedups.Flights",
    .basicsize = sizeof(PlFlights),
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = flights_slots,
};

int
pl_flights_exec(PyObject *module)
{
    PyObject *tp = PyType_FromModuleAndSpec(module, &flights_spec, NULL);
    if (tp == NULL) {
        return -1;
    }
    int rc = PyModule_AddObjectRef(module, "Flights", tp);
    Py_DECREF(tp);
    if (rc < 0) {
        return -1;
    }
    return PyModule_AddIntConstant(module, "has_flights", 1);
}
