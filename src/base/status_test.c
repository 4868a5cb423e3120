/* status_test.c - the status table: names, messages, last-error detail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "base/error.h"

static void store_codes_match_mooncake(void **state)
{
    (void)state;
    assert_int_equal(CR_OBJECT_NOT_FOUND, -704);
    assert_int_equal(CR_NO_AVAILABLE_HANDLE, -200);
    assert_int_equal(CR_INVALID_PARAMS, -600);
    assert_int_equal(CR_LEASE_EXPIRED, -707);
    assert_int_equal(CR_RPC_TIMEOUT, -901);
    assert_string_equal(cr_status_name(-704), "OBJECT_NOT_FOUND");
}

static void names_and_messages_cover_the_table(void **state)
{
    (void)state;
#define CHECK_(name, value, msg)                                                                   \
    assert_string_equal(cr_status_name(value), #name);                                             \
    assert_string_equal(cr_strerror(value), msg);
    CR_STATUS_TABLE(CHECK_)
#undef CHECK_
    assert_string_equal(cr_status_name(-123456), "UNKNOWN");
    assert_string_equal(cr_strerror(12345), "unknown status");
}

static void last_error_carries_detail(void **state)
{
    (void)state;
    int rc = crb_error(CR_ERR_INVALID_CONFIG, "protocol '%s' unknown", "rdmaa");
    assert_int_equal(rc, CR_ERR_INVALID_CONFIG);
    assert_non_null(strstr(cr_last_error_message(), "rdmaa"));
    assert_non_null(strstr(cr_last_error_message(), "ERR_INVALID_CONFIG"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(store_codes_match_mooncake),
        cmocka_unit_test(names_and_messages_cover_the_table),
        cmocka_unit_test(last_error_carries_detail),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
