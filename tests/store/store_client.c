/*
 * store_client.c - crescent-test-store-client: one cr_store in a process of
 * its own, driven over stdin/stdout by the multi-process store tests.
 *
 * Design: the test writes one command line, the helper answers with exactly
 * one line whose first token is the call's integer result (0 / a size / a
 * count on success, a negative cr_status on failure); failures also go to
 * stderr with cr_last_error_message(), which CTest shows. Values are never
 * shipped over the pipe: a value is (length, seed) of tests/store/
 * store_pattern.h, so the helper generates what it puts and checks what it
 * reads. Reads report FNV-1a of the bytes read and "ok" / "bad:<offset>".
 *
 * Flags: --master HOST:PORT (required) --segment SIZE (64M) --buffer SIZE
 * (16M, the local staging buffer) --region SIZE (32M of registered memory
 * for the zero-copy calls; 0 = none) --protocol P --rpc-timeout MS
 * --transfer-timeout MS --heartbeat MS --hostname HOST[:PORT] (the engine's
 * local hostname: a fixed port gives a restarted client the same segment
 * name) --ssd DIR (enable_ssd_offload with ssd_offload_path DIR). Sizes use cr_parse_size.
 * Thin mode (a thin client of crescent-client, cr_store_setup_thin):
 * --thin ADDRESS (instead of --master) --pool SIZE (the shared pool, 64M;
 * --buffer is then the local buffer) --region-kind shared|pool|malloc (the
 * zero-copy region from cr_alloc_shared (default), the thin pool, or malloc:
 * the slow path) --secret S. --tenant T: the tenant (embedded: its
 * namespace at the master; thin: must be the daemon's).
 *
 *   (start)                          READY <segment-name> | FAIL <rc> <message>
 *   put|upsert KEY LEN SEED [opts]   <rc>        copying put of the value
 *   put_from|upsert_from KEY LEN SEED [opts] [off=N]
 *                                    <rc>        zero-copy from region+N
 *   put_parts KEY LEN SEED NPARTS    <rc>        gathered from NPARTS pieces
 *   get KEY [SEED]                   <rc> <fnv> <ok|bad:OFF|->   (copying)
 *   get_into KEY CAP [SEED] [off=N]  <rc> <fnv> <check>          (region+N)
 *   get_multi KEY NPARTS [SEED]      <rc> <fnv> <check>  scattered over NPARTS
 *   batch_put PFX N LEN SEED [from] [opts]
 *                                    <rc> ok=<n> fail=<n> first=<code>
 *                                    keys PFX0..PFX<N-1>, seeds SEED+i
 *   batch_get PFX N LEN SEED [into]  <rc> ok=<n> miss=<n> err=<n> bad=<n> first=<code>
 *   batch_put_multi PFX N LEN SEED NPARTS [upsert]
 *                                    <rc> ok=<n> fail=<n> first=<code>
 *                                    zero-copy gather from NPARTS region pieces each
 *   batch_get_multi PFX N CAP SEED NPARTS
 *                                    <rc> ok=<n> miss=<n> over=<n> err=<n> bad=<n>
 *                                    scatter over NPARTS pieces holding CAP bytes
 *   batch_exist PFX N                <rc> yes=<n> no=<n> err=<n>
 *   batch_remove PFX N [force]       <rc> ok=<n> fail=<n> first=<code>
 *   exist KEY | size KEY | remove KEY [force] | remove_all [force]
 *   replicas KEY [CAP]               <rc> <segment>/<complete 0|1>/<size> ... (<= CAP, 8)
 *   replica_clear SEG|- K1,K2,...    <rc> r=<c1>,<c2>,...  ("-" = every replica)
 *   remove_regex PATTERN [force]     <rc>
 *   health                           <rc>
 *   name                             0 <segment-name>
 *   stats                            0 local=<b> shm=<b> cma=<b> tcp=<b>
 *   regcount                         <engine registrations>
 *   offstats                         0 keys=<n> bytes=<b> offloads=<n> failed=<n> staged=<n>
 *                                    promoted=<n> evicted=<n> rpc_reads=<n> compactions=<n>
 *                                    (disk tier)
 *   psess_start KEY SIZE | psess_end KEY | psess_revoke KEY
 *                                    <rc>  a put session (ranged API) in this process's table
 *   getstats                         0 on=<0|1> spec=<n> kept=<n>  (speculative get_into)
 *   thinstats                        0 calls=<n> zc=<b> copied=<b> slow=<calls>/<b> ...
 *                                    dspec=<n> dkept=<n> (speculative direct gets)
 *                                    transient=<n> reconnects=<n> lost=<n>
 *                                    shared=<n> slowregs=<n> conns=<n> pool=<b>
 *   close                            <rc> (cr_store_close; later calls fail)
 *   quit                             (cr_store_destroy, exit 0; no reply)
 *
 * Put options: r=N (replica_num), pref=SEG[,SEG...] (preferred_segments),
 * same (prefer_same_node), hard (hard_pin), soft (soft pin enable).
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/store.h"
#include "store_pattern.h"

#define MAX_PREF  8
#define MAX_BATCH 4096

static cr_store *store;
static uint8_t *region;
static uint64_t region_size;
static const char *region_kind = "shared";
static cr_store_sessions *sessions;

typedef struct put_opts {
    cr_replicate_config cfg;
    const char *pref[MAX_PREF];
    char pref_buf[1024];
    uint64_t off;
    bool from;
    bool force;
} put_opts;

static void report_error(const char *what, int64_t rc)
{
    if (rc < 0)
        fprintf(stderr, "store-client: %s: %" PRId64 " %s\n", what, rc,
                cr_last_error_message()); /* the message starts with the status name */
}

/* Parse trailing option tokens (strtok state continues from the caller). */
static void parse_opts(put_opts *o)
{
    cr_replicate_config_init(&o->cfg);
    o->off = 0;
    o->from = o->force = false;
    char *t;
    while ((t = strtok(NULL, " \t\r\n")) != NULL) {
        if (strncmp(t, "r=", 2) == 0) {
            o->cfg.replica_num = (uint32_t)strtoul(t + 2, NULL, 10);
        } else if (strncmp(t, "off=", 4) == 0) {
            o->off = strtoull(t + 4, NULL, 10);
        } else if (strncmp(t, "pref=", 5) == 0) {
            snprintf(o->pref_buf, sizeof(o->pref_buf), "%s", t + 5);
            size_t n = 0;
            char *save = NULL;
            for (char *p = strtok_r(o->pref_buf, ",", &save); p != NULL && n < MAX_PREF;
                 p = strtok_r(NULL, ",", &save))
                o->pref[n++] = p;
            o->cfg.preferred_segments = o->pref;
            o->cfg.n_preferred = n;
        } else if (strcmp(t, "same") == 0) {
            o->cfg.prefer_same_node = true;
        } else if (strcmp(t, "hard") == 0) {
            o->cfg.hard_pin = true;
        } else if (strcmp(t, "soft") == 0) {
            o->cfg.soft_pin_action = CR_SOFT_PIN_ENABLE;
        } else if (strcmp(t, "from") == 0 || strcmp(t, "into") == 0) {
            o->from = true;
        } else if (strcmp(t, "force") == 0) {
            o->force = true;
        }
    }
}

static void cmd_psess(const char *cmd)
{
    char *key = strtok(NULL, " \t\r\n");
    char *size = key ? strtok(NULL, " \t\r\n") : NULL;
    int rc = key == NULL ? CR_INVALID_PARAMS : 0, res = 0;
    if (rc == 0 && sessions == NULL)
        rc = cr_store_sessions_create(store, &sessions);
    const char *keys[1] = {key};
    if (rc == 0 && strcmp(cmd, "psess_start") == 0) {
        uint64_t sz = size ? strtoull(size, NULL, 10) : 0;
        rc = cr_store_put_session_start(sessions, keys, &sz, 1, NULL, &res);
    } else if (rc == 0 && strcmp(cmd, "psess_end") == 0) {
        rc = cr_store_put_session_end(sessions, keys, 1, &res);
    } else if (rc == 0) {
        rc = cr_store_put_session_revoke(sessions, keys, 1, &res);
    }
    report_error(cmd, rc < 0 ? rc : res);
    printf("%d\n", rc < 0 ? rc : res);
}

static int region_fits(uint64_t off, uint64_t len)
{
    return region != NULL && off <= region_size && len <= region_size - off;
}

static void print_read(int64_t rc, const uint8_t *p, bool have_seed, uint64_t seed)
{
    if (rc < 0) {
        printf("%" PRId64 " 0 -\n", rc);
        return;
    }
    uint64_t len = (uint64_t)rc;
    int64_t bad = have_seed ? sp_check(p, len, seed) : -1;
    if (!have_seed)
        printf("%" PRId64 " %016" PRIx64 " -\n", rc, sp_fnv(p, len));
    else if (bad < 0)
        printf("%" PRId64 " %016" PRIx64 " ok\n", rc, sp_fnv(p, len));
    else
        printf("%" PRId64 " %016" PRIx64 " bad:%" PRId64 "\n", rc, sp_fnv(p, len), bad);
}

static void cmd_put(const char *cmd, bool zero_copy, bool upsert)
{
    char *key = strtok(NULL, " \t\r\n");
    char *len_s = strtok(NULL, " \t\r\n");
    char *seed_s = strtok(NULL, " \t\r\n");
    if (key == NULL || len_s == NULL || seed_s == NULL) {
        printf("%d usage\n", CR_INVALID_PARAMS);
        return;
    }
    uint64_t len = strtoull(len_s, NULL, 10), seed = strtoull(seed_s, NULL, 0);
    static put_opts o;
    parse_opts(&o);
    int rc;
    if (zero_copy) {
        if (!region_fits(o.off, len)) {
            printf("%d region too small\n", CR_INVALID_PARAMS);
            return;
        }
        sp_fill(region + o.off, len, seed);
        rc = upsert ? cr_store_upsert_from(store, key, region + o.off, len, &o.cfg)
                    : cr_store_put_from(store, key, region + o.off, len, &o.cfg);
    } else {
        uint8_t *v = malloc(len ? len : 1);
        if (v == NULL) {
            printf("%d oom\n", CR_ERR_NO_MEMORY);
            return;
        }
        sp_fill(v, len, seed);
        rc = upsert ? cr_store_upsert(store, key, v, len, &o.cfg)
                    : cr_store_put(store, key, v, len, &o.cfg);
        free(v);
    }
    report_error(cmd, rc);
    printf("%d\n", rc);
}

static void cmd_put_parts(void)
{
    char *key = strtok(NULL, " \t\r\n");
    char *len_s = strtok(NULL, " \t\r\n");
    char *seed_s = strtok(NULL, " \t\r\n");
    char *n_s = strtok(NULL, " \t\r\n");
    if (key == NULL || len_s == NULL || seed_s == NULL || n_s == NULL) {
        printf("%d usage\n", CR_INVALID_PARAMS);
        return;
    }
    uint64_t len = strtoull(len_s, NULL, 10), seed = strtoull(seed_s, NULL, 0);
    size_t n = strtoul(n_s, NULL, 10);
    if (n == 0 || n > 64) {
        printf("%d parts\n", CR_INVALID_PARAMS);
        return;
    }
    uint8_t *v = malloc(len ? len : 1);
    sp_fill(v, len, seed);
    const void *parts[64];
    size_t sizes[64];
    uint64_t off = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t sz = i + 1 == n ? len - off : len / n;
        parts[i] = v + off;
        sizes[i] = sz;
        off += sz;
    }
    int rc = cr_store_put_parts(store, key, parts, sizes, n, NULL);
    free(v);
    report_error("put_parts", rc);
    printf("%d\n", rc);
}

static void cmd_get(bool into, bool multi)
{
    char *key = strtok(NULL, " \t\r\n");
    char *a = strtok(NULL, " \t\r\n");
    if (key == NULL || ((into || multi) && a == NULL)) {
        printf("%d usage\n", CR_INVALID_PARAMS);
        return;
    }
    uint64_t seed = 0, off = 0, cap = 0;
    bool have_seed = false;
    char *t;
    if (!into && !multi && a != NULL) {
        seed = strtoull(a, NULL, 0);
        have_seed = true;
    }
    while ((t = strtok(NULL, " \t\r\n")) != NULL) {
        if (strncmp(t, "off=", 4) == 0) {
            off = strtoull(t + 4, NULL, 10);
        } else {
            seed = strtoull(t, NULL, 0);
            have_seed = true;
        }
    }
    if (!into && !multi) {
        void *v = NULL;
        int64_t rc = cr_store_get(store, key, &v);
        if (rc != CR_OBJECT_NOT_FOUND)
            report_error("get", rc);
        print_read(rc, v, have_seed, seed);
        free(v);
        return;
    }
    if (multi) {
        /* NPARTS pieces of region, each a quarter of the value's size (from get_size). */
        size_t n = strtoul(a, NULL, 10);
        int64_t size = cr_store_get_size(store, key);
        if (size < 0 || n == 0 || n > 64 || !region_fits(0, (uint64_t)size + 64 * n)) {
            report_error("get_size", size);
            printf("%" PRId64 " 0 -\n", size < 0 ? size : (int64_t)CR_INVALID_PARAMS);
            return;
        }
        /* Scatter into pieces separated by 64-byte gaps, then gather to check. */
        void *bufs[64];
        size_t sizes[64];
        uint64_t o = 0, step = (uint64_t)size / n;
        for (size_t i = 0; i < n; i++) {
            sizes[i] = i + 1 == n ? (uint64_t)size - step * (n - 1) : step;
            bufs[i] = region + o + 64 * i;
            o += sizes[i];
        }
        int64_t rc = cr_store_get_into_multi(store, key, bufs, sizes, n);
        report_error("get_into_multi", rc);
        uint8_t *flat = malloc((uint64_t)size + 1);
        uint64_t f = 0;
        for (size_t i = 0; i < n && rc >= 0; i++) {
            memcpy(flat + f, bufs[i], sizes[i]);
            f += sizes[i];
        }
        print_read(rc, flat, have_seed, seed);
        free(flat);
        return;
    }
    cap = strtoull(a, NULL, 10);
    if (!region_fits(off, cap)) {
        printf("%d 0 -\n", CR_INVALID_PARAMS);
        return;
    }
    memset(region + off, 0xa5, cap);
    int64_t rc = cr_store_get_into(store, key, region + off, cap);
    if (rc != CR_OBJECT_NOT_FOUND)
        report_error("get_into", rc);
    print_read(rc, region + off, have_seed, seed);
}

/* Keys PFX0..PFX<n-1>; returns n or -1. */
static int batch_keys(char ***keys_out)
{
    char *pfx = strtok(NULL, " \t\r\n");
    char *n_s = strtok(NULL, " \t\r\n");
    if (pfx == NULL || n_s == NULL)
        return -1;
    int n = atoi(n_s);
    if (n <= 0 || n > MAX_BATCH)
        return -1;
    char **keys = calloc((size_t)n, sizeof(*keys));
    for (int i = 0; i < n; i++) {
        size_t l = strlen(pfx) + 16;
        keys[i] = malloc(l);
        snprintf(keys[i], l, "%s%d", pfx, i);
    }
    *keys_out = keys;
    return n;
}

static void free_keys(char **keys, int n)
{
    for (int i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
}

static void cmd_batch_put(void)
{
    char **keys;
    int n = batch_keys(&keys);
    char *len_s = n > 0 ? strtok(NULL, " \t\r\n") : NULL;
    char *seed_s = len_s ? strtok(NULL, " \t\r\n") : NULL;
    if (seed_s == NULL) {
        if (n > 0)
            free_keys(keys, n);
        printf("%d usage\n", CR_INVALID_PARAMS);
        return;
    }
    uint64_t len = strtoull(len_s, NULL, 10), seed = strtoull(seed_s, NULL, 0);
    static put_opts o;
    parse_opts(&o);
    int *res = calloc((size_t)n, sizeof(int));
    int rc;
    if (o.from) {
        if (!region_fits(0, len * (uint64_t)n)) {
            free_keys(keys, n);
            free(res);
            printf("%d region too small\n", CR_INVALID_PARAMS);
            return;
        }
        void **bufs = calloc((size_t)n, sizeof(void *));
        size_t *sizes = calloc((size_t)n, sizeof(size_t));
        for (int i = 0; i < n; i++) {
            bufs[i] = region + len * (uint64_t)i;
            sizes[i] = len;
            sp_fill(bufs[i], len, seed + (uint64_t)i);
        }
        rc = cr_store_batch_put_from(store, (const char *const *)keys, bufs, sizes, (size_t)n,
                                     &o.cfg, res);
        free(bufs);
        free(sizes);
    } else {
        uint8_t *all = malloc(len * (uint64_t)n + 1);
        const void **vals = calloc((size_t)n, sizeof(void *));
        size_t *sizes = calloc((size_t)n, sizeof(size_t));
        for (int i = 0; i < n; i++) {
            vals[i] = all + len * (uint64_t)i;
            sizes[i] = len;
            sp_fill(all + len * (uint64_t)i, len, seed + (uint64_t)i);
        }
        rc = cr_store_batch_put(store, (const char *const *)keys, vals, sizes, (size_t)n, &o.cfg,
                                res);
        free(all);
        free(vals);
        free(sizes);
    }
    report_error("batch_put", rc);
    int ok = 0, fail = 0, first = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (res[i] == 0) {
            ok++;
        } else {
            fail++;
            if (first == 0) {
                first = res[i];
                fprintf(stderr, "store-client: batch_put %s: %d %s\n", keys[i], res[i],
                        cr_status_name(res[i]));
            }
        }
    }
    printf("%d ok=%d fail=%d first=%d\n", rc, ok, fail, first);
    free(res);
    free_keys(keys, n);
}

static void cmd_batch_get(void)
{
    char **keys;
    int n = batch_keys(&keys);
    char *len_s = n > 0 ? strtok(NULL, " \t\r\n") : NULL;
    char *seed_s = len_s ? strtok(NULL, " \t\r\n") : NULL;
    if (seed_s == NULL) {
        if (n > 0)
            free_keys(keys, n);
        printf("%d usage\n", CR_INVALID_PARAMS);
        return;
    }
    uint64_t len = strtoull(len_s, NULL, 10), seed = strtoull(seed_s, NULL, 0);
    static put_opts o;
    parse_opts(&o);
    int64_t *res = calloc((size_t)n, sizeof(int64_t));
    void **bufs = calloc((size_t)n, sizeof(void *));
    int rc;
    if (o.from) {
        if (!region_fits(0, len * (uint64_t)n)) {
            free_keys(keys, n);
            free(res);
            free(bufs);
            printf("%d region too small\n", CR_INVALID_PARAMS);
            return;
        }
        size_t *caps = calloc((size_t)n, sizeof(size_t));
        memset(region, 0xa5, len * (uint64_t)n);
        for (int i = 0; i < n; i++) {
            bufs[i] = region + len * (uint64_t)i;
            caps[i] = len;
        }
        rc = cr_store_batch_get_into(store, (const char *const *)keys, bufs, caps, (size_t)n, res);
        free(caps);
    } else {
        rc = cr_store_batch_get(store, (const char *const *)keys, (size_t)n, bufs, res);
    }
    report_error("batch_get", rc);
    int ok = 0, miss = 0, err = 0, bad = 0, first = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (res[i] == CR_OBJECT_NOT_FOUND) {
            miss++;
        } else if (res[i] < 0) {
            err++;
            if (first == 0) {
                first = (int)res[i];
                fprintf(stderr, "store-client: batch_get %s: %" PRId64 " %s\n", keys[i], res[i],
                        cr_status_name((int)res[i]));
            }
        } else if ((uint64_t)res[i] != len || sp_check(bufs[i], len, seed + (uint64_t)i) >= 0) {
            bad++;
            fprintf(stderr, "store-client: batch_get %s: WRONG BYTES (size %" PRId64 ")\n", keys[i],
                    res[i]);
        } else {
            ok++;
        }
    }
    if (!o.from)
        for (int i = 0; i < n; i++)
            free(bufs[i]);
    printf("%d ok=%d miss=%d err=%d bad=%d first=%d\n", rc, ok, miss, err, bad, first);
    free(bufs);
    free(res);
    free_keys(keys, n);
}

/* Key i's NPARTS pieces in region: back to back per key, 64-byte gaps. */
static int multi_layout(int n, uint64_t len, size_t nparts, void ****bufs, size_t ***sizes,
                        size_t **counts)
{
    uint64_t stride = len + 64 * nparts;
    if (nparts == 0 || nparts > 64 || !region_fits(0, stride * (uint64_t)n))
        return -1;
    *bufs = calloc((size_t)n, sizeof(**bufs));
    *sizes = calloc((size_t)n, sizeof(**sizes));
    *counts = calloc((size_t)n, sizeof(**counts));
    for (int i = 0; i < n; i++) {
        (*bufs)[i] = calloc(nparts, sizeof(void *));
        (*sizes)[i] = calloc(nparts, sizeof(size_t));
        (*counts)[i] = nparts;
        uint64_t o = stride * (uint64_t)i, step = len / nparts;
        for (size_t k = 0; k < nparts; k++) {
            (*sizes)[i][k] = k + 1 == nparts ? len - step * (nparts - 1) : step;
            (*bufs)[i][k] = region + o;
            o += (*sizes)[i][k] + 64;
        }
    }
    return 0;
}

static void free_layout(int n, void ***bufs, size_t **sizes, size_t *counts)
{
    for (int i = 0; i < n; i++) {
        free(bufs[i]);
        free(sizes[i]);
    }
    free(bufs);
    free(sizes);
    free(counts);
}

static void cmd_batch_multi(bool get)
{
    char **keys;
    int n = batch_keys(&keys);
    char *len_s = n > 0 ? strtok(NULL, " \t\r\n") : NULL;
    char *seed_s = len_s ? strtok(NULL, " \t\r\n") : NULL;
    char *np_s = seed_s ? strtok(NULL, " \t\r\n") : NULL;
    char *flag = np_s ? strtok(NULL, " \t\r\n") : NULL;
    void ***bufs;
    size_t **sizes, *counts;
    uint64_t len = len_s ? strtoull(len_s, NULL, 10) : 0;
    uint64_t seed = seed_s ? strtoull(seed_s, NULL, 0) : 0;
    if (np_s == NULL || multi_layout(n, len, strtoul(np_s, NULL, 10), &bufs, &sizes, &counts) < 0) {
        if (n > 0)
            free_keys(keys, n);
        printf("%d usage\n", CR_INVALID_PARAMS);
        return;
    }
    uint8_t *flat = malloc(len + 1);
    int ok = 0, fail = 0, miss = 0, over = 0, bad = 0, first = 0, rc;
    if (!get) {
        for (int i = 0; i < n; i++) {
            sp_fill(flat, len, seed + (uint64_t)i);
            for (size_t k = 0, at = 0; k < counts[i]; at += sizes[i][k], k++)
                memcpy(bufs[i][k], flat + at, sizes[i][k]);
        }
        int *res = calloc((size_t)n, sizeof(int));
        bool upsert = flag != NULL && strcmp(flag, "upsert") == 0;
        rc = (upsert ? cr_store_batch_upsert_from_multi : cr_store_batch_put_from_multi)(
            store, (const char *const *)keys, (void *const *const *)bufs,
            (const size_t *const *)sizes, counts, (size_t)n, NULL, res);
        report_error("batch_put_multi", rc);
        for (int i = 0; i < n && rc == 0; i++) {
            if (res[i] == 0) {
                ok++;
            } else {
                fail++;
                first = first ? first : res[i];
            }
        }
        printf("%d ok=%d fail=%d first=%d\n", rc, ok, fail, first);
        free(res);
    } else {
        memset(region, 0xa5, (len + 64 * counts[0]) * (uint64_t)n);
        int64_t *res = calloc((size_t)n, sizeof(int64_t));
        rc = cr_store_batch_get_into_multi(store, (const char *const *)keys,
                                           (void *const *const *)bufs, (const size_t *const *)sizes,
                                           counts, (size_t)n, res);
        report_error("batch_get_multi", rc);
        for (int i = 0; i < n && rc == 0; i++) {
            if (res[i] == CR_OBJECT_NOT_FOUND) {
                miss++;
            } else if (res[i] == CR_BUFFER_OVERFLOW) {
                over++;
            } else if (res[i] < 0) {
                fail++;
                first = first ? first : (int)res[i];
            } else {
                uint64_t at = 0;
                for (size_t k = 0; k < counts[i] && at < (uint64_t)res[i]; k++) {
                    uint64_t take = (uint64_t)res[i] - at;
                    take = take < sizes[i][k] ? take : sizes[i][k];
                    memcpy(flat + at, bufs[i][k], take);
                    at += take;
                }
                if (sp_check(flat, (uint64_t)res[i], seed + (uint64_t)i) >= 0)
                    bad++;
                else
                    ok++;
            }
        }
        printf("%d ok=%d miss=%d over=%d err=%d bad=%d first=%d\n", rc, ok, miss, over, fail, bad,
               first);
        free(res);
    }
    free(flat);
    free_layout(n, bufs, sizes, counts);
    free_keys(keys, n);
}

static void cmd_batch_exist_remove(bool remove)
{
    char **keys;
    int n = batch_keys(&keys);
    if (n < 0) {
        printf("%d usage\n", CR_INVALID_PARAMS);
        return;
    }
    static put_opts o;
    parse_opts(&o);
    int *res = calloc((size_t)n, sizeof(int));
    int rc = remove
                 ? cr_store_batch_remove(store, (const char *const *)keys, (size_t)n, o.force, res)
                 : cr_store_batch_exist(store, (const char *const *)keys, (size_t)n, res);
    report_error(remove ? "batch_remove" : "batch_exist", rc);
    int a = 0, b = 0, c = 0, first = 0;
    for (int i = 0; i < n && rc == 0; i++) {
        if (remove) {
            if (res[i] == 0) {
                a++;
            } else {
                b++;
                first = first ? first : res[i];
            }
        } else {
            if (res[i] == 1)
                a++;
            else if (res[i] == 0)
                b++;
            else
                c++;
        }
    }
    if (remove)
        printf("%d ok=%d fail=%d first=%d\n", rc, a, b, first);
    else
        printf("%d yes=%d no=%d err=%d\n", rc, a, b, c);
    free(res);
    free_keys(keys, n);
}

static void cmd_key_op(const char *cmd)
{
    char *key = strtok(NULL, " \t\r\n");
    if (key == NULL && strcmp(cmd, "remove_all") != 0) {
        printf("%d usage\n", CR_INVALID_PARAMS);
        return;
    }
    char *flag = key != NULL ? strtok(NULL, " \t\r\n") : NULL;
    bool force =
        (flag != NULL && strcmp(flag, "force") == 0) || (key != NULL && strcmp(key, "force") == 0);
    int64_t rc;
    if (strcmp(cmd, "exist") == 0)
        rc = cr_store_exist(store, key);
    else if (strcmp(cmd, "size") == 0)
        rc = cr_store_get_size(store, key);
    else if (strcmp(cmd, "remove") == 0)
        rc = cr_store_remove(store, key, force);
    else if (strcmp(cmd, "remove_regex") == 0)
        rc = cr_store_remove_by_regex(store, key, force);
    else
        rc = cr_store_remove_all(store, force);
    if (rc != CR_OBJECT_NOT_FOUND)
        report_error(cmd, rc);
    printf("%" PRId64 "\n", rc);
}

static void cmd_replicas(void)
{
    char *key = strtok(NULL, " \t\r\n");
    char *cap_s = key != NULL ? strtok(NULL, " \t\r\n") : NULL;
    size_t cap = cap_s != NULL ? (size_t)atoi(cap_s) : 8;
    if (key == NULL || cap > 64) {
        printf("%d usage\n", CR_INVALID_PARAMS);
        return;
    }
    cr_replica_info info[64];
    int rc = cr_store_get_replicas(store, key, cap ? info : NULL, cap);
    if (rc != CR_OBJECT_NOT_FOUND)
        report_error("replicas", rc);
    printf("%d", rc);
    for (int i = 0; i < rc && (size_t)i < cap; i++)
        printf(" %s/%d/%" PRIu64 "%s", info[i].segment, info[i].complete ? 1 : 0, info[i].size,
               info[i].on_disk ? "/disk" : "");
    printf("\n");
}

static void cmd_replica_clear(void)
{
    char *seg = strtok(NULL, " \t\r\n");
    char *list = seg != NULL ? strtok(NULL, " \t\r\n") : NULL;
    if (list == NULL) {
        printf("%d usage\n", CR_INVALID_PARAMS);
        return;
    }
    const char *keys[MAX_BATCH];
    size_t n = 0;
    for (char *save = NULL, *k = strtok_r(list, ",", &save); k != NULL && n < MAX_BATCH;
         k = strtok_r(NULL, ",", &save))
        keys[n++] = k;
    int res[MAX_BATCH];
    int rc = cr_store_batch_replica_clear(store, keys, n, strcmp(seg, "-") == 0 ? "" : seg, res);
    report_error("replica_clear", rc);
    printf("%d r=", rc);
    for (size_t i = 0; rc == 0 && i < n; i++)
        printf(i ? ",%d" : "%d", res[i]);
    printf("\n");
}

static int parse_size_flag(const char *flag, const char *v, uint64_t *out)
{
    if (cr_parse_size(v, out) < 0) {
        printf("FAIL %d %s: %s\n", CR_INVALID_PARAMS, flag, cr_last_error_message());
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    cr_store_config cfg;
    cr_store_config_init(&cfg);
    cfg.global_segment_size = 64ull << 20;
    cr_store_thin_config thin;
    cr_store_thin_config_init(&thin);
    const char *thin_address = NULL;
    region_size = 32ull << 20;
    for (int i = 1; i + 1 < argc; i += 2) {
        const char *f = argv[i], *v = argv[i + 1];
        if (strcmp(f, "--master") == 0)
            cfg.master_address = v;
        else if (strcmp(f, "--thin") == 0)
            thin_address = v;
        else if (strcmp(f, "--pool") == 0) {
            if (parse_size_flag(f, v, &thin.mem_pool_size) < 0)
                return 2;
        } else if (strcmp(f, "--region-kind") == 0)
            region_kind = v;
        else if (strcmp(f, "--secret") == 0)
            thin.shared_secret = v;
        else if (strcmp(f, "--tenant") == 0)
            thin.tenant_id = cfg.tenant_id = v;
        else if (strcmp(f, "--segment") == 0) {
            if (parse_size_flag(f, v, &cfg.global_segment_size) < 0)
                return 2;
        } else if (strcmp(f, "--buffer") == 0) {
            if (parse_size_flag(f, v, &cfg.local_buffer_size) < 0)
                return 2;
        } else if (strcmp(f, "--region") == 0) {
            if (parse_size_flag(f, v, &region_size) < 0)
                return 2;
        } else if (strcmp(f, "--protocol") == 0)
            cfg.protocol = v;
        else if (strcmp(f, "--rpc-timeout") == 0)
            cfg.rpc_timeout_ms = (uint32_t)atoi(v);
        else if (strcmp(f, "--transfer-timeout") == 0)
            cfg.transfer_timeout_ms = (uint32_t)atoi(v);
        else if (strcmp(f, "--heartbeat") == 0)
            cfg.heartbeat_interval_ms = (uint32_t)atoi(v);
        else if (strcmp(f, "--hostname") == 0)
            cfg.local_hostname = v; /* "host:port": the segment name of a restarted client */
        else if (strcmp(f, "--ssd") == 0) {
            cfg.enable_ssd_offload = true; /* the disk tier at v (docs/disk-tier.md) */
            cfg.ssd_offload_path = v;
        } else {
            printf("FAIL %d unknown flag %s\n", CR_INVALID_PARAMS, f);
            return 2;
        }
    }
    int rc;
    if (thin_address != NULL) {
        thin.server_address = thin_address;
        thin.local_buffer_size = cfg.local_buffer_size;
        rc = cr_store_setup_thin(&thin, &store);
    } else {
        rc = cr_store_setup(&cfg, &store);
    }
    if (rc < 0) {
        printf("FAIL %d %s\n", rc, cr_last_error_message());
        return 1;
    }
    if (region_size > 0) {
        int arc = strcmp(region_kind, "pool") == 0
                      ? cr_store_pool_alloc(store, region_size, (void **)&region)
                  : strcmp(region_kind, "malloc") == 0
                      ? ((region = malloc(region_size)) != NULL ? 0 : CR_ERR_NO_MEMORY)
                      : cr_alloc_shared(region_size, (void **)&region);
        if (arc < 0 || cr_store_register_buffer(store, region, region_size) < 0) {
            printf("FAIL %d region: %s\n", CR_INTERNAL_ERROR, cr_last_error_message());
            cr_store_destroy(store);
            return 1;
        }
    }
    char name[300];
    cr_store_hostname(store, name, sizeof(name));
    printf("READY %s\n", name);
    fflush(stdout);

    static char line[16384];
    while (fgets(line, sizeof(line), stdin) != NULL) {
        char *cmd = strtok(line, " \t\r\n");
        if (cmd == NULL)
            continue;
        if (strcmp(cmd, "quit") == 0)
            break;
        if (strcmp(cmd, "put") == 0 || strcmp(cmd, "upsert") == 0)
            cmd_put(cmd, false, cmd[0] == 'u');
        else if (strcmp(cmd, "put_from") == 0 || strcmp(cmd, "upsert_from") == 0)
            cmd_put(cmd, true, cmd[0] == 'u');
        else if (strcmp(cmd, "put_parts") == 0)
            cmd_put_parts();
        else if (strcmp(cmd, "get") == 0)
            cmd_get(false, false);
        else if (strcmp(cmd, "get_into") == 0)
            cmd_get(true, false);
        else if (strcmp(cmd, "get_multi") == 0)
            cmd_get(false, true);
        else if (strcmp(cmd, "batch_put") == 0)
            cmd_batch_put();
        else if (strcmp(cmd, "batch_get") == 0)
            cmd_batch_get();
        else if (strcmp(cmd, "batch_put_multi") == 0)
            cmd_batch_multi(false);
        else if (strcmp(cmd, "batch_get_multi") == 0)
            cmd_batch_multi(true);
        else if (strcmp(cmd, "batch_exist") == 0)
            cmd_batch_exist_remove(false);
        else if (strcmp(cmd, "batch_remove") == 0)
            cmd_batch_exist_remove(true);
        else if (strcmp(cmd, "exist") == 0 || strcmp(cmd, "size") == 0 ||
                 strcmp(cmd, "remove") == 0 || strcmp(cmd, "remove_all") == 0 ||
                 strcmp(cmd, "remove_regex") == 0)
            cmd_key_op(cmd);
        else if (strcmp(cmd, "replicas") == 0)
            cmd_replicas();
        else if (strcmp(cmd, "replica_clear") == 0)
            cmd_replica_clear();
        else if (strcmp(cmd, "health") == 0) {
            rc = cr_store_health(store);
            report_error("health", rc);
            printf("%d\n", rc);
        } else if (strcmp(cmd, "name") == 0) {
            printf("0 %s\n", name);
        } else if (strcmp(cmd, "stats") == 0) {
            cr_engine_stats st = {0};
            rc = cr_store_engine(store) ? cr_engine_get_stats(cr_store_engine(store), &st)
                                        : CR_UNAVAILABLE_IN_CURRENT_STATUS;
            printf("%d local=%" PRIu64 " shm=%" PRIu64 " cma=%" PRIu64 " tcp=%" PRIu64 "\n", rc,
                   st.bytes_local, st.bytes_shm, st.bytes_cma, st.bytes_tcp);
        } else if (strncmp(cmd, "psess_", 6) == 0) {
            cmd_psess(cmd);
        } else if (strcmp(cmd, "thinstats") == 0) {
            cr_store_thin_stats ts = {0};
            rc = cr_store_thin_stats_get(store, &ts);
            printf("%d calls=%" PRIu64 " zc=%" PRIu64 " copied=%" PRIu64 " slow=%" PRIu64
                   "/%" PRIu64 " transient=%" PRIu64 " reconnects=%" PRIu64 " lost=%" PRIu64
                   " shared=%" PRIu64 " slowregs=%" PRIu64 " conns=%" PRIu64 " pool=%" PRIu64
                   " dget=%" PRIu64 "/%" PRIu64 " dput=%" PRIu64 "/%" PRIu64 " dspec=%" PRIu64
                   " dkept=%" PRIu64 "\n",
                   rc, ts.calls, ts.zero_copy_bytes, ts.copied_bytes, ts.slow_path_calls,
                   ts.slow_path_bytes, ts.transient_calls, ts.reconnects, ts.daemon_lost,
                   ts.shared_regions, ts.slow_path_regions, ts.connections, ts.pool_used,
                   ts.direct_get_keys, ts.direct_get_fallbacks, ts.direct_put_keys,
                   ts.direct_put_fallbacks, ts.direct_get_speculative, ts.direct_get_kept);
        } else if (strcmp(cmd, "getstats") == 0) {
            cr_store_get_stats gs = {0};
            rc = cr_store_get_stats_get(store, &gs);
            printf("%d on=%d spec=%" PRIu64 " kept=%" PRIu64 "\n", rc, gs.speculating ? 1 : 0,
                   gs.speculative_reads, gs.speculative_hits);
        } else if (strcmp(cmd, "offstats") == 0) {
            cr_store_offload_stats os;
            rc = cr_store_offload_stats_get(store, &os);
            printf("%d keys=%" PRIu64 " bytes=%" PRIu64 " offloads=%" PRIu64 " failed=%" PRIu64
                   " staged=%" PRIu64 " promoted=%" PRIu64 " evicted=%" PRIu64 " rpc_reads=%" PRIu64
                   " compactions=%" PRIu64 "\n",
                   rc, os.disk_keys, os.disk_bytes, os.offloads, os.offload_failures,
                   os.stage_reads, os.promotions, os.disk_evictions, os.rpc_reads, os.compactions);
        } else if (strcmp(cmd, "regcount") == 0) {
            cr_engine *e = cr_store_engine(store);
            printf("%zu\n", e ? cr_engine_registration_count(e) : (size_t)0);
        } else if (strcmp(cmd, "close") == 0) {
            if (region != NULL)
                cr_store_unregister_buffer(store, region);
            printf("%d\n", cr_store_close(store));
        } else {
            printf("%d unknown command '%s'\n", CR_INVALID_PARAMS, cmd);
        }
        fflush(stdout);
    }
    cr_store_sessions_destroy(sessions);
    if (region != NULL && (cr_store_engine(store) != NULL || cr_store_is_thin(store)))
        cr_store_unregister_buffer(store, region);
    if (strcmp(region_kind, "malloc") == 0)
        free(region);
    else if (strcmp(region_kind, "pool") == 0)
        cr_store_pool_free(store, region);
    else
        cr_free_shared(region);
    cr_store_destroy(store);
    return 0;
}
