/* purelink._speedups: the in-flight ledger's per-datagram work -- the stamps
 * as datagrams go out, the walk of an answer over the flights, RACK's
 * time-based loss check.
 *
 * Why: recovery.py's InFlight touches every datagram twice (sent, then
 * acked) in Python, a few hundred nanoseconds each.  These functions do those
 * loops in C on the very same state (InFlight's `flights`, a dict or the
 * ring of flights.c; `bytes`, `_retx`, its DeliveryRate's counters), so the
 * pure-Python path and this one
 * cannot drift apart, and hand back one aggregate per answer (the acked
 * flights, the lost ones); every policy -- congestion control, the RTT
 * estimator, path MTU, the counters -- stays Python and is called as before.
 *
 * Each function declines (returns NotImplemented, having changed nothing)
 * when it meets what it was not written for: a flight that is not the
 * compiled core's Flight, a rate's best flight of another type, an answer
 * whose ranges are not pairs of ints.  recovery.py then runs its own loop.
 */
#include "flight.h"

#include <stdint.h>

typedef struct {
    unsigned long long a, b;
} Range;

typedef struct {
    unsigned long long seq;
    Py_ssize_t n;
    Range *spans; /* into Answer.spans */
} Frag;

/* An ACK's ranges and fragment spans, in C. */
typedef struct {
    Range *ranges;
    Py_ssize_t nranges;
    Frag *frags;
    Py_ssize_t nfrags;
    Range *spans;
} Answer;

static void
answer_free(Answer *a)
{
    PyMem_Free(a->ranges);
    PyMem_Free(a->frags);
    PyMem_Free(a->spans);
}

/* A (a, b) pair of unsigned ints; -1 (no exception) if it is not one. */
static int
pair(PyObject *t, Range *r)
{
    if (!PyTuple_Check(t) || PyTuple_Size(t) != 2) {
        return -1;
    }
    r->a = PyLong_AsUnsignedLongLong(PyTuple_GetItem(t, 0));
    r->b = PyLong_AsUnsignedLongLong(PyTuple_GetItem(t, 1));
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    return 0;
}

/* The answer's ranges and fragments; 1 to decline, -1 with an exception. */
static int
answer_parse(PyObject *ack, Answer *out)
{
    int rc = 1;
    PyObject *ranges = PyObject_GetAttrString(ack, "ranges");
    PyObject *frags = ranges != NULL ? PyObject_GetAttrString(ack, "fragments") : NULL;
    if (frags == NULL) {
        Py_XDECREF(ranges);
        return -1;
    }
    if (!PyTuple_Check(ranges) || !PyTuple_Check(frags)) {
        goto done;
    }
    out->nranges = PyTuple_Size(ranges);
    out->nfrags = PyTuple_Size(frags);
    out->ranges = PyMem_Calloc((size_t)out->nranges + 1, sizeof(Range));
    out->frags = PyMem_Calloc((size_t)out->nfrags + 1, sizeof(Frag));
    Py_ssize_t nspans = 0;
    for (Py_ssize_t k = 0; k < out->nfrags; k++) {
        PyObject *entry = PyTuple_GetItem(frags, k);
        if (!PyTuple_Check(entry) || PyTuple_Size(entry) != 2 ||
            !PyTuple_Check(PyTuple_GetItem(entry, 1))) {
            goto done;
        }
        nspans += PyTuple_Size(PyTuple_GetItem(entry, 1));
    }
    out->spans = PyMem_Calloc((size_t)nspans + 1, sizeof(Range));
    if (out->ranges == NULL || out->frags == NULL || out->spans == NULL) {
        PyErr_NoMemory();
        rc = -1;
        goto done;
    }
    for (Py_ssize_t k = 0; k < out->nranges; k++) {
        if (pair(PyTuple_GetItem(ranges, k), &out->ranges[k]) < 0) {
            goto done;
        }
    }
    Range *span = out->spans;
    for (Py_ssize_t k = 0; k < out->nfrags; k++) {
        PyObject *entry = PyTuple_GetItem(frags, k);
        PyObject *spans = PyTuple_GetItem(entry, 1);
        out->frags[k].seq = PyLong_AsUnsignedLongLong(PyTuple_GetItem(entry, 0));
        if (PyErr_Occurred()) {
            PyErr_Clear();
            goto done;
        }
        out->frags[k].n = PyTuple_Size(spans);
        out->frags[k].spans = span;
        for (Py_ssize_t s = 0; s < out->frags[k].n; s++) {
            if (pair(PyTuple_GetItem(spans, s), span++) < 0) {
                goto done;
            }
        }
    }
    rc = 0;
done:
    Py_DECREF(ranges);
    Py_DECREF(frags);
    return rc;
}

static int
in_ranges(const PlFlight *f, const Answer *ans)
{
    for (Py_ssize_t k = 0; k < ans->nranges; k++) {
        if (ans->ranges[k].a <= f->first && f->last <= ans->ranges[k].b) {
            return 1;
        }
    }
    return 0;
}

/* In the spans of the fragment entry for f's batch (the last entry of that
 * seq: recovery.py makes a dict of them). */
static int
in_spans(const PlFlight *f, const Answer *ans)
{
    for (Py_ssize_t k = ans->nfrags - 1; k >= 0; k--) {
        const Frag *e = &ans->frags[k];
        if (e->seq != f->first) {
            continue;
        }
        for (Py_ssize_t s = 0; s < e->n; s++) {
            /* a <= offset and end <= b, as Python compares ints */
            int from = f->offset >= 0 && e->spans[s].a <= (unsigned long long)f->offset;
            int to = f->end < 0 || (unsigned long long)f->end <= e->spans[s].b;
            if (from && to) {
                return 1;
            }
        }
        return 0;
    }
    return 0;
}

/* ---------------------------------------------------------- helpers */

static int
get_ll(PyObject *o, const char *name, long long *v)
{
    PyObject *x = PyObject_GetAttrString(o, name);
    if (x == NULL) {
        return -1;
    }
    *v = PyLong_AsLongLong(x);
    Py_DECREF(x);
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

/* o.name = x, taking the new reference x (NULL: its creation failed) */
static int
set_new(PyObject *o, const char *name, PyObject *x)
{
    if (x == NULL) {
        return -1;
    }
    int rc = PyObject_SetAttrString(o, name, x);
    Py_DECREF(x);
    return rc;
}

static int
set_ll(PyObject *o, const char *name, long long v)
{
    return set_new(o, name, PyLong_FromLongLong(v));
}

static int
set_double(PyObject *o, const char *name, double v)
{
    return set_new(o, name, PyFloat_FromDouble(v));
}

static int
args_double(PyObject *o, double *v)
{
    *v = PyFloat_AsDouble(o);
    return *v == -1.0 && PyErr_Occurred() ? -1 : 0;
}

/* The flights in order, from a dict or a Flights (flights.c). */
typedef struct {
    PyObject *dict;
    PlFlights *ring;
    Py_ssize_t pos;
    unsigned long long pn;
} Walk;

/* 0 if `flights` is neither a dict nor a Flights. */
static int
walk_start(Walk *w, PyObject *flights)
{
    w->ring = pl_flights(flights);
    w->dict = w->ring == NULL && PyDict_Check(flights) ? flights : NULL;
    w->pos = 0;
    w->pn = 0;
    return w->ring != NULL || w->dict != NULL;
}

/* The next flight (borrowed) and its key (borrowed; NULL from a Flights); 0 at the end. */
static int
walk_next(Walk *w, PyObject **key, PyObject **value)
{
    if (w->ring != NULL) {
        *key = NULL;
        if (!pl_flights_next(w->ring, &w->pn, value)) {
            return 0;
        }
        w->pn++;
        return 1;
    }
    return PyDict_Next(w->dict, &w->pos, key, value);
}

static Py_ssize_t
walk_size(const Walk *w)
{
    return w->ring != NULL ? pl_flights_len(w->ring) : PyDict_Size(w->dict);
}

/* ------------------------------------------------------------- sent */

/* ledger_sent(new, flights, bytes, delivered, delivered_time, first_sent,
 * app_limited) -> bytes: every flight of the dict `new` (pn -> Flight, in
 * sending order, none a retransmission) went out: each gets the delivery-rate
 * stamps given (DeliveryRate.on_sent's, the interval already restarted by the
 * caller if nothing was in flight), goes into `flights` under its packet
 * number, and counts in the bytes in flight, returned (InFlight.sent for each,
 * without the congestion controller's on_sent: recovery.py calls this only
 * when the controller has none).  NotImplemented: declined, nothing done. */
static PyObject *
ledger_sent(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Walk into;
    if (nargs != 7 || !PyDict_Check(args[0]) || !walk_start(&into, args[1])) {
        PyErr_SetString(PyExc_TypeError, "ledger_sent(new: dict, flights: dict | Flights, "
                                         "bytes, delivered, delivered_time, first_sent, "
                                         "app_limited)");
        return NULL;
    }
    PyObject *new = args[0], *flights = args[1];
    long long bytes = PyLong_AsLongLong(args[2]);
    long long delivered = PyLong_AsLongLong(args[3]);
    double delivered_time, first_sent;
    int app_limited = PyObject_IsTrue(args[6]);
    if ((bytes == -1 || delivered == -1) && PyErr_Occurred()) {
        return NULL;
    }
    if (app_limited < 0 || args_double(args[4], &delivered_time) < 0 ||
        args_double(args[5], &first_sent) < 0) {
        return NULL;
    }
    PyTypeObject *tp = pl_flight_type(module);
    if (tp == NULL) {
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int plain = 1;
    while (PyDict_Next(new, &pos, &key, &value)) {
        if (Py_TYPE(value) != tp || ((PlFlight *)value)->retx) {
            plain = 0;
            break;
        }
    }
    Py_DECREF(tp);
    if (!plain) {
        Py_RETURN_NOTIMPLEMENTED;
    }
    pos = 0;
    while (PyDict_Next(new, &pos, &key, &value)) {
        PlFlight *f = (PlFlight *)value;
        f->delivered = delivered;
        f->delivered_time = delivered_time;
        f->first_sent = first_sent;
        f->app_limited = (char)app_limited;
        if (into.ring != NULL) {
            unsigned long long pn = PyLong_AsUnsignedLongLong(key);
            if ((pn == (unsigned long long)-1 && PyErr_Occurred()) ||
                pl_flights_put(into.ring, pn, value) < 0) {
                return NULL;
            }
        } else if (PyDict_SetItem(flights, key, value) < 0) {
            return NULL;
        }
        bytes += f->size;
    }
    return PyLong_FromLongLong(bytes);
}

/* ------------------------------------------------------------ acked */

/* One flight acked: into `acked`, its key in `flights` into `keys` (the
 * very key object, so that resolve's removal makes no int to look it up). */
static int
take_acked(PyObject *acked, PyObject *keys, PyObject *key, PyObject *value)
{
    return PyList_Append(acked, value) < 0 || (key != NULL && PyList_Append(keys, key) < 0)
               ? -1
               : 0;
}

/* The flights `ack` covers, in the flights' order (InFlight._acked): into
 * `acked`, their keys into `keys` (a dict's).  1 to decline, -1 with an
 * exception, 0 done. */
static int
walk_acked(PyObject *flights, PyTypeObject *tp, const Answer *ans, unsigned long long largest,
           unsigned long long received, int all_received, long long retx, PyObject *acked,
           PyObject *keys)
{
    int full = ans->nranges || ans->nfrags || retx;
    Walk w;
    PyObject *key, *value;
    walk_start(&w, flights);
    while (walk_next(&w, &key, &value)) {
        if (Py_TYPE(value) != tp) {
            return 1;
        }
        PlFlight *f = (PlFlight *)value;
        if (f->pn > largest) {
            break;
        }
        if (f->last <= received || (ans->nranges && in_ranges(f, ans)) ||
            (ans->nfrags && f->end && in_spans(f, ans))) {
            if (take_acked(acked, keys, key, value) < 0) {
                return -1;
            }
        } else if (!full) {
            break;
        }
    }
    Py_ssize_t n = PyList_Size(acked);
    if (n < walk_size(&w) && all_received) {
        /* everything sent is received: copies whose own answer never came are
         * done too (in the flights' order, after those above) */
        Py_ssize_t j = 0;
        walk_start(&w, flights);
        while (walk_next(&w, &key, &value)) {
            if (j < n && value == PyList_GetItem(acked, j)) {
                j++;
                continue;
            }
            if (Py_TYPE(value) != tp) {
                return 1;
            }
            if (((PlFlight *)value)->last <= received &&
                take_acked(acked, keys, key, value) < 0) {
                return -1;
            }
        }
    }
    return 0;
}

/* What resolving the acked flights changes: InFlight.remove and
 * DeliveryRate.on_acked for each. */
typedef struct {
    long long bytes, retx, delivered, newly;
    PyObject *best; /* borrowed: a Flight or None */
} Resolve;

static int
resolve(PyObject *flights, PyObject *acked, PyObject *keys, Resolve *r)
{
    Py_ssize_t n = PyList_Size(acked);
    PlFlights *ring = pl_flights(flights);
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *item = PyList_GetItem(acked, k);
        PlFlight *f = (PlFlight *)item;
        if (ring != NULL ? pl_flights_del(ring, f->pn) < 0
                         : PyDict_DelItem(flights, PyList_GetItem(keys, k)) < 0) {
            return -1;
        }
        r->bytes -= f->size;
        r->retx -= f->retx != 0;
        r->delivered += f->size;
        r->newly += f->size;
        PlFlight *best = r->best == Py_None ? NULL : (PlFlight *)r->best;
        if (best == NULL || f->sent > best->sent ||
            (f->sent == best->sent && f->delivered > best->delivered)) {
            r->best = item;
        }
    }
    return 0;
}

/* ledger_acked(inflight, ack, received, all_received, now) -> [flights]:
 * InFlight._acked, then InFlight.remove and DeliveryRate.on_acked for each
 * flight it returns.  NotImplemented: declined, nothing done. */
static PyObject *
ledger_acked(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 5) {
        PyErr_SetString(PyExc_TypeError,
                        "ledger_acked(inflight, ack, received, all_received, now)");
        return NULL;
    }
    PyObject *inflight = args[0];
    unsigned long long received = PyLong_AsUnsignedLongLong(args[2]);
    int all_received = PyObject_IsTrue(args[3]);
    double now;
    if ((received == (unsigned long long)-1 && PyErr_Occurred()) || all_received < 0 ||
        args_double(args[4], &now) < 0) {
        return NULL;
    }
    Answer ans = {0};
    Resolve r = {0};
    long long largest;
    PyObject *result = NULL, *acked = NULL, *keys = NULL, *rate = NULL, *best = NULL;
    PyTypeObject *tp = pl_flight_type(module);
    PyObject *flights = tp != NULL ? PyObject_GetAttrString(inflight, "flights") : NULL;
    if (flights == NULL) {
        goto done;
    }
    rate = PyObject_GetAttrString(inflight, "rate");
    best = rate != NULL ? PyObject_GetAttrString(rate, "_best") : NULL;
    if (best == NULL || get_ll(inflight, "_largest_pn", &largest) < 0 ||
        get_ll(inflight, "bytes", &r.bytes) < 0 || get_ll(inflight, "_retx", &r.retx) < 0 ||
        get_ll(rate, "delivered", &r.delivered) < 0 || get_ll(rate, "_newly", &r.newly) < 0) {
        goto done;
    }
    int rc = answer_parse(args[1], &ans);
    Walk check;
    if (rc == 0 && (!walk_start(&check, flights) || (best != Py_None && Py_TYPE(best) != tp) ||
                    largest < 0)) {
        rc = 1;
    }
    acked = rc == 0 ? PyList_New(0) : NULL;
    keys = acked != NULL ? PyList_New(0) : NULL;
    if (rc == 0 && keys == NULL) {
        goto done;
    }
    if (rc == 0) {
        rc = walk_acked(flights, tp, &ans, (unsigned long long)largest, received, all_received,
                        r.retx, acked, keys);
    }
    if (rc != 0) {
        result = rc > 0 ? Py_NewRef(Py_NotImplemented) : NULL;
        goto done;
    }
    r.best = best;
    rc = resolve(flights, acked, keys, &r);
    /* what was resolved stays resolved, even after an error midway */
    if (set_ll(inflight, "bytes", r.bytes) < 0 || set_ll(inflight, "_retx", r.retx) < 0 ||
        set_ll(rate, "delivered", r.delivered) < 0 || set_ll(rate, "_newly", r.newly) < 0 ||
        PyObject_SetAttrString(rate, "_best", r.best) < 0 ||
        (PyList_Size(acked) && set_double(rate, "delivered_time", now) < 0) || rc < 0) {
        goto done;
    }
    result = Py_NewRef(acked);
done:
    answer_free(&ans);
    Py_XDECREF(keys);
    Py_XDECREF(acked);
    Py_XDECREF(best);
    Py_XDECREF(rate);
    Py_XDECREF(flights);
    Py_XDECREF((PyObject *)tp);
    return result;
}

/* ------------------------------------------------------------- RACK */

/* ledger_lost(flights, reference, delay, now) -> (lost, loss_time): RACK's
 * walk (InFlight.detect_losses): the flights sent before packet number
 * `reference` that are `delay` old at `now`, up to the first that is not
 * (whose deadline is loss_time; None if there is none).  Changes nothing.
 * NotImplemented: declined. */
static PyObject *
ledger_lost(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Walk w;
    if (nargs != 4 || !walk_start(&w, args[0])) {
        PyErr_SetString(PyExc_TypeError,
                        "ledger_lost(flights: dict | Flights, reference, delay, now)");
        return NULL;
    }
    unsigned long long reference = PyLong_AsUnsignedLongLong(args[1]);
    double delay, now;
    if ((reference == (unsigned long long)-1 && PyErr_Occurred()) ||
        args_double(args[2], &delay) < 0 || args_double(args[3], &now) < 0) {
        return NULL;
    }
    PyTypeObject *tp = pl_flight_type(module);
    if (tp == NULL) {
        return NULL;
    }
    PyObject *lost = PyList_New(0);
    PyObject *loss_time = NULL;
    PyObject *key, *value;
    while (lost != NULL && walk_next(&w, &key, &value)) {
        if (Py_TYPE(value) != tp) {
            Py_DECREF(lost);
            Py_DECREF(tp);
            Py_RETURN_NOTIMPLEMENTED;
        }
        PlFlight *f = (PlFlight *)value;
        if (f->pn >= reference) {
            break;
        }
        if (f->sent + delay <= now) {
            if (PyList_Append(lost, value) < 0) {
                Py_CLEAR(lost);
            }
        } else {
            loss_time = PyFloat_FromDouble(f->sent + delay);
            if (loss_time == NULL) {
                Py_CLEAR(lost);
            }
            break;
        }
    }
    Py_DECREF(tp);
    if (lost == NULL) {
        Py_XDECREF(loss_time);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, lost, loss_time != NULL ? loss_time : Py_None);
    Py_DECREF(lost);
    Py_XDECREF(loss_time);
    return result;
}

static PyMethodDef ledger_functions[] = {
    {"ledger_sent", (PyCFunction)(void (*)(void))ledger_sent, METH_FASTCALL,
     "ledger_sent(new, flights, bytes, delivered, delivered_time, first_sent, app_limited) "
     "-> bytes: stamp, keep and count the flights that went out."},
    {"ledger_acked", (PyCFunction)(void (*)(void))ledger_acked, METH_FASTCALL,
     "ledger_acked(inflight, ack, received, all_received, now) -> the flights resolved."},
    {"ledger_lost", (PyCFunction)(void (*)(void))ledger_lost, METH_FASTCALL,
     "ledger_lost(flights, reference, delay, now) -> (lost, loss_time)."},
    {NULL, NULL, 0, NULL},
};

int
pl_ledger_exec(PyObject *module)
{
    if (PyModule_AddFunctions(module, ledger_functions) < 0) {
        return -1;
    }
    return PyModule_AddIntConstant(module, "has_ledger", 1);
}
