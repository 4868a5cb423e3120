/*
 * flagtab.h - one table-driven command-line parser for crescent's daemons
 * (crescent-master, crescent-metadata-server).
 *
 * A program describes each flag once: name, type, the field of its options
 * struct, bounds, default (as text) and help. Everything else comes from the
 * table: defaults, parsing argv, setting one flag from text (config files),
 * usage text. getopt_long_only would handle "-flag=value", but not Mooncake's
 * other spellings ('-' and '_' interchangeable, --noflag, booleans that never
 * take the next argument) nor typed values, so the walker is ours.
 *
 * Syntax accepted by crb_flags_resolve: --flag=value, --flag value,
 * -flag=value, -flag value; '-' and '_' are interchangeable in names
 * (--rpc-port); booleans: --flag alone is true, --noflag is false,
 * --flag=true|false|1|0|yes|no (any case), and a boolean never takes the next
 * argument; "--" ends the flags; positional arguments are refused.
 *
 * Values: ports 0..65535; integers in [min, max]; sizes as cr_parse_size
 * writes them ("64MB", "1 GiB"; crb_parse_size); durations
 * <digits>[ms|s|m|h], a bare number in the flag's unit_ms, stored in ms;
 * ratios in [0, 1]; strings shorter than the field (NONEMPTY: not empty);
 * enums one of `choices` (stored as an int index). COMPAT_* flags name a
 * Mooncake feature crescent does not have: accepted only at their one
 * harmless value, refused otherwise (never silently ignored); COMPAT_ANY
 * names a tuning knob of such a feature, accepted with any value (the
 * caller says once that it has no effect).
 *
 * Every failure is CR_INVALID_PARAMS with a message naming the flag and the
 * value (the caller's `ctx`); nothing here prints or exits.
 *
 * Threading: tables are constant; functions are reentrant.
 */
#ifndef CRESCENT_BASE_FLAGTAB_H
#define CRESCENT_BASE_FLAGTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum crb_flag_type {
    CRB_FLAG_BOOL,           /* bool */
    CRB_FLAG_PORT,           /* uint16_t, 0..65535 */
    CRB_FLAG_U32,            /* uint32_t in [min, max] */
    CRB_FLAG_U64,            /* uint64_t in [min, max] */
    CRB_FLAG_SIZE,           /* uint64_t bytes in [min, max] ("64MB") */
    CRB_FLAG_DURATION,       /* uint64_t ms in [min, max]; bare numbers in unit_ms */
    CRB_FLAG_RATIO,          /* double in [0, 1] */
    CRB_FLAG_STRING,         /* char[size], may be empty */
    CRB_FLAG_NONEMPTY,       /* char[size], not empty */
    CRB_FLAG_PATH,           /* char[size]: a file name (the caller may restrict where it is set) */
    CRB_FLAG_ENUM,           /* int: index into choices */
    CRB_FLAG_COMPAT_BOOL,    /* absent feature: only false */
    CRB_FLAG_COMPAT_STR,     /* absent feature: only choices[0] */
    CRB_FLAG_COMPAT_ANY,     /* setting of an absent feature: any value, no effect */
    CRB_FLAG_COMPAT_ANYBOOL, /* boolean setting of an absent feature: true or false, no effect */
} crb_flag_type;

typedef struct crb_flag {
    const char *name; /* with '_' */
    crb_flag_type type;
    size_t offset, size;        /* of the field in the options struct (0, 0 for COMPAT_*) */
    uint64_t min, max;          /* integers, sizes, durations (ms) */
    uint64_t unit_ms;           /* DURATION: unit of a bare number (1 or 1000) */
    const char *const *choices; /* ENUM: NULL-terminated; COMPAT_STR: {value, NULL} */
    const char *def;            /* default as text; NULL: keep the preset value */
    const char *help;
} crb_flag;

typedef struct crb_flag_set {
    const crb_flag *v;
    size_t n;
} crb_flag_set;

/* A resolved command-line assignment: flag and value text (borrowed from argv). */
typedef struct crb_flag_arg {
    const crb_flag *f;
    const char *value;
} crb_flag_arg;

#define CRB_FLAG_FIELD(type, member) offsetof(type, member), sizeof(((type *)0)->member)

/** The flag called name[0..len) ('-' read as '_'), or NULL. */
const crb_flag *crb_flag_find(const crb_flag_set *t, const char *name, size_t len);

/** Booleans (BOOL, COMPAT_BOOL) take no separate argument. */
bool crb_flag_is_bool(const crb_flag *f);

/** Set f's field in opts from text; ctx names the origin for messages. On
 *  failure the field is untouched. */
int crb_flag_set_value(const crb_flag *f, void *opts, const char *text, const char *ctx);

/** Apply every flag's def (where not NULL) to opts. 0, or the first failure
 *  (a table bug). */
int crb_flags_defaults(const crb_flag_set *t, void *opts);

/**
 * Resolve argv[1..argc) into assignments in order (out: room for argc
 * entries; *n_out written). Unknown flags, missing values, positional
 * arguments and "--flag=v" on a flag in no_value (NULL-terminated names the
 * caller handles itself, like "help") are CR_INVALID_PARAMS.
 */
int crb_flags_resolve(const crb_flag_set *t, int argc, char *const argv[],
                      const char *const *no_value, crb_flag_arg *out, size_t *n_out);

/** Apply resolved assignments in order; the first failure stops. */
int crb_flags_apply(void *opts, const crb_flag_arg *args, size_t n);

/** Is argv[i] (before any "--") --name / -name for one of names (NULL-terminated)? */
bool crb_flags_present(int argc, char *const argv[], const char *const *names);

/** Usage lines for every flag: "--name=HINT  help (default X)", the
 *  defaults read from `defaults` (an options struct holding them). */
void crb_flags_usage(FILE *f, const crb_flag_set *t, const void *defaults);

/** Parse a size like cr_parse_size ("16MB", "4 GiB", "512k"; binary
 *  multiples). CR_INVALID_PARAMS naming the text otherwise. */
int crb_parse_size(const char *text, uint64_t *out);

#endif
