/*
 * flagfile.c - gflags-style --flagfile expansion (see flagfile.h).
 *
 * Design: the command line is rebuilt into an owned vector: each argument
 * is copied, except a --flagfile, whose file is read whole (bounded), split
 * into lines, and each flag line expanded again (depth-limited), so the
 * table-driven parser then sees one plain command line.
 */
#include "master/flagfile.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "crescent/status.h"

int crk_args_push(crk_args *a, const char *s, size_t len)
{
    if (a->argc >= CRK_FLAGFILE_MAX_ARGS)
        return crb_error(CR_INVALID_PARAMS, "more than %d arguments after --flagfile expansion",
                         CRK_FLAGFILE_MAX_ARGS);
    if ((size_t)a->argc + 2 > a->cap) {
        size_t ncap = a->cap ? a->cap * 2 : 16;
        char **nv = realloc(a->argv, ncap * sizeof(*nv));
        if (nv == NULL)
            return crb_error(CR_ERR_NO_MEMORY, "flags: out of memory");
        a->argv = nv;
        a->cap = ncap;
    }
    char *copy = strndup(s, len);
    if (copy == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "flags: out of memory");
    a->argv[a->argc++] = copy;
    a->argv[a->argc] = NULL;
    return 0;
}

void crk_args_free(crk_args *a)
{
    if (a == NULL)
        return;
    for (int i = 0; i < a->argc; i++)
        free(a->argv[i]);
    free(a->argv);
    a->argv = NULL;
    a->argc = 0;
    a->cap = 0;
}

static bool is_blank(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

int crk_flagfile_split(const char *data, size_t len, const char *name, crk_args *a)
{
    size_t pos = 0;
    int line = 0;
    while (pos < len) {
        line++;
        const char *nl = memchr(data + pos, '\n', len - pos);
        size_t end = nl != NULL ? (size_t)(nl - data) : len;
        size_t b = pos, e = end;
        pos = end + 1;
        while (b < e && is_blank(data[b]))
            b++;
        while (e > b && is_blank(data[e - 1]))
            e--;
        if (e - b > CRK_FLAGFILE_MAX_LINE)
            return crb_error(CR_INVALID_PARAMS, "%s:%d: line longer than %d bytes", name, line,
                             CRK_FLAGFILE_MAX_LINE);
        if (b == e || data[b] == '#')
            continue;
        if (memchr(data + b, '\0', e - b) != NULL)
            return crb_error(CR_INVALID_PARAMS, "%s:%d: NUL byte", name, line);
        if (data[b] != '-')
            return crb_error(CR_INVALID_PARAMS,
                             "%s:%d: '%.*s' is not a flag (gflags' file-name filters are not "
                             "supported)",
                             name, line, (int)(e - b > 64 ? 64 : e - b), data + b);
        int rc = crk_args_push(a, data + b, e - b);
        if (rc != 0)
            return rc;
    }
    return 0;
}

/* The FILE of a --flagfile argument at argv[*i] (advancing *i past a
 * separate value), NULL when argv[*i] is not --flagfile; *bad on a missing
 * value. */
static const char *flagfile_of(int argc, char *const argv[], int *i, bool *bad)
{
    const char *s = argv[*i];
    *bad = false;
    if (s[0] != '-')
        return NULL;
    s += s[1] == '-' ? 2 : 1;
    if (strncmp(s, "flagfile", 8) != 0 || (s[8] != '\0' && s[8] != '='))
        return NULL;
    if (s[8] == '=')
        return s + 9;
    if (*i + 1 >= argc) {
        *bad = true;
        return NULL;
    }
    return argv[++*i];
}

static int expand(int argc, char *const argv[], int depth, crk_args *out);

static int expand_file(const char *path, int depth, crk_args *out)
{
    if (depth >= CRK_FLAGFILE_DEPTH)
        return crb_error(CR_INVALID_PARAMS, "--flagfile=%s: nested more than %d deep", path,
                         CRK_FLAGFILE_DEPTH);
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return crb_error(CR_INVALID_PARAMS, "--flagfile=%s: %s", path, strerror(errno));
    int rc;
    char *data = malloc(CRK_FLAGFILE_MAX_BYTES + 1);
    crk_args lines = {0};
    if (data == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "--flagfile=%s: out of memory", path);
        goto close_file;
    }
    size_t len = fread(data, 1, CRK_FLAGFILE_MAX_BYTES + 1, f);
    if (ferror(f))
        rc = crb_error(CR_INVALID_PARAMS, "--flagfile=%s: read error", path);
    else if (len > CRK_FLAGFILE_MAX_BYTES)
        rc = crb_error(CR_INVALID_PARAMS, "--flagfile=%s: larger than %u bytes", path,
                       CRK_FLAGFILE_MAX_BYTES);
    else
        rc = crk_flagfile_split(data, len, path, &lines);
    if (rc == 0)
        rc = expand(lines.argc, lines.argv, depth + 1, out);
    crk_args_free(&lines);
    free(data);
close_file:
    fclose(f);
    return rc;
}

static int expand(int argc, char *const argv[], int depth, crk_args *out)
{
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--") == 0) {
            for (; i < argc; i++) {
                int rc = crk_args_push(out, argv[i], strlen(argv[i]));
                if (rc != 0)
                    return rc;
            }
            return 0;
        }
        bool bad;
        const char *path = flagfile_of(argc, argv, &i, &bad);
        if (bad)
            return crb_error(CR_INVALID_PARAMS, "--flagfile needs a file");
        int rc = path != NULL ? expand_file(path, depth, out)
                              : crk_args_push(out, argv[i], strlen(argv[i]));
        if (rc != 0)
            return rc;
    }
    return 0;
}

int crk_flagfile_expand(int argc, char *const argv[], crk_args *out)
{
    if (argc < 1)
        return 0;
    int rc = crk_args_push(out, argv[0], strlen(argv[0])); /* the program */
    if (rc == 0)
        rc = expand(argc - 1, argv + 1, 0, out);
    if (rc != 0)
        crk_args_free(out);
    return rc;
}
