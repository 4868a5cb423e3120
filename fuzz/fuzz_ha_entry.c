/*
 * fuzz_ha_entry.c - libFuzzer target for the HA replication stream's
 * decoders (src/master/ha_codec.c): the input is a CRP_REPL_DATA frame body.
 * Contract: a failure is ERR_MALFORMED_FRAME; a decoded entry respects the
 * limits the standby relies on (key and name lengths, replica counts, known
 * kind and flags, pointers inside the input) and re-encodes to exactly the
 * bytes it came from.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"
#include "master/ha_codec.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz check failed: %s at %s:%d\n", #cond, __FILE__, __LINE__);        \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint64_t first = 0;
    uint32_t count = 0;
    int rc = crk_ha_frame_header(data, size, &first, &count);
    if (rc < 0) {
        CHECK(rc == CR_ERR_MALFORMED_FRAME);
        return 0;
    }
    size_t off = 12;
    for (uint32_t i = 0; i < count; i++) {
        const uint8_t *p;
        size_t n;
        rc = crk_ha_frame_entry(data, size, &off, &p, &n);
        if (rc < 0) {
            CHECK(rc == CR_ERR_MALFORMED_FRAME);
            return 0;
        }
        CHECK(p >= data && p + n <= data + size && off <= size);
        crk_ha_entry e;
        rc = crk_ha_entry_decode(p, n, &e);
        if (rc < 0) {
            CHECK(rc == CR_ERR_MALFORMED_FRAME);
            continue;
        }
        CHECK(e.kind >= CRK_HA_MOUNT && e.kind <= CRK_HA_DISK);
        CHECK(e.nrep <= CRK_HA_MAX_REPS && e.wnrep <= CRK_HA_MAX_REPS);
        if (e.kind == CRK_HA_DISK)
            CHECK((e.flags & ~CRK_HA_F_ON_DISK) == 0);
        if (e.kind == CRK_HA_KEY || e.kind == CRK_HA_DISK)
            CHECK(e.key_len >= 1 && e.key_len <= CRK_HA_MAX_KEY && e.key >= (const char *)p &&
                  e.key + e.key_len <= (const char *)p + n);
        if (e.kind == CRK_HA_MOUNT)
            CHECK(e.name_len >= 1 && e.name_len <= CRK_HA_MAX_NAME);
        crk_ha_buf b = {0};
        CHECK(crk_ha_entry_encode(&e, &b) == 0);
        CHECK(b.len == n && memcmp(b.data, p, n) == 0);
        crk_ha_buf_free(&b);
    }
    return 0;
}
