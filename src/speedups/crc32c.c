/* purelink._speedups: CRC-32C (Castagnoli), the checksum of the wire and
 * store formats.
 *
 * Why here and not only in the `crc32c` package: the packer and the intake
 * check every piece and batch in C, without a call back into Python per
 * checksum.  The Python function `crc32c(data, value=0)` is the same
 * function as the package's (tests/native/ hold them equal), so the two
 * paths agree byte for byte.
 *
 * Three ways, chosen once at import: the SSE 4.2 instruction on x86-64 when
 * the CPU has it, the ARMv8 CRC instructions when the compiler targets them,
 * and slicing-by-8 tables otherwise (8 bytes per step from 8 tables of 256
 * entries, built at import).
 *
 * The instructions take 8 bytes each but wait for the previous one's result
 * (3 cycles on x86-64, one issued per cycle), so one stream runs at a third
 * of what the CPU can do.  Long buffers are cut into three blocks checksummed
 * side by side, each from 0, and the three are joined: the register is
 * linear, so crc(s, X Y) = shift|Y|(crc(s, X)) xor crc(0, Y), where shiftN
 * is what N zero bytes do to a register, a 32 x 32 matrix over GF(2) applied
 * here as 4 lookups in tables built at import by crcjoin.c (one set for each
 * block size: BLOCK_LONG bytes for batches, BLOCK_SHORT for a datagram's
 * piece).
 */
#include "speedups.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define PL_CRC_X86 1
#endif
#if defined(__aarch64__) && defined(__ARM_FEATURE_CRC32)
#include <arm_acle.h>
#define PL_CRC_ARM 1
#endif

#define POLY 0x82F63B78u /* reflected Castagnoli polynomial */

static uint32_t table[8][256];
static int use_hardware;

#define BLOCK_LONG 4096
#define BLOCK_SHORT 128
static uint32_t shift_long[4][256];  /* BLOCK_LONG zero bytes */
static uint32_t shift_short[4][256]; /* BLOCK_SHORT zero bytes */

static void
build_tables(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++) {
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        }
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        for (int t = 1; t < 8; t++) {
            table[t][n] = (table[t - 1][n] >> 8) ^ table[0][table[t - 1][n] & 0xFF];
        }
    }
}

static uint32_t
crc_tables(uint32_t crc, const unsigned char *p, size_t len)
{
    while (len && ((uintptr_t)p & 7)) {
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xFF];
        len--;
    }
    while (len >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        word = __builtin_bswap64(word);
#endif
        word ^= crc;
        crc = table[7][word & 0xFF] ^ table[6][(word >> 8) & 0xFF] ^
              table[5][(word >> 16) & 0xFF] ^ table[4][(word >> 24) & 0xFF] ^
              table[3][(word >> 32) & 0xFF] ^ table[2][(word >> 40) & 0xFF] ^
              table[1][(word >> 48) & 0xFF] ^ table[0][word >> 56];
        p += 8;
        len -= 8;
    }
    while (len--) {
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xFF];
    }
    return crc;
}

#ifdef PL_CRC_X86
/* Runs of three blocks of `block` bytes (a multiple of 8) side by side, from
 * register c; advances *p and *len past them. */
__attribute__((target("sse4.2"))) static inline uint64_t
three_x86(uint64_t c, const unsigned char **p, size_t *len, size_t block,
          const uint32_t shift[4][256])
{
    while (*len >= 3 * block) {
        const unsigned char *a = *p, *b = a + block, *d = b + block;
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < block; i += 8) {
            uint64_t wa, wb, wd;
            memcpy(&wa, a + i, 8);
            memcpy(&wb, b + i, 8);
            memcpy(&wd, d + i, 8);
            c = _mm_crc32_u64(c, wa);
            c1 = _mm_crc32_u64(c1, wb);
            c2 = _mm_crc32_u64(c2, wd);
        }
        c = pl_crc32c_shifted(shift, pl_crc32c_shifted(shift, (uint32_t)c) ^ (uint32_t)c1) ^
            (uint32_t)c2;
        *p += 3 * block;
        *len -= 3 * block;
    }
    return c;
}

__attribute__((target("sse4.2"))) static uint32_t
crc_x86(uint32_t crc, const unsigned char *p, size_t len)
{
    uint64_t c = crc;
    while (len && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        len--;
    }
    c = three_x86(c, &p, &len, BLOCK_LONG, shift_long);
    c = three_x86(c, &p, &len, BLOCK_SHORT, shift_short);
    while (len >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        c = _mm_crc32_u64(c, word);
        p += 8;
        len -= 8;
    }
    while (len--) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
    }
    return (uint32_t)c;
}
#endif

#ifdef PL_CRC_ARM
static uint32_t
crc_arm(uint32_t crc, const unsigned char *p, size_t len)
{
    while (len && ((uintptr_t)p & 7)) {
        crc = __crc32cb(crc, *p++);
        len--;
    }
    while (len >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
        crc = __crc32cd(crc, word);
        p += 8;
        len -= 8;
    }
    while (len--) {
        crc = __crc32cb(crc, *p++);
    }
    return crc;
}
#endif

uint32_t
pl_crc32c(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = (const unsigned char *)data;
    crc = ~crc;
#ifdef PL_CRC_X86
    if (use_hardware) {
        return ~crc_x86(crc, p, len);
    }
#endif
#ifdef PL_CRC_ARM
    if (use_hardware) {
        return ~crc_arm(crc, p, len);
    }
#endif
    return ~crc_tables(crc, p, len);
}

/* The arguments of crc32c() and crc32c_portable(): (data, value=0), data
 * as a buffer the caller releases; 0, or -1 with an exception set. */
static int
crc_args(const char *name, PyObject *const *args, Py_ssize_t nargs, Py_buffer *view,
         uint32_t *value)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_Format(PyExc_TypeError, "%s(data, value=0) takes 1 or 2 arguments", name);
        return -1;
    }
    *value = 0;
    if (nargs == 2) {
        unsigned long v = PyLong_AsUnsignedLongMask(args[1]);
        if (v == (unsigned long)-1 && PyErr_Occurred()) {
            return -1;
        }
        *value = (uint32_t)v;
    }
    return PyObject_GetBuffer(args[0], view, PyBUF_SIMPLE);
}

/* Bytes above which crc32c() lets other threads run while it works. */
#define RELEASE_GIL_ABOVE (256 * 1024)

static PyObject *
py_crc32c(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_buffer view;
    uint32_t crc;
    if (crc_args("crc32c", args, nargs, &view, &crc) < 0) {
        return NULL;
    }
    if (view.len > RELEASE_GIL_ABOVE) {
        Py_BEGIN_ALLOW_THREADS
        crc = pl_crc32c(crc, view.buf, (size_t)view.len);
        Py_END_ALLOW_THREADS
    }
    else {
        crc = pl_crc32c(crc, view.buf, (size_t)view.len);
    }
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

/* The tables' way whatever the CPU has, so that tests check it on any machine. */
static PyObject *
py_crc32c_portable(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    Py_buffer view;
    uint32_t crc;
    if (crc_args("crc32c_portable", args, nargs, &view, &crc) < 0) {
        return NULL;
    }
    crc = ~crc_tables(~crc, view.buf, (size_t)view.len);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLong(crc);
}

static PyMethodDef methods[] = {
    {"crc32c", (PyCFunction)(void (*)(void))py_crc32c, METH_FASTCALL,
     "crc32c(data, value=0, /) -> int: CRC-32C of a bytes-like object, continuing from value."},
    {"crc32c_portable", (PyCFunction)(void (*)(void))py_crc32c_portable, METH_FASTCALL,
     "crc32c_portable(data, value=0, /) -> int: crc32c() by the tables, whatever the CPU has."},
    {NULL, NULL, 0, NULL},
};

int
pl_crc32c_exec(PyObject *module)
{
    build_tables();
    pl_crc32c_shift_tables(shift_long, BLOCK_LONG);
    pl_crc32c_shift_tables(shift_short, BLOCK_SHORT);
#ifdef PL_CRC_X86
    __builtin_cpu_init();
    use_hardware = __builtin_cpu_supports("sse4.2") != 0;
#endif
#ifdef PL_CRC_ARM
    use_hardware = 1;
#endif
    if (PyModule_AddFunctions(module, methods) < 0) {
        return -1;
    }
    return PyModule_AddIntConstant(module, "crc32c_hardware", use_hardware);
}
