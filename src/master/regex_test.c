/*
 * regex_test.c - bounded regular expressions (issue 11 item 2): the
 * patterns that froze the master with POSIX regcomp/regexec are refused or
 * stopped within milliseconds, ordinary patterns match as a search, and a
 * service-level remove_by_regex with a pathological pattern returns
 * CR_ERR_REGEX_BUDGET quickly instead of scanning for minutes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "base/error.h"
#include "master/regex.h"
#include "master/test_util.h"

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec / 1e6;
}

static int match(const char *pattern, const char *subject)
{
    crk_regex *re = NULL;
    assert_int_equal(crk_regex_compile(pattern, &re), 0);
    int rc = crk_regex_match(re, subject, strlen(subject));
    crk_regex_free(re);
    return rc;
}

static void ordinary_patterns(void **state)
{
    (void)state;
    assert_int_equal(match("^layer/0/", "layer/0/block"), 1);
    assert_int_equal(match("^layer/0/", "xlayer/0/block"), 0);
    assert_int_equal(match("/a$", "k/a"), 1);
    assert_int_equal(match("blk[0-9]+", "vllm@blk0042@tp0"), 1);
    assert_int_equal(match("[[:digit:]]{3}", "ab12"), 0);
    assert_int_equal(match("(a|b)c", "xxbc"), 1);
    /* Bytes, not UTF-8: an invalid sequence in a key is just bytes. */
    crk_regex *re = NULL;
    assert_int_equal(crk_regex_compile("\\xff", &re), 0);
    assert_int_equal(crk_regex_match(re, "a\xff", 2), 1);
    crk_regex_free(re);
}

static void bad_patterns_are_refused(void **state)
{
    (void)state;
    crk_regex *re = NULL;
    assert_int_equal(crk_regex_compile("([", &re), CR_INVALID_PARAMS);
    assert_non_null(strstr(cr_last_error_message(), "offset"));
    assert_int_equal(crk_regex_compile(NULL, &re), CR_INVALID_PARAMS);
    char *longp = malloc(CRK_REGEX_MAX_PATTERN + 2);
    memset(longp, 'a', CRK_REGEX_MAX_PATTERN + 1);
    longp[CRK_REGEX_MAX_PATTERN + 1] = '\0';
    assert_int_equal(crk_regex_compile(longp, &re), CR_INVALID_PARAMS);
    free(longp);
    /* 65 nested groups: over the nesting limit. */
    char nested[200] = "";
    for (int i = 0; i < 65; i++)
        strcat(nested, "(");
    strcat(nested, "a");
    for (int i = 0; i < 65; i++)
        strcat(nested, ")");
    assert_int_equal(crk_regex_compile(nested, &re), CR_INVALID_PARAMS);
    assert_null(re);
}

/* regcomp of this took > 1.2 GB and seconds (issue 11). */
static void huge_counted_repeat_is_refused_fast(void **state)
{
    (void)state;
    crk_regex *re = NULL;
    double t0 = now_ms();
    assert_int_equal(crk_regex_compile("(a{1,32767}){1,32767}", &re), CR_INVALID_PARAMS);
    assert_true(now_ms() - t0 < 500);
    assert_non_null(strstr(cr_last_error_message(), "too large"));
    t0 = now_ms();
    assert_int_equal(crk_regex_compile("((a{1,1000}){1,1000}){1,1000}", &re), CR_INVALID_PARAMS);
    assert_true(now_ms() - t0 < 500);
}

/* Catastrophic backtracking stops at the match limit within milliseconds. */
static void backtracking_hits_the_budget(void **state)
{
    (void)state;
    char subject[200];
    memset(subject, 'a', 150);
    subject[150] = '!';
    subject[151] = '\0';
    static const char *const evil[] = {"^(\\w+\\s?)*$", "^(a|a?)+$", "^(([a-z])+.)+[A-Z]([a-z])+$",
                                       "^(a*)*(\\1)*(a*)*\\2\\3$"};
    for (size_t i = 0; i < sizeof(evil) / sizeof(evil[0]); i++) {
        crk_regex *re = NULL;
        assert_int_equal(crk_regex_compile(evil[i], &re), 0);
        double t0 = now_ms();
        int rc = crk_regex_match(re, subject, strlen(subject));
        double took = now_ms() - t0;
        if (rc != CR_ERR_REGEX_BUDGET || took > 1000)
            fail_msg("%s: %d (%s) after %.1f ms", evil[i], rc, cr_last_error_message(), took);
        crk_regex_free(re);
    }
}

/* The service: the pattern of the report against 150-byte keys returns the
 * budget error at once; an ordinary one still removes what it matches. */
static void service_remove_by_regex_is_bounded(void **state)
{
    (void)state;
    crk_service *s = tu_service(NULL, 0);
    tu_mount(s, tu_client(1), "seg", 0, 64ull << 20, 0);
    char key[200];
    memset(key, 'a', 150);
    for (int i = 0; i < 200; i++) {
        snprintf(key + 150, sizeof(key) - 150, "-%03d!", i);
        assert_int_equal(tu_put(s, tu_client(1), key, 64, NULL, 1), 0);
    }
    uint64_t n = 99;
    double t0 = now_ms();
    assert_int_equal(crk_remove_by_regex(s, "^(a|a?)+$", false, 2, &n), CR_ERR_REGEX_BUDGET);
    assert_true(now_ms() - t0 < 2000);
    assert_true(n == 99); /* not written on failure */
    assert_int_equal(tu_stats(s).keys, 200);
    assert_int_equal(crk_remove_by_regex(s, "-0[0-4][0-9]!$", false, 2, &n), 0);
    assert_true(n == 50);
    assert_int_equal(tu_stats(s).keys, 150);
    /* After stop_scans, long scans give up. */
    crk_service_stop_scans(s);
    assert_int_equal(crk_remove_by_regex(s, "a", false, 2, &n), CR_ERR_SHUTDOWN);
    assert_int_equal(crk_remove_all(s, true, 2, &n), CR_ERR_SHUTDOWN);
    crk_service_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(ordinary_patterns),
        cmocka_unit_test(bad_patterns_are_refused),
        cmocka_unit_test(huge_counted_repeat_is_refused_fast),
        cmocka_unit_test(backtracking_hits_the_budget),
        cmocka_unit_test(service_remove_by_regex_is_bounded),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
