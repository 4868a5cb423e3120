/*
 * store_populate_test.c - CRESCENT_SEGMENT_POPULATE (src/store/populate.c):
 * lazy (default) commits no segment page at setup, mount commits every page
 * before cr_store_setup returns, background commits them after it returns
 * (the default of a store with an SSD tier, unless lazy is asked for), and a
 * value the store does not know fails setup with CR_INVALID_PARAMS.
 * Committed pages are read from this process's RssShmem (/proc/self/status):
 * the segment is a memfd mapped here, so each committed page of it counts.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "crescent/store.h"
#include "store_harness.h"

#define SEGMENT (64ull << 20)

static sh_master master;

/* RssShmem of this process in bytes (0 if the kernel does not say). */
static uint64_t rss_shmem(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    uint64_t kb = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "RssShmem: %llu kB", (unsigned long long *)&kb) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kb * 1024;
}

static int setup_tier(const char *mode, const char *ssd, cr_store **out)
{
    if (mode != NULL)
        setenv("CRESCENT_SEGMENT_POPULATE", mode, 1);
    else
        unsetenv("CRESCENT_SEGMENT_POPULATE");
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.master_address = master.addr;
    cfg.global_segment_size = SEGMENT;
    cfg.local_buffer_size = 1 << 20;
    cfg.enable_ssd_offload = ssd != NULL;
    cfg.ssd_offload_path = ssd;
    return cr_store_setup(&cfg, out);
}

static int setup_with(const char *mode, cr_store **out)
{
    return setup_tier(mode, NULL, out);
}

/* Wait (a loaded machine: up to 60 s) until RssShmem grew by the segment; that growth. */
static uint64_t wait_committed(uint64_t before)
{
    for (int i = 0; i < 600 && rss_shmem() - before < SEGMENT; i++) {
        struct timespec ts = {0, 100 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    return rss_shmem() - before;
}

static void lazy_by_default_commits_nothing(void **state)
{
    (void)state;
    uint64_t before = rss_shmem();
    cr_store *s;
    assert_int_equal(setup_with(NULL, &s), 0);
    assert_true(rss_shmem() - before < SEGMENT / 4);
    cr_store_destroy(s);
    assert_int_equal(setup_with("lazy", &s), 0);
    assert_true(rss_shmem() - before < SEGMENT / 4);
    cr_store_destroy(s);
}

static void mount_commits_every_page_in_setup(void **state)
{
    (void)state;
    uint64_t before = rss_shmem();
    cr_store *s;
    assert_int_equal(setup_with("mount", &s), 0);
    assert_true(rss_shmem() - before >= SEGMENT);
    /* The store works as usual on committed pages. */
    uint8_t v[5000];
    memset(v, 0x5a, sizeof(v));
    assert_int_equal(cr_store_put(s, "populated", v, sizeof(v), NULL), 0);
    void *got = NULL;
    assert_int_equal(cr_store_get(s, "populated", &got), (int64_t)sizeof(v));
    assert_memory_equal(got, v, sizeof(v));
    free(got);
    cr_store_destroy(s);
}

static void background_commits_after_setup(void **state)
{
    (void)state;
    uint64_t before = rss_shmem();
    cr_store *s;
    assert_int_equal(setup_with("background", &s), 0);
    assert_true(wait_committed(before) >= SEGMENT); /* the thread runs at the lowest priority */
    cr_store_destroy(s);                            /* joins the thread */
}

/* A store with an SSD tier fills its segment by design: committed in the background unless
 * the variable asks for lazy. */
static void disk_tier_commits_in_background(void **state)
{
    (void)state;
    char dir[] = "/tmp/crescent-populate-XXXXXX";
    assert_non_null(mkdtemp(dir));
    uint64_t before = rss_shmem();
    cr_store *s;
    assert_int_equal(setup_tier(NULL, dir, &s), 0);
    assert_true(wait_committed(before) >= SEGMENT);
    cr_store_destroy(s);
    before = rss_shmem();
    assert_int_equal(setup_tier("lazy", dir, &s), 0);
    struct timespec ts = {0, 300 * 1000 * 1000}; /* a background thread would have begun */
    nanosleep(&ts, NULL);
    assert_true(rss_shmem() - before < SEGMENT / 4);
    cr_store_destroy(s);
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void unknown_mode_is_refused(void **state)
{
    (void)state;
    cr_store *s = NULL;
    assert_int_equal(setup_with("always", &s), CR_INVALID_PARAMS);
    assert_null(s);
    assert_non_null(strstr(cr_last_error_message(), "CRESCENT_SEGMENT_POPULATE"));
    unsetenv("CRESCENT_SEGMENT_POPULATE");
}

static int group_setup(void **state)
{
    (void)state;
    return sh_master_start(&master, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    unsetenv("CRESCENT_SEGMENT_POPULATE");
    int rc = sh_master_stop(&master);
    sh_kill_all();
    return rc == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(lazy_by_default_commits_nothing),
        cmocka_unit_test(mount_commits_every_page_in_setup),
        cmocka_unit_test(background_commits_after_setup),
        cmocka_unit_test(disk_tier_commits_in_background),
        cmocka_unit_test(unknown_mode_is_refused),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
