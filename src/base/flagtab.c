/*
 * flagtab.c - the table-driven flag parser (see flagtab.h).
 *
 * Every way of setting a flag funnels into crb_flag_set_value() with the
 * value as text, so the command line, config files and defaults cannot
 * disagree about what is valid. Resolving argv is separate from applying
 * it, so a caller can apply something (a config file) between defaults and
 * the command line.
 */
#include "base/flagtab.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"

#define MS_PER_S    ((uint64_t)1000)
#define MS_PER_MIN  (60 * MS_PER_S)
#define MS_PER_HOUR (60 * MS_PER_MIN)
#define NAME_BUF    64 /* longest flag name + slack */
#define CTX_BUF     320

/* --- names ------------------------------------------------------------------ */

/* name[0..n) with '-' as '_' into buf; -1 if empty or too long. */
static int normalize(const char *name, size_t n, char buf[NAME_BUF])
{
    if (n == 0 || n >= NAME_BUF)
        return -1;
    for (size_t i = 0; i < n; i++)
        buf[i] = name[i] == '-' ? '_' : name[i];
    buf[n] = '\0';
    return 0;
}

static const crb_flag *find_normalized(const crb_flag_set *t, const char *norm)
{
    for (size_t i = 0; i < t->n; i++)
        if (strcmp(t->v[i].name, norm) == 0)
            return &t->v[i];
    return NULL;
}

const crb_flag *crb_flag_find(const crb_flag_set *t, const char *name, size_t len)
{
    char norm[NAME_BUF];
    return normalize(name, len, norm) == 0 ? find_normalized(t, norm) : NULL;
}

bool crb_flag_is_bool(const crb_flag *f)
{
    return f->type == CRB_FLAG_BOOL || f->type == CRB_FLAG_COMPAT_BOOL ||
           f->type == CRB_FLAG_COMPAT_ANYBOOL;
}

/* --- values ------------------------------------------------------------------ */

static int parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"true", "1", "yes"};
    static const char *const no[] = {"false", "0", "no"};
    for (size_t i = 0; i < 3; i++) {
        if (strcasecmp(s, yes[i]) == 0) {
            *out = true;
            return 0;
        }
        if (strcasecmp(s, no[i]) == 0) {
            *out = false;
            return 0;
        }
    }
    return -1;
}

/* Leading decimal digits of s as a u64; *end after them. -1 if none or overflow. */
static int parse_digits(const char *s, uint64_t *out, const char **end)
{
    uint64_t v = 0;
    const char *p = s;
    if (!isdigit((unsigned char)*p))
        return -1;
    for (; isdigit((unsigned char)*p); p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *out = v;
    *end = p;
    return 0;
}

/* "<digits>[ms|s|m|h]" in ms; a bare number is in unit_ms. */
static int parse_duration(const char *s, uint64_t unit_ms, uint64_t *out)
{
    static const struct {
        const char *suffix;
        uint64_t ms;
    } units[] = {{"ms", 1}, {"s", MS_PER_S}, {"m", MS_PER_MIN}, {"h", MS_PER_HOUR}};
    uint64_t v;
    const char *end;
    if (parse_digits(s, &v, &end) != 0)
        return -1;
    uint64_t mult = unit_ms ? unit_ms : 1;
    if (*end != '\0') {
        mult = 0;
        for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
            if (strcmp(end, units[i].suffix) == 0)
                mult = units[i].ms;
        if (mult == 0)
            return -1;
    }
    if (v > UINT64_MAX / mult)
        return -1;
    *out = v * mult;
    return 0;
}

int crb_parse_size(const char *text, uint64_t *out)
{
    if (text == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "size: NULL argument");
    const char *p = text;
    while (isspace((unsigned char)*p))
        p++;
    if (!isdigit((unsigned char)*p))
        return crb_error(CR_INVALID_PARAMS, "size '%s' does not start with a number", text);
    errno = 0;
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno != 0)
        return crb_error(CR_INVALID_PARAMS, "size '%s' is out of range", text);
    while (isspace((unsigned char)*end))
        end++;
    static const struct {
        const char *suffix;
        unsigned shift;
    } units[] = {{"", 0},     {"b", 0},   {"k", 10},   {"kb", 10}, {"kib", 10},
                 {"m", 20},   {"mb", 20}, {"mib", 20}, {"g", 30},  {"gb", 30},
                 {"gib", 30}, {"t", 40},  {"tb", 40},  {"tib", 40}};
    size_t n = strlen(end);
    while (n > 0 && isspace((unsigned char)end[n - 1]))
        n--;
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strlen(units[i].suffix) != n || strncasecmp(end, units[i].suffix, n) != 0)
            continue;
        if (units[i].shift > 0 && v > (UINT64_MAX >> units[i].shift))
            return crb_error(CR_INVALID_PARAMS, "size '%s' overflows 64 bits", text);
        *out = (uint64_t)v << units[i].shift;
        return 0;
    }
    return crb_error(CR_INVALID_PARAMS,
                     "size '%s' has an unknown unit (use B, KB/KiB, MB/MiB, GB/GiB, TB/TiB)", text);
}

static const char *unit_name(uint64_t unit_ms)
{
    return unit_ms == MS_PER_S ? "s" : "ms";
}

static int in_range(const crb_flag *f, uint64_t v, const char *ctx, const char *unit)
{
    if (v >= f->min && v <= f->max)
        return 0;
    return crb_error(CR_INVALID_PARAMS, "%s: out of range [%" PRIu64 "%s, %" PRIu64 "%s]", ctx,
                     f->min, unit, f->max, unit);
}

static int set_enum(const crb_flag *f, char *field, const char *text, const char *ctx)
{
    char list[256] = "";
    for (size_t i = 0; f->choices[i] != NULL; i++) {
        if (strcmp(text, f->choices[i]) == 0) {
            *(int *)(void *)field = (int)i;
            return 0;
        }
        size_t l = strlen(list);
        snprintf(list + l, sizeof(list) - l, "%s%s", i ? ", " : "", f->choices[i]);
    }
    return crb_error(CR_INVALID_PARAMS, "%s: unknown value (%s)", ctx, list);
}

int crb_flag_set_value(const crb_flag *f, void *opts, const char *text, const char *ctx)
{
    char *field = (char *)opts + f->offset;
    uint64_t v;
    const char *end;
    int rc;

    switch (f->type) {
    case CRB_FLAG_BOOL: {
        bool b;
        if (parse_bool(text, &b) != 0)
            return crb_error(CR_INVALID_PARAMS, "%s: not a boolean (true, false, 1, 0, yes, no)",
                             ctx);
        *(bool *)(void *)field = b;
        return 0;
    }
    case CRB_FLAG_PORT:
    case CRB_FLAG_U32:
    case CRB_FLAG_U64:
        if (parse_digits(text, &v, &end) != 0 || *end != '\0')
            return crb_error(CR_INVALID_PARAMS, "%s: not a non-negative integer", ctx);
        if ((rc = in_range(f, v, ctx, "")) != 0)
            return rc;
        if (f->type == CRB_FLAG_PORT)
            *(uint16_t *)(void *)field = (uint16_t)v;
        else if (f->type == CRB_FLAG_U32)
            *(uint32_t *)(void *)field = (uint32_t)v;
        else
            *(uint64_t *)(void *)field = v;
        return 0;
    case CRB_FLAG_SIZE:
        if (crb_parse_size(text, &v) != 0)
            return crb_error(CR_INVALID_PARAMS,
                             "%s: not a size (a number of bytes, or 64KB, 16MiB, 1GB)", ctx);
        if ((rc = in_range(f, v, ctx, " bytes")) != 0)
            return rc;
        *(uint64_t *)(void *)field = v;
        return 0;
    case CRB_FLAG_DURATION:
        if (parse_duration(text, f->unit_ms, &v) != 0)
            return crb_error(CR_INVALID_PARAMS,
                             "%s: not a duration (a number of %s, or with a unit: 500ms, 5s, "
                             "30m, 1h)",
                             ctx, unit_name(f->unit_ms));
        if ((rc = in_range(f, v, ctx, " ms")) != 0)
            return rc;
        *(uint64_t *)(void *)field = v;
        return 0;
    case CRB_FLAG_RATIO: {
        char *stop = NULL;
        errno = 0;
        double d = strtod(text, &stop);
        if (text[0] == '\0' || isspace((unsigned char)text[0]) || *stop != '\0' || errno != 0 ||
            !isfinite(d))
            return crb_error(CR_INVALID_PARAMS, "%s: not a number", ctx);
        if (!(d >= 0.0 && d <= 1.0))
            return crb_error(CR_INVALID_PARAMS, "%s: must be a ratio in [0, 1]", ctx);
        *(double *)(void *)field = d;
        return 0;
    }
    case CRB_FLAG_STRING:
    case CRB_FLAG_NONEMPTY:
    case CRB_FLAG_PATH: {
        size_t n = strlen(text);
        if (n >= f->size)
            return crb_error(CR_INVALID_PARAMS, "%s: longer than %zu bytes", ctx, f->size - 1);
        if (n == 0 && f->type == CRB_FLAG_NONEMPTY)
            return crb_error(CR_INVALID_PARAMS, "%s: must not be empty", ctx);
        memcpy(field, text, n + 1);
        return 0;
    }
    case CRB_FLAG_ENUM:
        return set_enum(f, field, text, ctx);
    case CRB_FLAG_COMPAT_BOOL: {
        bool b;
        if (parse_bool(text, &b) != 0)
            return crb_error(CR_INVALID_PARAMS, "%s: not a boolean (true, false, 1, 0, yes, no)",
                             ctx);
        if (b)
            return crb_error(CR_INVALID_PARAMS, "%s: not supported (%s)", ctx, f->help);
        return 0;
    }
    case CRB_FLAG_COMPAT_STR:
        if (strcmp(text, f->choices[0]) != 0)
            return crb_error(CR_INVALID_PARAMS, "%s: not supported (%s)", ctx, f->help);
        return 0;
    case CRB_FLAG_COMPAT_ANY:
        return 0;
    case CRB_FLAG_COMPAT_ANYBOOL: {
        bool b;
        if (parse_bool(text, &b) != 0)
            return crb_error(CR_INVALID_PARAMS, "%s: not a boolean (true, false, 1, 0, yes, no)",
                             ctx);
        return 0;
    }
    }
    return crb_error(CR_INVALID_PARAMS, "%s: unhandled flag type", ctx);
}

int crb_flags_defaults(const crb_flag_set *t, void *opts)
{
    for (size_t i = 0; i < t->n; i++) {
        const crb_flag *f = &t->v[i];
        if (f->def == NULL || f->size == 0)
            continue;
        char ctx[CTX_BUF];
        snprintf(ctx, sizeof(ctx), "default of --%s=%s", f->name, f->def);
        int rc = crb_flag_set_value(f, opts, f->def, ctx);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* --- command line ------------------------------------------------------------- */

static bool name_in(const char *norm, const char *const *names)
{
    for (size_t i = 0; names != NULL && names[i] != NULL; i++)
        if (strcmp(norm, names[i]) == 0)
            return true;
    return false;
}

bool crb_flags_present(int argc, char *const argv[], const char *const *names)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++) {
        const char *a = argv[i];
        if (a[0] != '-')
            continue;
        const char *p = a[1] == '-' ? a + 2 : a + 1;
        char norm[NAME_BUF];
        if (normalize(p, strlen(p), norm) == 0 && name_in(norm, names))
            return true;
    }
    return false;
}

/* Resolve argv[*i], consuming argv[*i + 1] as the value of a non-boolean
 * flag written without '='. */
static int resolve_one(const crb_flag_set *t, int argc, char *const argv[], int *i,
                       const char *const *no_value, crb_flag_arg *out)
{
    const char *arg = argv[*i];
    char norm[NAME_BUF] = "";

    if (arg[0] != '-' || arg[1] == '\0')
        return crb_error(CR_INVALID_PARAMS, "unexpected argument '%s' (flags start with --)", arg);
    const char *name = arg[1] == '-' ? arg + 2 : arg + 1;
    const char *eq = strchr(name, '=');
    size_t name_len = eq != NULL ? (size_t)(eq - name) : strlen(name);
    const crb_flag *f = normalize(name, name_len, norm) == 0 ? find_normalized(t, norm) : NULL;
    if (f == NULL && name_in(norm, no_value))
        return crb_error(CR_INVALID_PARAMS, "'%s': flag '--%s' takes no value", arg, norm);
    bool negated = false;
    if (f == NULL && strncmp(norm, "no", 2) == 0) {
        const crb_flag *g = find_normalized(t, norm + 2);
        if (g != NULL && crb_flag_is_bool(g)) {
            f = g;
            negated = true;
        }
    }
    if (f == NULL && eq != NULL)
        return crb_error(CR_INVALID_PARAMS, "unknown flag '%.*s' (in '%s'; see --help)",
                         (int)(name_len + (size_t)(name - arg)), arg, arg);
    if (f == NULL)
        return crb_error(CR_INVALID_PARAMS, "unknown flag '%s' (see --help)", arg);
    out->f = f;
    if (negated) {
        if (eq != NULL)
            return crb_error(CR_INVALID_PARAMS, "'%s': --no%s takes no value", arg, f->name);
        out->value = "false";
        return 0;
    }
    if (eq != NULL) {
        out->value = eq + 1;
        return 0;
    }
    if (crb_flag_is_bool(f)) {
        out->value = "true";
        return 0;
    }
    if (*i + 1 >= argc)
        return crb_error(CR_INVALID_PARAMS, "flag '--%s' needs a value", f->name);
    out->value = argv[++*i];
    return 0;
}

int crb_flags_resolve(const crb_flag_set *t, int argc, char *const argv[],
                      const char *const *no_value, crb_flag_arg *out, size_t *n_out)
{
    size_t n = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            if (i + 1 < argc)
                return crb_error(CR_INVALID_PARAMS, "unexpected argument '%s' after '--'",
                                 argv[i + 1]);
            break;
        }
        const char *a = argv[i];
        if (a[0] == '-' && a[1] != '\0') {
            const char *p = a[1] == '-' ? a + 2 : a + 1;
            char norm[NAME_BUF];
            if (normalize(p, strlen(p), norm) == 0 && name_in(norm, no_value))
                continue; /* an action the caller handles (--help) */
        }
        int rc = resolve_one(t, argc, argv, &i, no_value, &out[n]);
        if (rc != 0)
            return rc;
        n++;
    }
    *n_out = n;
    return 0;
}

int crb_flags_apply(void *opts, const crb_flag_arg *args, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        char ctx[CTX_BUF];
        snprintf(ctx, sizeof(ctx), "--%s=%s", args[k].f->name, args[k].value);
        int rc = crb_flag_set_value(args[k].f, opts, args[k].value, ctx);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* --- usage -------------------------------------------------------------------- */

static void format_value(const crb_flag *f, const void *opts, char *buf, size_t len)
{
    const char *field = (const char *)opts + f->offset;
    switch (f->type) {
    case CRB_FLAG_BOOL:
        snprintf(buf, len, "%s", *(const bool *)(const void *)field ? "true" : "false");
        break;
    case CRB_FLAG_PORT:
        snprintf(buf, len, "%u", (unsigned)*(const uint16_t *)(const void *)field);
        break;
    case CRB_FLAG_U32:
        snprintf(buf, len, "%u", (unsigned)*(const uint32_t *)(const void *)field);
        break;
    case CRB_FLAG_U64:
    case CRB_FLAG_SIZE:
        snprintf(buf, len, "%" PRIu64, *(const uint64_t *)(const void *)field);
        break;
    case CRB_FLAG_DURATION: {
        uint64_t ms = *(const uint64_t *)(const void *)field;
        if (f->unit_ms == MS_PER_S && ms % MS_PER_S == 0)
            snprintf(buf, len, "%" PRIu64 "s", ms / MS_PER_S);
        else
            snprintf(buf, len, "%" PRIu64 "ms", ms);
        break;
    }
    case CRB_FLAG_RATIO:
        snprintf(buf, len, "%g", *(const double *)(const void *)field);
        break;
    case CRB_FLAG_STRING:
    case CRB_FLAG_NONEMPTY:
    case CRB_FLAG_PATH:
        snprintf(buf, len, "\"%s\"", field);
        break;
    case CRB_FLAG_ENUM:
        snprintf(buf, len, "%s", f->choices[*(const int *)(const void *)field]);
        break;
    case CRB_FLAG_COMPAT_BOOL:
        snprintf(buf, len, "false");
        break;
    case CRB_FLAG_COMPAT_STR:
        snprintf(buf, len, "\"%s\"", f->choices[0]);
        break;
    case CRB_FLAG_COMPAT_ANY:
    case CRB_FLAG_COMPAT_ANYBOOL:
        snprintf(buf, len, "%s", f->def != NULL ? f->def : "-");
        break;
    }
}

static const char *value_hint(const crb_flag *f)
{
    switch (f->type) {
    case CRB_FLAG_BOOL:
    case CRB_FLAG_COMPAT_BOOL:
    case CRB_FLAG_COMPAT_ANYBOOL:
        return "[=BOOL]";
    case CRB_FLAG_PORT:
        return "=PORT";
    case CRB_FLAG_U32:
    case CRB_FLAG_U64:
        return "=N";
    case CRB_FLAG_SIZE:
        return "=SIZE";
    case CRB_FLAG_DURATION:
        return f->unit_ms == MS_PER_S ? "=DURATION(s)" : "=DURATION(ms)";
    case CRB_FLAG_RATIO:
        return "=RATIO";
    case CRB_FLAG_PATH:
        return "=FILE";
    default:
        return "=TEXT";
    }
}

void crb_flags_usage(FILE *f, const crb_flag_set *t, const void *defaults)
{
    for (size_t i = 0; i < t->n; i++) {
        char def[300];
        char head[NAME_BUF + 24];
        format_value(&t->v[i], defaults, def, sizeof(def));
        snprintf(head, sizeof(head), "--%s%s", t->v[i].name, value_hint(&t->v[i]));
        fprintf(f, "  %-44s %s (default %s)\n", head, t->v[i].help, def);
    }
}
