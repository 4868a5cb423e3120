/*
 * conf_file_test.c - the config-file reader alone: formats by name, JSON and
 * YAML entries with their kinds and lines, and every refusal (shape,
 * duplicates, bounds, syntax) naming the line.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "crescent/status.h"
#include "master/conf_file.h"

static crk_conf_list parse_ok(const char *text, crk_conf_format f)
{
    crk_conf_list l = {0};
    int rc = crk_conf_parse(text, strlen(text), f, "t", &l);
    if (rc != 0)
        fail_msg("parse failed: %s", cr_last_error_message());
    return l;
}

static void parse_bad_at(const char *text, crk_conf_format f, const char *mention, const char *file,
                         int line)
{
    crk_conf_list l = {0};
    int rc = crk_conf_parse(text, strlen(text), f, "t", &l);
    _assert_int_equal((LargestIntegralType)rc, (LargestIntegralType)CR_INVALID_PARAMS, file, line);
    _assert_true(l.v == NULL && l.n == 0, "output untouched", file, line);
    if (strstr(cr_last_error_message(), mention) == NULL) {
        fprintf(stderr, "%s:%d: \"%s\" lacks \"%s\"\n", file, line, cr_last_error_message(),
                mention);
        _assert_true(0, "message", file, line);
    }
}

#define BAD(text, f, mention) parse_bad_at((text), (f), (mention), __FILE__, __LINE__)

static void test_format_of(void **state)
{
    (void)state;
    crk_conf_format f;
    assert_int_equal(crk_conf_format_of("/a/master.json", &f), 0);
    assert_int_equal(f, CRK_CONF_JSON);
    assert_int_equal(crk_conf_format_of("m.yaml", &f), 0);
    assert_int_equal(f, CRK_CONF_YAML);
    assert_int_equal(crk_conf_format_of("m.yml", &f), 0);
    assert_int_equal(f, CRK_CONF_YAML);
    assert_int_equal(crk_conf_format_of("m.toml", &f), CR_INVALID_PARAMS);
    assert_int_equal(crk_conf_format_of("json", &f), CR_INVALID_PARAMS);
}

static void test_json(void **state)
{
    (void)state;
    crk_conf_list l = parse_ok("{\n  \"a\": \"x\",\n  \"b\": true,\n\n  \"c\": 12,\n"
                               "  \"d\": 0.5, \"e\": null, \"f\\\"g\": 1, \"s\": \"a:\\\"b\"\n}",
                               CRK_CONF_JSON);
    assert_int_equal(l.n, 7);
    assert_string_equal(l.v[0].key, "a");
    assert_string_equal(l.v[0].value, "x");
    assert_int_equal(l.v[0].kind, CRK_CONF_STRING);
    assert_int_equal(l.v[0].line, 2);
    assert_string_equal(l.v[1].value, "true");
    assert_int_equal(l.v[1].kind, CRK_CONF_BOOL);
    assert_int_equal(l.v[1].line, 3);
    assert_string_equal(l.v[2].value, "12");
    assert_int_equal(l.v[2].kind, CRK_CONF_INT);
    assert_int_equal(l.v[2].line, 5);
    assert_string_equal(l.v[3].value, "0.5");
    assert_int_equal(l.v[3].kind, CRK_CONF_REAL);
    assert_int_equal(l.v[4].kind, CRK_CONF_NULL);
    assert_string_equal(l.v[5].key, "f\"g");
    assert_int_equal(l.v[5].line, 0); /* an escaped key: no line */
    assert_int_equal(l.v[6].line, 6);
    crk_conf_list_free(&l);
    crk_conf_list_free(NULL);

    BAD("{\"a\": {\"b\": 1}}", CRK_CONF_JSON, "key 'a' must be");
    BAD("{\"a\": [1]}", CRK_CONF_JSON, "key 'a' must be");
    BAD("[]", CRK_CONF_JSON, "JSON object");
    BAD("{\"a\": 1, \"a\": 2}", CRK_CONF_JSON, "t:");
    BAD("{\n\"a\": 1,\n}", CRK_CONF_JSON, "t:3:");
    BAD("{\"a\": \"x\\u0000y\"}", CRK_CONF_JSON, "NUL");
}

static void test_yaml(void **state)
{
    (void)state;
    crk_conf_list l =
        parse_ok("# c\na: x\nb: 'q'\n\nc: 1.5\nd:\ne: \"\"\nf: |\n  lit\n", CRK_CONF_YAML);
    assert_int_equal(l.n, 6);
    assert_string_equal(l.v[0].key, "a");
    assert_string_equal(l.v[0].value, "x");
    assert_int_equal(l.v[0].kind, CRK_CONF_PLAIN);
    assert_int_equal(l.v[0].line, 2);
    assert_int_equal(l.v[1].kind, CRK_CONF_STRING);
    assert_int_equal(l.v[1].line, 3);
    assert_string_equal(l.v[2].value, "1.5");
    assert_int_equal(l.v[2].line, 5);
    assert_string_equal(l.v[3].value, "");
    assert_int_equal(l.v[3].kind, CRK_CONF_PLAIN);
    assert_string_equal(l.v[4].value, "");
    assert_int_equal(l.v[4].kind, CRK_CONF_STRING);
    assert_string_equal(l.v[5].value, "lit\n");
    crk_conf_list_free(&l);

    l = parse_ok("{a: 1, b: two}", CRK_CONF_YAML); /* flow style */
    assert_int_equal(l.n, 2);
    crk_conf_list_free(&l);
    l = parse_ok("", CRK_CONF_YAML);
    assert_int_equal(l.n, 0);
    crk_conf_list_free(&l);
    l = parse_ok("---\na: 1\n...\n", CRK_CONF_YAML);
    assert_int_equal(l.n, 1);
    crk_conf_list_free(&l);

    BAD("a: 1\na: 2\n", CRK_CONF_YAML, "t:2: duplicate key 'a' (first on line 1)");
    BAD("a: 1\nb:\n  c: 2\n", CRK_CONF_YAML, "t:3: key 'b' must be a scalar, not a nested");
    BAD("a: [1]\n", CRK_CONF_YAML, "sequence");
    BAD("[1]\n", CRK_CONF_YAML, "sequence");
    BAD("a: &x 1\nb: *x\n", CRK_CONF_YAML, "t:2: key 'b' must be a scalar, not an alias");
    BAD("a: 1\n---\nb: 2\n", CRK_CONF_YAML, "t:2: a second YAML document");
    BAD("a: 'unterminated\n", CRK_CONF_YAML, "t:");
    BAD("a: 1\n b: 2\n", CRK_CONF_YAML, "t:");
    BAD("text\n", CRK_CONF_YAML, "mapping");
    BAD("? [a]\n: 1\n", CRK_CONF_YAML, "sequence");
}

static void test_bounds(void **state)
{
    (void)state;
    size_t n = CRK_CONF_MAX_ENTRIES + 1;
    char *big = malloc(n * 16 + 8);
    assert_non_null(big);
    size_t w = 0;
    for (size_t i = 0; i < n; i++)
        w += (size_t)sprintf(big + w, "k%zu: 1\n", i);
    BAD(big, CRK_CONF_YAML, "more than");
    free(big);

    crk_conf_list l = {0};
    assert_int_equal(crk_conf_parse("x", CRK_CONF_MAX_BYTES + 1, CRK_CONF_YAML, "t", &l),
                     CR_INVALID_PARAMS);
    assert_int_equal(crk_conf_read_file("/nonexistent/m.yaml", &l), CR_INVALID_PARAMS);
    assert_non_null(strstr(cr_last_error_message(), "/nonexistent/m.yaml"));
    assert_int_equal(crk_conf_parse(NULL, 0, CRK_CONF_JSON, "t", &l), CR_INVALID_PARAMS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_format_of),
        cmocka_unit_test(test_json),
        cmocka_unit_test(test_yaml),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
