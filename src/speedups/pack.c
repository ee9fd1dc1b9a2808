/* purelink._speedups: packing records into batches and datagrams, straight
 * into each datagram's own bytes.
 *
 * Why: packing is most of the link thread's CPU per record.  This is
 * packing.py's Packer (and its Flight, flight.h) in C, decision for decision:
 * the same batch boundaries (the same fitting, from the last batch's count),
 * the same DATA datagrams and FRAGMENT pieces, the same resends, so the wire
 * bytes are identical (tests/native/test_pack.py holds them equal).  Each
 * datagram is allocated once at its final size and written in place: header,
 * length table and records copied once, the batch CRC-32C and the datagram
 * CRC-32C computed over the bytes where they lie -- no joins.  A batch larger
 * than one datagram is put together in a buffer the packer keeps from one
 * batch to the next (warm in the cache, no allocation), and cut from there.
 * With `stamps`, each flight gets the ledger's delivery-rate stamps as it is
 * made and goes straight into the ledger's flights (a dict or Flights).
 *
 * Layouts (wire.py, batch.py, docs/wire.md), all little-endian:
 *   datagram header  "PL" u8 version=2 u8 type u32 conn_id        (8)
 *   DATA             u64 pn, the batch, u32 crc                    (8 + 8 + batch + 4)
 *   batch            u64 position=0 u32 crc "PB" u8 1 u8 flags u32 length
 *                    u32 count u64 producer u64 first_seq u32 epoch (44),
 *                    u16 lengths[count] (not with FLAG_LARGE), payloads
 *   FRAGMENT         u64 pn u32 epoch u64 seq u32 total u32 offset, piece, u32 crc
 */
#include "flight.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "structmember.h"

#include "gso_send.h"

#define HEADER 8
#define TRAILER 4
#define BATCH_HEADER 44
#define DATA_OVERHEAD (HEADER + 8 + TRAILER)    /* 20 */
#define FRAGMENT_OVERHEAD (HEADER + 28 + TRAILER) /* 40 */
#define FRAG_HEAD (FRAGMENT_OVERHEAD - TRAILER) /* where a piece starts: 36 */
#define BATCH_LIMIT 0xFFFF
#define MAX_SMALL_RECORD 0xFFFF
#define BATCH_KEEP (1 << 20) /* a batch buffer kept between batches: at most this */
#define MSG_DATA 4
#define MSG_FRAGMENT 5
#define DATAGRAM_VERSION 2
#define BATCH_VERSION 1
#define FLAG_LARGE 1
#define AT_BATCH (HEADER + 8)         /* a DATA datagram's batch: 16 */
#define AT_LENGTH (AT_BATCH + 16)     /* its length field: 32 */
#define AT_TOTAL (HEADER + 20)        /* a FRAGMENT's total: 28 */

/* Py_XSETREF is not in the limited API: replace *slot by value (a new
 * reference), dropping the old one last. */
static inline void
setref(PyObject **slot, PyObject *value)
{
    PyObject *old = *slot;
    *slot = value;
    Py_XDECREF(old);
}

/* ------------------------------------------------------------- bytes */

static inline void
put16(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static inline void
put32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
    p[2] = (unsigned char)(v >> 16);
    p[3] = (unsigned char)(v >> 24);
}

static inline void
put64(unsigned char *p, uint64_t v)
{
    put32(p, (uint32_t)v);
    put32(p + 4, (uint32_t)(v >> 32));
}

static inline uint32_t
get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* CRC-32C arithmetic (zlib's crc32_combine, for the Castagnoli polynomial):
 * crc(A || B) = multmodp(x^(8 len(B)), crc(A)) ^ crc(B).  The packer checksums
 * a batch's bytes once and makes each full piece's datagram CRC from its
 * piece's CRC and its 36-byte head, instead of reading the piece again. */
#define POLY 0x82F63B78u

/* a * b modulo the polynomial, bit-reflected; a is never 0 here */
static uint32_t
multmodp(uint32_t a, uint32_t b)
{
    uint32_t m = (uint32_t)1 << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0) {
                break;
            }
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

/* A multiplication by one constant `a`, by table: multmodp(a, b) is linear in b
 * (over GF(2)), so it is the XOR of the products of b's four bytes, each
 * looked up: four loads where multmodp takes up to 32 dependent steps.  The
 * packer moves a CRC on past one chunk twice a datagram (the batch's CRC, and
 * each full piece's), always by the same x^(8 chunk). */
typedef struct {
    uint32_t t[4][256];
} MulTable;

/* The table of a: each entry the XOR of the products of its bits, the 32
 * products of one bit each made by multmodp. */
static void
mul_table(MulTable *m, uint32_t a)
{
    for (int j = 0; j < 4; j++) {
        m->t[j][0] = 0;
        for (uint32_t v = 1; v < 256; v++) {
            uint32_t low = v & (~v + 1); /* v's lowest bit */
            m->t[j][v] = v == low ? multmodp(a, v << (8 * j)) : m->t[j][low] ^ m->t[j][v ^ low];
        }
    }
}

static inline uint32_t
mul_by(const MulTable *m, uint32_t b)
{
    return m->t[0][b & 0xFF] ^ m->t[1][(b >> 8) & 0xFF] ^ m->t[2][(b >> 16) & 0xFF] ^
           m->t[3][b >> 24];
}

/* x^(8 n) modulo the polynomial: moves a CRC on past n bytes */
static uint32_t
shift_op(size_t n)
{
    uint32_t result = (uint32_t)1 << 31; /* x^0 */
    uint32_t base = (uint32_t)1 << 23;   /* x^8 */
    while (n) {
        if (n & 1) {
            result = multmodp(base, result);
        }
        base = multmodp(base, base);
        n >>= 1;
    }
    return result;
}

static inline void
put_datagram_header(unsigned char *p, int kind, uint32_t conn_id)
{
    p[0] = 'P';
    p[1] = 'L';
    p[2] = DATAGRAM_VERSION;
    p[3] = (unsigned char)kind;
    put32(p + 4, conn_id);
}

/* The batch header's bytes from offset 12 (what the batch CRC covers of it). */
static inline void
put_batch_tail(unsigned char *p, int flags, uint32_t length, uint32_t count, uint64_t producer,
               uint64_t first_seq, uint32_t epoch)
{
    p[0] = 'P';
    p[1] = 'B';
    p[2] = BATCH_VERSION;
    p[3] = (unsigned char)flags;
    put32(p + 4, length);
    put32(p + 8, count);
    put64(p + 12, producer);
    put64(p + 20, first_seq);
    put32(p + 28, epoch);
}

/* ------------------------------------------------------------ Flight */

static PyObject *
flight_alloc(PyTypeObject *tp)
{
    PlFlight *f = PyObject_Malloc(sizeof(PlFlight));
    if (f == NULL) {
        return PyErr_NoMemory();
    }
    memset((char *)f + sizeof(PyObject), 0, sizeof(PlFlight) - sizeof(PyObject));
    return PyObject_Init((PyObject *)f, tp); /* a reference to the (heap) type */
}

PyObject *
pl_flight_new(PyTypeObject *tp, unsigned long long pn, unsigned long long first,
              unsigned long long last, Py_ssize_t size, double sent, PyObject *data,
              Py_ssize_t offset, Py_ssize_t end)
{
    PlFlight *f = (PlFlight *)flight_alloc(tp);
    if (f == NULL) {
        return NULL;
    }
    f->pn = pn;
    f->first = first;
    f->last = last;
    f->size = size;
    f->sent = sent;
    Py_INCREF(data);
    f->data = data;
    f->offset = offset;
    f->end = end;
    return (PyObject *)f;
}

static PyObject *
flight_new(PyTypeObject *tp, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"pn", "first", "last", "size", "sent", "data", "offset", "end", NULL};
    unsigned long long pn, first, last;
    Py_ssize_t size, offset = 0, end = 0;
    double sent;
    PyObject *data;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "KKKndS|nn:Flight", kwlist, &pn, &first,
                                     &last, &size, &sent, &data, &offset, &end)) {
        return NULL;
    }
    return pl_flight_new(tp, pn, first, last, size, sent, data, offset, end);
}

static void
flight_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    Py_XDECREF(((PlFlight *)self)->data);
    PyObject_Free(self);
    Py_DECREF(tp);
}

static PyObject *
flight_get_data(PyObject *self, void *closure)
{
    (void)closure;
    PyObject *data = ((PlFlight *)self)->data;
    if (data == NULL) {
        data = PyBytes_FromStringAndSize(NULL, 0);
        ((PlFlight *)self)->data = data;
        if (data == NULL) {
            return NULL;
        }
    }
    Py_INCREF(data);
    return data;
}

static int
flight_set_data(PyObject *self, PyObject *value, void *closure)
{
    (void)closure;
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "a Flight's data cannot be deleted");
        return -1;
    }
    if (!PyBytes_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "a Flight's data is bytes");
        return -1;
    }
    Py_INCREF(value);
    setref(&((PlFlight *)self)->data, value);
    return 0;
}

static PyObject *
flight_repr(PyObject *self)
{
    PlFlight *f = (PlFlight *)self;
    return PyUnicode_FromFormat("Flight(pn=%llu, first=%llu, last=%llu, size=%zd, offset=%zd, "
                                "end=%zd)",
                                f->pn, f->first, f->last, f->size, f->offset, f->end);
}

#define FLIGHT_MEMBER(name, type) {#name, type, offsetof(PlFlight, name), 0, NULL}

static PyMemberDef flight_members[] = {
    FLIGHT_MEMBER(pn, T_ULONGLONG),
    FLIGHT_MEMBER(first, T_ULONGLONG),
    FLIGHT_MEMBER(last, T_ULONGLONG),
    FLIGHT_MEMBER(size, T_PYSSIZET),
    FLIGHT_MEMBER(sent, T_DOUBLE),
    FLIGHT_MEMBER(offset, T_PYSSIZET),
    FLIGHT_MEMBER(end, T_PYSSIZET),
    FLIGHT_MEMBER(retx, T_BOOL),
    FLIGHT_MEMBER(delivered, T_LONGLONG),
    FLIGHT_MEMBER(delivered_time, T_DOUBLE),
    FLIGHT_MEMBER(first_sent, T_DOUBLE),
    FLIGHT_MEMBER(app_limited, T_BOOL),
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef flight_getset[] = {
    {"data", flight_get_data, flight_set_data, "The datagram as sent (bytes).", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot flight_slots[] = {
    {Py_tp_doc, "One datagram in flight: what it carried, and its delivery-rate stamps "
                "(packing.Flight, in C)."},
    {Py_tp_new, flight_new},
    {Py_tp_dealloc, flight_dealloc},
    {Py_tp_free, PyObject_Free},
    {Py_tp_repr, flight_repr},
    {Py_tp_members, flight_members},
    {Py_tp_getset, flight_getset},
    {0, NULL},
};

static PyType_Spec flight_spec = {
    .name = "purelink._speedups.Flight",
    .basicsize = sizeof(PlFlight),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE,
    .slots = flight_slots,
};

PyTypeObject *
pl_flight_type(PyObject *module)
{
    PyObject *tp = PyObject_GetAttrString(module, "Flight");
    if (tp == NULL) {
        return NULL;
    }
    if (!PyType_Check(tp)) {
        Py_DECREF(tp);
        PyErr_SetString(PyExc_TypeError, "purelink._speedups.Flight is not a type");
        return NULL;
    }
    return (PyTypeObject *)tp;
}

/* ------------------------------------------------------------ Packer */

typedef struct {
    PyObject_HEAD
    PyTypeObject *flight_type;
    /* the open batch's bytes: a buffer of the packer's own, written again by
     * each batch (warm in the cache, no allocation per batch; let go after a
     * batch larger than BATCH_KEEP), holding a batch while batch_len */
    unsigned char *batch;
    Py_ssize_t batch_len; /* the open batch's length; 0: none is open */
    Py_ssize_t batch_cap;
    int filling; /* a fill runs: another, start() or a new size meanwhile is refused */
    unsigned long long conn_id;
    unsigned long long producer_id;
    unsigned long long epoch;
    unsigned long long next_seq;
    unsigned long long batches;
    unsigned long long pieces;
    unsigned long long payload;
    unsigned long long counted; /* the last seq whose bytes are in payload */
    unsigned long long first;   /* the open batch's seqs */
    unsigned long long last;
    Py_ssize_t at; /* the open batch's bytes before this are sent */
    Py_ssize_t guess;
    Py_ssize_t size;
    Py_ssize_t data_room;
    Py_ssize_t chunk;
    Py_ssize_t batch_room;
    /* the open batch's piece CRCs: crcs[k] of bytes [k crc_chunk, (k+1) crc_chunk)
     * for 0 < k < ncrcs (not the first piece: it holds the batch CRC, nor the
     * last), and x^(8 crc_chunk) */
    uint32_t *crcs;
    Py_ssize_t ncrcs;
    Py_ssize_t crc_chunk;
    MulTable *crc_op;    /* multiplication by x^(8 op_chunk), or NULL */
    Py_ssize_t op_chunk; /* the chunk crc_op is for (0: none yet) */
} Packer;

/* What a fill works on: the sender's records and lengths, and where the
 * datagrams and flights go. */
typedef struct {
    PyObject *recs;           /* list of bytes */
    const uint16_t *lens;     /* native u16 */
    Py_ssize_t nrecs;         /* usable entries of both */
    unsigned long long base;  /* seq of recs[0] */
    unsigned long long pn;    /* the last packet number used */
    double now;
    PyObject *out;            /* list */
    PyObject *flights;        /* dict or Flights, or NULL */
    PlFlights *ring;          /* flights if it is a Flights, else NULL */
    PyObject *made;           /* list of flights, or NULL */
    int piece_crcs;           /* pieces of the open batch: self->crcs hold */
    long long used;
    int stamped;              /* each flight gets the stamps below as it is made */
    long long delivered;      /* the delivery-rate stamps (packing.Stamps) */
    double delivered_time;
    double first_sent;
    char app_limited;
} Fill;

static int
set_size(Packer *self, Py_ssize_t size)
{
    if (size < 128) {
        PyErr_SetString(PyExc_ValueError,
                        "a datagram of fewer than 128 bytes cannot carry a batch");
        return -1;
    }
    if (size > 0x7FFFFFFF) {
        PyErr_SetString(PyExc_ValueError, "a datagram of 2 GiB or more");
        return -1;
    }
    self->size = size;
    self->data_room = size - DATA_OVERHEAD - BATCH_HEADER;
    self->chunk = size - FRAGMENT_OVERHEAD;
    Py_ssize_t pieces = (BATCH_LIMIT + BATCH_HEADER) / self->chunk;
    Py_ssize_t room = pieces * self->chunk - BATCH_HEADER;
    Py_ssize_t most = room > self->data_room ? room : self->data_room;
    self->batch_room = most < BATCH_LIMIT ? most : BATCH_LIMIT;
    return 0;
}

static PyObject *
packer_new(PyTypeObject *tp, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"size", NULL};
    Py_ssize_t size;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "n:Packer", kwlist, &size)) {
        return NULL;
    }
    PyObject *module = PyType_GetModule(tp);
    if (module == NULL) {
        return NULL;
    }
    PyTypeObject *flight_type = pl_flight_type(module);
    if (flight_type == NULL) {
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(tp, Py_tp_alloc);
    Packer *self = (Packer *)alloc(tp, 0);
    if (self == NULL) {
        Py_DECREF(flight_type);
        return NULL;
    }
    self->flight_type = flight_type;
    self->next_seq = 1;
    self->guess = 16;
    if (set_size(self, size) < 0) {
        Py_DECREF(self);
        return NULL;
    }
    return (PyObject *)self;
}

static int
packer_traverse(PyObject *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE(self));
    Py_VISIT(((Packer *)self)->flight_type);
    return 0;
}

static int
packer_clear(PyObject *self)
{
    Py_CLEAR(((Packer *)self)->flight_type);
    return 0;
}

static void
packer_dealloc(PyObject *self)
{
    PyTypeObject *tp = Py_TYPE(self);
    PyObject_GC_UnTrack(self);
    packer_clear(self);
    PyMem_Free(((Packer *)self)->batch);
    PyMem_Free(((Packer *)self)->crcs);
    PyMem_Free(((Packer *)self)->crc_op);
    freefunc free_ = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    free_(self);
    Py_DECREF(tp);
}

/* One datagram made, with its flight: the datagram into w->out, the flight
 * into w->flights by packet number and into w->made (each where not NULL). */
static int
emit(Fill *w, PyObject *data, PyObject *f, unsigned long long pn)
{
    if (w->stamped) {
        PlFlight *s = (PlFlight *)f;
        s->delivered = w->delivered;
        s->delivered_time = w->delivered_time;
        s->first_sent = w->first_sent;
        s->app_limited = w->app_limited;
    }
    if (w->ring != NULL) {
        if (pl_flights_put(w->ring, pn, f) < 0) {
            return -1;
        }
    } else if (w->flights != NULL) {
        PyObject *key = PyLong_FromUnsignedLongLong(pn);
        if (key == NULL) {
            return -1;
        }
        int rc = PyDict_SetItem(w->flights, key, f);
        Py_DECREF(key);
        if (rc < 0) {
            return -1;
        }
    }
    if (w->out != NULL && PyList_Append(w->out, data) < 0) {
        return -1;
    }
    if (w->made != NULL && PyList_Append(w->made, f) < 0) {
        return -1;
    }
    return 0;
}

/* FRAGMENT datagrams of batch bytes [start, end), chunk bytes each (the last
 * may be shorter), under packet numbers after w->pn.  `src` holds the batch's
 * bytes from `origin` on; `total` is the batch's length. */
static int
emit_pieces(Packer *self, Fill *w, unsigned long long first, unsigned long long last,
            const unsigned char *src, Py_ssize_t origin, Py_ssize_t start, Py_ssize_t end,
            Py_ssize_t total, Py_ssize_t *count)
{
    Py_ssize_t chunk = self->chunk;
    Py_ssize_t at = start;
    if (total > 0xFFFFFFFFLL || end > total) {
        PyErr_SetString(PyExc_OverflowError, "a batch of 4 GiB or more");
        return -1;
    }
    while (at < end) {
        Py_ssize_t stop = at + chunk < end ? at + chunk : end;
        Py_ssize_t n = FRAGMENT_OVERHEAD + (stop - at);
        PyObject *data = PyBytes_FromStringAndSize(NULL, n);
        if (data == NULL) {
            return -1;
        }
        unsigned char *p = (unsigned char *)PyBytes_AsString(data);
        unsigned long long pn = w->pn + 1;
        put_datagram_header(p, MSG_FRAGMENT, (uint32_t)self->conn_id);
        put64(p + 8, pn);
        put32(p + 16, (uint32_t)self->epoch);
        put64(p + 20, first);
        put32(p + 28, (uint32_t)total);
        put32(p + 32, (uint32_t)at);
        memcpy(p + FRAG_HEAD, src + (at - origin), (size_t)(stop - at));
        Py_ssize_t k = self->crc_chunk ? at / self->crc_chunk : 0;
        uint32_t crc;
        if (w->piece_crcs && k > 0 && k < self->ncrcs && at == k * self->crc_chunk &&
            stop - at == self->crc_chunk) {
            crc = mul_by(self->crc_op, pl_crc32c(0, p, FRAG_HEAD)) ^ self->crcs[k];
        } else {
            crc = pl_crc32c(0, p, (size_t)(n - TRAILER));
        }
        put32(p + n - TRAILER, crc);
        PyObject *f = pl_flight_new(self->flight_type, pn, first, last, n, w->now, data, at, stop);
        int failed = f == NULL || emit(w, data, f, pn) < 0;
        Py_XDECREF(f);
        Py_DECREF(data);
        if (failed) {
            return -1;
        }
        w->pn = pn;
        w->used += n;
        (*count)++;
        at = stop;
    }
    return 0;
}

/* Bytes of records recs[i:i+n]; -1 with an exception.  From the length
 * table, but for a clamped entry (a record of 65,535 bytes or more, asked
 * for its size): the records themselves are not read here, so a backlog's
 * records are first met in copy_records, which asks for them ahead.  A table
 * that is not the records' is caught there (it counts every byte it copies). */
static long long
real_bytes(Fill *w, Py_ssize_t i, Py_ssize_t n)
{
    long long total = 0;
    for (Py_ssize_t k = i; k < i + n; k++) {
        Py_ssize_t len = w->lens[k];
        if (len == 0xFFFF) {
            len = PyBytes_Size(PyList_GetItem(w->recs, k));
            if (len < 0) {
                return -1;
            }
        }
        total += len;
    }
    return total;
}

/* The records recs[i:i+n] back to back at p, exactly `room` bytes of them;
 * -1 with an exception if they are not bytes or their lengths are not what
 * the length table said (then p holds garbage: the caller drops it). */
static int
copy_records(Fill *w, unsigned char *p, Py_ssize_t i, Py_ssize_t n, long long room)
{
    /* (no Python code runs in this loop, and it changes no item: the items
     * looked up ahead stay the list's) */
    Py_ssize_t ahead = PyList_Size(w->recs) - PL_AHEAD; /* the last k that may look ahead */
    PlAhead next;
    for (Py_ssize_t k = i; k < i + n && k < i + PL_AHEAD; k++) {
        pl_ahead_keep(&next, k, PyList_GetItem(w->recs, k));
    }
    for (Py_ssize_t k = i; k < i + n; k++) {
        char *src;
        Py_ssize_t len;
        if (k < ahead) { /* (beyond the batch too: the next one's first records) */
            pl_ahead_keep(&next, k + PL_AHEAD, PyList_GetItem(w->recs, k + PL_AHEAD));
        }
        PyObject *rec = pl_ahead_item(&next, k);
        if (rec == NULL || PyBytes_AsStringAndSize(rec, &src, &len) < 0) {
            return -1;
        }
        if (len > room) {
            goto mismatch;
        }
        memcpy(p, src, (size_t)len);
        p += len;
        room -= len;
    }
    if (room == 0) {
        return 0;
    }
mismatch:
    PyErr_SetString(PyExc_ValueError, "fill(): lens are not the records' lengths");
    return -1;
}

static void
put_table(unsigned char *p, const uint16_t *lens, Py_ssize_t n)
{
    for (Py_ssize_t k = 0; k < n; k++) {
        put16(p + 2 * k, lens[k]);
    }
}

/* How many records from index i go in the next batch: packing.py's
 * _pack_batch fitting, step for step.  Sets *total as it computes it and
 * *large when it is one record larger than a batch of many. */
static Py_ssize_t
fit(Packer *self, Fill *w, Py_ssize_t i, Py_ssize_t avail, long long *total, int *large)
{
    const uint16_t *lens = w->lens;
    long long limit = self->batch_room;
    Py_ssize_t n = self->guess < avail ? self->guess : avail;
    long long t = real_bytes(w, i, n);
    if (t < 0) {
        return -1;
    }
    t += 2 * (long long)n;
    *large = 0;
    if (t <= limit) {
        while (n < avail && t + lens[i + n] + 2 <= limit) {
            t += lens[i + n] + 2;
            n++;
        }
    } else {
        while (n > 1 && t > limit) {
            n /= 2;
            t = 2 * (long long)n;
            for (Py_ssize_t k = i; k < i + n; k++) {
                t += lens[k];
            }
        }
        if (t <= limit) {
            while (n < avail && t + lens[i + n] + 2 <= limit) {
                t += lens[i + n] + 2;
                n++;
            }
        } else {
            *large = 1;
        }
    }
    *total = t;
    return n;
}

/* A DATA datagram of records recs[i:i+n] (payload bytes in all), as
 * wire.encode_data_batch makes it, under packet number pn. */
static PyObject *
data_datagram(Packer *self, Fill *w, unsigned long long pn, unsigned long long seq, Py_ssize_t i,
              Py_ssize_t n, long long payload)
{
    Py_ssize_t length = BATCH_HEADER + 2 * n + (Py_ssize_t)payload;
    Py_ssize_t size = DATA_OVERHEAD + length;
    PyObject *data = PyBytes_FromStringAndSize(NULL, size);
    if (data == NULL) {
        return NULL;
    }
    unsigned char *p = (unsigned char *)PyBytes_AsString(data);
    put_datagram_header(p, MSG_DATA, (uint32_t)self->conn_id);
    put64(p + 8, pn);
    put64(p + AT_BATCH, 0);
    unsigned char *tail = p + AT_BATCH + 12;
    put_batch_tail(tail, 0, (uint32_t)length, (uint32_t)n, self->producer_id, seq,
                   (uint32_t)self->epoch);
    put_table(tail + 32, w->lens + i, n);
    if (copy_records(w, tail + 32 + 2 * n, i, n, payload) < 0) {
        Py_DECREF(data);
        return NULL;
    }
    put32(p + AT_BATCH + 8, pl_crc32c(0, tail, (size_t)(length - 12)));
    put32(p + size - TRAILER, pl_crc32c(0, p, (size_t)(size - TRAILER)));
    return data;
}

/* The batch CRC of the batch at p (length bytes), read once: the CRC of each
 * full piece but the first and the last, kept for emit_pieces, moves the
 * batch's CRC on. */
static int
piece_crcs(Packer *self, unsigned char *p, Py_ssize_t length)
{
    Py_ssize_t chunk = self->chunk;
    Py_ssize_t pieces = (length + chunk - 1) / chunk;
    self->ncrcs = 0;
    if (pieces > 2) {
        uint32_t *crcs = PyMem_Realloc(self->crcs, (size_t)pieces * sizeof(uint32_t));
        if (crcs == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->crcs = crcs;
        if (self->op_chunk != chunk) {
            if (self->crc_op == NULL && (self->crc_op = PyMem_Malloc(sizeof(MulTable))) == NULL) {
                PyErr_NoMemory();
                return -1;
            }
            mul_table(self->crc_op, shift_op((size_t)chunk));
            self->op_chunk = chunk;
        }
    }
    Py_ssize_t first = chunk < length ? chunk : length;
    uint32_t crc = pl_crc32c(0, p + 12, (size_t)(first - 12));
    Py_ssize_t k = 1;
    for (; k < pieces - 1; k++) {
        self->crcs[k] = pl_crc32c(0, p + k * chunk, (size_t)chunk);
        crc = mul_by(self->crc_op, crc) ^ self->crcs[k];
    }
    if (k * chunk < length) {
        crc = pl_crc32c(crc, p + k * chunk, (size_t)(length - k * chunk));
    }
    self->ncrcs = pieces > 2 ? pieces - 1 : 0;
    self->crc_chunk = chunk;
    put32(p + 8, crc);
    return 0;
}

/* A batch of records recs[i:i+n] (encode_batch_of), or of the one record
 * recs[i] without a length table (encode_large_batch), into the packer's
 * batch buffer (grown to fit); 0, or -1 with an exception (no batch open). */
static int
batch_bytes(Packer *self, Fill *w, unsigned long long seq, Py_ssize_t i, Py_ssize_t n,
            long long payload, int large)
{
    long long length = BATCH_HEADER + (large ? 0 : 2 * (long long)n) + payload;
    if (length > 0xFFFFFFFFLL) {
        PyErr_SetString(PyExc_OverflowError, "a batch of 4 GiB or more");
        return -1;
    }
    self->batch_len = 0;
    if (length > self->batch_cap) {
        PyMem_Free(self->batch);
        self->batch_cap = 0;
        self->batch = PyMem_Malloc((size_t)length);
        if (self->batch == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        self->batch_cap = (Py_ssize_t)length;
    }
    unsigned char *p = self->batch;
    put64(p, 0);
    put_batch_tail(p + 12, large ? FLAG_LARGE : 0, (uint32_t)length, (uint32_t)n,
                   self->producer_id, seq, (uint32_t)self->epoch);
    unsigned char *at = p + BATCH_HEADER;
    if (!large) {
        put_table(at, w->lens + i, n);
        at += 2 * n;
    }
    if (copy_records(w, at, i, n, payload) < 0 || piece_crcs(self, p, (Py_ssize_t)length) < 0) {
        return -1;
    }
    self->batch_len = (Py_ssize_t)length;
    return 0;
}

/* The next batch (packing.py's _pack_batch): one DATA datagram if it fits one
 * (*made = 1), else opened for fill() to send in pieces (*made = 0). */
static int
pack_batch(Packer *self, Fill *w, unsigned long long pushed, Py_ssize_t *made)
{
    unsigned long long seq = self->next_seq;
    if (seq < w->base || seq - w->base >= (unsigned long long)w->nrecs ||
        pushed - seq >= (unsigned long long)w->nrecs - (seq - w->base)) {
        PyErr_SetString(PyExc_IndexError, "fill(): the records to pack are not all there");
        return -1;
    }
    Py_ssize_t i = (Py_ssize_t)(seq - w->base);
    Py_ssize_t avail = (Py_ssize_t)(pushed - seq + 1);
    long long total;
    int large;
    Py_ssize_t n = fit(self, w, i, avail, &total, &large);
    if (n < 0) {
        return -1;
    }
    /* the records' bytes: what fitting counted, but for one record larger than a
     * batch of many (its table entry is clamped); copy_records checks it */
    long long payload = large ? real_bytes(w, i, 1) : total - 2 * (long long)n;
    if (payload < 0) {
        return -1;
    }
    unsigned long long last = seq + (unsigned long long)n - 1;
    long long counted_bytes = payload;
    if (seq <= self->counted) { /* packed again after a new session, in part */
        counted_bytes = 0;
        if (last > self->counted) {
            Py_ssize_t from = i + (Py_ssize_t)(self->counted + 1 - seq);
            counted_bytes = real_bytes(w, from, i + n - from);
        }
    }
    PyObject *data = NULL;
    if (total <= self->data_room) {
        data = data_datagram(self, w, w->pn + 1, seq, i, n, payload);
        if (data == NULL) {
            return -1;
        }
        PyObject *f = pl_flight_new(self->flight_type, w->pn + 1, seq, last,
                                    PyBytes_Size(data), w->now, data, 0, 0);
        int failed = f == NULL || emit(w, data, f, w->pn + 1) < 0;
        Py_XDECREF(f);
        if (failed) {
            Py_DECREF(data);
            return -1;
        }
        w->pn += 1;
        w->used += PyBytes_Size(data);
        *made = 1;
        Py_DECREF(data);
    } else {
        if (batch_bytes(self, w, seq, i, n, payload, payload > MAX_SMALL_RECORD) < 0) {
            return -1;
        }
        self->first = seq;
        self->last = last;
        self->at = 0;
        *made = 0;
    }
    self->guess = n > 1 ? n : 1;
    self->next_seq = last + 1;
    self->batches += 1;
    self->payload += (unsigned long long)counted_bytes;
    if (last > self->counted) {
        self->counted = last;
    }
    return 0;
}

/* No batch is open any more (its buffer kept for the next, unless large). */
static void
close_batch(Packer *self)
{
    self->batch_len = 0;
    if (self->batch_cap > BATCH_KEEP) {
        PyMem_Free(self->batch);
        self->batch = NULL;
        self->batch_cap = 0;
    }
}

/* Pieces of the open batch: as many as count and room allow. */
static int
open_pieces(Packer *self, Fill *w, Py_ssize_t count, long long room, Py_ssize_t *made)
{
    Py_ssize_t len = self->batch_len;
    Py_ssize_t chunk = self->chunk;
    long long want = (room - w->used + self->size - 1) / self->size;
    long long left = (len - self->at + chunk - 1) / chunk;
    if (want > left) {
        want = left;
    }
    if (want > count) {
        want = count;
    }
    Py_ssize_t end = self->at + (Py_ssize_t)want * chunk;
    if (end > len) {
        end = len;
    }
    Py_ssize_t k = 0;
    w->piece_crcs = 1;
    int rc = emit_pieces(self, w, self->first, self->last, self->batch, 0, self->at, end, len,
                         &k);
    w->piece_crcs = 0;
    if (rc == 0) {
        self->pieces += (unsigned long long)k;
        self->at = end;
        if (end >= len) {
            close_batch(self);
        }
        *made = k;
    }
    return rc;
}

static int
arg_ull(PyObject *o, unsigned long long *v)
{
    *v = PyLong_AsUnsignedLongLong(o);
    return *v == (unsigned long long)-1 && PyErr_Occurred() ? -1 : 0;
}

static int
arg_ll(PyObject *o, long long *v)
{
    *v = PyLong_AsLongLong(o);
    return *v == -1 && PyErr_Occurred() ? -1 : 0;
}

/* fill(recs, lens, base, pushed, pn, now, count, room, out, flights) ->
 * (pn, bytes): packing.py's Packer.fill. */
/* The stamps (delivered, delivered_time, first_sent, app_limited) into w;
 * 0, or -1 with an exception. */
static int
fill_stamps(Fill *w, PyObject *stamps)
{
    if (!PyTuple_Check(stamps) || PyTuple_Size(stamps) != 4) {
        PyErr_SetString(PyExc_TypeError, "fill(): stamps is a tuple of 4");
        return -1;
    }
    w->delivered = PyLong_AsLongLong(PyTuple_GetItem(stamps, 0));
    if (w->delivered == -1 && PyErr_Occurred()) {
        return -1;
    }
    w->delivered_time = PyFloat_AsDouble(PyTuple_GetItem(stamps, 1));
    if (w->delivered_time == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    w->first_sent = PyFloat_AsDouble(PyTuple_GetItem(stamps, 2));
    if (w->first_sent == -1.0 && PyErr_Occurred()) {
        return -1;
    }
    int app_limited = PyObject_IsTrue(PyTuple_GetItem(stamps, 3));
    if (app_limited < 0) {
        return -1;
    }
    w->app_limited = (char)app_limited;
    w->stamped = 1;
    return 0;
}

static PyObject *
packer_fill(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    Packer *self = (Packer *)op;
    if (nargs != 10 && nargs != 11) {
        PyErr_SetString(PyExc_TypeError, "fill() takes 10 or 11 arguments");
        return NULL;
    }
    Fill w = {0};
    unsigned long long pushed;
    long long count, room;
    w.recs = args[0];
    w.out = args[8];
    w.flights = args[9];
    w.ring = pl_flights(w.flights);
    if (!PyList_Check(w.recs) || !PyList_Check(w.out) ||
        !(PyDict_Check(w.flights) || w.ring != NULL)) {
        PyErr_SetString(PyExc_TypeError, "fill(): recs and out are lists, flights a dict "
                                         "or a Flights");
        return NULL;
    }
    if (arg_ull(args[2], &w.base) < 0 || arg_ull(args[3], &pushed) < 0 ||
        arg_ull(args[4], &w.pn) < 0 || arg_ll(args[6], &count) < 0 ||
        arg_ll(args[7], &room) < 0) {
        return NULL;
    }
    w.now = PyFloat_AsDouble(args[5]);
    if (w.now == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (nargs == 11 && args[10] != Py_None && fill_stamps(&w, args[10]) < 0) {
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_FORMAT | PyBUF_C_CONTIGUOUS) < 0) {
        return NULL;
    }
    if (view.itemsize != 2 || view.format == NULL || strchr(view.format, 'H') == NULL) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_TypeError, "fill(): lens is an array('H')");
        return NULL;
    }
    w.lens = (const uint16_t *)view.buf;
    w.nrecs = PyList_Size(w.recs);
    if (view.len / 2 < w.nrecs) {
        w.nrecs = view.len / 2;
    }
    /* Python code can run in a fill: a flight put over another in `flights`
     * lets the old one go (its __del__, a weakref callback), and an
     * allocation can start the garbage collector.  Such code may call this
     * packer again: a fill, start() or a new size meanwhile is refused, since
     * they would replace the open batch's buffer while its pieces are read */
    if (self->filling) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "fill(): the packer is filling already");
        return NULL;
    }
    self->filling = 1;
    long long sent = 0;
    int rc = 0;
    Py_ssize_t lens_n = w.nrecs;
    while (sent < count && w.used < room) {
        Py_ssize_t made = 0;
        /* (that code may also have shortened recs: only the items it holds now) */
        Py_ssize_t held = PyList_Size(w.recs);
        w.nrecs = held < lens_n ? held : lens_n;
        if (!self->batch_len) {
            if (self->next_seq > pushed) {
                break;
            }
            rc = pack_batch(self, &w, pushed, &made);
        } else {
            rc = open_pieces(self, &w, (Py_ssize_t)(count - sent), room, &made);
        }
        if (rc < 0) {
            break;
        }
        sent += made;
    }
    self->filling = 0;
    PyBuffer_Release(&view);
    if (rc < 0) {
        return NULL;
    }
    return Py_BuildValue("(KL)", w.pn, w.used);
}

/* The datagram `data` again under packet number pn (wire.reseal). */
static PyObject *
reseal(PyObject *data, unsigned long long pn)
{
    Py_ssize_t n = PyBytes_Size(data);
    if (n < 0) {
        return NULL;
    }
    if (n < HEADER + 8 + TRAILER) {
        PyErr_SetString(PyExc_ValueError, "resend(): the flight's datagram is too short");
        return NULL;
    }
    PyObject *again = PyBytes_FromStringAndSize(PyBytes_AsString(data), n);
    if (again == NULL) {
        return NULL;
    }
    unsigned char *p = (unsigned char *)PyBytes_AsString(again);
    put64(p + HEADER, pn);
    put32(p + n - TRAILER, pl_crc32c(0, p, (size_t)(n - TRAILER)));
    return again;
}

/* Where a flight's bytes of its batch are in its datagram, and the batch's
 * length; -1 with ValueError if the datagram does not hold them. */
static int
flight_piece(PlFlight *f, const unsigned char *p, Py_ssize_t n, Py_ssize_t *at,
             Py_ssize_t *start, Py_ssize_t *end, Py_ssize_t *total)
{
    if (f->end) { /* the piece's own bytes: what follows the fragment head */
        *start = f->offset;
        *end = f->end;
        *at = FRAG_HEAD;
        if (n < FRAGMENT_OVERHEAD || f->offset < 0 || f->end <= f->offset ||
            f->end - f->offset > n - FRAGMENT_OVERHEAD) {
            goto bad;
        }
        *total = get32(p + AT_TOTAL);
    } else { /* a whole batch: it follows the DATA datagram's 16-byte head */
        if (n < AT_LENGTH + 4) {
            goto bad;
        }
        *total = get32(p + AT_LENGTH);
        *start = 0;
        *end = *total;
        *at = AT_BATCH;
        if (*total > n - AT_BATCH - TRAILER) {
            goto bad;
        }
    }
    if (*end > *total) {
        goto bad;
    }
    return 0;
bad:
    PyErr_SetString(PyExc_ValueError, "resend(): the flight's datagram does not hold its bytes");
    return -1;
}

/* resend(f, pn, now) -> (pn, [flights]): packing.py's Packer.resend. */
static PyObject *
packer_resend(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    Packer *self = (Packer *)op;
    Fill w = {0};
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "resend() takes 3 arguments");
        return NULL;
    }
    if (!PyObject_TypeCheck(args[0], self->flight_type)) {
        PyErr_SetString(PyExc_TypeError, "resend(): a Flight of the compiled core");
        return NULL;
    }
    PlFlight *f = (PlFlight *)args[0];
    if (arg_ull(args[1], &w.pn) < 0) {
        return NULL;
    }
    w.now = PyFloat_AsDouble(args[2]);
    if (w.now == -1.0 && PyErr_Occurred()) {
        return NULL;
    }
    if (f->size <= self->size) { /* the same bytes under a new packet number */
        PyObject *again = reseal(f->data, w.pn + 1);
        if (again == NULL) {
            return NULL;
        }
        setref(&f->data, again);
        f->pn = w.pn + 1;
        f->sent = w.now;
        return Py_BuildValue("(K[O])", f->pn, (PyObject *)f);
    }
    PyObject *data = f->data;
    Py_INCREF(data);
    const unsigned char *p = (const unsigned char *)PyBytes_AsString(data);
    Py_ssize_t at, start, end, total;
    PyObject *result = NULL;
    w.made = PyList_New(0);
    if (w.made != NULL && flight_piece(f, p, PyBytes_Size(data), &at, &start, &end, &total) == 0) {
        Py_ssize_t k = 0;
        if (emit_pieces(self, &w, f->first, f->last, p + at, start, start, end, total, &k) == 0) {
            result = Py_BuildValue("(KO)", w.pn, w.made);
        }
    }
    Py_XDECREF(w.made);
    Py_DECREF(data);
    return result;
}

/* start(conn_id, producer_id, epoch, next_seq): a session opens. */
static PyObject *
packer_start(PyObject *op, PyObject *const *args, Py_ssize_t nargs)
{
    Packer *self = (Packer *)op;
    unsigned long long v[4];
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "start() takes 4 arguments");
        return NULL;
    }
    for (int k = 0; k < 4; k++) {
        if (arg_ull(args[k], &v[k]) < 0) {
            return NULL;
        }
    }
    if (((Packer *)op)->filling) {
        PyErr_SetString(PyExc_RuntimeError, "start(): the packer is filling");
        return NULL;
    }
    self->conn_id = v[0];
    self->producer_id = v[1];
    self->epoch = v[2];
    self->next_seq = v[3];
    close_batch(self);
    Py_RETURN_NONE;
}

static PyObject *
packer_get_size(PyObject *op, void *closure)
{
    (void)closure;
    return PyLong_FromSsize_t(((Packer *)op)->size);
}

static int
packer_set_size(PyObject *op, PyObject *value, void *closure)
{
    (void)closure;
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "size cannot be deleted");
        return -1;
    }
    Py_ssize_t size = PyLong_AsSsize_t(value);
    if (size == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (((Packer *)op)->filling) {
        PyErr_SetString(PyExc_RuntimeError, "size: the packer is filling");
        return -1;
    }
    return set_size((Packer *)op, size);
}

static PyObject *
packer_get_open(PyObject *op, void *closure)
{
    (void)closure;
    return PyBool_FromLong(((Packer *)op)->batch_len != 0);
}

/* gso_run(datagrams, i, limit) -> j: where the run of datagrams that goes to
 * the kernel in one UDP GSO call from datagrams[i] ends (transport.py's
 * run_end): up to `limit` datagrams of datagrams[i]'s size, and one shorter
 * last one. */
static PyObject *
gso_run(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3 || !PyList_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "gso_run(datagrams: list, i, limit)");
        return NULL;
    }
    PyObject *datagrams = args[0];
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    Py_ssize_t limit = PyLong_AsSsize_t(args[2]);
    if ((i == -1 || limit == -1) && PyErr_Occurred()) {
        return NULL;
    }
    Py_ssize_t n = PyList_Size(datagrams);
    if (i < 0 || i >= n) {
        PyErr_SetString(PyExc_IndexError, "gso_run(): no datagram at i");
        return NULL;
    }
    Py_ssize_t size = PyObject_Size(PyList_GetItem(datagrams, i));
    if (size < 0) {
        return NULL;
    }
    Py_ssize_t j = run_end(datagrams, i, n, size, limit);
    return j < 0 ? NULL : PyLong_FromSsize_t(j);
}

/* total_size(datagrams) -> int: sum(map(len, datagrams)) for a list of
 * bytes-like objects (the sender's count of the bytes a call put out). */
static PyObject *
total_size(PyObject *module, PyObject *datagrams)
{
    (void)module;
    if (!PyList_Check(datagrams)) {
        PyErr_SetString(PyExc_TypeError, "total_size(datagrams: list)");
        return NULL;
    }
    long long total = 0;
    for (Py_ssize_t k = 0; k < PyList_Size(datagrams); k++) {
        PyObject *d = PyList_GetItem(datagrams, k);
        Py_INCREF(d); /* the length of another type may run code */
        Py_ssize_t len = PyBytes_CheckExact(d) ? PyBytes_Size(d) : PyObject_Size(d);
        Py_DECREF(d);
        if (len < 0) {
            return NULL;
        }
        total += len;
    }
    return PyLong_FromLongLong(total);
}

static PyMethodDef pack_functions[] = {
    {"gso_run", (PyCFunction)(void (*)(void))gso_run, METH_FASTCALL,
     "gso_run(datagrams, i, limit) -> where the GSO run from datagrams[i] ends."},
    {"total_size", total_size, METH_O,
     "total_size(datagrams) -> sum(map(len, datagrams)) for a list of datagrams."},
    SEND_RUN_METHOD
    {NULL, NULL, 0, NULL},
};

static PyMethodDef packer_methods[] = {
    {"fill", (PyCFunction)(void (*)(void))packer_fill, METH_FASTCALL,
     "fill(recs, lens, base, pushed, pn, now, count, room, out, flights, stamps=None) "
     "-> (pn, bytes)"},
    {"resend", (PyCFunction)(void (*)(void))packer_resend, METH_FASTCALL,
     "resend(f, pn, now) -> (pn, flights)"},
    {"start", (PyCFunction)(void (*)(void))packer_start, METH_FASTCALL,
     "start(conn_id, producer_id, epoch, next_seq)"},
    {NULL, NULL, 0, NULL},
};

#define PACKER_MEMBER(name, doc) {#name, T_ULONGLONG, offsetof(Packer, name), 0, doc}

static PyMemberDef packer_members[] = {
    PACKER_MEMBER(conn_id, NULL),
    PACKER_MEMBER(producer_id, NULL),
    PACKER_MEMBER(epoch, NULL),
    PACKER_MEMBER(next_seq, "The first seq in no batch yet."),
    PACKER_MEMBER(batches, "Batches built."),
    PACKER_MEMBER(pieces, "FRAGMENT datagrams sent as first transmissions."),
    PACKER_MEMBER(payload, "Bytes of records put in batches, each record once."),
    {NULL, 0, 0, 0, NULL},
};

static PyGetSetDef packer_getset[] = {
    {"size", packer_get_size, packer_set_size, "Largest datagram to make.", NULL},
    {"open", packer_get_open, NULL, "Whether a batch has pieces not yet sent.", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyType_Slot packer_slots[] = {
    {Py_tp_doc, "Cuts a sender's records into batches and batches into datagrams "
                "(packing.Packer, in C)."},
    {Py_tp_new, packer_new},
    {Py_tp_dealloc, packer_dealloc},
    {Py_tp_traverse, packer_traverse},
    {Py_tp_clear, packer_clear},
    {Py_tp_methods, packer_methods},
    {Py_tp_members, packer_members},
    {Py_tp_getset, packer_getset},
    {0, NULL},
};

static PyType_Spec packer_spec = {
    .name = "purelink._speedups.Packer",
    .basicsize = sizeof(Packer),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_IMMUTABLETYPE | Py_TPFLAGS_HAVE_GC,
    .slots = packer_slots,
};

int
pl_pack_exec(PyObject *module)
{
    PyObject *flight = PyType_FromModuleAndSpec(module, &flight_spec, NULL);
    if (flight == NULL) {
        return -1;
    }
    int rc = PyModule_AddObjectRef(module, "Flight", flight);
    Py_DECREF(flight);
    if (rc < 0) {
        return -1;
    }
    PyObject *packer = PyType_FromModuleAndSpec(module, &packer_spec, NULL);
    if (packer == NULL) {
        return -1;
    }
    rc = PyModule_AddObjectRef(module, "Packer", packer);
    Py_DECREF(packer);
    if (rc < 0) {
        return -1;
    }
    if (PyModule_AddFunctions(module, pack_functions) < 0) {
        return -1;
    }
    return PyModule_AddIntConstant(module, "has_pack", 1);
}
