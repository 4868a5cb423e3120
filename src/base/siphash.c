/*
 * siphash.c - SipHash-1-3 (Aumasson & Bernstein), see siphash.h. Reads the
 * message as little-endian 64-bit words; the last word carries the tail
 * bytes and the length's low byte in its top byte.
 */
#include "base/siphash.h"

#include <string.h>

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define SIP_ROUND                                                                                  \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = ROTL(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = ROTL(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = ROTL(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = ROTL(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = ROTL(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = ROTL(v2, 32);                                                                         \
    } while (0)

static inline uint64_t load_le64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

uint64_t crb_siphash13(const crb_sipkey *key, const void *data, size_t len)
{
    const unsigned char *in = data;
    uint64_t v0 = 0x736f6d6570736575ull ^ key->k0;
    uint64_t v1 = 0x646f72616e646f6dull ^ key->k1;
    uint64_t v2 = 0x6c7967656e657261ull ^ key->k0;
    uint64_t v3 = 0x7465646279746573ull ^ key->k1;
    const unsigned char *end = in + (len & ~(size_t)7);
    for (; in != end; in += 8) {
        uint64_t m = load_le64(in);
        v3 ^= m;
        SIP_ROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    switch (len & 7) {
    case 7:
        b |= (uint64_t)in[6] << 48;
        /* fall through */
    case 6:
        b |= (uint64_t)in[5] << 40;
        /* fall through */
    case 5:
        b |= (uint64_t)in[4] << 32;
        /* fall through */
    case 4:
        b |= (uint64_t)in[3] << 24;
        /* fall through */
    case 3:
        b |= (uint64_t)in[2] << 16;
        /* fall through */
    case 2:
        b |= (uint64_t)in[1] << 8;
        /* fall through */
    case 1:
        b |= (uint64_t)in[0];
        break;
    default:
        break;
    }
    v3 ^= b;
    SIP_ROUND;
    v0 ^= b;
    v2 ^= 0xff;
    SIP_ROUND;
    SIP_ROUND;
    SIP_ROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}
