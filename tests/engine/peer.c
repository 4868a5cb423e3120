/*
 * peer.c - a target engine process driven over stdin/stdout, used by the
 * multi-process tests and the demo. It prints one line per command:
 *
 *   (start)            READY <segment-name>
 *   reg <loc> <size> [ro]   OK <addr>   (memory filled with pattern(addr));
 *                      loc "shared" allocates with cr_alloc_shared and
 *                      registers it as cpu:0 (host-shareable)
 *   unreg_reuse <addr> <len>   unregister, then at once reuse the memory
 *                      (fill with seed 77), wait 300 ms and check that no
 *                      late transfer overwrote it: OK | CLOBBERED <offset>
 *   unreg <addr>       OK | ERR <code>
 *   count              COUNT <n>
 *   notes              NOTES <n> [<from> <message>]...
 *   check <addr> <len> <seed>   OK | MISMATCH <offset>
 *   fill <addr> <len> <seed>    OK
 *   quit               (destroys the engine, exits 0)
 *
 * Flags: --port N, --secret S, --host H, --protocol P, --metadata M,
 * --any-user (hand shm fds to any uid), --no-cma.
 * Pattern bytes: byte i of a region filled with seed s is (i * 131 + s) & 0xff.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "crescent/engine.h"

static struct {
    void *p;
    int shared;
} allocations[4096];
static size_t n_allocations;

static void release(void *p, int shared)
{
    if (shared)
        cr_free_shared(p);
    else
        free(p);
}

static uint8_t pattern(uint64_t i, uint64_t seed)
{
    return (uint8_t)((i * 131 + seed) & 0xff);
}

/*
 * check and fill touch memory that the engine's worker threads read or wrote
 * on behalf of another process. The ordering is real (the initiator saw the
 * WRITE acknowledged before it asked us to check) but it runs through the
 * other process, where ThreadSanitizer cannot see it; so these two helpers
 * are not instrumented.
 */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define NO_TSAN __attribute__((no_sanitize("thread")))
#endif
#endif
#if !defined(NO_TSAN) && defined(__SANITIZE_THREAD__)
#define NO_TSAN __attribute__((no_sanitize_thread))
#endif
#ifndef NO_TSAN
#define NO_TSAN
#endif

NO_TSAN static uint64_t check_region(const uint8_t *p, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        if (p[i] != pattern(i, seed))
            return i;
    return UINT64_MAX;
}

NO_TSAN static void fill_region(uint8_t *p, uint64_t len, uint64_t seed)
{
    for (uint64_t i = 0; i < len; i++)
        p[i] = pattern(i, seed);
}

int main(int argc, char **argv)
{
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    /* The protocol the test exercises (tests/engine/harness.h); --protocol
     * overrides it. */
    if (getenv("CRESCENT_TEST_PROTOCOL") != NULL && getenv("CRESCENT_TEST_PROTOCOL")[0] != '\0')
        cfg.protocol = getenv("CRESCENT_TEST_PROTOCOL");
    for (int i = 1; i < argc; i += 2) {
        if (strcmp(argv[i], "--any-user") == 0) {
            cfg.shm_allow_any_user = true;
            i--;
        } else if (strcmp(argv[i], "--no-cma") == 0) {
            cfg.disable_cma = true;
            i--;
        } else if (i + 1 >= argc) {
            fprintf(stderr, "peer: flag %s needs a value\n", argv[i]);
            return 2;
        } else if (strcmp(argv[i], "--port") == 0)
            cfg.rpc_port = (uint16_t)atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--secret") == 0)
            cfg.shared_secret = argv[i + 1];
        else if (strcmp(argv[i], "--host") == 0)
            cfg.local_hostname = argv[i + 1];
        else if (strcmp(argv[i], "--protocol") == 0)
            cfg.protocol = argv[i + 1];
        else if (strcmp(argv[i], "--metadata") == 0)
            cfg.metadata = argv[i + 1];
        else {
            fprintf(stderr, "peer: unknown flag %s\n", argv[i]);
            return 2;
        }
    }
    cr_engine *e;
    int rc = cr_engine_create(&cfg, &e);
    if (rc < 0) {
        printf("FAIL %d %s\n", rc, cr_last_error_message());
        return 1;
    }
    char name[300];
    cr_engine_segment_name(e, name, sizeof(name));
    printf("READY %s\n", name);
    fflush(stdout);
    char line[512];
    while (fgets(line, sizeof(line), stdin) != NULL) {
        char loc[64], flag[8] = "";
        unsigned long long a, len, seed;
        if (sscanf(line, "reg %63s %llu %7s", loc, &len, flag) >= 2) {
            int shared = strcmp(loc, "shared") == 0;
            uint8_t *p = NULL;
            if (shared)
                cr_alloc_shared(len, (void **)&p);
            else
                p = aligned_alloc(4096, (len + 4095) / 4096 * 4096);
            fill_region(p, len, (uint64_t)(uintptr_t)p);
            rc = cr_engine_register(e, p, len, shared ? "cpu:0" : loc, strcmp(flag, "ro") != 0);
            if (rc != 0) {
                release(p, shared);
            } else if (n_allocations < 4096) {
                allocations[n_allocations].p = p;
                allocations[n_allocations++].shared = shared;
            }
            if (rc == 0)
                printf("OK %llu\n", (unsigned long long)(uintptr_t)p);
            else
                printf("ERR %d\n", rc);
        } else if (sscanf(line, "unreg %llu", &a) == 1) {
            rc = cr_engine_unregister(e, (void *)(uintptr_t)a);
            if (rc == 0) {
                for (size_t i = 0; i < n_allocations; i++) {
                    if (allocations[i].p == (void *)(uintptr_t)a) {
                        release(allocations[i].p, allocations[i].shared);
                        allocations[i] = allocations[--n_allocations];
                        break;
                    }
                }
                printf("OK\n");
            } else {
                printf("ERR %d\n", rc);
            }
        } else if (sscanf(line, "unreg_reuse %llu %llu", &a, &len) == 2) {
            rc = cr_engine_unregister(e, (void *)(uintptr_t)a);
            if (rc != 0) {
                printf("ERR %d\n", rc);
            } else {
                /* The memory stays allocated (freed at quit) and is reused
                 * at once, as an allocator would. */
                fill_region((uint8_t *)(uintptr_t)a, len, 77);
                struct timespec ts = {0, 300 * 1000 * 1000};
                nanosleep(&ts, NULL);
                uint64_t bad = check_region((const uint8_t *)(uintptr_t)a, len, 77);
                if (bad == UINT64_MAX)
                    printf("OK\n");
                else
                    printf("CLOBBERED %llu\n", (unsigned long long)bad);
            }
        } else if (strncmp(line, "count", 5) == 0) {
            printf("COUNT %zu\n", cr_engine_registration_count(e));
        } else if (strncmp(line, "notes", 5) == 0) {
            cr_notification *n;
            size_t cnt;
            cr_engine_take_notifications(e, &n, &cnt);
            printf("NOTES %zu", cnt);
            for (size_t i = 0; i < cnt; i++)
                printf(" %s %s", n[i].from, n[i].message);
            printf("\n");
            cr_notifications_free(n, cnt);
        } else if (sscanf(line, "check %llu %llu %llu", &a, &len, &seed) == 3) {
            uint64_t bad = check_region((const uint8_t *)(uintptr_t)a, len, seed);
            if (bad == UINT64_MAX)
                printf("OK\n");
            else
                printf("MISMATCH %llu\n", (unsigned long long)bad);
        } else if (sscanf(line, "fill %llu %llu %llu", &a, &len, &seed) == 3) {
            fill_region((uint8_t *)(uintptr_t)a, len, seed);
            printf("OK\n");
        } else if (strncmp(line, "quit", 4) == 0) {
            break;
        } else {
            printf("ERR unknown command\n");
        }
        fflush(stdout);
    }
    cr_engine_destroy(e);
    for (size_t i = 0; i < n_allocations; i++)
        release(allocations[i].p, allocations[i].shared);
    return 0;
}
