/*
 * config.c - the disk store's defaults and its environment variables
 * (Mooncake's MOONCAKE_OFFLOAD_* names where Mooncake has one, CRESCENT_OFFLOAD_*
 * for crescent's own knobs). Parsing is strict: a value that does not parse
 * names the variable and leaves the configuration unchanged.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "disk/disk.h"

void crf_config_init(crf_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->bucket_size_limit = 256ull << 20;
    cfg->bucket_keys_limit = 500;
    cfg->capacity_bytes = 0;
    cfg->max_keys = 10000000;
    cfg->eviction = CRF_EVICT_LRU;
    cfg->sync = CRF_SYNC_SEAL;
    cfg->io_mode = CRF_IO_AUTO;
    cfg->compaction_dead_ratio = 0.5;
    cfg->background_compaction = true;
    cfg->queue_depth = 64;
    cfg->write_buffer_bytes = 8ull << 20;
    cfg->prealloc_bytes = 256ull << 20;
}

/* Decimal bytes with an optional binary suffix (K, M, G, T; "KB"/"KiB" too). */
static int parse_bytes(const char *name, const char *text, uint64_t *out)
{
    char *end = NULL;
    errno = 0;
    if (text[0] < '0' || text[0] > '9')
        return crb_error(CR_ERR_INVALID_CONFIG, "%s='%s': not a byte count", name, text);
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0)
        return crb_error(CR_ERR_INVALID_CONFIG, "%s='%s': out of range", name, text);
    unsigned shift = 0;
    if (*end != '\0') {
        switch (*end) {
        case 'k':
        case 'K':
            shift = 10;
            break;
        case 'm':
        case 'M':
            shift = 20;
            break;
        case 'g':
        case 'G':
            shift = 30;
            break;
        case 't':
        case 'T':
            shift = 40;
            break;
        default:
            return crb_error(CR_ERR_INVALID_CONFIG, "%s='%s': not a byte count", name, text);
        }
        end++;
        if (strcasecmp(end, "") != 0 && strcasecmp(end, "b") != 0 && strcasecmp(end, "ib") != 0)
            return crb_error(CR_ERR_INVALID_CONFIG, "%s='%s': not a byte count", name, text);
    }
    if (shift > 0 && v > (UINT64_MAX >> shift))
        return crb_error(CR_ERR_INVALID_CONFIG, "%s='%s': out of range", name, text);
    *out = (uint64_t)v << shift;
    return 0;
}

static int parse_ratio(const char *name, const char *text, double *out)
{
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || end == text || *end != '\0' || !(v >= 0.0 && v <= 1.0))
        return crb_error(CR_ERR_INVALID_CONFIG, "%s='%s': not a ratio in [0, 1]", name, text);
    *out = v;
    return 0;
}

static int parse_word(const char *name, const char *text, const char *const *words, int n, int *out)
{
    for (int i = 0; i < n; i++) {
        if (strcasecmp(text, words[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    char list[128] = "";
    for (int i = 0; i < n; i++) {
        strncat(list, words[i], sizeof(list) - strlen(list) - 1);
        if (i + 1 < n)
            strncat(list, "|", sizeof(list) - strlen(list) - 1);
    }
    return crb_error(CR_ERR_INVALID_CONFIG, "%s='%s': not one of %s", name, text, list);
}

int crf_config_from_env(crf_config *cfg)
{
    static const char *const evictions[] = {"none", "lru", "fifo"};
    static const char *const syncs[] = {"none", "seal", "put"};
    static const char *const ios[] = {"auto", "direct", "buffered"};
    crf_config c = *cfg;
    const char *v;
    uint64_t n;
    int w, rc;

    if ((v = getenv("MOONCAKE_OFFLOAD_FILE_STORAGE_PATH")) != NULL && v[0] != '\0')
        c.path = v;
    if ((v = getenv("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES")) != NULL) {
        if ((rc = parse_bytes("MOONCAKE_OFFLOAD_BUCKET_SIZE_LIMIT_BYTES", v, &n)) != 0)
            return rc;
        c.bucket_size_limit = n;
    }
    if ((v = getenv("MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT")) != NULL) {
        if ((rc = parse_bytes("MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT", v, &n)) != 0)
            return rc;
        if (n == 0 || n > UINT32_MAX)
            return crb_error(CR_ERR_INVALID_CONFIG, "MOONCAKE_OFFLOAD_BUCKET_KEYS_LIMIT='%s'", v);
        c.bucket_keys_limit = (uint32_t)n;
    }
    if ((v = getenv("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES")) != NULL) {
        if ((rc = parse_bytes("MOONCAKE_OFFLOAD_TOTAL_SIZE_LIMIT_BYTES", v, &n)) != 0)
            return rc;
        c.capacity_bytes = n;
    }
    /* The bucket backend's own quota wins over the generic one, as in Mooncake. */
    if ((v = getenv("MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE")) != NULL) {
        if ((rc = parse_bytes("MOONCAKE_OFFLOAD_BUCKET_MAX_TOTAL_SIZE", v, &n)) != 0)
            return rc;
        if (n != 0)
            c.capacity_bytes = n;
    }
    if ((v = getenv("MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT")) != NULL) {
        if ((rc = parse_bytes("MOONCAKE_OFFLOAD_TOTAL_KEYS_LIMIT", v, &n)) != 0)
            return rc;
        c.max_keys = n;
    }
    if ((v = getenv("MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY")) != NULL) {
        if ((rc = parse_word("MOONCAKE_OFFLOAD_BUCKET_EVICTION_POLICY", v, evictions, 3, &w)) != 0)
            return rc;
        c.eviction = (crf_eviction)w;
    }
    if ((v = getenv("CRESCENT_OFFLOAD_SYNC")) != NULL) {
        if ((rc = parse_word("CRESCENT_OFFLOAD_SYNC", v, syncs, 3, &w)) != 0)
            return rc;
        c.sync = (crf_sync_policy)w;
    }
    if ((v = getenv("CRESCENT_OFFLOAD_IO")) != NULL) {
        if ((rc = parse_word("CRESCENT_OFFLOAD_IO", v, ios, 3, &w)) != 0)
            return rc;
        c.io_mode = (crf_io_mode)w;
    }
    if ((v = getenv("CRESCENT_OFFLOAD_COMPACTION_DEAD_RATIO")) != NULL) {
        if ((rc = parse_ratio("CRESCENT_OFFLOAD_COMPACTION_DEAD_RATIO", v,
                              &c.compaction_dead_ratio)) != 0)
            return rc;
    }
    if ((v = getenv("CRESCENT_OFFLOAD_PREALLOC")) != NULL) {
        if ((rc = parse_bytes("CRESCENT_OFFLOAD_PREALLOC", v, &n)) != 0)
            return rc;
        c.prealloc_bytes = n;
    }
    *cfg = c;
    return 0;
}
