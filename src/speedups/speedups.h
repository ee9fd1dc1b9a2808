/* purelink._speedups: what the parts of the compiled core share.
 *
 * Why: the extension is one module built from one C file per part (the
 * link's queue and ring, packing and CRC-32C, the in-flight ledger, the
 * listener's intake); each part adds its types and functions to the module
 * in its own exec function, so the parts are written and reviewed apart.
 *
 * The limited API of CPython 3.11 (Py_LIMITED_API, set by setup.py): one
 * binary per platform serves 3.11 and every later CPython (an abi3 wheel).
 * Not built for a free-threaded CPython: the ring is not audited for it, so
 * such an interpreter runs the pure-Python path (setup.py).
 */
#ifndef PURELINK_SPEEDUPS_H
#define PURELINK_SPEEDUPS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* Returning None, NotImplemented, True or False takes a reference, made by
 * the running interpreter.  The Py_RETURN_* macros of the headers of CPython
 * 3.12, of 3.13 before its fixes, and (for NotImplemented) of 3.14.0 return
 * the object with no new reference even in the limited API of 3.11, as if it
 * were immortal, which it is from 3.12 on but not on 3.11 (CPython
 * gh-134989, gh-140487): a module built by such a CPython (its abi3 wheel
 * installs on a 3.11 too) takes one reference from None at every such
 * return on a 3.11, until the interpreter aborts ("deallocating None").
 * tests/native/test_abi.py checks the counts; .ci/run runs tests/native on
 * the oldest interpreter against the binary each newer one builds. */
#undef Py_RETURN_NONE
#define Py_RETURN_NONE return pl_new_ref(Py_None)
#undef Py_RETURN_NOTIMPLEMENTED
#define Py_RETURN_NOTIMPLEMENTED return pl_new_ref(Py_NotImplemented)
#undef Py_RETURN_TRUE
#define Py_RETURN_TRUE return pl_new_ref(Py_True)
#undef Py_RETURN_FALSE
#define Py_RETURN_FALSE return pl_new_ref(Py_False)

static inline PyObject *
pl_new_ref(PyObject *o)
{
    Py_IncRef(o);
    return o;
}

/* Each part's exec function: add its names to the module; 0, or -1 with an
 * exception set. */
int pl_crc32c_exec(PyObject *module);
int pl_ring_exec(PyObject *module);
int pl_pack_exec(PyObject *module);
int pl_ledger_exec(PyObject *module);
int pl_flights_exec(PyObject *module);
int pl_intake_exec(PyObject *module);

/* CRC-32C (Castagnoli) of len bytes at data, continuing from crc (0 to
 * start); the CPU's instruction where present, a table otherwise
 * (crc32c.c).  No Python calls: safe without the GIL. */
uint32_t pl_crc32c(uint32_t crc, const void *data, size_t len);

/* What n zero bytes after them do to a CRC-32C: crc(A B) ==
 * pl_crc32c_shift(crc(A), |B|) ^ crc(B) (crcjoin.c).  For a length met
 * often, pl_crc32c_shift_tables makes 4 tables of 256 and pl_crc32c_shifted
 * applies them.  No Python calls. */
uint32_t pl_crc32c_shift(uint32_t crc, uint64_t n);
void pl_crc32c_shift_tables(uint32_t tables[4][256], uint64_t n);

static inline uint32_t
pl_crc32c_shifted(const uint32_t tables[4][256], uint32_t crc)
{
    return tables[0][crc & 0xFF] ^ tables[1][(crc >> 8) & 0xFF] ^
           tables[2][(crc >> 16) & 0xFF] ^ tables[3][crc >> 24];
}

/* How many records ahead a loop over a link's records asks for the next
 * one's object: a backlog's records meet the loop cold (each in its own
 * cache lines, far from the last), and a load's latency is several records'
 * work, so it is asked for this far ahead, as a hint the CPU may ignore.
 * Nothing is read through the pointer: a hint on any address is harmless. */
#define PL_AHEAD 12

/* Ask for the first two cache lines of `obj` (a small bytes object: its
 * header and its first bytes), to be written (its reference count). */
static inline void
pl_prefetch_object(const void *obj)
{
#if defined(__GNUC__) || defined(__clang__)
    __builtin_prefetch(obj, 1, 3);
    __builtin_prefetch((const char *)obj + 64, 0, 3);
#else
    (void)obj;
#endif
}

/* The items of a list that a loop will meet next, each looked up once: a
 * loop over a list's items asks for item k + PL_AHEAD (pl_ahead_keep, which
 * asks the CPU for its object too) and uses item k from here
 * (pl_ahead_item), so each item costs one PyList_GetItem, not two (the
 * limited API has no macro for it).  The pointers are borrowed: only for a
 * loop that runs no Python code and changes no item it has not reached. */
#define PL_WINDOW 16 /* a power of two above PL_AHEAD */

typedef struct {
    PyObject *at[PL_WINDOW];
} PlAhead;

static inline void
pl_ahead_keep(PlAhead *a, Py_ssize_t k, PyObject *item)
{
    a->at[k & (PL_WINDOW - 1)] = item;
    pl_prefetch_object(item);
}

static inline PyObject *
pl_ahead_item(const PlAhead *a, Py_ssize_t k)
{
    return a->at[k & (PL_WINDOW - 1)];
}

#endif
