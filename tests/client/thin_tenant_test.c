/*
 * thin_tenant_test.c - two tenants on one master, through two crescent-client
 * daemons started with --tenant_id team-a and team-b, and an embedded client
 * of the default tenant: the same key is three objects; a tenant sees and
 * removes only its own keys (batch exist, remove_all, remove_by_regex
 * anchored on its own key names); the master's /metrics counts keys and
 * bytes per tenant; a thin client asking a daemon for another tenant is
 * refused with CR_ERR_TENANT_MISMATCH.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"
#include "thin_harness.h"

static int teardown(void **state)
{
    (void)state;
    sh_kill_all();
    return 0;
}

/* A labelled sample of the master's /metrics, or -1. */
static double labelled(const sh_master *m, const char *sample)
{
    static char body[1 << 20];
    if (sh_http_get(m->metrics_port, "/metrics", body, sizeof(body)) != 200)
        return -1;
    const char *p = strstr(body, sample);
    return p != NULL && p[strlen(sample)] == ' ' ? strtod(p + strlen(sample) + 1, NULL) : -1;
}

static void expect_read(const char *line, long long size)
{
    if (strtoll(line, NULL, 10) != size || strstr(line, " ok") == NULL)
        fail_msg("read '%s', want %lld bytes verified", line, size);
}

static void test_two_tenants(void **state)
{
    (void)state;
    sh_master m;
    th_daemon da, db;
    sh_client a, b, dflt;
    assert_int_equal(sh_master_start(&m, NULL), 0);
    assert_int_equal(
        th_daemon_start(&da, m.addr, NULL, (const char *[]){"--tenant_id=team-a", NULL}), 0);
    assert_int_equal(
        th_daemon_start(&db, m.addr, NULL, (const char *[]){"--tenant_id=team-b", NULL}), 0);
    assert_int_equal(th_client_start(&a, &da, NULL), 0);
    assert_int_equal(th_client_start(&b, &db, NULL), 0);
    assert_int_equal(sh_client_start(&dflt, m.addr, (const char *[]){"--segment", "32M", NULL}), 0);

    /* one key name, three objects */
    assert_int_equal(sh_rc(&a, "put shared 5000 1"), 0);
    assert_int_equal(sh_rc(&b, "put shared 7000 2"), 0);
    assert_int_equal(sh_rc(&dflt, "put shared 9000 3"), 0);
    expect_read(sh_cmd(&a, "get shared 1"), 5000);
    expect_read(sh_cmd(&b, "get shared 2"), 7000);
    expect_read(sh_cmd(&dflt, "get shared 3"), 9000);
    assert_int_equal(sh_rc(&a, "size shared"), 5000);
    assert_int_equal(sh_rc(&b, "size shared"), 7000);

    /* each tenant sees only its keys */
    assert_int_equal(sh_field(sh_cmd(&a, "batch_put x- 10 4096 10 from"), "ok"), 10);
    assert_int_equal(sh_field(sh_cmd(&a, "batch_exist x- 10"), "yes"), 10);
    assert_int_equal(sh_field(sh_cmd(&b, "batch_exist x- 10"), "yes"), 0);
    assert_int_equal(sh_field(sh_cmd(&dflt, "batch_exist x- 10"), "yes"), 0);
    assert_int_equal(sh_rc(&b, "get x-3 13"), CR_OBJECT_NOT_FOUND);

    /* per-tenant counts at the master */
    assert_int_equal((int)labelled(&m, "master_tenant_keys{tenant=\"team-a\"}"), 11);
    assert_int_equal((int)labelled(&m, "master_tenant_keys{tenant=\"team-b\"}"), 1);
    assert_int_equal((int)labelled(&m, "master_tenant_keys{tenant=\"default\"}"), 1);
    assert_int_equal((int)labelled(&m, "master_tenant_bytes{tenant=\"team-b\"}"), 7000);
    assert_int_equal((int)labelled(&m, "master_tenant_bytes{tenant=\"team-a\"}"), 5000 + 40960);

    /* removal is scoped to the tenant; regexes see the tenant's own key names */
    assert_int_equal(sh_rc(&a, "remove_regex ^x-[0-4]$ force"), 5);
    assert_int_equal(sh_field(sh_cmd(&a, "batch_exist x- 10"), "yes"), 5);
    assert_int_equal(sh_rc(&b, "remove_all force"), 1);
    assert_int_equal(sh_rc(&b, "exist shared"), 0);
    expect_read(sh_cmd(&a, "get shared 1"), 5000);
    expect_read(sh_cmd(&dflt, "get shared 3"), 9000);
    assert_int_equal(sh_rc(&dflt, "remove_all force"), 1);
    expect_read(sh_cmd(&a, "get shared 1"), 5000);

    /* a thin client cannot ask a daemon for another tenant */
    sh_client wrong;
    assert_int_equal(th_client_start(&wrong, &da, (const char *[]){"--tenant", "team-b", NULL}),
                     -1);
    assert_non_null(strstr(wrong.line, "-3062"));
    sh_client same;
    assert_int_equal(th_client_start(&same, &da, (const char *[]){"--tenant", "team-a", NULL}), 0);
    expect_read(sh_cmd(&same, "get shared 1"), 5000);

    assert_int_equal(sh_client_stop(&same), 0);
    assert_int_equal(sh_client_stop(&a), 0);
    assert_int_equal(sh_client_stop(&b), 0);
    assert_int_equal(sh_client_stop(&dflt), 0);
    assert_int_equal(th_daemon_stop(&da), 0);
    assert_int_equal(th_daemon_stop(&db), 0);
    assert_int_equal(sh_master_stop(&m), 0);
}

int main(void)
{
    if (getenv("CRESCENT_CLIENT_BIN") == NULL || getenv("CRESCENT_STORE_CLIENT_BIN") == NULL)
        return 77;
    const struct CMUnitTest tests[] = {cmocka_unit_test_teardown(test_two_tenants, teardown)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}
