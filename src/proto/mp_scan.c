/*
 * mp_scan.c - see mp_scan.h. Shared by messages.c and rpc.c.
 */
#include "proto/mp_scan.h"

#define SCAN_MAX_DEPTH CRP_MP_MAX_DEPTH

/*
 * Prove that p[0..len) is exactly one complete msgpack object whose
 * containers nest at most SCAN_MAX_DEPTH deep and whose element counts are
 * each backed by at least one input byte per element. NULL, or why not.
 */
const char *crp_mp_scan(const uint8_t *p, size_t len)
{
    uint64_t left[SCAN_MAX_DEPTH + 1]; /* objects still expected per level */
    size_t depth = 0;
    size_t pos = 0;
    uint64_t pending = 1; /* sum of left[] */

    left[0] = 1;
    for (;;) {
        while (left[depth] == 0) {
            if (depth == 0)
                return pos == len ? NULL : "has trailing bytes after the body";
            depth--;
        }
        if (pos >= len)
            return "is truncated";
        uint8_t b = p[pos++];
        left[depth]--;
        pending--;

        size_t len_bytes = 0;   /* size of a following length/count field */
        uint64_t skip = 0;      /* payload bytes to step over */
        uint64_t children = 0;  /* objects contained */
        unsigned per_entry = 0; /* objects per counted entry: 1 array, 2 map */
        uint64_t ext = 0;       /* ext: the type byte after the length */

        if (b <= 0x7f || b >= 0xe0) {
            /* positive or negative fixint */
        } else if (b <= 0x8f) {
            children = 2u * (b & 0x0fu);
            per_entry = 2;
        } else if (b <= 0x9f) {
            children = b & 0x0fu;
            per_entry = 1;
        } else if (b <= 0xbf) {
            skip = b & 0x1fu; /* fixstr */
        } else {
            switch (b) {
            case 0xc0: /* nil, false, true */
            case 0xc2:
            case 0xc3:
                break;
            case 0xc4: /* bin 8, str 8 */
            case 0xd9:
                len_bytes = 1;
                break;
            case 0xc5: /* bin 16, str 16 */
            case 0xda:
                len_bytes = 2;
                break;
            case 0xc6: /* bin 32, str 32 */
            case 0xdb:
                len_bytes = 4;
                break;
            case 0xc7: /* ext 8/16/32 */
                len_bytes = 1;
                ext = 1;
                break;
            case 0xc8:
                len_bytes = 2;
                ext = 1;
                break;
            case 0xc9:
                len_bytes = 4;
                ext = 1;
                break;
            case 0xca: /* float 32, 64 */
                skip = 4;
                break;
            case 0xcb:
                skip = 8;
                break;
            case 0xcc: /* uint/int 8, 16, 32, 64 */
            case 0xd0:
                skip = 1;
                break;
            case 0xcd:
            case 0xd1:
                skip = 2;
                break;
            case 0xce:
            case 0xd2:
                skip = 4;
                break;
            case 0xcf:
            case 0xd3:
                skip = 8;
                break;
            case 0xd4: /* fixext 1, 2, 4, 8, 16 (type byte + data) */
                skip = 2;
                break;
            case 0xd5:
                skip = 3;
                break;
            case 0xd6:
                skip = 5;
                break;
            case 0xd7:
                skip = 9;
                break;
            case 0xd8:
                skip = 17;
                break;
            case 0xdc: /* array 16, 32 */
                len_bytes = 2;
                per_entry = 1;
                break;
            case 0xdd:
                len_bytes = 4;
                per_entry = 1;
                break;
            case 0xde: /* map 16, 32 */
                len_bytes = 2;
                per_entry = 2;
                break;
            case 0xdf:
                len_bytes = 4;
                per_entry = 2;
                break;
            default: /* 0xc1 is never used */
                return "contains the invalid msgpack byte 0xc1";
            }
        }
        if (len_bytes > 0) {
            if (len_bytes > len - pos)
                return "is truncated";
            uint64_t n = crp_mp_load_be(p + pos, len_bytes);
            pos += len_bytes;
            if (per_entry != 0)
                children = n * per_entry; /* n < 2^32: cannot overflow */
            else
                skip = n + ext;
        }
        if (skip > len - pos)
            return "is truncated";
        pos += (size_t)skip;
        if (pending > len - pos) /* every object still expected needs a byte */
            return "is truncated";
        if (per_entry != 0) {
            if (depth == SCAN_MAX_DEPTH)
                return "is nested too deeply";
            if (children > len - pos - pending)
                return "is truncated";
            if (children > 0) {
                left[++depth] = children;
                pending += children;
            }
        }
    }
}
