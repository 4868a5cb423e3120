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

/* A wrapped failure of the same status names the status once (issue 11:
 * "X: put ...: X: put_start ..."); a different inner status stays. */
static void wrapped_detail_names_the_status_once(void **state)
{
    (void)state;
    crb_error(CR_NO_AVAILABLE_HANDLE, "put_start 'k': no space");
    char inner[512];
    strcpy(inner, cr_last_error_message());
    crb_error(CR_NO_AVAILABLE_HANDLE, "put 'k': %s", inner);
    assert_string_equal(cr_last_error_message(),
                        "NO_AVAILABLE_HANDLE: put 'k': put_start 'k': no space");
    strcpy(inner, cr_last_error_message());
    crb_error(CR_NO_AVAILABLE_HANDLE, "%s", inner);
    assert_string_equal(cr_last_error_message(),
                        "NO_AVAILABLE_HANDLE: put 'k': put_start 'k': no space");
    crb_error(CR_RPC_FAIL, "call: %s", "ERR_CONNECTION: reset");
    assert_string_equal(cr_last_error_message(), "RPC_FAIL: call: ERR_CONNECTION: reset");
    crb_error(CR_RPC_FAIL, "NOT_RPC_FAIL: x");
    assert_string_equal(cr_last_error_message(), "RPC_FAIL: NOT_RPC_FAIL: x");
}

/* A relayed master message that names the operation and key again (seen in
 * store_procs_test's lease_blocks_remove: "remove 'L': remove 'L': leased"). */
static void relayed_detail_names_the_operation_once(void **state)
{
    (void)state;
    crb_error(CR_OBJECT_HAS_LEASE, "remove '%s': %s", "L",
              "OBJECT_HAS_LEASE: remove 'L': leased for 10 more ms");
    assert_string_equal(cr_last_error_message(),
                        "OBJECT_HAS_LEASE: remove 'L': leased for 10 more ms");
    crb_error(CR_RPC_FAIL, "a: a: a: b: b");
    assert_string_equal(cr_last_error_message(),
                        "RPC_FAIL: a: b: b"); /* the last part is a sentence */
    crb_error(CR_RPC_FAIL, "get 'k': get 'k2': x");
    assert_string_equal(cr_last_error_message(), "RPC_FAIL: get 'k': get 'k2': x");
    crb_error(CR_RPC_FAIL, "ab: a: x");
    assert_string_equal(cr_last_error_message(), "RPC_FAIL: ab: a: x");
    crb_error(CR_RPC_FAIL, "a: ab: x");
    assert_string_equal(cr_last_error_message(), "RPC_FAIL: a: ab: x");
    crb_error(CR_RPC_FAIL, "x: x");
    assert_string_equal(cr_last_error_message(), "RPC_FAIL: x: x");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(store_codes_match_mooncake),
        cmocka_unit_test(names_and_messages_cover_the_table),
        cmocka_unit_test(last_error_carries_detail),
        cmocka_unit_test(relayed_detail_names_the_operation_once),
        cmocka_unit_test(wrapped_detail_names_the_status_once),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
