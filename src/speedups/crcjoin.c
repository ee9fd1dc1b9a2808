/* purelink._speedups: joining CRC-32Cs, so the listener checks a batch put
 * together from pieces without a second pass over its bytes.
 *
 * Why: the intake checks each piece's datagram (its CRC covers the piece's
 * header and bytes) and, when the last piece comes, the whole batch (its CRC
 * covers the batch from byte 12).  Both are CRCs over the same bytes, so the
 * batch's can be had from the pieces': the register is linear, and
 *
 *     crc(A B) = shift_|B|(crc(A)) xor crc(B)
 *
 * where shift_n is what n zero bytes do to a register (with the standard
 * pre- and post-inversion it cancels out: zlib's crc32_combine is the same
 * identity).  shift_n is multiplication by x^(8n) modulo the polynomial, in
 * the bit-reflected order of the register: x^(8n) is found by squaring
 * (x^(2^k) for k < 64 in a table made once), and applied either bit by bit
 * (`pl_crc32c_shift`, for any n) or, for the one length that comes again and
 * again (a batch's middle pieces), from 4 tables of 256 made for it
 * (`pl_crc32c_shift_tables`), 4 lookups a piece.  crc32c.c joins its three
 * side-by-side streams through the same tables.
 */
#include "speedups.h"

#define POLY 0x82F63B78u /* reflected Castagnoli polynomial */
#define X0 0x80000000u   /* x^0, bit-reflected */

static uint32_t x2k[64]; /* x^(2^k) mod P */
static int x2k_made;

/* a * b mod P, bit-reflected. */
static uint32_t
mul(uint32_t a, uint32_t b)
{
    uint32_t p = 0;
    for (uint32_t m = X0; m != 0 && a != 0; m >>= 1) {
        if (a & m) {
            p ^= b;
            a ^= m;
        }
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}

static void
make_x2k(void)
{
    if (x2k_made) {
        return;
    }
    uint32_t p = X0 >> 1; /* x^1 */
    for (int k = 0; k < 64; k++) {
        x2k[k] = p;
        p = mul(p, p);
    }
    x2k_made = 1;
}

/* x^(8n) mod P. */
static uint32_t
x8n(uint64_t n)
{
    make_x2k();
    uint32_t p = X0;
    for (int k = 3; n != 0 && k < 64; k++, n >>= 1) {
        if (n & 1) {
            p = mul(x2k[k], p);
        }
    }
    return p;
}

uint32_t
pl_crc32c_shift(uint32_t crc, uint64_t n)
{
    return mul(x8n(n), crc);
}

void
pl_crc32c_shift_tables(uint32_t tables[4][256], uint64_t n)
{
    /* the image of each of the 32 bits: bit 31 is x^0, and each bit below it
     * is the one above times x */
    uint32_t image[32];
    uint32_t b = x8n(n);
    for (int bit = 31; bit >= 0; bit--) {
        image[bit] = b;
        b = b & 1 ? (b >> 1) ^ POLY : b >> 1;
    }
    for (int byte = 0; byte < 4; byte++) {
        tables[byte][0] = 0;
        for (uint32_t v = 1; v < 256; v++) {
            int bit = 0; /* v's lowest bit set */
            while (!(v >> bit & 1)) {
                bit++;
            }
            tables[byte][v] = tables[byte][v & (v - 1)] ^ image[byte * 8 + bit];
        }
    }
}
