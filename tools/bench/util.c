/*
 * util.c - small helpers for crescent-bench: command-line values, clocks,
 * the latency histogram, the verification pattern and the progress line.
 *
 * Design: nothing here allocates; every function is reentrant except the
 * progress line, which only the main thread writes.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "crescent/store.h"

uint64_t cb_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int cb_parse_size(const char *text, uint64_t *out)
{
    /* the library's parser (cr_parse_size: "4K", "1MiB", "16 GB", binary multiples) */
    return cr_parse_size(text, out) == 0 ? 0 : -1;
}

int cb_parse_u32(const char *text, uint32_t min, uint32_t max, uint32_t *out)
{
    if (text == NULL || !isdigit((unsigned char)text[0]))
        return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int cb_parse_seconds(const char *text, double *out)
{
    if (text == NULL || text[0] == '\0')
        return -1;
    char *end = NULL;
    errno = 0;
    double v = strtod(text, &end);
    if (errno != 0 || *end != '\0' || !isfinite(v) || v <= 0.0 || v > 86400.0)
        return -1;
    *out = v;
    return 0;
}

int cb_parse_u64(const char *text, uint64_t *out)
{
    if (text == NULL || !isdigit((unsigned char)text[0]))
        return -1;
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(text, &end, 0);
    if (errno != 0 || *end != '\0')
        return -1;
    *out = v;
    return 0;
}

const char *cb_format_size(uint64_t v, char *buf, size_t len)
{
    static const char units[] = "KMGT";
    int u = -1;
    while (u < 3 && v != 0 && v % 1024 == 0) {
        v /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, len, "%" PRIu64, v);
    else
        snprintf(buf, len, "%" PRIu64 "%c", v, units[u]);
    return buf;
}

const char *cb_format_bytes(uint64_t v, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double d = (double)v;
    int u = 0;
    while (u < 4 && d >= 1024.0) {
        d /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%" PRIu64 " B", v);
    else
        snprintf(buf, len, "%.2f %s", d, units[u]);
    return buf;
}

/* ---- histogram ---------------------------------------------------------- */

static size_t hist_index(uint64_t v)
{
    if (v < 32)
        return (size_t)v;
    unsigned msb = 63u - (unsigned)__builtin_clzll(v); /* >= 5 */
    uint64_t sub = (v >> (msb - 5)) & 31u;
    return (size_t)(msb - 4) * 32u + (size_t)sub;
}

static uint64_t hist_midpoint(size_t idx)
{
    if (idx < 32)
        return idx;
    unsigned msb = (unsigned)(idx / 32) + 4;
    uint64_t sub = idx % 32;
    uint64_t lo = (32u + sub) << (msb - 5);
    uint64_t width = (uint64_t)1 << (msb - 5);
    return lo + width / 2;
}

void cb_hist_add(cb_hist *h, uint64_t value_ns, uint64_t weight)
{
    h->counts[hist_index(value_ns)] += weight;
    h->total += weight;
}

void cb_hist_merge(cb_hist *dst, const cb_hist *src)
{
    for (size_t i = 0; i < CB_HIST_BUCKETS; i++)
        dst->counts[i] += src->counts[i];
    dst->total += src->total;
}

uint64_t cb_hist_quantile(const cb_hist *h, double q)
{
    if (h->total == 0)
        return 0;
    uint64_t rank = (uint64_t)ceil(q * (double)h->total);
    if (rank == 0)
        rank = 1;
    uint64_t seen = 0;
    for (size_t i = 0; i < CB_HIST_BUCKETS; i++) {
        seen += h->counts[i];
        if (seen >= rank)
            return hist_midpoint(i);
    }
    return hist_midpoint(CB_HIST_BUCKETS - 1);
}

/* ---- verification pattern ----------------------------------------------- */

static uint64_t splitmix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void put_word_bytes(uint8_t *dst, uint64_t w, unsigned from, unsigned to)
{
    for (unsigned k = from; k < to; k++)
        *dst++ = (uint8_t)(w >> (8 * k));
}

void cb_pattern_fill(uint8_t *dst, uint64_t offset, uint64_t len, uint64_t seed)
{
    uint64_t end = offset + len;
    uint64_t o = offset;
    if (o % 8 != 0) { /* unaligned head */
        uint64_t word_end = (o / 8 + 1) * 8;
        unsigned to = (unsigned)((word_end <= end ? word_end : end) - o / 8 * 8);
        unsigned from = (unsigned)(o % 8);
        put_word_bytes(dst, splitmix64(o / 8 + seed), from, to);
        dst += to - from;
        o += to - from;
    }
    for (; o + 8 <= end; o += 8, dst += 8) {
        uint64_t w = splitmix64(o / 8 + seed);
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(dst, &w, 8);
#else
        put_word_bytes(dst, w, 0, 8);
#endif
    }
    if (o < end) /* tail */
        put_word_bytes(dst, splitmix64(o / 8 + seed), 0, (unsigned)(end - o));
}

int64_t cb_first_mismatch(const uint8_t *got, const uint8_t *want, size_t len)
{
    if (memcmp(got, want, len) == 0)
        return -1;
    for (size_t i = 0; i < len; i++)
        if (got[i] != want[i])
            return (int64_t)i;
    return -1;
}

/* ---- progress line ------------------------------------------------------ */

void cb_progress(const char *label, double elapsed_s, double gbps)
{
    fprintf(stderr, "\r%-40s %7.1f s %9.3f GB/s   ", label, elapsed_s, gbps);
    fflush(stderr);
}

void cb_progress_clear(void)
{
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
}

int cb_parse_size_list(const char *prog, const char *flag, const char *text, uint64_t limit,
                       uint64_t *out, size_t max, size_t *n)
{
    size_t count = 0;
    for (const char *p = text;;) {
        size_t len = strcspn(p, ",");
        char item[32];
        uint64_t v = 0;
        if (len == 0 || len >= sizeof(item)) {
            fprintf(stderr, "%s: %s '%s' is not a list like 4K,64K,1M\n", prog, flag, text);
            return -1;
        }
        memcpy(item, p, len);
        item[len] = '\0';
        if (cb_parse_size(item, &v) < 0 || v == 0 || v > limit) {
            char lim[32];
            fprintf(stderr, "%s: %s: '%s' is not a size from 1 to %s (K/M/G binary)\n", prog, flag,
                    item, cb_format_size(limit, lim, sizeof(lim)));
            return -1;
        }
        if (count == max) {
            fprintf(stderr, "%s: %s: more than %zu sizes\n", prog, flag, max);
            return -1;
        }
        out[count++] = v;
        p += len;
        if (*p == '\0')
            break;
        p++;
    }
    *n = count;
    return 0;
}

int cb_bad_value(const char *bench, const char *flag, const char *value, const char *want)
{
    fprintf(stderr, CB_PROG " %s: %s '%s' is not %s\n", bench, flag, value, want);
    return -1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

void cb_range(const double *v, unsigned n, double *lo, double *med, double *hi)
{
    double t[64];
    memcpy(t, v, n * sizeof(*t));
    qsort(t, n, sizeof(*t), cmp_double);
    *lo = t[0];
    *hi = t[n - 1];
    *med = n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}
