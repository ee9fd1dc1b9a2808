/* purelink._speedups: the link's queue() and its hand-off ring, its counters
 * and the wake-once signal, and the link thread's take.
 *
 * Why: queue() is the application thread's whole cost of sending a record,
 * and in Python it is ~9 times an empty function call.  Here `Link.queue`
 * is a C method of Link's base type (HandOff), so `link.queue(record)`
 * reaches C with no Python frame, and its common case runs in C alone:
 * take the seq from the grant, store a new reference at `slots[seq & mask]`,
 * add the bytes, and wake the link thread if it sleeps.  Everything else
 * (errors, Full, large or non-bytes records, `seq=`, a grant used up and the
 * ring's growth) is the Python slow path, `Link._queue_slow`, called from
 * here: the one place for policy.  The pure-Python reference is link.py's
 * queue() with ring.py; the two agree step for step (tests/native/test_ring.py).
 *
 * What the Python side sees is unchanged: `_slots` (the newest list and its
 * mask, published as one pair), `_next_seq()`, `_new_grant()`, `queued`,
 * `_grant_range`, `_bytes_in`, `_limit_bytes`, `_small`, `_wakeup` are
 * attributes of HandOff backed by the C fields below.  Everything runs
 * holding the GIL and calls no Python code between taking the seq and
 * storing the record, so the fast path is one step for other threads (the
 * pure path's window for a KeyboardInterrupt between the two is gone).
 *
 * The wake-once signal (primitives/wakeup.py): WakeFlag is the base type of
 * Wakeup and holds `armed`, `writes`, `_closed` and the fds, so the Python
 * wakeup and this queue() read and write the same flag.  The Dekker order
 * is kept: queue() stores the record, then loads `armed`; the inline signal
 * clears `armed` BEFORE it writes the eventfd.
 *
 * The take (ring_take, ring_has): ring.py's take() and has() over the same
 * generations (tuples of (since, list, mask)), checked as they are read, since
 * the link's Python code builds them.
 */
#include "speedups.h"

#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

/* ------------------------------------------------------------ WakeFlag */

typedef struct {
    PyObject_HEAD
    int armed;
    int closed;
    int read_fd;
    int write_fd;
    long long writes;
} WakeFlagObject;

static void wakeflag_dealloc(PyObject *self);

/* Whether o's type is WakeFlag or a subclass: its layout is WakeFlagObject.
 * (Walks tp_base looking for this file's dealloc: no global state needed.) */
static int
is_wakeflag(PyObject *o)
{
    PyTypeObject *t = Py_TYPE(o);
    while (t != NULL) {
        if (PyType_GetSlot(t, Py_tp_dealloc) == (void *)wakeflag_dealloc) {
            return 1;
        }
        t = (PyTypeObject *)PyType_GetSlot(t, Py_tp_base);
    }
    return 0;
}

static PyObject *
wakeflag_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args;
    (void)kwds;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    WakeFlagObject *self = (WakeFlagObject *)alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->armed = 0;
    self->closed = 1; /* no fd yet: a signal writes nothing */
    self->read_fd = -1;
    self->write_fd = -1;
    self->writes = 0;
    return (PyObject *)self;
}

static void
wakeflag_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free(self);
    Py_DECREF(tp);
}

/* The signal: disarm, then write the fd (wakeup.py Wakeup.signal).  0, or -1
 * with OSError set (the write failed for another reason than a full counter). */
static int
wake(WakeFlagObject *w)
{
    w->armed = 0; /* before the write: see wakeup.py's header */
    if (w->closed) {
        return 0;
    }
    ssize_t r;
    do {
        if (w->read_fd == w->write_fd) {
            uint64_t one = 1;
            r = write(w->write_fd, &one, sizeof one);
        }
        else {
            char zero = 0;
            r = write(w->write_fd, &zero, 1);
        }
    } while (r < 0 && errno == EINTR);
    if (r < 0 && errno != EAGAIN && errno != EWOULDBLOCK) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    w->writes++;
    return 0;
}

static int
no_delete(PyObject *value, const char *name)
{
    if (value == NULL) {
        PyErr_Format(PyExc_AttributeError, "cannot delete %s", name);
        return -1;
    }
    return 0;
}

/* An int attribute of the C struct at `offset` (type int or long long). */
static int
set_ll(PyObject *value, long long *out, const char *name)
{
    if (no_delete(value, name) < 0) {
        return -1;
    }
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) {
        return -1;
    }
    *out = v;
    return 0;
}

static int
set_int(PyObject *value, int *out, const char *name)
{
    long long v;
    if (set_ll(value, &v, name) < 0) {
        return -1;
    }
    if (v < INT32_MIN || v > INT32_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s out of range", name);
        return -1;
    }
    *out = (int)v;
    return 0;
}

static int
set_flag(PyObject *value, int *out, const char *name)
{
    if (no_delete(value, name) < 0) {
        return -1;
    }
    int v = PyObject_IsTrue(value);
    if (v < 0) {
        return -1;
    }
    *out = v;
    return 0;
}

#define W(o) ((WakeFlagObject *)(o))

static PyObject *
wf_get_armed(PyObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(W(self)->armed);
}

static int
wf_set_armed(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    return set_flag(v, &W(self)->armed, "armed");
}

static PyObject *
wf_get_closed(PyObject *self, void *c)
{
    (void)c;
    return PyBool_FromLong(W(self)->closed);
}

static int
wf_set_closed(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    return set_flag(v, &W(self)->closed, "_closed");
}

static PyObject *
wf_get_read_fd(PyObject *self, void *c)
{
    (void)c;
    return PyLong_FromLong(W(self)->read_fd);
}

static int
wf_set_read_fd(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    return set_int(v, &W(self)->read_fd, "_read_fd");
}

static PyObject *
wf_get_write_fd(PyObject *self, void *c)
{
    (void)c;
    return PyLong_FromLong(W(self)->write_fd);
}

static int
wf_set_write_fd(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    return set_int(v, &W(self)->write_fd, "_write_fd");
}

static PyObject *
wf_get_writes(PyObject *self, void *c)
{
    (void)c;
    return PyLong_FromLongLong(W(self)->writes);
}

static int
wf_set_writes(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    return set_ll(v, &W(self)->writes, "writes");
}

static PyGetSetDef wakeflag_getset[] = {
    {"armed", wf_get_armed, wf_set_armed, "the owner sleeps and nobody has taken on waking it", NULL},
    {"_closed", wf_get_closed, wf_set_closed, "the fds are closed: a signal writes nothing", NULL},
    {"_read_fd", wf_get_read_fd, wf_set_read_fd, "the fd the owner polls", NULL},
    {"_write_fd", wf_get_write_fd, wf_set_write_fd, "the fd a signal writes (the same: an eventfd)", NULL},
    {"writes", wf_get_writes, wf_set_writes, "writes to the fd", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot wakeflag_slots[] = {
    {Py_tp_new, wakeflag_new},
    {Py_tp_dealloc, wakeflag_dealloc},
    {Py_tp_getset, wakeflag_getset},
    {Py_tp_doc, "The wake-once flag and fd that Wakeup (primitives/wakeup.py) is built on: "
                "the link's queue() in C reads and writes the same flag."},
    {0, NULL},
};

static PyType_Spec wakeflag_spec = {
    .name = "purelink._speedups.WakeFlag",
    .basicsize = sizeof(WakeFlagObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .slots = wakeflag_slots,
};

/* ------------------------------------------------------------ HandOff */

typedef struct {
    PyObject_HEAD
    PyObject *slots;   /* the newest generation's list, or NULL before the first */
    Py_ssize_t mask;   /* len(slots) - 1 */
    long long next;    /* the grant: the next seq it hands out ... */
    long long stop;    /* ... and the first it does not */
    long long bytes_in;
    long long limit_bytes;
    long long small;
    PyObject *wakeup;  /* the Wakeup, or NULL */
    WakeFlagObject *flag; /* the same object if its layout is WakeFlag's, else NULL */
} HandOffObject;

#define H(o) ((HandOffObject *)(o))

static PyObject *
handoff_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    (void)args; /* Link(url, stream, ...): its __init__ takes them */
    (void)kwds;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    HandOffObject *self = (HandOffObject *)alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->slots = NULL;
    self->mask = 0;
    self->next = 1;
    self->stop = 1; /* no grant yet: every call takes the slow path */
    self->bytes_in = 0;
    self->limit_bytes = -1;
    self->small = 0;
    self->wakeup = NULL;
    self->flag = NULL;
    return (PyObject *)self;
}

static int
handoff_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(H(self)->slots);
    Py_VISIT(H(self)->wakeup);
    return 0;
}

static int
handoff_clear(PyObject *self)
{
    H(self)->flag = NULL;
    Py_CLEAR(H(self)->slots);
    Py_CLEAR(H(self)->wakeup);
    return 0;
}

static void
handoff_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    handoff_clear(self);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free(self);
    Py_DECREF(tp);
}

/* The Python slow path: self._queue_slow(record, seq). */
static PyObject *
queue_slow(PyObject *self, PyObject *record, PyObject *seq)
{
    return PyObject_CallMethod(self, "_queue_slow", "OO", record, seq);
}

/* queue(record): the fast path, else the slow path (see the header). */
static PyObject *
queue_record(PyObject *self, PyObject *record)
{
    HandOffObject *h = H(self);
    if (!PyBytes_CheckExact(record)) {
        return queue_slow(self, record, Py_None);
    }
    Py_ssize_t n = PyBytes_Size(record);
    /* (limit_bytes >= -1 and n >= 0: limit_bytes - n cannot overflow) */
    if (n >= h->small || h->bytes_in > h->limit_bytes - n || h->next >= h->stop
        || h->slots == NULL) {
        return queue_slow(self, record, Py_None);
    }
    long long s = h->next;
    PyObject *seq = PyLong_FromLongLong(s);
    if (seq == NULL) {
        return NULL;
    }
    Py_INCREF(record);
    /* steals the new reference and drops the slot's None; the index is in
     * range: `_slots` takes only a list with len == mask + 1 (and a list
     * that shrank since makes this an IndexError, not a wild write) */
    if (PyList_SetItem(h->slots, (Py_ssize_t)(s & h->mask), record) < 0) {
        Py_DECREF(seq);
        return NULL;
    }
    h->next = s + 1;
    h->bytes_in += n;
    /* the record is stored: now load `armed` (Dekker's order, wakeup.py) */
    if (h->flag != NULL) {
        if (h->flag->armed && wake(h->flag) < 0) {
            Py_DECREF(seq);
            return NULL;
        }
    }
    else if (h->wakeup != NULL) { /* not a WakeFlag: ask it in Python */
        PyObject *armed = PyObject_GetAttrString(h->wakeup, "armed");
        int on = armed == NULL ? -1 : PyObject_IsTrue(armed);
        Py_XDECREF(armed);
        PyObject *r = on > 0 ? PyObject_CallMethod(h->wakeup, "signal", NULL) : NULL;
        if (on < 0 || (on > 0 && r == NULL)) {
            Py_DECREF(seq);
            return NULL;
        }
        Py_XDECREF(r);
    }
    return seq;
}

/* queue(record, seq=None) */
static PyObject *
handoff_queue(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs == 1 && kwnames == NULL) {
        return queue_record(self, args[0]);
    }
    /* the general call: queue(record, seq=None), positional or keyword */
    PyObject *record = nargs > 0 ? args[0] : NULL;
    PyObject *seq = nargs > 1 ? args[1] : NULL;
    if (nargs > 2) {
        PyErr_Format(PyExc_TypeError, "queue() takes at most 2 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_Size(kwnames);
    for (Py_ssize_t i = 0; i < nkw; i++) {
        PyObject *name = PyTuple_GetItem(kwnames, i);
        if (name == NULL) {
            return NULL;
        }
        PyObject **to = NULL;
        if (PyUnicode_CompareWithASCIIString(name, "record") == 0) {
            to = &record;
        }
        else if (PyUnicode_CompareWithASCIIString(name, "seq") == 0) {
            to = &seq;
        }
        if (to == NULL) {
            PyErr_Format(PyExc_TypeError, "queue() got an unexpected keyword argument '%U'", name);
            return NULL;
        }
        if (*to != NULL) {
            PyErr_Format(PyExc_TypeError, "queue() got multiple values for argument '%U'", name);
            return NULL;
        }
        *to = args[nargs + i];
    }
    if (record == NULL) {
        PyErr_SetString(PyExc_TypeError, "queue() missing 1 required argument: 'record'");
        return NULL;
    }
    if (seq == NULL || seq == Py_None) {
        return queue_record(self, record);
    }
    return queue_slow(self, record, seq);
}

/* _next_seq(): the grant's next seq; StopIteration once it is used up. */
static PyObject *
handoff_next_seq(PyObject *self, PyObject *unused)
{
    (void)unused;
    HandOffObject *h = H(self);
    if (h->next >= h->stop) {
        PyErr_SetNone(PyExc_StopIteration);
        return NULL;
    }
    return PyLong_FromLongLong(h->next++);
}

/* _new_grant(first, stop): hand out seqs first .. stop - 1 from now on (as
 * iter(range(first, stop)) does in the pure path: empty if stop <= first). */
static PyObject *
handoff_new_grant(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "_new_grant(first, stop) takes 2 arguments");
        return NULL;
    }
    long long first = PyLong_AsLongLong(args[0]);
    if (first == -1 && PyErr_Occurred()) {
        return NULL;
    }
    long long stop = PyLong_AsLongLong(args[1]);
    if (stop == -1 && PyErr_Occurred()) {
        return NULL;
    }
    H(self)->stop = stop;
    H(self)->next = first < stop ? first : stop;
    Py_RETURN_NONE;
}

static PyObject *
ho_get_queued(PyObject *self, void *c)
{
    (void)c;
    return PyLong_FromLongLong(H(self)->next - 1);
}

/* _grant_range: (stop, an iterator over what the grant has not handed out). */
static PyObject *
ho_get_grant_range(PyObject *self, void *c)
{
    (void)c;
    PyObject *range = PyObject_CallFunction((PyObject *)&PyRange_Type, "LL", H(self)->next,
                                            H(self)->stop);
    if (range == NULL) {
        return NULL;
    }
    PyObject *it = PyObject_GetIter(range);
    Py_DECREF(range);
    if (it == NULL) {
        return NULL;
    }
    return Py_BuildValue("(LN)", H(self)->stop, it);
}

static PyObject *
ho_get_slots(PyObject *self, void *c)
{
    (void)c;
    if (H(self)->slots == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_slots");
        return NULL;
    }
    return Py_BuildValue("(On)", H(self)->slots, H(self)->mask);
}

/* _slots = (list, mask): a list whose length is a power of two, mask = len - 1. */
static int
ho_set_slots(PyObject *self, PyObject *value, void *c)
{
    (void)c;
    if (no_delete(value, "_slots") < 0) {
        return -1;
    }
    PyObject *list, *mask_obj;
    if (!PyTuple_Check(value) || PyTuple_Size(value) != 2
        || !PyList_Check(list = PyTuple_GetItem(value, 0))
        || !PyLong_Check(mask_obj = PyTuple_GetItem(value, 1))) {
        PyErr_SetString(PyExc_TypeError, "_slots must be a (list, mask) pair");
        return -1;
    }
    Py_ssize_t mask = PyLong_AsSsize_t(mask_obj);
    if (mask == -1 && PyErr_Occurred()) {
        return -1;
    }
    Py_ssize_t size = PyList_Size(list);
    if (size < 1 || mask != size - 1 || (size & mask) != 0) {
        PyErr_SetString(PyExc_ValueError, "_slots: the list's length must be a power of two, mask = length - 1");
        return -1;
    }
    Py_INCREF(list);
    PyObject *old = H(self)->slots;
    H(self)->slots = list;
    H(self)->mask = mask;
    Py_XDECREF(old);
    return 0;
}

#define LL_ATTR(field, pyname)                                                   \
    static PyObject *ho_get_##field(PyObject *self, void *c)                     \
    {                                                                            \
        (void)c;                                                                 \
        return PyLong_FromLongLong(H(self)->field);                              \
    }                                                                            \
    static int ho_set_##field(PyObject *self, PyObject *v, void *c)              \
    {                                                                            \
        (void)c;                                                                 \
        return set_ll(v, &H(self)->field, pyname);                               \
    }

LL_ATTR(bytes_in, "_bytes_in")
LL_ATTR(small, "_small")

static PyObject *
ho_get_limit_bytes(PyObject *self, void *c)
{
    (void)c;
    return PyLong_FromLongLong(H(self)->limit_bytes);
}

/* _limit_bytes: a bound past 2**63 - 1 (capacity_bytes has no upper limit) is
 * that, which no byte total reaches; below -1, -1: the same decisions. */
static int
ho_set_limit_bytes(PyObject *self, PyObject *v, void *c)
{
    (void)c;
    if (no_delete(v, "_limit_bytes") < 0) {
        return -1;
    }
    int overflow;
    long long limit = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (limit == -1 && PyErr_Occurred()) {
        return -1;
    }
    H(self)->limit_bytes = overflow > 0 ? LLONG_MAX : overflow < 0 || limit < -1 ? -1 : limit;
    return 0;
}

static PyObject *
ho_get_wakeup(PyObject *self, void *c)
{
    (void)c;
    if (H(self)->wakeup == NULL) {
        PyErr_SetString(PyExc_AttributeError, "_wakeup");
        return NULL;
    }
    Py_INCREF(H(self)->wakeup);
    return H(self)->wakeup;
}

static int
ho_set_wakeup(PyObject *self, PyObject *value, void *c)
{
    (void)c;
    if (no_delete(value, "_wakeup") < 0) {
        return -1;
    }
    Py_INCREF(value);
    PyObject *old = H(self)->wakeup;
    H(self)->wakeup = value;
    H(self)->flag = is_wakeflag(value) ? (WakeFlagObject *)value : NULL;
    Py_XDECREF(old);
    return 0;
}

static PyGetSetDef handoff_getset[] = {
    {"queued", ho_get_queued, NULL, "The last seq queued.", NULL},
    {"_grant_range", ho_get_grant_range, NULL, "(stop, iterator over the seqs not handed out)", NULL},
    {"_slots", ho_get_slots, ho_set_slots, "(the newest list, its mask)", NULL},
    {"_bytes_in", ho_get_bytes_in, ho_set_bytes_in, "bytes queued in all", NULL},
    {"_limit_bytes", ho_get_limit_bytes, ho_set_limit_bytes, "the byte total allowed before Full (-1: none)", NULL},
    {"_small", ho_get_small, ho_set_small, "records below this many bytes take the fast path", NULL},
    {"_wakeup", ho_get_wakeup, ho_set_wakeup, "the link thread's Wakeup", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyMethodDef handoff_methods[] = {
    {"queue", (PyCFunction)(void (*)(void))handoff_queue, METH_FASTCALL | METH_KEYWORDS,
     "queue($self, /, record, seq=None)\n--\n\n"
     "Queue one record; returns its seq.  Never blocks.  Raises Full.\n"
     "`seq=`: the seq this record must get (queued + 1, else ValueError); it is\n"
     "checked and taken under a lock, so it means something only when no other\n"
     "thread queues at the same time."},
    {"_next_seq", handoff_next_seq, METH_NOARGS, "The grant's next seq; StopIteration once used up."},
    {"_new_grant", (PyCFunction)(void (*)(void))handoff_new_grant, METH_FASTCALL,
     "Hand out seqs first .. stop - 1 from now on."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot handoff_slots[] = {
    {Py_tp_new, handoff_new},
    {Py_tp_dealloc, handoff_dealloc},
    {Py_tp_traverse, handoff_traverse},
    {Py_tp_clear, handoff_clear},
    {Py_tp_getset, handoff_getset},
    {Py_tp_methods, handoff_methods},
    {Py_tp_doc, "The link's side of the hand-off in C: queue(), the grant, the newest ring "
                "list and the byte counts (link.py, ring.py)."},
    {0, NULL},
};

static PyType_Spec handoff_spec = {
    .name = "purelink._speedups.HandOff",
    .basicsize = sizeof(HandOffObject),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = handoff_slots,
};

/* ------------------------------------------------------------ the take */

typedef struct {
    long long since;
    PyObject *slots; /* borrowed from gens */
    Py_ssize_t mask;
} Gen;

/* Read gens (a tuple of (since, list, mask)) into `out` (n entries); -1 with
 * TypeError/ValueError if any is not that shape. */
static int
read_gens(PyObject *gens, Gen **out, Py_ssize_t *n)
{
    if (!PyTuple_Check(gens)) {
        PyErr_SetString(PyExc_TypeError, "gens must be a tuple of (since, slots, mask)");
        return -1;
    }
    Py_ssize_t count = PyTuple_Size(gens);
    Gen *g = PyMem_Malloc(sizeof(Gen) * (size_t)(count > 0 ? count : 1));
    if (g == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *t = PyTuple_GetItem(gens, i);
        PyObject *slots;
        if (t == NULL || !PyTuple_Check(t) || PyTuple_Size(t) != 3
            || !PyList_Check(slots = PyTuple_GetItem(t, 1))) {
            PyErr_SetString(PyExc_TypeError, "gens must be a tuple of (since, slots, mask)");
            goto fail;
        }
        g[i].since = PyLong_AsLongLong(PyTuple_GetItem(t, 0));
        if (g[i].since == -1 && PyErr_Occurred()) {
            goto fail;
        }
        if (g[i].since < 0) {
            PyErr_SetString(PyExc_ValueError, "gens: a seq is not negative");
            goto fail;
        }
        g[i].mask = PyLong_AsSsize_t(PyTuple_GetItem(t, 2));
        if (g[i].mask == -1 && PyErr_Occurred()) {
            goto fail;
        }
        Py_ssize_t size = PyList_Size(slots);
        if (size < 1 || g[i].mask != size - 1 || (size & g[i].mask) != 0) {
            PyErr_SetString(PyExc_ValueError, "gens: a list's length must be a power of two");
            goto fail;
        }
        g[i].slots = slots;
    }
    *out = g;
    *n = count;
    return 0;
fail:
    PyMem_Free(g);
    return -1;
}

/* The record of seq in slots (borrowed; None if empty), NULL with IndexError if
 * the list shrank under us (only a caller breaking the ring's rules can). */
static PyObject *
slot(const Gen *g, long long seq)
{
    return PyList_GetItem(g->slots, (Py_ssize_t)(seq & (long long)g->mask));
}

/* Empty the slot of seq; 0 or -1. */
static int
clear_slot(const Gen *g, long long seq)
{
    Py_INCREF(Py_None);
    return PyList_SetItem(g->slots, (Py_ssize_t)(seq & (long long)g->mask), Py_None);
}

/* A record's length as the batch's length table has it (capped at 0xFFFF);
 * -1 with an exception. */
static int
table_length(PyObject *r, uint16_t *v)
{
    /* a bytes object's size is its length: read with no call, from the
     * cache line whose reference count the append writes next */
    Py_ssize_t len = PyBytes_CheckExact(r) ? Py_SIZE(r) : PyObject_Size(r);
    if (len < 0) {
        return -1;
    }
    *v = len > 0xFFFF ? 0xFFFF : (uint16_t)len;
    return 0;
}

/* Append rec to out; with lens, its table length too (lens has room: the take
 * appends at most end - start + 1 records). */
static int
append_taken(PyObject *out, PyObject *rec, uint16_t *lens, Py_ssize_t *count)
{
    Py_INCREF(rec); /* held: the length of a subclass of bytes may run its code */
    int failed = (lens != NULL && table_length(rec, &lens[*count]) < 0) ||
                 PyList_Append(out, rec) < 0;
    Py_DECREF(rec);
    if (failed) {
        return -1;
    }
    (*count)++;
    return 0;
}

/* Look up the slots of lo + from .. lo + to (at most) into `ahead`; 0 or -1. */
static int
look_ahead(PlAhead *ahead, const Gen *g, long long lo, long long from, long long to)
{
    for (long long i = from; i <= to; i++) {
        PyObject *next = slot(g, lo + i);
        if (next == NULL) {
            return -1;
        }
        pl_ahead_keep(ahead, (Py_ssize_t)i, next);
    }
    return 0;
}

/* ring.take(gens, start, end), appending to out (and, with lens, each length
 * to lens; *count counts what was appended); see ring.py. */
static int
take_into(PyObject *out, const Gen *g, Py_ssize_t n, long long start, long long end,
          uint16_t *lens, Py_ssize_t *count)
{
    Py_ssize_t last = n - 1;
    for (Py_ssize_t k = 0; k < n; k++) {
        /* one list: all of start .. end is in it (ring.py's common case) */
        long long lo = n == 1 || start > g[k].since ? start : g[k].since;
        long long hi = end;
        if (k != last && g[k + 1].since - 1 < hi) {
            hi = g[k + 1].since - 1;
        }
        if (lo > hi) {
            continue;
        }
        if ((unsigned long long)hi - (unsigned long long)lo >= (unsigned long long)g[k].mask + 1) {
            PyErr_SetString(PyExc_ValueError, "start .. end spans more seqs than a list has slots");
            return -1;
        }
        /* the slots ahead, each looked up once: this list's slots of lo .. hi
         * are distinct (the span is under its size), and only the take's own
         * clears change them -- but for Python code, which only the length of
         * a record that is not exactly bytes runs: after one, look again */
        PlAhead ahead;
        long long span = hi - lo;
        if (look_ahead(&ahead, &g[k], lo, 0, span < PL_AHEAD - 1 ? span : PL_AHEAD - 1) < 0) {
            return -1;
        }
        for (long long i = 0; i <= span; i++) {
            long long s = lo + i;
            long long to = i + PL_AHEAD < span ? i + PL_AHEAD : span;
            if (i + PL_AHEAD <= span && look_ahead(&ahead, &g[k], lo, to, to) < 0) {
                return -1;
            }
            PyObject *rec = pl_ahead_item(&ahead, (Py_ssize_t)i);
            int exact = PyBytes_CheckExact(rec);
            if (rec != Py_None) {
                if (append_taken(out, rec, lens, count) < 0 ||
                    (!exact && look_ahead(&ahead, &g[k], lo, i + 1, to) < 0)) {
                    return -1;
                }
                /* cleared in an older list too, now that its line is in the cache:
                 * left there, the list's dealloc would meet each record again */
                if (clear_slot(&g[k], s) < 0) {
                    return -1;
                }
                continue;
            }
            /* a straggler wrote it into a newer list, or not yet */
            Py_ssize_t j = k + 1;
            for (; j < n; j++) {
                rec = slot(&g[j], s);
                if (rec == NULL) {
                    return -1;
                }
                if (rec != Py_None) {
                    break;
                }
            }
            if (j == n) {
                return 0; /* not there yet: stop before it */
            }
            exact = PyBytes_CheckExact(rec);
            if (append_taken(out, rec, lens, count) < 0 || clear_slot(&g[j], s) < 0 ||
                (!exact && look_ahead(&ahead, &g[k], lo, i + 1, to) < 0)) {
                return -1;
            }
        }
    }
    return 0;
}

static int
seq_args(PyObject *const *args, Py_ssize_t nargs, Py_ssize_t want, long long *a, long long *b)
{
    if (nargs != want) {
        PyErr_Format(PyExc_TypeError, "takes %zd arguments", want);
        return -1;
    }
    *a = PyLong_AsLongLong(args[1]);
    if (*a == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (want == 3) {
        *b = PyLong_AsLongLong(args[2]);
        if (*b == -1 && PyErr_Occurred()) {
            return -1;
        }
    }
    return 0;
}

/* take_into for one list (the common case): the records written from start on
 * are counted first, so the list is made at its size and filled in place (no
 * growth, no append per record); then their slots are cleared. */
static PyObject *
take_one(const Gen *g, long long start, long long end)
{
    if (start > end) {
        return PyList_New(0);
    }
    if ((unsigned long long)end - (unsigned long long)start >= (unsigned long long)g->mask + 1) {
        PyErr_SetString(PyExc_ValueError, "start .. end spans more seqs than a list has slots");
        return NULL;
    }
    Py_ssize_t count = 0;
    for (long long s = start; s <= end; s++, count++) {
        PyObject *rec = slot(g, s);
        if (rec == NULL) {
            return NULL;
        }
        if (rec == Py_None) {
            break; /* not there yet: stop before it */
        }
    }
    PyObject *out = PyList_New(count);
    if (out == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *rec = slot(g, start + i);
        if (rec == NULL || rec == Py_None) { /* only a writer breaking the ring's rules */
            if (rec == Py_None) {
                PyErr_SetString(PyExc_RuntimeError, "a ring slot was emptied during the take");
            }
            Py_DECREF(out);
            return NULL;
        }
        Py_INCREF(rec);
        if (PyList_SetItem(out, i, rec) < 0 || clear_slot(g, start + i) < 0) {
            Py_DECREF(out);
            return NULL;
        }
    }
    return out;
}

/* ring.py take(gens, start, end) as a new list, or NULL. */
static PyObject *
take_list(PyObject *const *args, Py_ssize_t nargs)
{
    long long start, end;
    Gen *g;
    Py_ssize_t n;
    if (seq_args(args, nargs, 3, &start, &end) < 0 || read_gens(args[0], &g, &n) < 0) {
        return NULL;
    }
    PyObject *out;
    if (n == 1) {
        out = take_one(g, start, end);
    } else {
        Py_ssize_t count = 0;
        out = PyList_New(0);
        if (out != NULL && n > 0 && take_into(out, g, n, start, end, NULL, &count) < 0) {
            Py_CLEAR(out);
        }
    }
    PyMem_Free(g);
    return out;
}

/* ring_take(gens, start, end) -> list: ring.py take(). */
static PyObject *
ring_take(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    return take_list(args, nargs);
}

static PyObject *ring_lengths(PyObject *module, PyObject *records);

/* ring_take_lengths(gens, start, end) -> (list, bytes): ring_take and
 * ring_lengths of what it took in one call (thread.py _take). */
static PyObject *
ring_take_lengths(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *chunk = take_list(args, nargs);
    if (chunk == NULL) {
        return NULL;
    }
    PyObject *lens = ring_lengths(module, chunk);
    if (lens == NULL) {
        Py_DECREF(chunk);
        return NULL;
    }
    PyObject *pair = PyTuple_Pack(2, chunk, lens);
    Py_DECREF(chunk);
    Py_DECREF(lens);
    return pair;
}

/* ring_take_into(gens, start, end, records) -> bytes: ring_take's records
 * appended to `records` itself (the sender's list: no list in between, each
 * record touched once), and their length table, as ring_lengths gives it. */
static PyObject *
ring_take_into(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    long long start, end;
    Gen *g;
    Py_ssize_t n;
    if (nargs != 4 || !PyList_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError, "ring_take_into(gens, start, end, records: list)");
        return NULL;
    }
    if (seq_args(args, 3, 3, &start, &end) < 0 || read_gens(args[0], &g, &n) < 0) {
        return NULL;
    }
    /* at most as many as the lists hold together (take_into declines a range
     * wider than a list within that list) */
    Py_ssize_t room = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        room += g[k].mask + 1;
    }
    if (start > end) {
        room = 0;
    } else if ((unsigned long long)end - (unsigned long long)start < (unsigned long long)room) {
        room = (Py_ssize_t)(end - start + 1);
    }
    /* the table is written straight into the bytes returned, made for all of
     * start .. end (what a take finds but for a hole); copied to its size
     * only when the take stopped short */
    PyObject *table = PyBytes_FromStringAndSize(NULL, room * (Py_ssize_t)sizeof(uint16_t));
    uint16_t *lens = table == NULL ? NULL : (uint16_t *)PyBytes_AsString(table);
    Py_ssize_t count = 0;
    PyObject *out = NULL;
    if (lens != NULL && (n == 0 || take_into(args[3], g, n, start, end, lens, &count) == 0)) {
        if (count == room) {
            out = Py_NewRef(table);
        } else {
            out = PyBytes_FromStringAndSize((const char *)lens, count * (Py_ssize_t)sizeof(uint16_t));
        }
    }
    Py_XDECREF(table);
    PyMem_Free(g);
    return out;
}

/* records_bytes(records, lens, lo, hi) -> int: the bytes of records[lo:hi],
 * from their length table `lens` (array("H"), each length capped at 0xFFFF):
 * sender_records.py _release's count of what was stored.  Only a capped entry
 * looks at its record (its real length); the others are not touched, so the
 * count reads 2 bytes per record, not each record's object. */
static PyObject *
records_bytes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    long long lo, hi;
    if (nargs != 4 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "records_bytes(records: list, lens, lo, hi)");
        return NULL;
    }
    lo = PyLong_AsLongLong(args[2]);
    hi = lo == -1 && PyErr_Occurred() ? -1 : PyLong_AsLongLong(args[3]);
    if (PyErr_Occurred()) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    PyObject *out = NULL;
    Py_ssize_t size = PyList_Size(args[0]);
    if (view.itemsize != 2 || view.format == NULL || strcmp(view.format, "H") != 0) {
        PyErr_SetString(PyExc_TypeError, "records_bytes(): lens is an array('H')");
    } else if (lo < 0 || hi > size || lo > hi || hi > view.len / 2) {
        PyErr_SetString(PyExc_IndexError, "records_bytes(): lo .. hi is not within both");
    } else {
        const unsigned char *p = view.buf;
        long long total = 0;
        Py_ssize_t i = (Py_ssize_t)lo;
        for (; i < (Py_ssize_t)hi; i++) {
            uint16_t v;
            memcpy(&v, p + 2 * i, sizeof v);
            if (v == 0xFFFF) { /* capped: the record's own length */
                PyObject *r = PyList_GetItem(args[0], i);
                Py_ssize_t len = r == NULL ? -1 : PyObject_Size(r);
                if (len < 0) {
                    break;
                }
                total += len;
            } else {
                total += v;
            }
        }
        if (i == (Py_ssize_t)hi) {
            out = PyLong_FromLongLong(total);
        }
    }
    PyBuffer_Release(&view);
    return out;
}

/* ring_has(gens, seq) -> bool: ring.py has(). */
static PyObject *
ring_has(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    long long seq, unused = 0;
    Gen *g;
    Py_ssize_t n;
    if (seq_args(args, nargs, 2, &seq, &unused) < 0 || read_gens(args[0], &g, &n) < 0) {
        return NULL;
    }
    int found = 0;
    for (Py_ssize_t k = n - 1; k >= 0; k--) {
        PyObject *rec = slot(&g[k], seq);
        if (rec == NULL) {
            PyMem_Free(g);
            return NULL;
        }
        if (rec != Py_None) {
            found = 1;
            break;
        }
        if (g[k].since <= seq) {
            break;
        }
    }
    PyMem_Free(g);
    return PyBool_FromLong(found);
}

/* ring_lengths(records) -> bytes: each record's length, capped at 0xFFFF, as
 * native uint16 (for array("H", ...)): the batch's length table that the link
 * thread hands the sender with the records (thread.py _take). */
static PyObject *
ring_lengths(PyObject *module, PyObject *records)
{
    (void)module;
    if (!PyList_Check(records)) {
        PyErr_SetString(PyExc_TypeError, "ring_lengths() takes a list");
        return NULL;
    }
    Py_ssize_t n = PyList_Size(records);
    PyObject *out = PyBytes_FromStringAndSize(NULL, n * (Py_ssize_t)sizeof(uint16_t));
    if (out == NULL) {
        return NULL;
    }
    char *p = PyBytes_AsString(out);
    if (p == NULL) {
        Py_DECREF(out);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *r = PyList_GetItem(records, i);
        Py_ssize_t len = r == NULL ? -1 : PyBytes_CheckExact(r) ? PyBytes_Size(r) : PyObject_Size(r);
        if (len < 0) {
            Py_DECREF(out);
            return NULL;
        }
        uint16_t v = len > 0xFFFF ? 0xFFFF : (uint16_t)len;
        memcpy(p + i * (Py_ssize_t)sizeof v, &v, sizeof v);
    }
    return out;
}

/* untracked(records: list) -> list: the same list, no longer tracked by the
 * cyclic garbage collector.  For the link's lists of records (the ring's
 * slots, the sender's records), which hold exact bytes and None only: those
 * refer to nothing, so no cycle can run through the list and a collection
 * has nothing to find there.  Tracked, a list of a backlog's records is young
 * while the backlog drains (made, or grown, for it), and the young
 * collections that the listener's and the application's allocations start
 * walked all its items, each a cache miss (a list of 200,000 records and a
 * ring of 524,288 slots: one such collection took ~10 ms).  Appending to or
 * cutting an untracked list leaves it untracked. */
static PyObject *
untracked(PyObject *module, PyObject *records)
{
    (void)module;
    if (!PyList_CheckExact(records)) {
        PyErr_SetString(PyExc_TypeError, "untracked() takes a list");
        return NULL;
    }
    PyObject_GC_UnTrack(records);
    return Py_NewRef(records);
}

static PyMethodDef ring_functions[] = {
    {"ring_lengths", ring_lengths, METH_O,
     "ring_lengths(records) -> bytes: each length, at most 0xFFFF, as native uint16."},
    {"ring_take", (PyCFunction)(void (*)(void))ring_take, METH_FASTCALL,
     "ring_take(gens, start, end) -> list: ring.py's take() in C."},
    {"ring_take_lengths", (PyCFunction)(void (*)(void))ring_take_lengths, METH_FASTCALL,
     "ring_take_lengths(gens, start, end) -> (list, bytes): ring_take and ring_lengths."},
    {"ring_take_into", (PyCFunction)(void (*)(void))ring_take_into, METH_FASTCALL,
     "ring_take_into(gens, start, end, records) -> bytes: the take appended to records."},
    {"records_bytes", (PyCFunction)(void (*)(void))records_bytes, METH_FASTCALL,
     "records_bytes(records, lens, lo, hi) -> int: the bytes of records[lo:hi]."},
    {"ring_has", (PyCFunction)(void (*)(void))ring_has, METH_FASTCALL,
     "ring_has(gens, seq) -> bool: ring.py's has() in C."},
    {"untracked", untracked, METH_O,
     "untracked(records: list) -> list: the list, not tracked by the garbage collector "
     "(for lists of bytes and None only)."},
    {NULL, NULL, 0, NULL},
};

static int
add_type(PyObject *module, PyType_Spec *spec, const char *name)
{
    PyObject *type = PyType_FromModuleAndSpec(module, spec, NULL);
    if (type == NULL) {
        return -1;
    }
    int r = PyModule_AddObjectRef(module, name, type);
    Py_DECREF(type);
    return r;
}

int
pl_ring_exec(PyObject *module)
{
    if (add_type(module, &wakeflag_spec, "WakeFlag") < 0
        || add_type(module, &handoff_spec, "HandOff") < 0
        || PyModule_AddFunctions(module, ring_functions) < 0) {
        return -1;
    }
    return PyModule_AddIntConstant(module, "has_ring", 1);
}
