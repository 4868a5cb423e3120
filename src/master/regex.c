/*
 * regex.c - PCRE2 with bounded compile and match costs (see regex.h).
 *
 * Compile-time memory goes through a general context whose allocator
 * charges a per-compile budget (each block carries its size in a header);
 * the budget is reset for every compile. Match-time memory is bounded by
 * pcre2_set_heap_limit instead (PCRE2 allocates its backtracking frames
 * through the same context, and the heap limit stops them first).
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include "master/regex.h"

#include <pcre2.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#define DEPTH_LIMIT 10000
#define NEST_LIMIT  64

typedef struct budget {
    size_t used, limit;
} budget;

struct crk_regex {
    budget b;
    pcre2_general_context *gc;
    pcre2_compile_context *cc;
    pcre2_match_context *mc;
    pcre2_code *code;
    pcre2_match_data *md;
    bool jit;
};

/* Blocks carry their size in front, 16-byte aligned. */
static void *budget_malloc(PCRE2_SIZE n, void *data)
{
    budget *b = data;
    if (n > b->limit - b->used)
        return NULL;
    size_t *p = malloc(n + 16);
    if (p == NULL)
        return NULL;
    *p = n;
    b->used += n;
    return (char *)p + 16;
}

static void budget_free(void *ptr, void *data)
{
    if (ptr == NULL)
        return;
    budget *b = data;
    size_t *p = (size_t *)(void *)((char *)ptr - 16);
    b->used -= *p;
    free(p);
}

void crk_regex_free(crk_regex *re)
{
    if (re == NULL)
        return;
    pcre2_match_data_free(re->md);
    pcre2_code_free(re->code);
    pcre2_match_context_free(re->mc);
    pcre2_compile_context_free(re->cc);
    pcre2_general_context_free(re->gc);
    free(re);
}

int crk_regex_compile(const char *pattern, crk_regex **out)
{
    if (pattern == NULL || out == NULL)
        return crb_error(CR_INVALID_PARAMS, "regex: NULL pattern");
    size_t len = strnlen(pattern, CRK_REGEX_MAX_PATTERN + 1);
    if (len > CRK_REGEX_MAX_PATTERN)
        return crb_error(CR_INVALID_PARAMS, "regex: pattern longer than %d bytes",
                         CRK_REGEX_MAX_PATTERN);
    crk_regex *re = calloc(1, sizeof(*re));
    if (re == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "regex: state");
    /* The budget covers the compile; the match heap has its own limit. */
    re->b.limit = CRK_REGEX_COMPILE_MEMORY + (size_t)CRK_REGEX_MATCH_HEAP_KIB * 1024 + 65536;
    re->gc = pcre2_general_context_create(budget_malloc, budget_free, &re->b);
    re->cc = re->gc ? pcre2_compile_context_create(re->gc) : NULL;
    re->mc = re->gc ? pcre2_match_context_create(re->gc) : NULL;
    if (re->cc == NULL || re->mc == NULL) {
        crk_regex_free(re);
        return crb_error(CR_ERR_NO_MEMORY, "regex: PCRE2 contexts");
    }
    pcre2_set_max_pattern_length(re->cc, CRK_REGEX_MAX_PATTERN);
    pcre2_set_parens_nest_limit(re->cc, NEST_LIMIT);
    pcre2_set_match_limit(re->mc, CRK_REGEX_MATCH_LIMIT);
    pcre2_set_depth_limit(re->mc, DEPTH_LIMIT);
    pcre2_set_heap_limit(re->mc, CRK_REGEX_MATCH_HEAP_KIB);

    size_t before = re->b.used;
    re->b.limit = before + CRK_REGEX_COMPILE_MEMORY;
    int err = 0;
    PCRE2_SIZE at = 0;
    re->code = pcre2_compile((PCRE2_SPTR)pattern, len, 0, &err, &at, re->cc);
    if (re->code == NULL) {
        PCRE2_UCHAR msg[160];
        if (err == PCRE2_ERROR_NOMEMORY || err == PCRE2_ERROR_HEAP_FAILED)
            snprintf((char *)msg, sizeof(msg), "it needs more than %u KiB to compile",
                     CRK_REGEX_COMPILE_MEMORY / 1024);
        else
            pcre2_get_error_message(err, msg, sizeof(msg));
        crk_regex_free(re);
        return crb_error(CR_INVALID_PARAMS, "regex '%.200s': at offset %zu: %s", pattern,
                         (size_t)at, (const char *)msg);
    }
    re->b.limit = SIZE_MAX; /* from here on the match limits bound memory */
    re->jit = pcre2_jit_compile(re->code, PCRE2_JIT_COMPLETE) == 0;
    re->md = pcre2_match_data_create(1, re->gc);
    if (re->md == NULL) {
        crk_regex_free(re);
        return crb_error(CR_ERR_NO_MEMORY, "regex: match data");
    }
    *out = re;
    return 0;
}

int crk_regex_match(crk_regex *re, const char *subject, size_t len)
{
    int rc = pcre2_match(re->code, (PCRE2_SPTR)subject, len, 0, 0, re->md, re->mc);
    if (rc >= 0)
        return 1;
    if (rc == PCRE2_ERROR_NOMATCH)
        return 0;
    PCRE2_UCHAR msg[160];
    pcre2_get_error_message(rc, msg, sizeof(msg));
    if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
        rc == PCRE2_ERROR_HEAPLIMIT || rc == PCRE2_ERROR_JIT_STACKLIMIT ||
        rc == PCRE2_ERROR_NOMEMORY)
        return crb_error(CR_ERR_REGEX_BUDGET,
                         "regex: %s on a key of %zu bytes (at most %d steps per key)",
                         (const char *)msg, len, CRK_REGEX_MATCH_LIMIT);
    return crb_error(CR_INTERNAL_ERROR, "regex: PCRE2 match failed: %s", (const char *)msg);
}
