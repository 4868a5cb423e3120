/*
 * spin_test.c - the spin modes (base/spin.h): CRESCENT_BUSY_POLL_US parsed
 * into a mode, the fixed and the never mode, and the adaptive back-off step
 * by step.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/spin.h"
#include "crescent/status.h"

static void mode_from_env(void **state)
{
    (void)state;
    int64_t mode = 12345;
    unsetenv("CRESCENT_BUSY_POLL_US");
    assert_int_equal(crb_spin_mode_from_env(CR_ERR_INVALID_CONFIG, &mode), 0);
    assert_int_equal(mode, CRB_SPIN_ADAPTIVE);
    setenv("CRESCENT_BUSY_POLL_US", "", 1);
    mode = 1;
    assert_int_equal(crb_spin_mode_from_env(CR_ERR_INVALID_CONFIG, &mode), 0);
    assert_int_equal(mode, CRB_SPIN_ADAPTIVE);
    setenv("CRESCENT_BUSY_POLL_US", "25", 1);
    assert_int_equal(crb_spin_mode_from_env(CR_ERR_INVALID_CONFIG, &mode), 0);
    assert_int_equal(mode, 25000);
    setenv("CRESCENT_BUSY_POLL_US", "0", 1);
    assert_int_equal(crb_spin_mode_from_env(CR_ERR_INVALID_CONFIG, &mode), 0);
    assert_int_equal(mode, 0);
    const char *bad[] = {"fast", "-1", "10001", "5us", " 5"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        setenv("CRESCENT_BUSY_POLL_US", bad[i], 1);
        mode = 777;
        assert_int_equal(crb_spin_mode_from_env(-42, &mode), -42); /* the caller's status */
        assert_int_equal(mode, 777);                               /* not written */
        assert_non_null(strstr(cr_last_error_message(), "CRESCENT_BUSY_POLL_US"));
        assert_non_null(strstr(cr_last_error_message(), bad[i]));
    }
    unsetenv("CRESCENT_BUSY_POLL_US");
}

static void fixed_and_never(void **state)
{
    (void)state;
    crb_spin s;
    crb_spin_init(&s, 30000);
    for (int i = 0; i < 20; i++) {
        assert_int_equal(crb_spin_window(&s), 30000);
        crb_spin_done(&s, false); /* misses never shorten a fixed window */
    }
    assert_int_equal(atomic_load(&s.windows), 20);
    assert_int_equal(atomic_load(&s.caught), 0);
    crb_spin_init(&s, 0);
    for (int i = 0; i < 5; i++)
        assert_int_equal(crb_spin_window(&s), 0);
    assert_int_equal(atomic_load(&s.windows), 0);
}

/* Waits until the next window; checks that exactly `sleeps` waits sleep first. */
static void expect_sleeps_then_window(crb_spin *s, unsigned sleeps)
{
    for (unsigned i = 0; i < sleeps; i++)
        assert_int_equal(crb_spin_window(s), 0);
    assert_int_equal(crb_spin_window(s), CRB_SPIN_ADAPTIVE_NS);
}

static void adaptive_backs_off_and_recovers(void **state)
{
    (void)state;
    crb_spin s;
    crb_spin_init(&s, CRB_SPIN_ADAPTIVE);
    /* Caught windows keep every wait polling. */
    for (int i = 0; i < 10; i++) {
        assert_int_equal(crb_spin_window(&s), CRB_SPIN_ADAPTIVE_NS);
        crb_spin_done(&s, true);
    }
    /* Two misses in a row are tolerated. */
    expect_sleeps_then_window(&s, 0);
    crb_spin_done(&s, false);
    expect_sleeps_then_window(&s, 0);
    crb_spin_done(&s, false);
    expect_sleeps_then_window(&s, 0);
    crb_spin_done(&s, false); /* the third: 2 waits sleep */
    expect_sleeps_then_window(&s, 2);
    crb_spin_done(&s, false); /* 4 */
    expect_sleeps_then_window(&s, 4);
    crb_spin_done(&s, false); /* 8, the cap */
    expect_sleeps_then_window(&s, CRB_SPIN_MAX_SKIP);
    crb_spin_done(&s, false);
    expect_sleeps_then_window(&s, CRB_SPIN_MAX_SKIP);
    crb_spin_done(&s, true); /* caught: polling again at every wait */
    for (int i = 0; i < 5; i++) {
        assert_int_equal(crb_spin_window(&s), CRB_SPIN_ADAPTIVE_NS);
        crb_spin_done(&s, true);
    }
    /* And a miss after that is tolerated again. */
    expect_sleeps_then_window(&s, 0);
    crb_spin_done(&s, false);
    expect_sleeps_then_window(&s, 0);
    crb_spin_done(&s, true); /* (closes its window: frees its place) */
    assert_int_equal(atomic_load(&s.caught), 17);
    assert_int_equal(atomic_load(&s.windows), 10 + 3 + 3 + 1 + 5 + 2);
}

/* At most crb_spin_window_limit() adaptive windows are open at once in the
 * process; a wait that finds them taken sleeps without counting a miss, and
 * so do all waits for CRB_SPIN_CONTENDED_NS after; then windows open again. */
static void adaptive_windows_are_limited(void **state)
{
    (void)state;
    int limit = crb_spin_window_limit();
    assert_true(limit >= 1);
    crb_spin s[65];
    assert_true(limit < 65);
    for (int i = 0; i <= limit; i++)
        crb_spin_init(&s[i], CRB_SPIN_ADAPTIVE);
    for (int i = 0; i < limit; i++)
        assert_int_equal(crb_spin_window(&s[i]), CRB_SPIN_ADAPTIVE_NS);
    assert_int_equal(crb_spin_window(&s[limit]), 0); /* all places taken */
    assert_int_equal(atomic_load(&s[limit].misses), 0);
    uint64_t refused_at = crb_now_ns();
    crb_spin_done(&s[0], false);
    /* A place is free, but the process was found crowded: no window opens for
     * CRB_SPIN_CONTENDED_NS (checked only while that has certainly not passed). */
    uint64_t got = crb_spin_window(&s[limit]);
    if (crb_now_ns() < refused_at + CRB_SPIN_CONTENDED_NS)
        assert_int_equal(got, 0);
    else if (got > 0)
        crb_spin_done(&s[limit], true);
    for (int i = 1; i < limit; i++)
        crb_spin_done(&s[i], true);
    usleep(CRB_SPIN_CONTENDED_NS / 1000 + 1000);
    /* All closed and the crowd gone: every one of them can poll again. */
    for (int i = 0; i < limit; i++)
        assert_int_equal(crb_spin_window(&s[i]), CRB_SPIN_ADAPTIVE_NS);
    for (int i = 0; i < limit; i++)
        crb_spin_done(&s[i], true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(mode_from_env),
        cmocka_unit_test(fixed_and_never),
        cmocka_unit_test(adaptive_backs_off_and_recovers),
        cmocka_unit_test(adaptive_windows_are_limited),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
