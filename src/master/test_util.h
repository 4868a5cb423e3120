/*
 * test_util.h - helpers shared by the master core's unit tests (header-only;
 * include after cmocka.h).
 */
#ifndef CRESCENT_MASTER_TEST_UTIL_H
#define CRESCENT_MASTER_TEST_UTIL_H

#include <stdio.h>
#include <string.h>

#include "crescent/status.h"
#include "master/service.h"

static inline crk_client_id tu_client(uint64_t n)
{
    crk_client_id id = {.hi = 0xC0FFEEull, .lo = n};
    return id;
}

/* Defaults, except that clients never expire (tests advance time freely). */
static inline crk_config tu_config(void)
{
    crk_config c;
    crk_config_default(&c);
    c.client_ttl_ms = 1ull << 50;
    return c;
}

/* A service with cfg, or with tu_config() when cfg is NULL. */
static inline crk_service *tu_service(const crk_config *cfg, uint64_t now)
{
    crk_service *s = NULL;
    crk_config def = tu_config();
    assert_int_equal(crk_service_create(cfg ? cfg : &def, now, &s), 0);
    assert_non_null(s);
    return s;
}

static inline uint64_t tu_mount(crk_service *s, crk_client_id c, const char *name, uint64_t base,
                                uint64_t size, uint64_t now)
{
    crk_segment_spec spec = {.name = name, .base = base, .size = size};
    uint64_t epoch = 0;
    assert_int_equal(crk_mount_segment(s, c, &spec, now, &epoch), 0);
    return epoch;
}

static inline crk_replicate_config tu_cfg(uint32_t replicas)
{
    crk_replicate_config cfg = {.replica_num = replicas};
    return cfg;
}

/* put_start + put_end; returns put_start's status. */
static inline int tu_put(crk_service *s, crk_client_id c, const char *key, uint64_t size,
                         const crk_replicate_config *cfg, uint64_t now)
{
    crk_replica_list l;
    int rc = crk_put_start(s, c, key, size, cfg, now, &l);
    if (rc != 0)
        return rc;
    assert_int_equal(crk_put_end(s, c, key, now), 0);
    return 0;
}

static inline crk_stats tu_stats(crk_service *s)
{
    crk_stats st;
    crk_get_stats(s, &st);
    return st;
}

#endif
