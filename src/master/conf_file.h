/*
 * conf_file.h - the master's --config_path file, read into a flat list of
 * (key, scalar) entries with the line each key is on.
 *
 * Formats, chosen by the file name's ending as Mooncake's master does:
 * ".json" (jansson) or ".yaml" / ".yml" (libyaml); any other ending is
 * refused. The top level must be a mapping of keys to scalars (Mooncake's
 * sample conf/master.json and conf/master.yaml); nested mappings,
 * sequences, YAML aliases and duplicate keys are refused, as are files over
 * CRK_CONF_MAX_BYTES or with more than CRK_CONF_MAX_ENTRIES keys.
 *
 * The entries carry the scalar as text plus what kind of scalar it was, so
 * the caller (flags.c) can keep e.g. a JSON number out of a string flag while
 * accepting YAML's untyped plain scalars as text. Interpreting keys is the
 * caller's job (the flag table).
 *
 * Errors: CR_INVALID_PARAMS with a message "<file>:<line>: ..." (or
 * "<file>: ..." when no line applies); CR_ERR_NO_MEMORY. Nothing is printed.
 *
 * Threading: no shared state; functions are reentrant.
 */
#ifndef CRESCENT_MASTER_CONF_FILE_H
#define CRESCENT_MASTER_CONF_FILE_H

#include <stddef.h>

#define CRK_CONF_MAX_BYTES   (1u << 20) /* 1 MiB: far more than any master config */
#define CRK_CONF_MAX_ENTRIES 1024

typedef enum crk_conf_kind {
    CRK_CONF_STRING, /* JSON string, or a quoted YAML scalar */
    CRK_CONF_PLAIN,  /* an unquoted YAML scalar: untyped text */
    CRK_CONF_BOOL,   /* JSON true / false (text "true" / "false") */
    CRK_CONF_INT,    /* JSON integer (decimal text) */
    CRK_CONF_REAL,   /* JSON real (text with %.17g) */
    CRK_CONF_NULL,   /* JSON null (text "") */
} crk_conf_kind;

typedef struct crk_conf_entry {
    char *key;   /* NUL-terminated; owned by the list */
    char *value; /* NUL-terminated scalar text; owned by the list */
    crk_conf_kind kind;
    int line; /* 1-based line of the key; 0 if unknown */
} crk_conf_entry;

typedef struct crk_conf_list {
    crk_conf_entry *v; /* in file order */
    size_t n;
} crk_conf_list;

typedef enum crk_conf_format {
    CRK_CONF_JSON,
    CRK_CONF_YAML,
} crk_conf_format;

/**
 * The format a file name asks for (".json", ".yaml", ".yml"); CR_INVALID_PARAMS
 * naming the file otherwise ("unsupported config file format").
 */
int crk_conf_format_of(const char *path, crk_conf_format *out);

/**
 * Parse data[0..len) (need not be NUL-terminated; `name` is used in
 * messages only) into *out. On failure *out is untouched. The caller frees
 * *out with crk_conf_list_free.
 */
int crk_conf_parse(const char *data, size_t len, crk_conf_format format, const char *name,
                   crk_conf_list *out);

/** Read path (format from its name) and parse it into *out. */
int crk_conf_read_file(const char *path, crk_conf_list *out);

/** Free the entries; l is left empty. NULL is fine. */
void crk_conf_list_free(crk_conf_list *l);

#endif
