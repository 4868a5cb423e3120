/*
 * fuzz_master_conf.c - libFuzzer target for crescent-master's config-file
 * reader (src/master/conf_file.c): JSON (jansson) and YAML (libyaml) into
 * flat key/scalar lists.
 *
 * The first byte picks the format (even: JSON, odd: YAML), the rest is the
 * file. Contract: a failure is CR_INVALID_PARAMS (or CR_ERR_NO_MEMORY) with
 * the list untouched; a success has at most CRK_CONF_MAX_ENTRIES entries,
 * each key and value NUL-terminated without inner NULs, keys distinct, kinds
 * in range and lines within the file's line count (0 = unknown).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"
#include "master/conf_file.h"

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz check failed: %s at %s:%d (last error: %s)\n", #cond, __FILE__,  \
                    __LINE__, cr_last_error_message());                                            \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    crk_conf_format format = (data[0] & 1) ? CRK_CONF_YAML : CRK_CONF_JSON;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    size_t lines = 1;
    for (size_t i = 0; i < len; i++)
        lines += text[i] == '\n' || text[i] == '\r';
    crk_conf_list l = {0};
    int rc = crk_conf_parse(len > 0 ? text : NULL, len, format, "fuzz", &l);
    if (rc != 0) {
        CHECK(rc == CR_INVALID_PARAMS || rc == CR_ERR_NO_MEMORY);
        CHECK(l.v == NULL && l.n == 0);
        return 0;
    }
    CHECK(l.n <= CRK_CONF_MAX_ENTRIES);
    for (size_t i = 0; i < l.n; i++) {
        const crk_conf_entry *e = &l.v[i];
        CHECK(e->key != NULL && e->value != NULL);
        CHECK(e->kind >= CRK_CONF_STRING && e->kind <= CRK_CONF_NULL);
        CHECK(e->line >= 0 && (size_t)e->line <= lines);
        for (size_t j = 0; j < i; j++)
            CHECK(strcmp(l.v[j].key, e->key) != 0);
    }
    crk_conf_list_free(&l);
    CHECK(l.v == NULL && l.n == 0);
    return 0;
}
