/*
 * ha_codec.c - encoder and bounds-checked decoder of the HA replication
 * stream's entries (ha_codec.h).
 */
#include "master/ha_codec.h"

#include <stdbool.h>
#include <stdlib.h>
#include <stddef.h>
#include <string.h>

#include "base/error.h"

void crk_ha_buf_free(crk_ha_buf *b)
{
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

static int reserve(crk_ha_buf *b, size_t more)
{
    if (b->len + more <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + more)
        cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (p == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "ha entry buffer of %zu bytes", cap);
    b->data = p;
    b->cap = cap;
    return 0;
}

static void put_u8(crk_ha_buf *b, uint8_t v)
{
    b->data[b->len++] = v;
}

static void put_u16(crk_ha_buf *b, uint16_t v)
{
    for (int i = 0; i < 2; i++)
        b->data[b->len++] = (uint8_t)(v >> (8 * i));
}

static void put_u64(crk_ha_buf *b, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        b->data[b->len++] = (uint8_t)(v >> (8 * i));
}

static void put_bytes(crk_ha_buf *b, const void *p, size_t n)
{
    if (n > 0)
        memcpy(b->data + b->len, p, n);
    b->len += n;
}

int crk_ha_entry_encode(const crk_ha_entry *e, crk_ha_buf *b)
{
    size_t need = 1 + 6 * 8 + 2 + CRK_HA_MAX_NAME;
    if (e->kind == CRK_HA_KEY) {
        if (e->key_len == 0 || e->key_len > CRK_HA_MAX_KEY || e->nrep > CRK_HA_MAX_REPS ||
            e->wnrep > CRK_HA_MAX_REPS)
            return crb_error(CR_INVALID_PARAMS, "ha entry: key of %zu bytes, %u/%u replicas",
                             e->key_len, e->nrep, e->wnrep);
        need = 1 + 2 + e->key_len + 1 + 16 + 1 + 16 * e->nrep + 9 + 16 * e->wnrep;
    } else if (e->kind == CRK_HA_DISK) {
        if (e->key_len == 0 || e->key_len > CRK_HA_MAX_KEY || (e->flags & ~CRK_HA_F_ON_DISK))
            return crb_error(CR_INVALID_PARAMS, "ha entry: disk key of %zu bytes, flags 0x%x",
                             e->key_len, (unsigned)e->flags);
        need = 1 + 2 + e->key_len + 1 + 4 * 8;
    } else if (e->kind == CRK_HA_MOUNT && (e->name_len == 0 || e->name_len > CRK_HA_MAX_NAME)) {
        return crb_error(CR_INVALID_PARAMS, "ha entry: segment name of %zu bytes", e->name_len);
    }
    int rc = reserve(b, need);
    if (rc < 0)
        return rc;
    put_u8(b, (uint8_t)e->kind);
    switch (e->kind) {
    case CRK_HA_MOUNT:
        put_u64(b, e->epoch);
        put_u64(b, e->owner_hi);
        put_u64(b, e->owner_lo);
        put_u64(b, e->base);
        put_u64(b, e->size);
        put_u16(b, (uint16_t)e->name_len);
        put_bytes(b, e->name, e->name_len);
        break;
    case CRK_HA_UNMOUNT:
        put_u64(b, e->epoch);
        break;
    case CRK_HA_KEY:
        put_u16(b, (uint16_t)e->key_len);
        put_bytes(b, e->key, e->key_len);
        put_u8(b, e->flags);
        put_u64(b, e->size);
        put_u64(b, e->soft_left_ms);
        put_u8(b, (uint8_t)e->nrep);
        for (uint32_t i = 0; i < e->nrep; i++) {
            put_u64(b, e->rep[i].epoch);
            put_u64(b, e->rep[i].offset);
        }
        if (e->flags & CRK_HA_F_WRITING) {
            put_u64(b, e->wsize);
            put_u8(b, (uint8_t)e->wnrep);
            for (uint32_t i = 0; i < e->wnrep; i++) {
                put_u64(b, e->wrep[i].epoch);
                put_u64(b, e->wrep[i].offset);
            }
        }
        break;
    case CRK_HA_DISK:
        put_u16(b, (uint16_t)e->key_len);
        put_bytes(b, e->key, e->key_len);
        put_u8(b, e->flags);
        put_u64(b, e->owner_hi);
        put_u64(b, e->owner_lo);
        put_u64(b, e->disk_version);
        put_u64(b, e->size);
        break;
    case CRK_HA_SNAP_END:
        put_u64(b, e->end_seq);
        break;
    case CRK_HA_RESET:
        break;
    default:
        b->len--;
        return crb_error(CR_INVALID_PARAMS, "ha entry: unknown kind %d", e->kind);
    }
    return 0;
}

/* --- decoding ------------------------------------------------------------------ */

typedef struct reader {
    const uint8_t *p;
    size_t n, off;
    bool bad;
} reader;

static uint64_t get_n(reader *r, int bytes)
{
    if (r->bad || r->n - r->off < (size_t)bytes) {
        r->bad = true;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)r->p[r->off + (size_t)i] << (8 * i);
    r->off += (size_t)bytes;
    return v;
}

static const char *get_bytes(reader *r, size_t len)
{
    if (r->bad || r->n - r->off < len) {
        r->bad = true;
        return NULL;
    }
    const char *s = (const char *)r->p + r->off;
    r->off += len;
    return s;
}

static bool get_reps(reader *r, uint32_t *n, crk_ha_rep *reps)
{
    *n = (uint32_t)get_n(r, 1);
    if (*n > CRK_HA_MAX_REPS)
        return false;
    for (uint32_t i = 0; i < *n; i++) {
        reps[i].epoch = get_n(r, 8);
        reps[i].offset = get_n(r, 8);
    }
    return !r->bad;
}

int crk_ha_entry_decode(const uint8_t *p, size_t n, crk_ha_entry *out)
{
    reader r = {p, n, 0, false};
    crk_ha_entry e;
    memset(&e, 0, offsetof(crk_ha_entry, rep)); /* the replicas: only those in use */
    e.kind = (int)get_n(&r, 1);
    const char *what = "kind";
    switch (e.kind) {
    case CRK_HA_MOUNT:
        e.epoch = get_n(&r, 8);
        e.owner_hi = get_n(&r, 8);
        e.owner_lo = get_n(&r, 8);
        e.base = get_n(&r, 8);
        e.size = get_n(&r, 8);
        e.name_len = (size_t)get_n(&r, 2);
        what = "segment name";
        if (e.name_len == 0 || e.name_len > CRK_HA_MAX_NAME)
            r.bad = true;
        e.name = get_bytes(&r, e.name_len);
        break;
    case CRK_HA_UNMOUNT:
        e.epoch = get_n(&r, 8);
        break;
    case CRK_HA_KEY:
        e.key_len = (size_t)get_n(&r, 2);
        what = "key";
        if (e.key_len == 0 || e.key_len > CRK_HA_MAX_KEY)
            r.bad = true;
        e.key = get_bytes(&r, e.key_len);
        e.flags = (uint8_t)get_n(&r, 1);
        e.size = get_n(&r, 8);
        e.soft_left_ms = get_n(&r, 8);
        what = "replicas";
        if (!r.bad && !get_reps(&r, &e.nrep, e.rep))
            r.bad = true;
        if (!r.bad && (e.flags & CRK_HA_F_WRITING)) {
            e.wsize = get_n(&r, 8);
            if (!get_reps(&r, &e.wnrep, e.wrep))
                r.bad = true;
        }
        if (e.flags &
            ~(CRK_HA_F_COMPLETE | CRK_HA_F_HARD_PIN | CRK_HA_F_SOFT_PIN | CRK_HA_F_WRITING))
            r.bad = true;
        break;
    case CRK_HA_DISK:
        e.key_len = (size_t)get_n(&r, 2);
        what = "disk key";
        if (e.key_len == 0 || e.key_len > CRK_HA_MAX_KEY)
            r.bad = true;
        e.key = get_bytes(&r, e.key_len);
        e.flags = (uint8_t)get_n(&r, 1);
        e.owner_hi = get_n(&r, 8);
        e.owner_lo = get_n(&r, 8);
        e.disk_version = get_n(&r, 8);
        e.size = get_n(&r, 8);
        if (e.flags & ~CRK_HA_F_ON_DISK)
            r.bad = true;
        break;
    case CRK_HA_SNAP_END:
        e.end_seq = get_n(&r, 8);
        break;
    case CRK_HA_RESET:
        break;
    default:
        r.bad = true;
        break;
    }
    if (r.bad || r.off != n)
        return crb_error(CR_ERR_MALFORMED_FRAME, "ha entry (kind %d, %zu bytes): bad %s%s", e.kind,
                         n, what, !r.bad ? " (trailing bytes)" : "");
    memcpy(out, &e, offsetof(crk_ha_entry, rep));
    memcpy(out->rep, e.rep, e.nrep * sizeof(e.rep[0]));
    memcpy(out->wrep, e.wrep, e.wnrep * sizeof(e.wrep[0]));
    return 0;
}

int crk_ha_frame_header(const uint8_t *body, size_t len, uint64_t *first_seq, uint32_t *count)
{
    reader r = {body, len, 0, false};
    uint64_t s = get_n(&r, 8);
    uint32_t c = (uint32_t)get_n(&r, 4);
    if (r.bad || c > len / 5)
        return crb_error(CR_ERR_MALFORMED_FRAME, "ha frame of %zu bytes: bad header", len);
    *first_seq = s;
    *count = c;
    return 0;
}

int crk_ha_frame_entry(const uint8_t *body, size_t len, size_t *off, const uint8_t **entry,
                       size_t *entry_len)
{
    reader r = {body, len, *off, *off > len};
    size_t n = (size_t)get_n(&r, 4);
    const char *p = get_bytes(&r, n);
    if (r.bad || n == 0)
        return crb_error(CR_ERR_MALFORMED_FRAME, "ha frame: entry at %zu overruns %zu bytes", *off,
                         len);
    *entry = (const uint8_t *)p;
    *entry_len = n;
    *off = r.off;
    return 0;
}
