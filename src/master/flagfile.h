/*
 * flagfile.h - gflags' --flagfile for the master's command line (Mooncake's
 * mooncake_master takes it): "--flagfile=FILE" (or "--flagfile FILE",
 * "-flagfile...") is replaced, where it stands, by the flags in FILE, one per
 * line; blank lines and lines starting with '#' are skipped, leading and
 * trailing blanks trimmed, and a line that is not a flag (gflags' file-name
 * filters) is refused. Files may name further flagfiles, CRK_FLAGFILE_DEPTH
 * deep. Nothing after "--" is expanded.
 *
 * Bounds: a file is at most CRK_FLAGFILE_MAX_BYTES, a line at most
 * CRK_FLAGFILE_MAX_LINE bytes, the expanded command line at most
 * CRK_FLAGFILE_MAX_ARGS arguments. Errors: CR_INVALID_PARAMS naming
 * file:line (or the argument), CR_ERR_NO_MEMORY.
 *
 * Threading: no shared state; reentrant.
 */
#ifndef CRESCENT_MASTER_FLAGFILE_H
#define CRESCENT_MASTER_FLAGFILE_H

#include <stddef.h>

#define CRK_FLAGFILE_DEPTH     4
#define CRK_FLAGFILE_MAX_BYTES (64u << 10)
#define CRK_FLAGFILE_MAX_LINE  4096
#define CRK_FLAGFILE_MAX_ARGS  4096

/* An argument vector: argv[0..argc) owned, argv[argc] == NULL. */
typedef struct crk_args {
    char **argv;
    int argc;
    size_t cap;
} crk_args;

/** Append a copy of s. */
int crk_args_push(crk_args *a, const char *s, size_t len);

/** Free every argument; a is left empty. NULL is fine. */
void crk_args_free(crk_args *a);

/**
 * Split data[0..len) (a flagfile's bytes; `name` for messages) into flags
 * appended to *a, following the rules above but without expanding nested
 * --flagfile lines (crk_flagfile_expand does). On failure *a keeps what was
 * appended before the bad line.
 */
int crk_flagfile_split(const char *data, size_t len, const char *name, crk_args *a);

/** argv[0..argc) with every --flagfile expanded, into *out (empty on entry). */
int crk_flagfile_expand(int argc, char *const argv[], crk_args *out);

#endif
