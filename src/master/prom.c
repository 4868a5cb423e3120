/*
 * prom.c - text buffer and Prometheus exposition builder (see prom.h).
 *
 * Design: every writer goes through text_reserve(), which records the first
 * failure in the buffer's sticky status; later calls return it untouched.
 * Names are validated before anything of a line is written, so a refused
 * line leaves no partial output behind. Doubles are printed with the fewest
 * significant digits (15, then 16, then 17) that parse back to the same
 * value, which keeps 0.05 readable as "0.05" instead of
 * "0.050000000000000003" while staying exact.
 */
#include "master/prom.h"

#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"

#define TEXT_MIN_CAP 1024

/* ------------------------------------------------------------------------ */
/* Text buffer                                                              */
/* ------------------------------------------------------------------------ */

void crk_text_free(crk_text *t)
{
    free(t->data);
    memset(t, 0, sizeof(*t));
}

void crk_text_reset(crk_text *t)
{
    t->len = 0;
    t->status = 0;
    if (t->data != NULL)
        t->data[0] = '\0';
}

char *crk_text_steal(crk_text *t, size_t *len)
{
    char *p = t->data;
    if (len != NULL)
        *len = t->len;
    memset(t, 0, sizeof(*t));
    return p;
}

/* Room for n more bytes plus the NUL; 0 or the (sticky) status. */
static int text_reserve(crk_text *t, size_t n)
{
    if (t->status != 0)
        return t->status;
    if (t->cap > t->len && n < t->cap - t->len)
        return 0;
    if (n > SIZE_MAX / 2 - t->len) {
        t->status = crb_error(CR_ERR_NO_MEMORY, "text buffer: %zu + %zu bytes overflow", t->len, n);
        return t->status;
    }
    size_t need = t->len + n + 1;
    size_t cap = t->cap < TEXT_MIN_CAP ? TEXT_MIN_CAP : t->cap;
    while (cap < need)
        cap *= 2;
    char *p = realloc(t->data, cap);
    if (p == NULL) {
        t->status = crb_error(CR_ERR_NO_MEMORY, "text buffer: cannot grow to %zu bytes", cap);
        return t->status;
    }
    t->data = p;
    t->cap = cap;
    return 0;
}

int crk_text_append(crk_text *t, const void *s, size_t n)
{
    int rc = text_reserve(t, n);
    if (rc != 0)
        return rc;
    if (n > 0)
        memcpy(t->data + t->len, s, n);
    t->len += n;
    t->data[t->len] = '\0';
    return 0;
}

int crk_text_puts(crk_text *t, const char *s)
{
    return crk_text_append(t, s, strlen(s));
}

static int text_vappendf(crk_text *t, const char *fmt, va_list ap)
{
    va_list copy;
    va_copy(copy, ap);
    int n = vsnprintf(NULL, 0, fmt, copy);
    va_end(copy);
    if (n < 0) {
        if (t->status == 0)
            t->status = crb_error(CR_INVALID_PARAMS, "text buffer: bad format '%s'", fmt);
        return t->status;
    }
    int rc = text_reserve(t, (size_t)n);
    if (rc != 0)
        return rc;
    vsnprintf(t->data + t->len, (size_t)n + 1, fmt, ap);
    t->len += (size_t)n;
    return 0;
}

int crk_text_appendf(crk_text *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc = text_vappendf(t, fmt, ap);
    va_end(ap);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Exposition                                                               */
/* ------------------------------------------------------------------------ */

static bool valid_name(const char *s, bool colon_ok)
{
    if (s == NULL || *s == '\0')
        return false;
    for (const char *p = s; *p != '\0'; p++) {
        char c = *p;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
                  (colon_ok && c == ':') || (p > s && c >= '0' && c <= '9');
        if (!ok)
            return false;
    }
    return true;
}

/* Record an invalid argument in t (unless a failure is already held). */
static int invalid(crk_text *t, const char *what, const char *name)
{
    if (t->status == 0)
        t->status = crb_error(CR_INVALID_PARAMS, "prometheus: invalid %s '%s'", what,
                              name != NULL ? name : "(null)");
    return t->status;
}

static int check_labels(crk_text *t, const crk_prom_label *labels, size_t n, bool forbid_le)
{
    if (n > 0 && labels == NULL)
        return invalid(t, "label list", NULL);
    for (size_t i = 0; i < n; i++) {
        const char *name = labels[i].name;
        if (!valid_name(name, false) || strncmp(name, "__", 2) == 0 ||
            (forbid_le && strcmp(name, "le") == 0))
            return invalid(t, "label name", name);
        if (labels[i].value == NULL)
            return invalid(t, "label value of", name);
    }
    return t->status;
}

/* Append s with the given characters escaped (\\, \n always; \" when quote). */
static int append_escaped(crk_text *t, const char *s, bool quote)
{
    int rc = 0;
    for (const char *p = s; rc == 0 && *p != '\0'; p++) {
        const char *run = p;
        while (*p != '\0' && *p != '\\' && *p != '\n' && !(quote && *p == '"'))
            p++;
        if (p > run)
            rc = crk_text_append(t, run, (size_t)(p - run));
        if (rc != 0 || *p == '\0')
            break;
        rc = crk_text_append(t, *p == '\n' ? "\\n" : *p == '"' ? "\\\"" : "\\\\", 2);
    }
    return rc;
}

/* Shortest exact decimal form of v, Prometheus spelling for the specials. */
static void format_double(double v, char *buf, size_t len)
{
    if (isnan(v)) {
        snprintf(buf, len, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, len, "%s", v > 0 ? "+Inf" : "-Inf");
        return;
    }
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, len, "%.*g", digits, v);
        if (strtod(buf, NULL) == v)
            return;
    }
}

static int append_labels(crk_text *t, const crk_prom_label *labels, size_t n, const char *le)
{
    if (n == 0 && le == NULL)
        return t->status;
    int rc = crk_text_append(t, "{", 1);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        rc = crk_text_appendf(t, "%s%s=\"", i > 0 ? "," : "", labels[i].name);
        if (rc == 0)
            rc = append_escaped(t, labels[i].value, true);
        if (rc == 0)
            rc = crk_text_append(t, "\"", 1);
    }
    if (rc == 0 && le != NULL)
        rc = crk_text_appendf(t, "%sle=\"%s\"", n > 0 ? "," : "", le);
    if (rc == 0)
        rc = crk_text_append(t, "}", 1);
    return rc;
}

static const char *type_name(crk_prom_type type)
{
    switch (type) {
    case CRK_PROM_COUNTER:
        return "counter";
    case CRK_PROM_GAUGE:
        return "gauge";
    case CRK_PROM_HISTOGRAM:
        return "histogram";
    case CRK_PROM_UNTYPED:
        return "untyped";
    }
    return NULL;
}

int crk_prom_family(crk_text *t, const char *name, crk_prom_type type, const char *help)
{
    const char *tn = type_name(type);
    if (!valid_name(name, true))
        return invalid(t, "metric name", name);
    if (tn == NULL)
        return invalid(t, "metric type of", name);
    int rc = t->status;
    if (rc == 0 && help != NULL) {
        rc = crk_text_appendf(t, "# HELP %s ", name);
        if (rc == 0)
            rc = append_escaped(t, help, false);
        if (rc == 0)
            rc = crk_text_append(t, "\n", 1);
    }
    if (rc == 0)
        rc = crk_text_appendf(t, "# TYPE %s %s\n", name, tn);
    return rc;
}

/* name{labels[,le]} value-text\n */
static int sample_line(crk_text *t, const char *name, const char *suffix,
                       const crk_prom_label *labels, size_t n, const char *le, const char *value)
{
    int rc = crk_text_appendf(t, "%s%s", name, suffix);
    if (rc == 0)
        rc = append_labels(t, labels, n, le);
    if (rc == 0)
        rc = crk_text_appendf(t, " %s\n", value);
    return rc;
}

int crk_prom_sample(crk_text *t, const char *name, const crk_prom_label *labels, size_t n_labels,
                    double value)
{
    char num[40];
    if (!valid_name(name, true))
        return invalid(t, "metric name", name);
    if (check_labels(t, labels, n_labels, false) != 0)
        return t->status;
    format_double(value, num, sizeof(num));
    return sample_line(t, name, "", labels, n_labels, NULL, num);
}

int crk_prom_sample_u64(crk_text *t, const char *name, const crk_prom_label *labels,
                        size_t n_labels, uint64_t value)
{
    char num[24];
    if (!valid_name(name, true))
        return invalid(t, "metric name", name);
    if (check_labels(t, labels, n_labels, false) != 0)
        return t->status;
    snprintf(num, sizeof(num), "%llu", (unsigned long long)value);
    return sample_line(t, name, "", labels, n_labels, NULL, num);
}

int crk_prom_counter(crk_text *t, const char *name, const char *help, uint64_t value)
{
    int rc = crk_prom_family(t, name, CRK_PROM_COUNTER, help);
    if (rc == 0)
        rc = crk_prom_sample_u64(t, name, NULL, 0, value);
    return rc;
}

int crk_prom_gauge(crk_text *t, const char *name, const char *help, double value)
{
    int rc = crk_prom_family(t, name, CRK_PROM_GAUGE, help);
    if (rc == 0)
        rc = crk_prom_sample(t, name, NULL, 0, value);
    return rc;
}

int crk_prom_histogram(crk_text *t, const char *name, const crk_prom_label *labels, size_t n_labels,
                       const double *bounds, const uint64_t *bucket_counts, size_t n_bounds,
                       double sum)
{
    char le[40], num[40];
    if (!valid_name(name, true))
        return invalid(t, "metric name", name);
    if (check_labels(t, labels, n_labels, true) != 0)
        return t->status;
    if (bucket_counts == NULL || (n_bounds > 0 && bounds == NULL))
        return invalid(t, "bucket arrays of", name);
    for (size_t i = 0; i < n_bounds; i++)
        if (!isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1])))
            return invalid(t, "bucket bounds of", name);

    uint64_t cumulative = 0;
    int rc = t->status;
    for (size_t i = 0; rc == 0 && i <= n_bounds; i++) {
        cumulative += bucket_counts[i];
        if (i < n_bounds)
            format_double(bounds[i], le, sizeof(le));
        else
            snprintf(le, sizeof(le), "+Inf");
        snprintf(num, sizeof(num), "%llu", (unsigned long long)cumulative);
        rc = sample_line(t, name, "_bucket", labels, n_labels, le, num);
    }
    format_double(sum, num, sizeof(num));
    if (rc == 0)
        rc = sample_line(t, name, "_sum", labels, n_labels, NULL, num);
    snprintf(num, sizeof(num), "%llu", (unsigned long long)cumulative);
    if (rc == 0)
        rc = sample_line(t, name, "_count", labels, n_labels, NULL, num);
    return rc;
}

/* ------------------------------------------------------------------------ */
/* Lock-free histogram                                                      */
/* ------------------------------------------------------------------------ */

const uint64_t crk_prom_latency_bounds_us[] = {
    10,    25,    50,     100,    250,    500,     1000,    2500,    5000,     10000,
    25000, 50000, 100000, 250000, 500000, 1000000, 2500000, 5000000, 10000000,
};
const size_t crk_prom_latency_bounds_us_count =
    sizeof(crk_prom_latency_bounds_us) / sizeof(crk_prom_latency_bounds_us[0]);

int crk_prom_hist_init(crk_prom_hist *h, const uint64_t *bounds, size_t n)
{
    if (h == NULL || bounds == NULL || n == 0 || n > CRK_PROM_HIST_MAX_BOUNDS)
        return crb_error(CR_INVALID_PARAMS, "histogram: %zu bounds (want 1..%d)", n,
                         CRK_PROM_HIST_MAX_BOUNDS);
    for (size_t i = 1; i < n; i++)
        if (bounds[i] <= bounds[i - 1])
            return crb_error(CR_INVALID_PARAMS,
                             "histogram: bounds must increase (bound %zu is %llu after %llu)", i,
                             (unsigned long long)bounds[i], (unsigned long long)bounds[i - 1]);
    h->n_bounds = n;
    memcpy(h->bounds, bounds, n * sizeof(*bounds));
    for (size_t i = 0; i <= CRK_PROM_HIST_MAX_BOUNDS; i++)
        atomic_init(&h->counts[i], 0);
    atomic_init(&h->sum, 0);
    return 0;
}

void crk_prom_hist_observe(crk_prom_hist *h, uint64_t value)
{
    size_t lo = 0, hi = h->n_bounds; /* first bound >= value, or n_bounds */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (h->bounds[mid] < value)
            lo = mid + 1;
        else
            hi = mid;
    }
    atomic_fetch_add_explicit(&h->counts[lo], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&h->sum, value, memory_order_relaxed);
}

int crk_prom_hist_write(crk_text *t, const char *name, const crk_prom_label *labels,
                        size_t n_labels, const crk_prom_hist *h, double divisor)
{
    double bounds[CRK_PROM_HIST_MAX_BOUNDS];
    uint64_t counts[CRK_PROM_HIST_MAX_BOUNDS + 1];
    size_t n = h->n_bounds;
    if (!(divisor > 0) || !isfinite(divisor))
        return invalid(t, "divisor of", name);
    for (size_t i = 0; i < n; i++)
        bounds[i] = (double)h->bounds[i] / divisor;
    for (size_t i = 0; i <= n; i++)
        counts[i] = atomic_load_explicit(&h->counts[i], memory_order_relaxed);
    double sum = (double)atomic_load_explicit(&h->sum, memory_order_relaxed) / divisor;
    return crk_prom_histogram(t, name, labels, n_labels, bounds, counts, n, sum);
}
