/*
 * disk_test_fixture.h - the cmocka fixture the disk store's unit tests
 * share: a scratch directory, a config for it and the store opened on it,
 * plus putting and probing the self-describing values of disk_test_util.h.
 * Test-only; header-only; include after <cmocka.h>.
 *
 * A test's setup calls tu_store_init, adjusts cfg, and tu_store_open opens
 * the store when the test wants it (after cfg is final); tu_store_fini
 * closes it and removes the directory.
 */
#ifndef CRESCENT_DISK_TEST_FIXTURE_H
#define CRESCENT_DISK_TEST_FIXTURE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"
#include "disk/disk.h"
#include "disk/disk_test_util.h"

typedef struct tu_store {
    char *dir;      /* owned: removed by tu_store_fini */
    crf_config cfg; /* cfg.path is dir */
    crf_store *s;   /* NULL until tu_store_open */
} tu_store;

/* A fresh directory (named after tag) and the tests' base config: 1 GiB of
 * capacity, no background compaction. Fails the test if it cannot. */
static inline void tu_store_init(tu_store *f, const char *tag)
{
    memset(f, 0, sizeof(*f));
    f->dir = tu_mkdtemp(tag);
    assert_non_null(f->dir);
    crf_config_init(&f->cfg);
    f->cfg.path = f->dir;
    f->cfg.capacity_bytes = 1ull << 30;
    f->cfg.background_compaction = false;
}

static inline void tu_store_fini(tu_store *f)
{
    crf_close(f->s);
    f->s = NULL;
    tu_rmtree(f->dir);
    f->dir = NULL;
}

static inline void tu_store_open(tu_store *f)
{
    int rc = crf_open(&f->cfg, &f->s);
    if (rc != 0)
        fail_msg("crf_open: %s: %s", cr_status_name(rc), cr_last_error_message());
}

static inline void tu_store_reopen(tu_store *f)
{
    crf_close(f->s);
    f->s = NULL;
    tu_store_open(f);
}

/* Put tu_fill(len, id, version) under tu_key(id) with meta (may be NULL). */
static inline int tu_put(crf_store *s, uint64_t id, uint64_t version, uint64_t len,
                         const void *meta, size_t meta_len)
{
    char key[32];
    tu_key(key, sizeof(key), id);
    uint8_t *v = malloc(len + 1);
    if (v == NULL)
        return CR_ERR_NO_MEMORY;
    tu_fill(v, len, id, version);
    int rc = crf_put(s, key, strlen(key), v, len, meta, meta_len);
    free(v);
    return rc;
}

/* 1 = present with exactly these bytes, 0 = missing, -1 = anything else. */
static inline int tu_probe(crf_store *s, uint64_t id, uint64_t version, uint64_t len)
{
    char key[32];
    tu_key(key, sizeof(key), id);
    uint8_t *buf = malloc(len + 1);
    if (buf == NULL)
        return -1;
    int64_t got = crf_get(s, key, strlen(key), buf, len + 1);
    int r = -1;
    if (got == CR_OBJECT_NOT_FOUND)
        r = 0;
    else if (got == (int64_t)len && tu_check(buf, len, id, version))
        r = 1;
    free(buf);
    return r;
}

#endif
