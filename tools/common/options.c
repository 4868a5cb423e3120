/*
 * options.c - see options.h.
 */
#include "options.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tool_util.h"

static int parse_u32(const char *text, uint32_t min, uint32_t max, uint32_t *out)
{
    if (text[0] < '0' || text[0] > '9')
        return -1;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v < min || v > max)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

int ct_parse_options(int argc, char **argv, const ct_option *opts, size_t n, ct_apply_fn apply,
                     void *ctx, const char *prog)
{
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0)
            return CT_OPTS_HELP;
        const ct_option *o = NULL;
        const char *v = NULL;
        for (size_t k = 0; k < n && o == NULL; k++) {
            if (opts[k].kind == CT_OPT_SWITCH) {
                if (strcmp(arg, opts[k].name) == 0)
                    o = &opts[k];
                continue;
            }
            int m = ct_flag_value(argc, argv, &i, opts[k].name, &v);
            if (m < 0) {
                fprintf(stderr, "%s: flag '%s' needs a value\n", prog, arg);
                return -1;
            }
            if (m > 0)
                o = &opts[k];
        }
        if (o == NULL) {
            fprintf(stderr, "%s: unknown %s '%s' (see --help)\n", prog,
                    arg[0] == '-' ? "flag" : "argument", arg);
            return -1;
        }
        switch (o->kind) {
        case CT_OPT_SWITCH:
            *(bool *)o->dst = true;
            break;
        case CT_OPT_STRING:
            *(const char **)o->dst = v;
            break;
        case CT_OPT_U32:
            if (parse_u32(v, o->min, o->max, (uint32_t *)o->dst) < 0) {
                fprintf(stderr, "%s: bad value '%s' for %s: expected a whole number in %u..%u\n",
                        prog, v, o->name, o->min, o->max);
                return -1;
            }
            break;
        case CT_OPT_APPLY:
            if (apply == NULL || apply(ctx, o->name, v) < 0)
                return -1;
            break;
        }
    }
    return 0;
}
