/*
 * offload.c - the disk tier's OFFLOAD_HEARTBEAT body (see offload.h).
 *
 * Encoding uses the shared msgpack encoder (mp_codec.h); decoding unpacks
 * the whole body, checks every field, then copies the items and their keys
 * into one malloc'd block (items first, keys after them) so a message is
 * freed with one call.
 */
#include "proto/offload.h"

#include <stdlib.h>
#include <string.h>

#include "proto/mp_codec.h"
#include "proto/rpc.h"

#define MALFORMED CR_ERR_MALFORMED_FRAME

static const char *const MSG_KEYS[] = {"seg", "st", "more", "it"};
static const char *const ITEM_KEYS[] = {"t", "k", "v", "a", "l", "ttl", "st"};

int crp_off_encode(const crp_off_msg *m, crp_buf *out)
{
    crp_mp_enc e;
    crp_mp_enc_init(&e, out, "offload message", CRP_RPC_MAX_BLOB);
    if (m->n_stats > CRP_OFF_MAX_STATS || m->n_items > CRP_OFF_MAX_ITEMS ||
        (m->n_items > 0 && m->items == NULL)) {
        crp_mp_enc_invalid(&e, NULL, "%zu stats, %zu items (at most %d and %d)", m->n_stats,
                           m->n_items, CRP_OFF_MAX_STATS, CRP_OFF_MAX_ITEMS);
        return crp_mp_enc_finish(&e);
    }
    msgpack_pack_map(&e.pk, 4);
    crp_mp_enc_str(&e, "seg", m->segment ? m->segment : "", CRP_MAX_NAME);
    crp_mp_enc_key(&e, "st");
    msgpack_pack_array(&e.pk, m->n_stats);
    for (size_t i = 0; i < m->n_stats; i++)
        msgpack_pack_uint64(&e.pk, m->stats[i]);
    crp_mp_enc_bool(&e, "more", m->more);
    crp_mp_enc_key(&e, "it");
    msgpack_pack_array(&e.pk, m->n_items);
    for (size_t i = 0; i < m->n_items && e.status == 0; i++) {
        const crp_off_item *it = &m->items[i];
        size_t mark = crp_mp_path_push(&e.c, "item", i);
        if (it->kind < CRP_OFF_OFFLOAD || it->kind > CRP_OFF_UNSTAGE)
            crp_mp_enc_invalid(&e, "t", "unknown kind %u", (unsigned)it->kind);
        else if (it->key == NULL || it->key[0] == '\0')
            crp_mp_enc_invalid(&e, "k", "is NULL or empty");
        else if (it->status > 0)
            crp_mp_enc_invalid(&e, "st", "is positive (%d)", (int)it->status);
        msgpack_pack_map(&e.pk, 7);
        crp_mp_enc_u64(&e, "t", it->kind);
        crp_mp_enc_str(&e, "k", it->key ? it->key : "", CRP_OFF_MAX_KEY);
        crp_mp_enc_u64(&e, "v", it->version);
        crp_mp_enc_u64(&e, "a", it->addr);
        crp_mp_enc_u64(&e, "l", it->size);
        crp_mp_enc_u64(&e, "ttl", it->ttl_ms);
        crp_mp_enc_i32(&e, "st", it->status);
        crp_mp_path_pop(&e.c, mark);
    }
    return crp_mp_enc_finish(&e);
}

/* One item's fields, checked; the key is a view into the unpacked body. */
static int dec_item(crp_mp_ctx *c, const msgpack_object *o, crp_off_item *it, const char **kp,
                    size_t *kn)
{
    const msgpack_object *v[7];
    uint8_t kind;
    int rc = crp_mp_map_fields(c, NULL, o, ITEM_KEYS, 7, v);
    if (rc == 0)
        rc = crp_mp_get_u8(c, "t", v[0], CRP_OFF_UNSTAGE, &kind);
    if (rc == 0 && kind < CRP_OFF_OFFLOAD)
        rc = crp_mp_fail(MALFORMED, c, "t", "is 0 (no such kind)");
    if (rc == 0)
        rc = crp_mp_get_str_view(c, "k", v[1], CRP_OFF_MAX_KEY, kp, kn);
    if (rc == 0 && *kn == 0)
        rc = crp_mp_fail(MALFORMED, c, "k", "is empty");
    if (rc == 0)
        rc = crp_mp_get_u64(c, "v", v[2], &it->version);
    if (rc == 0)
        rc = crp_mp_get_u64(c, "a", v[3], &it->addr);
    if (rc == 0)
        rc = crp_mp_get_u64(c, "l", v[4], &it->size);
    if (rc == 0)
        rc = crp_mp_get_u64(c, "ttl", v[5], &it->ttl_ms);
    if (rc == 0)
        rc = crp_mp_get_i32(c, "st", v[6], &it->status);
    if (rc == 0 && it->status > 0)
        rc = crp_mp_fail(MALFORMED, c, "st", "is a positive status (%d)", (int)it->status);
    if (rc == 0)
        it->kind = kind;
    return rc;
}

int crp_off_decode(const void *data, size_t len, crp_off_msg *out)
{
    crp_mp_ctx c;
    crp_mp_ctx_init(&c, "offload message");
    msgpack_unpacked u;
    int rc = crp_mp_unpack(&c, data, len, CRP_RPC_MAX_BLOB, &u);
    if (rc != 0)
        return rc;
    crp_off_msg m;
    memset(&m, 0, sizeof(m));
    const msgpack_object *v[4];
    const msgpack_object_array *st = NULL, *items = NULL;
    const char *seg = NULL;
    size_t seg_len = 0;
    crp_off_item *tmp = NULL;
    const char **kps = NULL;
    size_t *kns = NULL;
    rc = crp_mp_map_fields(&c, NULL, &u.data, MSG_KEYS, 4, v);
    if (rc == 0)
        rc = crp_mp_get_str_view(&c, "seg", v[0], CRP_MAX_NAME, &seg, &seg_len);
    if (rc == 0)
        rc = crp_mp_get_array(&c, "st", v[1], CRP_OFF_MAX_STATS, &st);
    for (size_t i = 0; rc == 0 && i < st->size; i++)
        rc = crp_mp_get_u64(&c, "st", &st->ptr[i], &m.stats[i]);
    if (rc == 0)
        rc = crp_mp_get_bool(&c, "more", v[2], &m.more);
    if (rc == 0)
        rc = crp_mp_get_array(&c, "it", v[3], CRP_OFF_MAX_ITEMS, &items);
    if (rc != 0)
        goto destroy;
    m.n_stats = st->size;
    size_t n = items->size;
    tmp = calloc(n ? n : 1, sizeof(*tmp));
    kps = calloc(n ? n : 1, sizeof(*kps));
    kns = calloc(n ? n : 1, sizeof(*kns));
    if (tmp == NULL || kps == NULL || kns == NULL) {
        rc = crp_mp_fail(CR_ERR_NO_MEMORY, &c, "it", "%zu items", n);
        goto destroy;
    }
    size_t key_bytes = seg_len + 1;
    for (size_t i = 0; i < n; i++) {
        size_t mark = crp_mp_path_push(&c, "item", i);
        rc = dec_item(&c, &items->ptr[i], &tmp[i], &kps[i], &kns[i]);
        crp_mp_path_pop(&c, mark);
        if (rc != 0)
            goto destroy;
        key_bytes += kns[i] + 1;
    }
    /* One block: items, then the segment name and the keys. */
    uint8_t *block = malloc(n * sizeof(crp_off_item) + key_bytes);
    if (block == NULL) {
        rc = crp_mp_fail(CR_ERR_NO_MEMORY, &c, NULL, "%zu items", n);
        goto destroy;
    }
    crp_off_item *its = (crp_off_item *)(void *)block;
    char *p = (char *)(block + n * sizeof(crp_off_item));
    memcpy(p, seg, seg_len);
    p[seg_len] = '\0';
    m.segment = p;
    p += seg_len + 1;
    for (size_t i = 0; i < n; i++) {
        its[i] = tmp[i];
        memcpy(p, kps[i], kns[i]);
        p[kns[i]] = '\0';
        its[i].key = p;
        p += kns[i] + 1;
    }
    m.items = n ? its : NULL;
    m.n_items = n;
    m.block = block;
    *out = m;
destroy:
    free(tmp);
    free(kps);
    free(kns);
    msgpack_unpacked_destroy(&u);
    return rc;
}

void crp_off_clear(crp_off_msg *m)
{
    if (m == NULL)
        return;
    free(m->block);
    memset(m, 0, sizeof(*m));
}
