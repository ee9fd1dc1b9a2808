/* purelink._speedups: the listener's fast intake.
 *
 * Why: nearly every datagram a listener gets is the next DATA of an open
 * session (or the next piece of a batch larger than one datagram), and the
 * pure-Python core pays ~5 us of bytecode for each.  `Intake` does that
 * common case in C, over the core's own Python state (its sessions,
 * producers, writes and counters: nothing is mirrored here, so nothing can
 * drift), and `Intake.drain` receives from the UDP socket itself, splitting
 * a GRO super-datagram by the segment size the kernel reports.
 *
 * The rule: C takes a datagram only where the pure path would take it with
 * no drop, no answer and no policy (core_intake.py's `_fast_data` and
 * `_fast_piece`, plus the piece that completes a batch, checked whole);
 * everything else -- an unknown or ended session, a wrong address or epoch,
 * anything out of order or held, a control message, a bad CRC, any field
 * that is off -- is DECLINED: `take` returns False before it changed
 * anything, and the Python path handles the datagram from scratch, so drops,
 * reasons and counters have one home.  (One exception, harmless: the piece
 * that completes a batch is copied into the batch's buffer before the batch
 * is checked; the Python path, which then takes it, writes the same bytes to
 * the same place.)
 *
 * Within one receive (a GRO buffer holds dozens of datagrams), the next DATA
 * of the same session and the next piece of the same batch are taken as a
 * run (`Run`, `PieceRun`): checked against what the run's first datagram
 * found, and what they change of the Python state written back once, when
 * the run ends -- before any Python code runs.  What the C takes it copies
 * (a DATA's batch into a bytes, a piece into its batch's buffer), so a
 * receive buffer none of whose datagrams went to Python goes back to the pool
 * at once, and the next receive reuses it warm.
 *
 * Every length and offset read from the wire is checked against the bytes
 * that came before it is used.  All of it holds the GIL but the receive
 * system call, made into a buffer this code holds an export of.
 */
#include "speedups.h"

#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <arpa/inet.h>
#include <netinet/in.h>

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define DATAGRAM_VERSION 2
#define BATCH_VERSION 1
#define KIND_DATA 4
#define KIND_FRAGMENT 5
#define BATCH_HEADER 44
#define DATA_FIXED 60       /* header, pn, the batch header */
#define FRAGMENT_HEAD 36    /* header, pn, epoch, seq, total, offset */
#define TRAILER 4
#define FLAG_LARGE 0x01
#define MAX_PIECED_BATCH (0xFFFF + 2)

/* The attribute names this part reads and writes, interned once per Intake. */
enum {
    N_CONNS, N_WRITES, N_WRITE_OWNERS, N_ACK_DUE_SET, N_STATS, N_STATE, N_ADDR, N_EPOCH,
    N_PRODUCER, N_PID, N_RECEIVED, N_HELD, N_PARTIALS, N_MAX_RECORD, N_STREAM, N_LARGEST_PN,
    N_ACK_DELAY_FROM, N_LAST_SEEN, N_ACK_DUE, N_DATAGRAMS, N_BYTES, N_BATCHES, N_RECORDS,
    N_MEMORY, N_CONFIG, N_MAX_MEMORY, N_TOTAL, N_SPANS, N_BUF, N_COUNTED, N_ACCOUNT, N_HOLDING,
    N_HELD_BYTES, N_COUNT
};

static const char *const NAMES[N_COUNT] = {
    "_conns", "_writes", "_write_owners", "_ack_due", "stats", "state", "addr", "epoch",
    "producer", "pid", "received", "held", "partials", "max_record", "stream", "largest_pn",
    "ack_delay_from", "last_seen", "ack_due", "datagrams", "bytes", "batches", "records",
    "_memory", "config", "max_memory", "total", "spans", "buf", "counted", "_account", "_holding",
    "held_bytes",
};

typedef struct {
    PyObject_HEAD
    int hardware;           /* SSE 4.2's crc32 instruction: both CRCs of a DATA in one pass */
    PyObject *batch_header; /* wire.BatchHeader */
    PyObject *partial;      /* receiver.Partial */
    PyObject *open;         /* SessionState.OPEN */
    PyObject *tuple_new;    /* tuple.__new__, to make a BatchHeader without Python code */
    PyObject *names[N_COUNT];
    /* The batch being put together whose CRC is followed piece by piece (see
     * `Track` below): its Partial, the span tuple this code last put in its
     * spans, the end of that span, the CRC-32C of its bytes 12 .. end, and
     * whether shift tables were made for one of its pieces. */
    PyObject *t_part, *t_span;
    uint64_t t_end;
    uint32_t t_crc;
    int t_made;
    uint64_t shift_len;       /* the piece length `shift` is for (UINT64_MAX: none) */
    uint32_t shift[4][256];   /* pl_crc32c_shift_tables(shift, shift_len) */
} Intake;

/* A run: DATA datagrams of one session taken one after the other with no
 * Python code in between.  Its session was checked at the run's first
 * datagram and cannot have changed since (only Python code changes it), so
 * the next ones are checked against what is kept here; what they change of
 * the session (the producer's `received`, the packet numbers, `last_seen`,
 * `ack_due`) is written back once, when the run ends -- before any Python
 * code runs, before the GIL is let go, and at the end of each call. */
typedef struct {
    PyObject *conn, *p, *key, *addr, *stream, *writes, *owners, *received_obj;
    uint32_t conn_id, epoch;
    uint64_t pid, received, max_record, largest;
    int taken, pn_moved;
} Run;

/* A piece run: the next pieces of one batch (not its last), taken one after
 * the other with no Python code in between, as a DATA run is.  It begins at a
 * piece the full path took (`piece_hold`: every check made, the span and the
 * packet number written), so the state it keeps -- the session, the
 * producer, the batch being put together and an export of its buffer -- is
 * what that check saw, and nothing but this code changes it until the run
 * ends.  A next piece that continues it exactly (same session, address,
 * epoch, seq and total, at the byte where the last one ended, not the last
 * piece, its CRC right) is copied in place; what it changes of the Python
 * state (the batch's one span, the packet numbers) is written back once, when
 * the run ends, before any Python code runs. */
typedef struct {
    PyObject *conn, *key, *p, *part, *addr;
    Py_buffer buf; /* the batch's buffer (held while part != NULL) */
    uint32_t conn_id, epoch;
    uint64_t seq, total, end, largest;
    int taken, pn_moved;
    int tracked;  /* the batch's CRC is followed (crc: its bytes 12 .. end) */
    uint32_t crc;
} PieceRun;

/* One call's work: the core, the time, the runs, and the counters it owes the
 * core's stats (added in one go when a run ends). */
typedef struct {
    Intake *self;
    PyObject *core;
    PyObject *now;
    long long datagrams, bytes, batches, records, held;
    Run run;
    PieceRun prun;
} Ctx;

/* Where a taken batch's memoryview comes from: `obj`'s bytes from `at` on
 * (a memoryview of `obj` is made the first time one is needed). */
typedef struct {
    PyObject *obj;
    PyObject *view;
    Py_ssize_t at;
} Source;

static inline uint32_t
rd32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t
rd64(const unsigned char *p)
{
    return (uint64_t)rd32(p) | (uint64_t)rd32(p + 4) << 32;
}

#define NAME(c, n) ((c)->self->names[n])

/* ------------------------------------------------------------ reading state */

/* getattr(obj, name) as a u64 in *out: 0, or -1 (declined; no error set). */
static int
attr_u64(PyObject *obj, PyObject *name, uint64_t *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        PyErr_Clear();
        return -1;
    }
    unsigned long long x = PyLong_AsUnsignedLongLong(v);
    Py_DECREF(v);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    *out = (uint64_t)x;
    return 0;
}

/* getattr(obj, name) as a signed 64-bit number: 0, or -1 (declined). */
static int
attr_i64(PyObject *obj, PyObject *name, long long *out)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        PyErr_Clear();
        return -1;
    }
    long long x = PyLong_AsLongLong(v);
    Py_DECREF(v);
    if (x == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return -1;
    }
    *out = x;
    return 0;
}

/* bool(getattr(obj, name)): 1, 0, or -1 (declined). */
static int
attr_true(PyObject *obj, PyObject *name)
{
    PyObject *v = PyObject_GetAttr(obj, name);
    if (v == NULL) {
        PyErr_Clear();
        return -1;
    }
    int r = PyObject_IsTrue(v);
    Py_DECREF(v);
    if (r < 0) {
        PyErr_Clear();
    }
    return r;
}

/* The open session `conn_id` at `addr` in `epoch`, and its producer (new
 * references in *conn, *producer, and the conn id as an int in *key): 0, or
 * -1 (declined: the Python path says why). */
static int
open_session(Ctx *c, uint32_t conn_id, uint32_t epoch, PyObject *addr, PyObject **key,
             PyObject **conn, PyObject **producer)
{
    *key = *conn = *producer = NULL;
    PyObject *conns = PyObject_GetAttr(c->core, NAME(c, N_CONNS));
    if (conns == NULL || !PyDict_Check(conns)) {
        goto decline;
    }
    *key = PyLong_FromUnsignedLong(conn_id);
    if (*key == NULL) {
        goto decline;
    }
    PyObject *found = PyDict_GetItemWithError(conns, *key); /* borrowed */
    if (found == NULL) {
        goto decline;
    }
    Py_INCREF(found);
    *conn = found;
    Py_CLEAR(conns);
    PyObject *state = PyObject_GetAttr(found, NAME(c, N_STATE));
    if (state == NULL) {
        goto decline;
    }
    int open = state == c->self->open;
    Py_DECREF(state);
    if (!open) {
        goto decline;
    }
    PyObject *where = PyObject_GetAttr(found, NAME(c, N_ADDR));
    if (where == NULL) {
        goto decline;
    }
    int same = PyObject_RichCompareBool(where, addr, Py_EQ);
    Py_DECREF(where);
    uint64_t conn_epoch;
    if (same != 1 || attr_u64(found, NAME(c, N_EPOCH), &conn_epoch) < 0 || conn_epoch != epoch) {
        goto decline;
    }
    *producer = PyObject_GetAttr(found, NAME(c, N_PRODUCER));
    if (*producer == NULL) {
        goto decline;
    }
    return 0;
decline:
    PyErr_Clear();
    Py_XDECREF(conns);
    Py_CLEAR(*key);
    Py_CLEAR(*conn);
    Py_CLEAR(*producer);
    return -1;
}

/* ------------------------------------------------------------- the counters */

static int
add_counter(PyObject *stats, PyObject *name, long long n)
{
    if (n == 0) {
        return 0;
    }
    PyObject *v = PyObject_GetAttr(stats, name);
    if (v == NULL) {
        return -1;
    }
    PyObject *d = PyLong_FromLongLong(n);
    PyObject *sum = d == NULL ? NULL : PyNumber_Add(v, d);
    Py_DECREF(v);
    Py_XDECREF(d);
    if (sum == NULL) {
        return -1;
    }
    int r = PyObject_SetAttr(stats, name, sum);
    Py_DECREF(sum);
    return r;
}

/* Add what this call owes the core's stats; 0, or -1 with an exception set. */
static int run_end(Ctx *c);

static int
flush(Ctx *c)
{
    if (run_end(c) < 0) {
        return -1;
    }
    if (!(c->datagrams | c->bytes | c->batches | c->records | c->held)) {
        return 0;
    }
    PyObject *stats = PyObject_GetAttr(c->core, NAME(c, N_STATS));
    if (stats == NULL) {
        return -1;
    }
    int r = add_counter(stats, NAME(c, N_DATAGRAMS), c->datagrams);
    r = r < 0 ? r : add_counter(stats, NAME(c, N_BYTES), c->bytes);
    r = r < 0 ? r : add_counter(stats, NAME(c, N_BATCHES), c->batches);
    r = r < 0 ? r : add_counter(stats, NAME(c, N_RECORDS), c->records);
    r = r < 0 ? r : add_counter(stats, NAME(c, N_HELD), c->held);
    Py_DECREF(stats);
    c->datagrams = c->bytes = c->batches = c->records = c->held = 0;
    return r;
}

/* --------------------------------------------------------- what is written */

/* The packet number noted, as `_note_pn` does for a datagram that brought
 * something new: 0, or -1 with an exception set. */
static int
note_pn(Ctx *c, PyObject *conn, PyObject *key, uint64_t pn)
{
    PyObject *largest = PyObject_GetAttr(conn, NAME(c, N_LARGEST_PN));
    PyObject *pn_obj = PyLong_FromUnsignedLongLong(pn);
    if (largest == NULL || pn_obj == NULL) {
        Py_XDECREF(largest);
        Py_XDECREF(pn_obj);
        return -1;
    }
    int newer = PyObject_RichCompareBool(pn_obj, largest, Py_GT);
    Py_DECREF(largest);
    if (newer == 1) {
        if (PyObject_SetAttr(conn, NAME(c, N_LARGEST_PN), pn_obj) < 0 ||
            PyObject_SetAttr(conn, NAME(c, N_ACK_DELAY_FROM), c->now) < 0) {
            newer = -1;
        }
    }
    Py_DECREF(pn_obj);
    if (newer < 0 || PyObject_SetAttr(conn, NAME(c, N_LAST_SEEN), c->now) < 0) {
        return -1;
    }
    int due = attr_true(conn, NAME(c, N_ACK_DUE));
    if (due == 1) {
        return 0;
    }
    if (due < 0 || PyObject_SetAttr(conn, NAME(c, N_ACK_DUE), Py_True) < 0) {
        return -1;
    }
    PyObject *due_set = PyObject_GetAttr(c->core, NAME(c, N_ACK_DUE_SET));
    if (due_set == NULL) {
        return -1;
    }
    int r = PySet_Add(due_set, key);
    Py_DECREF(due_set);
    return r;
}

/* dict_name[stream].append(item), the list made if it is not there (and,
 * when `list_out` is given, a new reference to it there). */
static int
append_to(Ctx *c, int dict_name, PyObject *stream, PyObject *item, PyObject **list_out)
{
    PyObject *dict = PyObject_GetAttr(c->core, NAME(c, dict_name));
    if (dict == NULL) {
        return -1;
    }
    int r = -1;
    PyObject *list = PyDict_GetItemWithError(dict, stream); /* borrowed */
    if (list != NULL) {
        r = PyList_Append(list, item);
    }
    else if (!PyErr_Occurred()) {
        list = PyList_New(1);
        if (list != NULL) {
            Py_INCREF(item);
            PyList_SetItem(list, 0, item);
            r = PyDict_SetItem(dict, stream, list);
            Py_DECREF(list);
        }
    }
    if (r == 0 && list_out != NULL) {
        Py_INCREF(list);
        *list_out = list;
    }
    Py_DECREF(dict);
    return r;
}

/* BatchHeader(position, crc, flags, length, count, producer, first, epoch),
 * made as tuple.__new__ makes an instance of a tuple subclass (BatchHeader is
 * a NamedTuple: no __dict__, nothing but its items), without calling Python. */
static PyObject *
make_header(Ctx *c, const unsigned char *h)
{
    PyTypeObject *type = (PyTypeObject *)c->self->batch_header;
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    PyObject *header = alloc == NULL ? NULL : alloc(type, 8);
    if (header == NULL) {
        return NULL;
    }
    PyObject *items[8] = {
        PyLong_FromUnsignedLongLong(rd64(h)),      PyLong_FromUnsignedLong(rd32(h + 8)),
        PyLong_FromUnsignedLong(h[15]),            PyLong_FromUnsignedLong(rd32(h + 16)),
        PyLong_FromUnsignedLong(rd32(h + 20)),     PyLong_FromUnsignedLongLong(rd64(h + 24)),
        PyLong_FromUnsignedLongLong(rd64(h + 32)), PyLong_FromUnsignedLong(rd32(h + 40)),
    };
    int ok = 1;
    for (int i = 0; i < 8; i++) {
        if (items[i] == NULL) {
            ok = 0;
        }
        else if (PyTuple_SetItem(header, i, items[i]) < 0) { /* steals, even on failure */
            ok = 0;
        }
    }
    if (!ok) {
        Py_DECREF(header);
        return NULL;
    }
    return header;
}

/* The batch `batch` (a memoryview) with its header `h` goes to the store:
 * the core's writes and their owners, the producer's `received`. */
static int
write_batch(Ctx *c, PyObject *producer, PyObject *batch, const unsigned char *h, uint64_t last)
{
    PyObject *header = make_header(c, h);
    PyObject *write = header == NULL ? NULL : PyTuple_Pack(2, batch, header);
    Py_XDECREF(header);
    PyObject *received = write == NULL ? NULL : PyLong_FromUnsignedLongLong(last);
    PyObject *owner = received == NULL ? NULL : PyTuple_Pack(2, producer, received);
    PyObject *stream = owner == NULL ? NULL : PyObject_GetAttr(producer, NAME(c, N_STREAM));
    int r = -1;
    if (stream != NULL && append_to(c, N_WRITES, stream, write, NULL) == 0 &&
        PyObject_SetAttr(producer, NAME(c, N_RECEIVED), received) == 0 &&
        append_to(c, N_WRITE_OWNERS, stream, owner, NULL) == 0) {
        c->batches += 1;
        c->records += rd32(h + 20);
        r = 0;
    }
    Py_XDECREF(write);
    Py_XDECREF(received);
    Py_XDECREF(owner);
    Py_XDECREF(stream);
    return r;
}

static PyObject *
source_slice(Source *src, Py_ssize_t start, Py_ssize_t end)
{
    if (src->view == NULL) {
        src->view = PyMemoryView_FromObject(src->obj);
        if (src->view == NULL) {
            return NULL;
        }
    }
    return PySequence_GetSlice(src->view, src->at + start, src->at + end);
}

/* ------------------------------------------------------------------ checks */

/* Whether the u16 length table of a batch at `b` (count entries) adds up to
 * `payload`, and its largest entry in *largest. */
static int
table_adds_up(const unsigned char *b, uint32_t count, uint64_t payload, uint64_t *largest)
{
    uint64_t sum = 0, most = 0;
    const unsigned char *t = b + BATCH_HEADER;
    for (uint32_t i = 0; i < count; i++) {
        uint64_t n = (uint64_t)t[2 * i] | (uint64_t)t[2 * i + 1] << 8;
        sum += n;
        most = n > most ? n : most;
    }
    *largest = most;
    return sum == payload;
}

static int
all_zero(const unsigned char *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (p[i]) {
            return 0;
        }
    }
    return 1;
}

/* The checks of a DATA datagram's bytes alone (core_intake.py `_fast_data`,
 * in its order): 1 if they pass. */
static int
data_bytes_ok(const unsigned char *d, Py_ssize_t size)
{
    if (size < DATA_FIXED + TRAILER || d[0] != 'P' || d[1] != 'L' || d[28] != 'P' || d[29] != 'B' ||
        d[2] != DATAGRAM_VERSION || d[30] != BATCH_VERSION || d[31] != 0) {
        return 0;
    }
    uint64_t length = rd32(d + 32), count = rd32(d + 36);
    Py_ssize_t end = size - TRAILER;
    return count != 0 && 16 + (int64_t)length <= (int64_t)end &&
           length >= BATCH_HEADER + 2 * count;
}

/* ------------------------------------------------------------ DATA, in one go */

/* The run ends: what it changed of its session written back (see `Run`);
 * 0, or -1 with an exception set. */
static int prun_end(Ctx *c);

/* What a run's datagrams did to their session, written back as note_pn does
 * for each (the same `now` for all): the largest packet number if it moved,
 * last_seen, and the session put on the ACK list; 0, or -1 with an exception. */
static int
run_seen(Ctx *c, PyObject *conn, PyObject *key, int pn_moved, uint64_t largest)
{
    int r = 0;
    if (pn_moved) {
        PyObject *pn = PyLong_FromUnsignedLongLong(largest);
        r = pn == NULL ? -1 : PyObject_SetAttr(conn, NAME(c, N_LARGEST_PN), pn);
        Py_XDECREF(pn);
        r = r < 0 ? r : PyObject_SetAttr(conn, NAME(c, N_ACK_DELAY_FROM), c->now);
    }
    r = r < 0 ? r : PyObject_SetAttr(conn, NAME(c, N_LAST_SEEN), c->now);
    int due = r < 0 ? 1 : attr_true(conn, NAME(c, N_ACK_DUE));
    if (due != 1) {
        PyObject *due_set = PyObject_GetAttr(c->core, NAME(c, N_ACK_DUE_SET));
        r = due_set == NULL || PyObject_SetAttr(conn, NAME(c, N_ACK_DUE), Py_True) < 0
                ? -1 : PySet_Add(due_set, key);
        Py_XDECREF(due_set);
    }
    return r;
}

static int
data_run_end(Ctx *c)
{
    Run *run = &c->run;
    int r = 0;
    if (run->taken) {
        r = PyObject_SetAttr(run->p, NAME(c, N_RECEIVED), run->received_obj);
        r = r < 0 ? r : run_seen(c, run->conn, run->key, run->pn_moved, run->largest);
    }
    Py_CLEAR(run->conn);
    Py_CLEAR(run->p);
    Py_CLEAR(run->key);
    Py_CLEAR(run->addr);
    Py_CLEAR(run->stream);
    Py_CLEAR(run->writes);
    Py_CLEAR(run->owners);
    Py_CLEAR(run->received_obj);
    run->taken = run->pn_moved = 0;
    return r;
}

/* Whichever run is going on ends (at most one is: each begins after the
 * other ended); 0, or -1 with an exception set. */
static int
run_end(Ctx *c)
{
    int r = prun_end(c);
    return data_run_end(c) < 0 || r < 0 ? -1 : 0;
}

/* A run begins at a DATA of session `conn_id`: its session and producer
 * checked as `_fast_data` does; 1, or 0 (declined, no run). */
static int
run_begin(Ctx *c, uint32_t conn_id, uint32_t epoch, PyObject *addr, uint64_t producer_id)
{
    Run *run = &c->run;
    if (open_session(c, conn_id, epoch, addr, &run->key, &run->conn, &run->p) < 0) {
        return 0;
    }
    run->conn_id = conn_id;
    run->epoch = epoch;
    Py_INCREF(addr);
    run->addr = addr;
    run->stream = PyObject_GetAttr(run->p, NAME(c, N_STREAM));
    if (run->stream == NULL || attr_u64(run->p, NAME(c, N_PID), &run->pid) < 0 ||
        run->pid != producer_id || attr_u64(run->p, NAME(c, N_RECEIVED), &run->received) < 0 ||
        attr_true(run->p, NAME(c, N_HELD)) != 0 || attr_true(run->p, NAME(c, N_PARTIALS)) != 0 ||
        attr_u64(run->p, NAME(c, N_MAX_RECORD), &run->max_record) < 0 ||
        attr_u64(run->conn, NAME(c, N_LARGEST_PN), &run->largest) < 0) {
        PyErr_Clear();
        run_end(c); /* nothing taken: only lets go */
        return 0;
    }
    return 1;
}

#if defined(__x86_64__) || defined(__i386__)
#include <nmmintrin.h>
/* Two CRC-32C states over the same bytes in one pass (the CPU runs the two
 * chains side by side: the cost of one). */
__attribute__((target("sse4.2"))) static void
crc_twice(uint32_t *a, uint32_t *b, const unsigned char *p, size_t len)
{
    uint64_t x = ~*a & 0xFFFFFFFFu, y = ~*b & 0xFFFFFFFFu;
    for (; len >= 8; p += 8, len -= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        x = _mm_crc32_u64(x, w);
        y = _mm_crc32_u64(y, w);
    }
    uint32_t x32 = (uint32_t)x, y32 = (uint32_t)y;
    for (; len; p++, len--) {
        x32 = _mm_crc32_u8(x32, *p);
        y32 = _mm_crc32_u8(y32, *p);
    }
    *a = ~x32;
    *b = ~y32;
}
#define HAVE_CRC_TWICE 1
#endif

/* Whether the datagram's CRC and its batch's CRC are right. */
static int
data_crcs_ok(Ctx *c, const unsigned char *d, Py_ssize_t end, uint64_t length)
{
    const unsigned char *batch = d + 16;
#ifdef HAVE_CRC_TWICE
    if (c->self->hardware) {
        uint32_t whole = pl_crc32c(0, d, 28), own = 0;
        crc_twice(&whole, &own, batch + 12, (size_t)(length - 12));
        whole = pl_crc32c(whole, batch + length, (size_t)(end - 16 - (Py_ssize_t)length));
        return whole == rd32(d + end) && own == rd32(batch + 8);
    }
#endif
    (void)c;
    return pl_crc32c(0, d, (size_t)end) == rd32(d + end) &&
           pl_crc32c(0, batch + 12, (size_t)(length - 12)) == rd32(batch + 8);
}

/* The run's next batch to the store: 0, or -1 with an exception set. */
static int
run_write(Ctx *c, PyObject *view, const unsigned char *h, uint64_t last)
{
    Run *run = &c->run;
    PyObject *header = make_header(c, h);
    PyObject *write = header == NULL ? NULL : PyTuple_Pack(2, view, header);
    Py_XDECREF(header);
    PyObject *received = write == NULL ? NULL : PyLong_FromUnsignedLongLong(last);
    PyObject *owner = received == NULL ? NULL : PyTuple_Pack(2, run->p, received);
    int r = owner == NULL ? -1 : 0;
    if (r == 0) {
        r = run->writes != NULL ? PyList_Append(run->writes, write)
                                : append_to(c, N_WRITES, run->stream, write, &run->writes);
    }
    if (r == 0) {
        r = run->owners != NULL ? PyList_Append(run->owners, owner)
                                : append_to(c, N_WRITE_OWNERS, run->stream, owner, &run->owners);
    }
    Py_XDECREF(write);
    Py_XDECREF(owner);
    if (r < 0) {
        Py_XDECREF(received);
        return -1;
    }
    Py_XDECREF(run->received_obj);
    run->received_obj = received;
    run->received = last;
    run->taken = 1;
    c->batches += 1;
    c->records += rd32(h + 20);
    return 0;
}

static int
take_data(Ctx *c, const unsigned char *d, Py_ssize_t size, Source *src, PyObject *addr)
{
    if (!data_bytes_ok(d, size)) {
        return 0;
    }
    uint64_t length = rd32(d + 32), count = rd32(d + 36), pn = rd64(d + 8);
    uint64_t producer_id = rd64(d + 40), first = rd64(d + 48), largest;
    uint32_t conn_id = rd32(d + 4), epoch = rd32(d + 56);
    Py_ssize_t end = size - TRAILER;
    Run *run = &c->run;
    if (run->conn == NULL || run->conn_id != conn_id || run->epoch != epoch ||
        run->addr != addr || run->pid != producer_id) {
        if (run_end(c) < 0) {
            return -1;
        }
        if (!run_begin(c, conn_id, epoch, addr, producer_id)) {
            return 0;
        }
    }
    uint64_t table_end = BATCH_HEADER + 2 * count;
    if (run->received == UINT64_MAX || first != run->received + 1 ||
        first > UINT64_MAX - (count - 1) || !data_crcs_ok(c, d, end, length) ||
        !all_zero(d + 16 + length, end - 16 - (Py_ssize_t)length) ||
        !table_adds_up(d + 16, (uint32_t)count, length - table_end, &largest) ||
        length - table_end > run->max_record) {
        return 0;
    }
    /* a copy (one allocation, not GC-tracked), not a view into the receive
     * buffer: cheaper than a memoryview's slice, and nothing to keep alive */
    (void)src;
    PyObject *batch = PyBytes_FromStringAndSize((const char *)d + 16, (Py_ssize_t)length);
    if (batch == NULL || run_write(c, batch, d + 16, first + count - 1) < 0) {
        Py_XDECREF(batch);
        return -1;
    }
    Py_DECREF(batch);
    if (pn > run->largest) {
        run->largest = pn;
        run->pn_moved = 1;
    }
    return 1;
}

/* ---------------------------------------------------- FRAGMENT, in order */

/* What a piece is: its fixed fields, and the producer's state it meets. */
typedef struct {
    uint64_t pn, seq, total, offset, end;
    uint32_t epoch;
    const unsigned char *chunk;
    Py_ssize_t chunk_len;
    uint32_t crc; /* the datagram's CRC (checked) */
    PyObject *key, *conn, *p, *seq_obj, *partials, *part;
} Piece;

/* ------------------------------------------- the batch's CRC from its pieces
 *
 * Track: when the pieces of a batch come in order through this code, each
 * one's datagram CRC (checked anyway) gives its bytes' CRC, and those joined
 * (crcjoin.c) give the CRC of the batch from byte 12 so far; the last piece
 * then checks the batch against it without a second pass over its bytes.
 *
 * The one risk: bytes written into the batch's buffer by anything else after
 * the CRC followed them.  The only other writers are the Python path's
 * (`Partial.add`, `_fast_piece`), and each write there puts a new tuple in
 * `spans`; this code holds a reference to the tuple it put there last (so no
 * other object can take its address), and uses the followed CRC only while
 * the batch's spans are exactly [that tuple] and it ends where the CRC does.
 * Anything else -- a piece through the Python path, a piece of another
 * length in the middle, another batch begun -- and the batch is checked by
 * a pass over its bytes, as before.  One batch is followed at a time. */

static void
track_drop(Intake *self)
{
    Py_CLEAR(self->t_part);
    Py_CLEAR(self->t_span);
    self->t_made = 0;
}

/* p's memory as Producer.memory reckons it: held_bytes and the totals of its
 * partials not counted; 0, or -1 (declined: something not as expected). */
static int
producer_memory(Ctx *c, PyObject *p, long long *out)
{
    long long held, total;
    PyObject *partials = PyObject_GetAttr(p, NAME(c, N_PARTIALS));
    if (partials == NULL || !PyDict_Check(partials) ||
        attr_i64(p, NAME(c, N_HELD_BYTES), &held) < 0) {
        PyErr_Clear();
        Py_XDECREF(partials);
        return -1;
    }
    Py_ssize_t at = 0;
    PyObject *key, *part;
    int r = 0;
    while (r == 0 && PyDict_Next(partials, &at, &key, &part)) {
        int counted = attr_true(part, NAME(c, N_COUNTED));
        if (counted < 0 || (!counted && (attr_i64(part, NAME(c, N_TOTAL), &total) < 0 ||
                                         total < 0 || held > LLONG_MAX - total))) {
            r = -1;
        }
        else if (!counted) {
            held += total;
        }
    }
    Py_DECREF(partials);
    *out = held;
    return r;
}

/* core._account(p) (core_state.py) without its Python frames (two a batch, the
 * Producer.memory property's and its generator's among them): p's memory into
 * core._holding (popped, then put back at the end when not 0) and the running
 * core._memory; where anything is not as expected, the method itself is
 * called.  0, or -1 with an exception set. */
static int
account(Ctx *c, PyObject *p)
{
    long long held, before = 0, memory;
    PyObject *holding = PyObject_GetAttr(c->core, NAME(c, N_HOLDING));
    PyObject *was = holding == NULL || !PyDict_CheckExact(holding) ? NULL
                    : PyDict_GetItemWithError(holding, p); /* borrowed */
    int fast = holding != NULL && PyDict_CheckExact(holding) && !PyErr_Occurred() &&
               producer_memory(c, p, &held) == 0 &&
               attr_i64(c->core, NAME(c, N_MEMORY), &memory) == 0;
    if (fast && was != NULL) {
        before = PyLong_AsLongLong(was);
        fast = !(before == -1 && PyErr_Occurred());
    }
    fast = fast && !(held > 0 && memory > LLONG_MAX - held) &&
           !(before > 0 && memory + held < LLONG_MIN + before) &&
           !(before < 0 && memory + held > LLONG_MAX + before);
    PyErr_Clear();
    if (!fast) {
        Py_XDECREF(holding);
        PyObject *x = PyObject_CallMethodObjArgs(c->core, NAME(c, N_ACCOUNT), p, NULL);
        Py_XDECREF(x);
        return x == NULL ? -1 : 0;
    }
    int r = was != NULL ? PyDict_DelItem(holding, p) : 0;
    if (r == 0 && held) {
        PyObject *v = PyLong_FromLongLong(held);
        r = v == NULL ? -1 : PyDict_SetItem(holding, p, v);
        Py_XDECREF(v);
    }
    Py_DECREF(holding);
    PyObject *total = r < 0 ? NULL : PyLong_FromLongLong(memory + held - before);
    r = total == NULL ? -1 : PyObject_SetAttr(c->core, NAME(c, N_MEMORY), total);
    Py_XDECREF(total);
    return r;
}

/* A batch the core let go of (its Partial held by nothing but the track) is
 * not kept alive past the call. */
static void
track_let_go(Intake *self)
{
    if (self->t_part != NULL && Py_REFCNT(self->t_part) == 1) {
        track_drop(self);
    }
}

/* The CRC followed is that of `part`'s bytes 12 .. `end`: 1 if so. */
static int
track_holds(Intake *self, PyObject *part, PyObject *spans, uint64_t end)
{
    return self->t_part != NULL && self->t_part == part && self->t_end == end &&
           PyList_Check(spans) && PyList_Size(spans) == 1 &&
           PyList_GetItem(spans, 0) == self->t_span;
}

static void
track_set(Intake *self, PyObject *part, PyObject *span, uint64_t end, uint32_t crc)
{
    if (self->t_part != part) {
        track_drop(self);
        self->t_part = Py_NewRef(part);
    }
    Py_INCREF(span);
    Py_XDECREF(self->t_span);
    self->t_span = span;
    self->t_end = end;
    self->t_crc = crc;
}

/* *crc (of the batch up to a piece) on over the piece: `d` its datagram, `dg`
 * the datagram's CRC, `len` the piece's bytes; `middle`: not the batch's last
 * (the shift tables are made for its length, at most once a batch).  1, or 0:
 * not followed (a middle piece of another length). */
static int
track_step(Intake *self, uint32_t *crc, const unsigned char *d, uint32_t dg, uint64_t len,
           int middle)
{
    /* crc(H P) = shift|P|(crc(H)) ^ crc(P), so crc(B P) = shift|P|(crc(B) ^ crc(H)) ^ crc(H P) */
    uint32_t x = *crc ^ pl_crc32c(0, d, FRAGMENT_HEAD);
    if (len != self->shift_len && middle) {
        if (self->t_made) {
            return 0;
        }
        pl_crc32c_shift_tables(self->shift, len);
        self->shift_len = len;
        self->t_made = 1;
    }
    x = len == self->shift_len ? pl_crc32c_shifted(self->shift, x) : pl_crc32c_shift(x, len);
    *crc = x ^ dg;
    return 1;
}

static void
piece_clear(Piece *k)
{
    Py_CLEAR(k->key);
    Py_CLEAR(k->conn);
    Py_CLEAR(k->p);
    Py_CLEAR(k->seq_obj);
    Py_CLEAR(k->partials);
    Py_CLEAR(k->part);
}

/* spans == [(0, offset)] */
static int
one_span_to(PyObject *spans, uint64_t offset)
{
    if (!PyList_Check(spans) || PyList_Size(spans) != 1) {
        return 0;
    }
    PyObject *span = PyList_GetItem(spans, 0); /* borrowed */
    if (span == NULL || !PyTuple_Check(span) || PyTuple_Size(span) != 2) {
        PyErr_Clear();
        return 0;
    }
    PyObject *a = PyTuple_GetItem(span, 0), *b = PyTuple_GetItem(span, 1);
    if (a == NULL || b == NULL || !PyLong_Check(a) || !PyLong_Check(b)) {
        PyErr_Clear();
        return 0;
    }
    unsigned long long x = PyLong_AsUnsignedLongLong(a), y = PyLong_AsUnsignedLongLong(b);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return x == 0 && y == offset;
}

/* The piece meets a batch being put together that it continues: 1 if so. */
static int
continues(Ctx *c, Piece *k, int completing)
{
    uint64_t total, epoch;
    if (k->total < BATCH_HEADER || /* (the Python path never makes one smaller) */
        attr_u64(k->part, NAME(c, N_TOTAL), &total) < 0 || total != k->total ||
        attr_u64(k->part, NAME(c, N_EPOCH), &epoch) < 0 || epoch != k->epoch) {
        return 0;
    }
    PyObject *spans = PyObject_GetAttr(k->part, NAME(c, N_SPANS));
    if (spans == NULL) {
        PyErr_Clear();
        return 0;
    }
    int ok = one_span_to(spans, k->offset);
    Py_DECREF(spans);
    if (!ok || !completing) {
        return ok;
    }
    /* the last piece: the batch is checked whole here, so nothing else may be
     * going on for the producer that on_fragment/on_batch would have to do */
    uint64_t max_record;
    return attr_true(k->p, NAME(c, N_HELD)) == 0 && PyDict_Size(k->partials) == 1 &&
           attr_true(k->part, NAME(c, N_COUNTED)) == 0 &&
           attr_u64(k->p, NAME(c, N_MAX_RECORD), &max_record) == 0 &&
           k->total <= (max_record > MAX_PIECED_BATCH ? max_record : MAX_PIECED_BATCH) +
                           BATCH_HEADER;
}

/* The first piece of the next batch may start one: 1 if so. */
static int
may_start(Ctx *c, Piece *k)
{
    uint64_t max_record;
    long long memory, max_memory;
    PyObject *config = PyObject_GetAttr(c->core, NAME(c, N_CONFIG));
    if (config == NULL) {
        PyErr_Clear();
        return 0;
    }
    int r = attr_i64(config, NAME(c, N_MAX_MEMORY), &max_memory);
    Py_DECREF(config);
    return r == 0 && k->offset == 0 && attr_u64(k->p, NAME(c, N_MAX_RECORD), &max_record) == 0 &&
           max_record <= UINT64_MAX - BATCH_HEADER && k->total <= max_record + BATCH_HEADER &&
           k->total >= BATCH_HEADER && attr_i64(c->core, NAME(c, N_MEMORY), &memory) == 0 &&
           memory >= 0 && (uint64_t)memory + k->total <= (uint64_t)max_memory && max_memory >= 0;
}

/* Read the piece's fields and find what it belongs to: 1 (go on), 0 (declined). */
static int
piece_find(Ctx *c, Piece *k, const unsigned char *d, Py_ssize_t size, PyObject *addr)
{
    if (size <= FRAGMENT_HEAD + TRAILER || d[0] != 'P' || d[1] != 'L' || d[2] != DATAGRAM_VERSION) {
        return 0;
    }
    k->pn = rd64(d + 8);
    k->epoch = rd32(d + 16);
    k->seq = rd64(d + 20);
    k->total = rd32(d + 28);
    k->offset = rd32(d + 32);
    k->chunk = d + FRAGMENT_HEAD;
    k->chunk_len = size - FRAGMENT_HEAD - TRAILER;
    k->end = k->offset + (uint64_t)k->chunk_len;
    uint64_t received;
    if (k->end > k->total ||
        open_session(c, rd32(d + 4), k->epoch, addr, &k->key, &k->conn, &k->p) < 0 ||
        attr_u64(k->p, NAME(c, N_RECEIVED), &received) < 0 || received == UINT64_MAX ||
        k->seq != received + 1) {
        return 0;
    }
    k->partials = PyObject_GetAttr(k->p, NAME(c, N_PARTIALS));
    k->seq_obj = PyLong_FromUnsignedLongLong(k->seq);
    if (k->partials == NULL || k->seq_obj == NULL || !PyDict_Check(k->partials)) {
        PyErr_Clear();
        return 0;
    }
    k->part = PyDict_GetItemWithError(k->partials, k->seq_obj);
    if (k->part == NULL) {
        if (PyErr_Occurred()) {
            PyErr_Clear();
            return 0;
        }
        return k->end < k->total && may_start(c, k);
    }
    Py_INCREF(k->part);
    return continues(c, k, k->end == k->total);
}

/* The piece's bytes into the batch's buffer: 0, or -1 with an exception set. */
static int
piece_copy(Ctx *c, Piece *k, Py_buffer *into)
{
    PyObject *buf = PyObject_GetAttr(k->part, NAME(c, N_BUF));
    if (buf == NULL) {
        return -1;
    }
    int r = PyObject_GetBuffer(buf, into, PyBUF_WRITABLE);
    Py_DECREF(buf);
    if (r < 0) {
        return -1;
    }
    if ((uint64_t)into->len != k->total) {
        PyBuffer_Release(into);
        PyErr_SetString(PyExc_RuntimeError, "intake: a batch's buffer is not its length");
        return -1;
    }
    memcpy((char *)into->buf + k->offset, k->chunk, (size_t)k->chunk_len);
    return 0;
}

/* The checks verify_batch and on_fragment make of a batch put together, the
 * largest record against max_record included: 1 if it passes. */
static int
batch_ok(Ctx *c, Piece *k, const unsigned char *b, uint64_t len, const uint32_t *crc)
{
    uint64_t length = rd32(b + 16), count = rd32(b + 20), first = rd64(b + 32);
    unsigned flags = b[15];
    uint64_t pid, max_record, largest;
    if (b[12] != 'P' || b[13] != 'B' || b[14] != BATCH_VERSION || (flags & ~FLAG_LARGE) ||
        length != len || first == 0 || count == 0 || first > UINT64_MAX - (count - 1) ||
        (flags & FLAG_LARGE ? count != 1 || length < BATCH_HEADER
                            : length < BATCH_HEADER + 2 * count) ||
        (crc != NULL ? *crc : pl_crc32c(0, b + 12, (size_t)(length - 12))) != rd32(b + 8)) {
        return 0;
    }
    if (flags & FLAG_LARGE) {
        largest = length - BATCH_HEADER;
    }
    else if (!table_adds_up(b, (uint32_t)count, length - BATCH_HEADER - 2 * count, &largest)) {
        return 0;
    }
    return attr_u64(k->p, NAME(c, N_PID), &pid) == 0 && pid == rd64(b + 24) && first == k->seq &&
           rd32(b + 40) == k->epoch && attr_u64(k->p, NAME(c, N_MAX_RECORD), &max_record) == 0 &&
           (length - BATCH_HEADER <= max_record || largest <= max_record);
}

/* The piece completes its batch: checked whole, then stored as on_fragment
 * would; 1 (taken), 0 (declined), -1 (error). */
static int
piece_complete(Ctx *c, Piece *k)
{
    Intake *self = c->self;
    uint32_t crc = 0;
    int followed = 0;
    if (self->t_part == k->part) {
        PyObject *spans = PyObject_GetAttr(k->part, NAME(c, N_SPANS));
        if (spans == NULL) {
            PyErr_Clear();
        }
        else if (track_holds(self, k->part, spans, k->offset)) {
            crc = self->t_crc;
            followed = track_step(self, &crc, k->chunk - FRAGMENT_HEAD, k->crc,
                                  (uint64_t)k->chunk_len, 0);
        }
        Py_XDECREF(spans);
        track_drop(self);
    }
    Py_buffer whole;
    if (piece_copy(c, k, &whole) < 0) {
        return -1;
    }
    const unsigned char *b = whole.buf;
    uint64_t last = rd64(b + 32) + rd32(b + 20) - 1;
    int ok = batch_ok(c, k, b, k->total, followed ? &crc : NULL);
    PyObject *buf = ok ? PyObject_GetAttr(k->part, NAME(c, N_BUF)) : NULL;
    PyObject *view = buf == NULL ? NULL : PyMemoryView_FromObject(buf);
    Py_XDECREF(buf);
    if (!ok || view == NULL) {
        PyBuffer_Release(&whole);
        return ok ? -1 : 0;
    }
    int r = PyDict_DelItem(k->partials, k->seq_obj);
    r = r < 0 ? r : write_batch(c, k->p, view, b, last);
    PyBuffer_Release(&whole);
    Py_DECREF(view);
    if (r < 0) {
        return -1;
    }
    PyObject *holding = PyObject_GetAttr(c->core, NAME(c, N_HOLDING));
    int held = holding == NULL ? -1 : PyObject_IsTrue(holding);
    if (held == 1) {
        held = PySequence_Contains(holding, k->p);
    }
    Py_XDECREF(holding);
    if (held == 1) { /* in-order data may have released held bytes (`_after`) */
        held = account(c, k->p);
    }
    return held < 0 || note_pn(c, k->conn, k->key, k->pn) < 0 ? -1 : 1;
}

/* Partial(total, False, epoch), but with a buffer whose bytes are not zeroed
 * first (Partial's own bytearray(total) writes every byte once more before
 * the pieces do: 64 KB a batch here).  No byte of it is read before a piece
 * wrote it: a batch is read only when its spans cover it whole
 * (`Partial.complete`, `continues`), and nothing else reads its buffer.
 * New reference, or NULL with an exception set. */
static PyObject *
new_partial(Ctx *c, uint64_t total, uint32_t epoch)
{
    PyObject *zero = PyLong_FromLong(0), *epoch_obj = PyLong_FromUnsignedLong(epoch);
    PyObject *part = zero == NULL || epoch_obj == NULL ? NULL
                     : PyObject_CallFunctionObjArgs(c->self->partial, zero, Py_False, epoch_obj,
                                                    NULL);
    Py_XDECREF(zero);
    Py_XDECREF(epoch_obj);
    PyObject *total_obj = part == NULL ? NULL : PyLong_FromUnsignedLongLong(total);
    /* an empty bytearray resized: the documented way to a buffer whose new
     * bytes are not written first */
    PyObject *buf = total_obj == NULL || total > PY_SSIZE_T_MAX ? NULL
                    : PyByteArray_FromStringAndSize("", 0);
    if (buf != NULL && PyByteArray_Resize(buf, (Py_ssize_t)total) < 0) {
        Py_CLEAR(buf);
    }
    int r = buf == NULL ? -1 : PyObject_SetAttr(part, NAME(c, N_TOTAL), total_obj);
    r = r < 0 ? r : PyObject_SetAttr(part, NAME(c, N_BUF), buf);
    Py_XDECREF(total_obj);
    Py_XDECREF(buf);
    if (r < 0) {
        if (!PyErr_Occurred()) {
            PyErr_NoMemory();
        }
        Py_XDECREF(part);
        return NULL;
    }
    return part;
}

/* A piece that is not the last: into the batch being put together (begun
 * here for its first piece), as `_fast_piece` does; 1 or -1. */
static int
piece_hold(Ctx *c, Piece *k)
{
    Intake *self = c->self;
    int first = k->part == NULL;
    if (first) {
        k->part = new_partial(c, k->total, k->epoch);
        if (k->part == NULL || PyDict_SetItem(k->partials, k->seq_obj, k->part) < 0) {
            return -1;
        }
    }
    Py_buffer into;
    if (piece_copy(c, k, &into) < 0) {
        return -1;
    }
    PyBuffer_Release(&into);
    PyObject *spans = PyObject_GetAttr(k->part, NAME(c, N_SPANS));
    PyObject *span = spans == NULL ? NULL : Py_BuildValue("(iK)", 0, (unsigned long long)k->end);
    int r = -1;
    /* (before spans[0] is replaced: whether the CRC followed covers the batch
     * up to this piece) */
    int followed = span != NULL && !first && track_holds(self, k->part, spans, k->offset);
    if (span != NULL && PyList_Check(spans)) {
        if (PyList_Size(spans) == 0) {
            r = PyList_Append(spans, span);
            r = r < 0 ? r : account(c, k->p);
        }
        else {
            Py_INCREF(span);
            r = PyList_SetItem(spans, 0, span);
        }
    }
    if (r == 0) {
        uint32_t crc = self->t_crc;
        if (first && k->chunk_len >= 12) {
            track_set(self, k->part, span, k->end,
                      pl_crc32c(0, k->chunk + 12, (size_t)k->chunk_len - 12));
        }
        else if (followed && track_step(self, &crc, k->chunk - FRAGMENT_HEAD, k->crc,
                                        (uint64_t)k->chunk_len, 1)) {
            track_set(self, k->part, span, k->end, crc);
        }
        else if (self->t_part == k->part) {
            track_drop(self);
        }
    }
    Py_XDECREF(spans);
    Py_XDECREF(span);
    if (r < 0) {
        return -1;
    }
    c->held += 1;
    return note_pn(c, k->conn, k->key, k->pn) < 0 ? -1 : 1;
}

/* The piece run ends: the batch's span and the session's packet numbers
 * written back (as piece_hold and note_pn would have, piece by piece: the
 * same `now` throughout the call); 0, or -1 with an exception set. */
static int
prun_end(Ctx *c)
{
    PieceRun *pr = &c->prun;
    if (pr->part == NULL) {
        return 0;
    }
    PyBuffer_Release(&pr->buf);
    int r = 0;
    if (pr->taken) {
        PyObject *spans = PyObject_GetAttr(pr->part, NAME(c, N_SPANS));
        PyObject *span = spans == NULL ? NULL : Py_BuildValue("(iK)", 0, (unsigned long long)pr->end);
        if (span == NULL || !PyList_Check(spans) || PyList_Size(spans) != 1) {
            Py_XDECREF(span);
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_RuntimeError, "intake: a batch's spans changed in a run");
            }
            r = -1;
        }
        else {
            r = PyList_SetItem(spans, 0, span); /* steals span (the list keeps it) */
            if (r == 0 && pr->tracked) {
                track_set(c->self, pr->part, span, pr->end, pr->crc);
            }
        }
        if ((r < 0 || !pr->tracked) && c->self->t_part == pr->part) {
            track_drop(c->self);
        }
        Py_XDECREF(spans);
        r = r < 0 ? r : run_seen(c, pr->conn, pr->key, pr->pn_moved, pr->largest);
    }
    Py_CLEAR(pr->conn);
    Py_CLEAR(pr->key);
    Py_CLEAR(pr->p);
    Py_CLEAR(pr->part);
    Py_CLEAR(pr->addr);
    pr->taken = pr->pn_moved = 0;
    return r;
}

/* A piece run begins after piece_hold took `k` (see PieceRun); no run if
 * anything it needs cannot be had (nothing changed either way). */
static void
prun_begin(Ctx *c, Piece *k, PyObject *addr)
{
    PieceRun *pr = &c->prun;
    uint64_t largest;
    if (attr_u64(k->conn, NAME(c, N_LARGEST_PN), &largest) < 0) {
        return;
    }
    PyObject *buf = PyObject_GetAttr(k->part, NAME(c, N_BUF));
    int r = buf == NULL ? -1 : PyObject_GetBuffer(buf, &pr->buf, PyBUF_WRITABLE);
    Py_XDECREF(buf);
    if (r < 0) {
        PyErr_Clear();
        return;
    }
    if ((uint64_t)pr->buf.len != k->total) {
        PyBuffer_Release(&pr->buf);
        return;
    }
    pr->conn = Py_NewRef(k->conn);
    pr->key = Py_NewRef(k->key);
    pr->p = Py_NewRef(k->p);
    pr->part = Py_NewRef(k->part);
    pr->addr = Py_NewRef(addr);
    pr->conn_id = (uint32_t)PyLong_AsUnsignedLong(k->key);
    pr->epoch = k->epoch;
    pr->seq = k->seq;
    pr->total = k->total;
    pr->end = k->end;
    pr->largest = largest;
    pr->taken = pr->pn_moved = 0;
    pr->tracked = c->self->t_part == k->part && c->self->t_end == k->end;
    pr->crc = c->self->t_crc;
}

/* The next piece of the run, in place: 1 (taken), or 0 (it does not
 * continue the run exactly: nothing changed, the full path decides). */
static int
prun_next(Ctx *c, const unsigned char *d, Py_ssize_t size, PyObject *addr)
{
    PieceRun *pr = &c->prun;
    if (size <= FRAGMENT_HEAD + TRAILER || d[0] != 'P' || d[1] != 'L' ||
        d[2] != DATAGRAM_VERSION || addr != pr->addr || rd32(d + 4) != pr->conn_id ||
        rd32(d + 16) != pr->epoch || rd64(d + 20) != pr->seq || rd32(d + 28) != pr->total ||
        rd32(d + 32) != pr->end) {
        return 0;
    }
    Py_ssize_t chunk_len = size - FRAGMENT_HEAD - TRAILER;
    uint64_t end = pr->end + (uint64_t)chunk_len;
    Py_ssize_t crc_end = size - TRAILER;
    if (end >= pr->total) {
        return 0; /* the last piece (checked whole): the full path */
    }
    uint32_t dg = pl_crc32c(0, d, (size_t)crc_end);
    if (dg != rd32(d + crc_end)) {
        return 0; /* a bad one: the full path */
    }
    if (pr->tracked && !track_step(c->self, &pr->crc, d, dg, (uint64_t)chunk_len, 1)) {
        pr->tracked = 0;
    }
    memcpy((char *)pr->buf.buf + pr->end, d + FRAGMENT_HEAD, (size_t)chunk_len);
    pr->end = end;
    uint64_t pn = rd64(d + 8);
    if (pn > pr->largest) {
        pr->largest = pn;
        pr->pn_moved = 1;
    }
    pr->taken = 1;
    c->held += 1;
    return 1;
}

static int
take_piece(Ctx *c, const unsigned char *d, Py_ssize_t size, PyObject *addr)
{
    if (c->prun.part != NULL && prun_next(c, d, size, addr)) {
        return 1;
    }
    if (run_end(c) < 0) { /* the Python state is read afresh below */
        return -1;
    }
    Piece k;
    memset(&k, 0, sizeof k);
    int r = piece_find(c, &k, d, size, addr);
    if (r == 1) {
        Py_ssize_t end = size - TRAILER;
        k.crc = pl_crc32c(0, d, (size_t)end);
        if (k.crc != rd32(d + end)) {
            r = 0;
        }
        else if (k.end == k.total) {
            r = piece_complete(c, &k);
        }
        else {
            r = piece_hold(c, &k);
            if (r == 1) {
                prun_begin(c, &k, addr);
            }
        }
    }
    piece_clear(&k);
    return r;
}

/* One datagram: 1 taken, 0 declined (nothing changed), -1 error. */
static int
take_one(Ctx *c, const unsigned char *d, Py_ssize_t size, Source *src, PyObject *addr)
{
    if (size <= DATA_FIXED) { /* as receive_datagram: the fast paths start above this */
        return 0;
    }
    if (d[3] == KIND_DATA) {
        return take_data(c, d, size, src, addr);
    }
    if (d[3] == KIND_FRAGMENT) {
        return take_piece(c, d, size, addr);
    }
    return 0;
}

/* ------------------------------------------------------------ Python methods */

/* The call ends (r < 0: with an exception set): the run ended and the counters
 * added even then (what was taken before an error stays taken); 0 or -1. */
static int
finish(Ctx *c, int r)
{
    if (r >= 0) {
        return flush(c);
    }
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    if (flush(c) < 0) {
        PyErr_Clear();
    }
    PyErr_Restore(type, value, tb);
    return -1;
}

static PyObject *
intake_take(Intake *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "take(core, data, addr, now) takes 4 arguments");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(args[1], &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    Ctx c;
    memset(&c, 0, sizeof c);
    c.self = self;
    c.core = args[0];
    c.now = args[3];
    int is_view = PyMemoryView_Check(args[1]);
    Source src = {args[1], is_view ? args[1] : NULL, 0};
    if (is_view) {
        Py_INCREF(args[1]);
    }
    int r = take_one(&c, view.buf, view.len, &src, args[2]);
    PyBuffer_Release(&view);
    Py_XDECREF(src.view);
    int done = finish(&c, r);
    track_let_go(self);
    if (done < 0) {
        return NULL;
    }
    return PyBool_FromLong(r);
}

/* The Python address of a sockaddr, as the socket module gives it. */
static PyObject *
make_address(const struct sockaddr_storage *sa, socklen_t len)
{
    char host[INET6_ADDRSTRLEN];
    if (len == 0) {
        Py_RETURN_NONE;
    }
    if (sa->ss_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)sa;
        if (inet_ntop(AF_INET, &a->sin_addr, host, sizeof host) == NULL) {
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        return Py_BuildValue("(si)", host, (int)ntohs(a->sin_port));
    }
    if (sa->ss_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)sa;
        if (inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host) == NULL) {
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        return Py_BuildValue("(siII)", host, (int)ntohs(a->sin6_port),
                             (unsigned int)ntohl(a->sin6_flowinfo),
                             (unsigned int)a->sin6_scope_id);
    }
    PyErr_SetString(PyExc_OSError, "intake: a datagram from an address family not IP");
    return NULL;
}

/* The GRO segment size a receive reports, or 0. */
static int
gro_segment(struct msghdr *msg)
{
    int segment = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(msg); cm != NULL; cm = CMSG_NXTHDR(msg, cm)) {
        if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO &&
            cm->cmsg_len >= CMSG_LEN(sizeof(int))) {
            memcpy(&segment, CMSG_DATA(cm), sizeof(int));
        }
    }
    return segment;
}

/* What one drain owes its caller. */
typedef struct {
    long long calls, datagrams, bytes;
    struct sockaddr_storage last_sa;
    socklen_t last_len;
    PyObject *last_addr;
} Drain;

/* Hand each datagram of one receive to the fast path or to `fallback`;
 * *shown: whether any went to `fallback` (which may keep a view of `buf`:
 * the fast path copies what it keeps). */
static int
segments(Ctx *c, Drain *dr, PyObject *buf, const unsigned char *data, Py_ssize_t n, int segment,
         PyObject *addr, int fast, PyObject *fallback, int *shown)
{
    Source src = {buf, NULL, 0};
    Py_ssize_t step = segment > 0 && segment < n ? segment : n;
    int r = 0;
    /* at least once: an empty datagram is a datagram too (dropped as truncated) */
    for (Py_ssize_t at = 0; (at < n || at == 0) && r == 0; at += step > 0 ? step : 1) {
        Py_ssize_t len = n - at < step ? n - at : step;
        dr->datagrams += 1;
        int taken = 0;
        if (fast) {
            taken = take_one(c, data + at, len, &src, addr);
            if (taken == 1) {
                c->datagrams += 1;
                c->bytes += len;
            }
        }
        if (taken < 0) {
            r = -1;
        }
        else if (!taken) {
            *shown = 1;
            /* (src is the whole buffer, from 0: the datagram is at .. at + len) */
            PyObject *view = flush(c) < 0 ? NULL : source_slice(&src, at, at + len);
            PyObject *x = view == NULL ? NULL
                          : PyObject_CallFunctionObjArgs(fallback, view, addr, c->now, NULL);
            r = x == NULL ? -1 : 0;
            Py_XDECREF(view);
            Py_XDECREF(x);
        }
    }
    Py_XDECREF(src.view);
    return r;
}

/* One receive into a buffer of the pool: 1 (go on), 0 (EAGAIN: done), -1. */
static int
receive_one(Ctx *c, Drain *dr, int fd, PyObject *get, PyObject *put, PyObject *used, int gro,
            int fast, PyObject *fallback)
{
    /* the run ends (its state written back, the counters added) before the GIL
     * is let go below: another thread never sees the core half brought up to date */
    if (flush(c) < 0) {
        return -1;
    }
    PyObject *buf = PyObject_CallNoArgs(get);
    if (buf == NULL) {
        return -1;
    }
    Py_buffer into;
    if (PyObject_GetBuffer(buf, &into, PyBUF_WRITABLE) < 0) {
        Py_DECREF(buf);
        return -1;
    }
    struct sockaddr_storage sa;
    union {
        char space[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } control;
    struct iovec iov = {into.buf, (size_t)into.len};
    struct msghdr msg;
    memset(&msg, 0, sizeof msg);
    msg.msg_name = &sa;
    msg.msg_namelen = sizeof sa;
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = gro ? control.space : NULL;
    msg.msg_controllen = gro ? sizeof control.space : 0;
    /* the GIL is let go for the copy, as the socket module's recvmsg_into
     * does: a link thread in the same process packs meanwhile (keeping it,
     * as link/nogil.py does for sends, measured no better here: see
     * docs/performance.md, "The compiled core: intake") */
    ssize_t n;
    int err;
    Py_BEGIN_ALLOW_THREADS
    n = recvmsg(fd, &msg, MSG_DONTWAIT);
    err = errno;
    Py_END_ALLOW_THREADS
    int r = 1;
    if (n < 0) {
        PyBuffer_Release(&into);
        PyObject *x = PyObject_CallFunctionObjArgs(put, buf, NULL);
        Py_DECREF(buf);
        if (x == NULL) {
            return -1;
        }
        Py_DECREF(x);
        if (err == EAGAIN || err == EWOULDBLOCK) {
            return 0;
        }
        if (err == ECONNREFUSED) {
            return 1;
        }
        if (err == EINTR) {
            return PyErr_CheckSignals() < 0 ? -1 : 1;
        }
        errno = err;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    dr->calls += 1;
    dr->bytes += n;
    if (dr->last_addr == NULL || msg.msg_namelen != dr->last_len ||
        memcmp(&sa, &dr->last_sa, msg.msg_namelen) != 0) {
        Py_CLEAR(dr->last_addr);
        dr->last_addr = make_address(&sa, msg.msg_namelen);
        memcpy(&dr->last_sa, &sa, sizeof sa);
        dr->last_len = msg.msg_namelen;
        r = dr->last_addr == NULL ? -1 : 1;
    }
    int shown = 0;
    if (r == 1) {
        int segment = gro ? gro_segment(&msg) : 0;
        r = segments(c, dr, buf, into.buf, n, segment, dr->last_addr, fast, fallback, &shown) < 0
                ? -1 : 1;
    }
    PyBuffer_Release(&into);
    /* a buffer whose datagrams the fast path took whole is referred to by
     * nothing: back to the pool now (the next receive reuses it, still in
     * the cache); one that Python code saw stays until the round's writes
     * are done (`used`) */
    if (r == 1 && !shown) {
        r = flush(c) < 0 ? -1 : 1;
        PyObject *x = r < 0 ? NULL : PyObject_CallFunctionObjArgs(put, buf, NULL);
        r = x == NULL ? -1 : 1;
        Py_XDECREF(x);
    }
    else if (PyList_Append(used, buf) < 0) {
        r = -1;
    }
    Py_DECREF(buf);
    return r;
}

static PyObject *
intake_drain(Intake *self, PyObject *args)
{
    PyObject *core, *get, *put, *used, *now, *fallback;
    int fd, gro, budget, fast;
    if (!PyArg_ParseTuple(args, "OiOOO!ppiOO:drain", &core, &fd, &get, &put, &PyList_Type, &used,
                          &gro, &fast, &budget, &now, &fallback)) {
        return NULL;
    }
    Ctx c;
    memset(&c, 0, sizeof c);
    c.self = self;
    c.core = core;
    c.now = now;
    Drain dr;
    memset(&dr, 0, sizeof dr);
    int r = 1;
    for (int i = 0; i < budget && r == 1; i++) {
        r = receive_one(&c, &dr, fd, get, put, used, gro, fast, fallback);
    }
    Py_XDECREF(dr.last_addr);
    r = finish(&c, r);
    track_let_go(self);
    if (r < 0) {
        return NULL;
    }
    return Py_BuildValue("(LLL)", dr.calls, dr.datagrams, dr.bytes);
}

/* ------------------------------------------------------------------- the type */

static int
intake_traverse(Intake *self, visitproc visit, void *arg)
{
    Py_VISIT(Py_TYPE((PyObject *)self));
    Py_VISIT(self->batch_header);
    Py_VISIT(self->partial);
    Py_VISIT(self->open);
    Py_VISIT(self->tuple_new);
    Py_VISIT(self->t_part);
    Py_VISIT(self->t_span);
    return 0;
}

static int
intake_clear(Intake *self)
{
    Py_CLEAR(self->batch_header);
    Py_CLEAR(self->partial);
    Py_CLEAR(self->open);
    Py_CLEAR(self->tuple_new);
    track_drop(self);
    for (int i = 0; i < N_COUNT; i++) {
        Py_CLEAR(self->names[i]);
    }
    return 0;
}

static void
intake_dealloc(Intake *self)
{
    PyTypeObject *tp = Py_TYPE((PyObject *)self);
    PyObject_GC_UnTrack(self);
    intake_clear(self);
    freefunc tp_free = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    tp_free(self);
    Py_DECREF(tp);
}

static PyObject *
intake_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *batch_header, *partial, *open;
    static char *keywords[] = {"batch_header", "partial", "open", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOO:Intake", keywords, &batch_header,
                                     &partial, &open)) {
        return NULL;
    }
    allocfunc alloc = (allocfunc)PyType_GetSlot(type, Py_tp_alloc);
    Intake *self = (Intake *)alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
#ifdef HAVE_CRC_TWICE
    __builtin_cpu_init();
    self->hardware = __builtin_cpu_supports("sse4.2") != 0;
#endif
    self->shift_len = UINT64_MAX; /* no tables made yet */
    Py_INCREF(batch_header);
    self->batch_header = batch_header;
    Py_INCREF(partial);
    self->partial = partial;
    Py_INCREF(open);
    self->open = open;
    self->tuple_new = PyObject_GetAttrString((PyObject *)&PyTuple_Type, "__new__");
    if (self->tuple_new == NULL) {
        Py_DECREF(self);
        return NULL;
    }
    for (int i = 0; i < N_COUNT; i++) {
        self->names[i] = PyUnicode_InternFromString(NAMES[i]);
        if (self->names[i] == NULL) {
            Py_DECREF(self);
            return NULL;
        }
    }
    return (PyObject *)self;
}

/* join_crc(a, b, n, tables): crc(A B) from a = crc(A), b = crc(B), n = |B|,
 * through the shift tables (made for n) or bit by bit: for the tests. */
static PyObject *
intake_join_crc(Intake *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "join_crc(a, b, n, tables) takes 4 arguments");
        return NULL;
    }
    unsigned long a = PyLong_AsUnsignedLong(args[0]), b = PyLong_AsUnsignedLong(args[1]);
    unsigned long long n = PyLong_AsUnsignedLongLong(args[2]);
    int tables = PyObject_IsTrue(args[3]);
    if (PyErr_Occurred() || tables < 0) {
        return NULL;
    }
    if (a > 0xFFFFFFFFul || b > 0xFFFFFFFFul) {
        PyErr_SetString(PyExc_ValueError, "join_crc: a CRC-32C is below 2**32");
        return NULL;
    }
    uint32_t x;
    if (tables) {
        if (n != self->shift_len) {
            pl_crc32c_shift_tables(self->shift, n);
            self->shift_len = n;
        }
        x = pl_crc32c_shifted(self->shift, (uint32_t)a);
    }
    else {
        x = pl_crc32c_shift((uint32_t)a, n);
    }
    return PyLong_FromUnsignedLong(x ^ (uint32_t)b);
}

static PyMethodDef intake_methods[] = {
    {"join_crc", (PyCFunction)(void (*)(void))intake_join_crc, METH_FASTCALL,
     "join_crc(a, b, n, tables, /) -> int: the CRC-32C of A B from a = crc(A), b = crc(B)\n"
     "and n = len(B) (through shift tables made for n when `tables`): for the tests."},
    {"take", (PyCFunction)(void (*)(void))intake_take, METH_FASTCALL,
     "take(core, data, addr, now, /) -> bool: the datagram taken by the fast path, or False\n"
     "(declined, nothing changed: the core's Python path must handle it)."},
    {"drain", (PyCFunction)intake_drain, METH_VARARGS,
     "drain(core, fd, get, put, used, gro, fast, budget, now, fallback, /) -> (receives,\n"
     "datagrams, bytes): receive until EAGAIN or `budget` receives, each into a buffer from\n"
     "get() (appended to `used` when a datagram of it went to `fallback`; else put() back at\n"
     "once), a GRO receive split by its segment size; each datagram taken (when `fast`) or\n"
     "given to fallback(view, addr, now)."},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot intake_slots[] = {
    {Py_tp_doc, "The listener's fast intake over a ListenerCore's state (core_intake.py)."},
    {Py_tp_new, intake_new},
    {Py_tp_dealloc, intake_dealloc},
    {Py_tp_traverse, intake_traverse},
    {Py_tp_clear, intake_clear},
    {Py_tp_methods, intake_methods},
    {0, NULL},
};

static PyType_Spec intake_spec = {
    .name = "purelink._speedups.Intake",
    .basicsize = sizeof(Intake),
    .itemsize = 0,
    .flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .slots = intake_slots,
};

int
pl_intake_exec(PyObject *module)
{
    PyObject *type = PyType_FromModuleAndSpec(module, &intake_spec, NULL);
    if (type == NULL) {
        return -1;
    }
    int r = PyModule_AddObjectRef(module, "Intake", type);
    Py_DECREF(type);
    if (r < 0) {
        return -1;
    }
    return PyModule_AddIntConstant(module, "has_intake", 1);
}
