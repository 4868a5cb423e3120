/*
 * fuzz_master_conf.c - libFuzzer target for crescent-master's files: the
 * config-file reader (src/master/conf_file.c: JSON through jansson and YAML
 * through libyaml into flat key/scalar lists) and the --flagfile splitter
 * (src/master/flagfile.c).
 *
 * The first byte picks the decoder ('F' or a multiple of 3: flagfile; 'Y' or
 * 1 mod 3: YAML; else JSON), the rest is the file. Config contract: a
 * failure is CR_INVALID_PARAMS (or CR_ERR_NO_MEMORY) with the list
 * untouched; a success has at most CRK_CONF_MAX_ENTRIES entries, each key
 * and value NUL-terminated, keys distinct, kinds in range and lines within
 * the file's line count (0 = unknown). Flagfile contract: every argument
 * starts with '-', is at most CRK_FLAGFILE_MAX_LINE bytes, has no blank at
 * either end, and there are at most CRK_FLAGFILE_MAX_ARGS.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"
#include "fuzz_common.h"
#include "master/conf_file.h"
#include "master/flagfile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    if (data[0] == 'F' || (data[0] != 'Y' && data[0] % 3 == 0)) {
        crk_args a = {0};
        int rc = crk_flagfile_split(text, len, "fuzz", &a);
        FUZZ_CHECK(rc == 0 || rc == CR_INVALID_PARAMS || rc == CR_ERR_NO_MEMORY);
        FUZZ_CHECK(a.argc <= CRK_FLAGFILE_MAX_ARGS);
        for (int i = 0; i < a.argc; i++) {
            size_t n = strlen(a.argv[i]);
            FUZZ_CHECK(n >= 1 && n <= CRK_FLAGFILE_MAX_LINE && a.argv[i][0] == '-');
            FUZZ_CHECK(a.argv[i][n - 1] != ' ' && a.argv[i][n - 1] != '\t');
            FUZZ_CHECK(strchr(a.argv[i], '\n') == NULL);
        }
        FUZZ_CHECK(a.argc == 0 || a.argv[a.argc] == NULL);
        crk_args_free(&a);
        return 0;
    }
    crk_conf_format format = (data[0] == 'Y' || data[0] % 3 == 1) ? CRK_CONF_YAML : CRK_CONF_JSON;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n' || text[i] == '\r';
    crk_conf_list l = {0};
    int rc = crk_conf_parse(len > 0 ? text : NULL, len, format, "fuzz", &l);
    if (rc != 0) {
        FUZZ_CHECK(rc == CR_INVALID_PARAMS || rc == CR_ERR_NO_MEMORY);
        FUZZ_CHECK(l.v == NULL && l.n == 0);
        return 0;
    }
    FUZZ_CHECK(l.n <= CRK_CONF_MAX_ENTRIES);
    for (size_t i = 0; i < l.n; i++) {
        const crk_conf_entry *e = &l.v[i];
        FUZZ_CHECK(e->key != NULL && e->value != NULL);
        FUZZ_CHECK(e->kind >= CRK_CONF_STRING && e->kind <= CRK_CONF_NULL);
        FUZZ_CHECK(e->line >= 0 && (size_t)e->line <= lines);
        for (size_t j = 0; j < i; j++)
            FUZZ_CHECK(strcmp(l.v[j].key, e->key) != 0);
    }
    crk_conf_list_free(&l);
    FUZZ_CHECK(l.v == NULL && l.n == 0);
    return 0;
}
