/*
 * flagtab_test.c - the generic flag table on a small options struct: every
 * value type, defaults from the table, resolve + apply order, spellings
 * (-flag, --flag value, '-' for '_', --noflag), and the refusals.
 * crescent-master's own table is tested in master/flags_test.c.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"
#include "base/flagtab.h"

typedef struct opts {
    bool on;
    uint16_t port;
    uint32_t n;
    uint64_t big, bytes, ms;
    double ratio;
    char name[8];
    int mode;
} opts;

#define F(m) CRB_FLAG_FIELD(opts, m)
static const char *const MODES[] = {"fast", "safe", NULL};
static const char *const ONLY_X[] = {"x", NULL};
static const crb_flag FLAGS[] = {
    {"on", CRB_FLAG_BOOL, F(on), 0, 0, 0, NULL, "true", "a switch"},
    {"port", CRB_FLAG_PORT, F(port), 0, 65535, 0, NULL, "80", "a port"},
    {"n", CRB_FLAG_U32, F(n), 1, 10, 0, NULL, "3", "a count"},
    {"big", CRB_FLAG_U64, F(big), 0, UINT64_MAX, 0, NULL, "0", "a number"},
    {"max_bytes", CRB_FLAG_SIZE, F(bytes), 1024, 1ull << 40, 0, NULL, "64MB", "a size"},
    {"wait", CRB_FLAG_DURATION, F(ms), 0, 3600000, 1000, NULL, "5", "a duration"},
    {"ratio", CRB_FLAG_RATIO, F(ratio), 0, 0, 0, NULL, "0.5", "a ratio"},
    {"name", CRB_FLAG_NONEMPTY, F(name), 0, 0, 0, NULL, "abc", "a name"},
    {"mode", CRB_FLAG_ENUM, F(mode), 0, 0, 0, MODES, "safe", "a mode"},
    {"old", CRB_FLAG_COMPAT_STR, 0, 0, 0, 0, 0, ONLY_X, NULL, "a removed feature"},
};
static const crb_flag_set T = {FLAGS, sizeof(FLAGS) / sizeof(FLAGS[0])};

static int parse(opts *o, int argc, char **argv)
{
    crb_flag_arg args[16];
    size_t n = 0;
    static const char *const actions[] = {"help", NULL};
    int rc = crb_flags_resolve(&T, argc, argv, actions, args, &n);
    return rc != 0 ? rc : crb_flags_apply(o, args, n);
}

static void defaults_and_types(void **state)
{
    (void)state;
    opts o;
    memset(&o, 0, sizeof(o));
    assert_int_equal(crb_flags_defaults(&T, &o), 0);
    assert_true(o.on);
    assert_int_equal(o.port, 80);
    assert_int_equal(o.n, 3);
    assert_true(o.bytes == 64ull << 20);
    assert_true(o.ms == 5000);
    assert_true(o.ratio == 0.5);
    assert_string_equal(o.name, "abc");
    assert_int_equal(o.mode, 1);

    char *argv[] = {"prog",        "--noon",
                    "-port=8080",  "--n",
                    "10",          "--max-bytes",
                    "1 GiB",       "--wait=250ms",
                    "--mode=fast", "--big=18446744073709551615",
                    "--old=x",     "--help",
                    NULL};
    assert_int_equal(parse(&o, 12, argv), 0);
    assert_false(o.on);
    assert_int_equal(o.port, 8080);
    assert_int_equal(o.n, 10);
    assert_true(o.bytes == 1ull << 30);
    assert_true(o.ms == 250);
    assert_int_equal(o.mode, 0);
    assert_true(o.big == UINT64_MAX);
}

static void refusals(void **state)
{
    (void)state;
    opts o;
    memset(&o, 0, sizeof(o));
    crb_flags_defaults(&T, &o);
    static const struct {
        const char *arg, *mention;
    } bad[] = {
        {"--n=11", "out of range"},
        {"--n=0", "out of range"},
        {"--port=65536", "out of range"},
        {"--max_bytes=1000", "out of range"},
        {"--max_bytes=12parsecs", "size"},
        {"--wait=5y", "duration"},
        {"--ratio=1.5", "ratio"},
        {"--name=", "empty"},
        {"--name=toolongname", "longer"},
        {"--mode=slow", "fast, safe"},
        {"--old=y", "not supported"},
        {"--nosuch=1", "unknown flag"},
        {"stray", "unexpected argument"},
        {"--n", "needs a value"},
        {"--noport", "unknown flag"},
        {"--help=1", "takes no value"},
        {"--big=18446744073709551616", "integer"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        char *argv[] = {"prog", (char *)bad[i].arg, NULL};
        opts before = o;
        if (parse(&o, 2, argv) != CR_INVALID_PARAMS)
            fail_msg("%s was accepted", bad[i].arg);
        if (strstr(cr_last_error_message(), bad[i].mention) == NULL)
            fail_msg("%s: '%s' lacks '%s'", bad[i].arg, cr_last_error_message(), bad[i].mention);
        assert_memory_equal(&before, &o, sizeof(o)); /* nothing applied */
    }
}

static void size_parser(void **state)
{
    (void)state;
    uint64_t v;
    assert_int_equal(crb_parse_size("512k", &v), 0);
    assert_true(v == 512 * 1024);
    assert_int_equal(crb_parse_size(" 16 MiB ", &v), 0);
    assert_true(v == 16ull << 20);
    assert_int_equal(crb_parse_size("50%", &v), CR_INVALID_PARAMS);
    assert_int_equal(crb_parse_size("-1", &v), CR_INVALID_PARAMS);
    assert_int_equal(crb_parse_size("17179869184t", &v), CR_INVALID_PARAMS);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(defaults_and_types),
        cmocka_unit_test(refusals),
        cmocka_unit_test(size_parser),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
