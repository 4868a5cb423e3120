/*
 * options.h - the tools' one command-line parser: a table of flags, each a
 * switch (no value), a string, a bounded whole number, or a value handed
 * to the tool's own apply function (sizes, lists, enums). Accepts
 * "--name value" and "--name=value"; "--help"/"-h" anywhere stops parsing.
 *
 * Errors are printed once, in one wording, prefixed with the tool's name
 * ("crescent-bench store: ..."): a flag without its value, an unknown flag
 * or stray argument, a number outside its range. An apply function that
 * returns < 0 has printed its own message.
 *
 * No state; any thread.
 */
#ifndef CRESCENT_TOOLS_OPTIONS_H
#define CRESCENT_TOOLS_OPTIONS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum ct_opt_kind {
    CT_OPT_SWITCH, /* no value: *(bool *)dst = true */
    CT_OPT_STRING, /* *(const char **)dst = value (borrowed from argv) */
    CT_OPT_U32,    /* *(uint32_t *)dst = value, within [min, max] */
    CT_OPT_APPLY,  /* apply(ctx, name, value) */
} ct_opt_kind;

typedef struct ct_option {
    const char *name; /* "--threads" */
    ct_opt_kind kind;
    void *dst;         /* SWITCH, STRING, U32 */
    uint32_t min, max; /* U32 */
} ct_option;

/* Table entries (every field initialized, for -Wextra). */
#define CT_SWITCH(name, dst)                                                                       \
    {                                                                                              \
        (name), CT_OPT_SWITCH, (dst), 0, 0                                                         \
    }
#define CT_STRING(name, dst)                                                                       \
    {                                                                                              \
        (name), CT_OPT_STRING, (dst), 0, 0                                                         \
    }
#define CT_U32(name, dst, min, max)                                                                \
    {                                                                                              \
        (name), CT_OPT_U32, (dst), (min), (max)                                                    \
    }
#define CT_APPLY(name)                                                                             \
    {                                                                                              \
        (name), CT_OPT_APPLY, NULL, 0, 0                                                           \
    }

/* Handle an APPLY flag's value: 0, or < 0 after printing why it is bad. */
typedef int (*ct_apply_fn)(void *ctx, const char *name, const char *value);

#define CT_OPTS_HELP 1 /* ct_parse_options saw --help or -h */

/*
 * Parse argv[1..argc) against opts[0..n). Returns 0, CT_OPTS_HELP, or -1
 * after printing "<prog>: <what is wrong>" to stderr. apply may be NULL
 * when no flag is CT_OPT_APPLY.
 */
int ct_parse_options(int argc, char **argv, const ct_option *opts, size_t n, ct_apply_fn apply,
                     void *ctx, const char *prog);

#endif
