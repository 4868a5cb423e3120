/*
 * flags_test.c - crescent-client's command line (flags.c): Mooncake's
 * real_client_main flags with its defaults and syntax forms, crescent's own,
 * --flagfile, and refusals (unknown flags, bad values, offload, protocols,
 * positional arguments) with a message naming the flag.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/daemon.h"

static int parse(crs_config *c, const char *const *args)
{
    char *argv[32];
    int argc = 0;
    argv[argc++] = "crescent-client";
    for (; args[argc - 1] != NULL; argc++)
        argv[argc] = (char *)args[argc - 1];
    crs_config_defaults(c);
    return crs_parse_flags(c, argc, argv);
}

static void test_defaults(void **state)
{
    (void)state;
    crs_config c;
    unsetenv("MC_FORCE_TCP");
    assert_int_equal(parse(&c, (const char *[]){NULL}), 0);
    assert_int_equal(c.port, 50052);
    assert_string_equal(c.master, "127.0.0.1:50051");
    assert_string_equal(c.metadata, "http://127.0.0.1:8080/metadata");
    assert_string_equal(c.protocol, "tcp");
    assert_true(c.global_segment_size == 4ull << 30);
    assert_true(c.local_buffer_size == 16ull << 20); /* Mooncake's "0" */
    assert_int_equal(c.threads, 1);
    assert_string_equal(c.tenant, "default");
    assert_string_equal(c.host, "127.0.0.1"); /* Mooncake's 0.0.0.0 */
    assert_false(c.enable_http_server);
    assert_int_equal(c.http_port, 9300);
}

static void test_mooncake_flags(void **state)
{
    (void)state;
    crs_config c;
    const char *args[] = {"--host=10.0.0.5",
                          "-port",
                          "50060",
                          "--master_server_address=m:1",
                          "--metadata_server",
                          "P2PHANDSHAKE",
                          "--protocol=rdma",
                          "--device_names=mlx5_0,mlx5_1",
                          "--global_segment_size=512 MB",
                          "--local-buffer-size=16MB",
                          "--threads=4",
                          "--tenant_id=team-a",
                          "--noenable_offload",
                          "--start_offload_rpc_server=false",
                          "--enable_http_server",
                          "--http_port=0",
                          "--v=0",
                          "--minloglevel=0",
                          "--logtostderr",
                          NULL};
    assert_int_equal(parse(&c, args), 0);
    assert_false(c.enable_offload);
    assert_string_equal(c.host, "10.0.0.5");
    assert_int_equal(c.port, 50060);
    assert_string_equal(c.master, "m:1");
    assert_string_equal(c.metadata, "P2PHANDSHAKE");
    assert_string_equal(c.protocol, "auto");
    assert_string_equal(c.devices, "mlx5_0,mlx5_1");
    assert_true(c.global_segment_size == 512ull << 20);
    assert_true(c.local_buffer_size == 16ull << 20);
    assert_int_equal(c.threads, 4);
    assert_string_equal(c.tenant, "team-a");
    assert_true(c.enable_http_server);
    assert_int_equal(c.http_port, 0);
}

static void test_crescent_flags_and_flagfile(void **state)
{
    (void)state;
    char path[] = "/tmp/crescent-client-flags-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    const char *body = "# a comment\n\n--socket=@test-sock\n  --shared_secret=s3cret  \n"
                       "--allow_any_user\n--max_thin_clients=8\n";
    assert_int_equal(write(fd, body, strlen(body)), (ssize_t)strlen(body));
    close(fd);
    char flagfile[128];
    snprintf(flagfile, sizeof(flagfile), "--flagfile=%s", path);
    crs_config c;
    assert_int_equal(parse(&c, (const char *[]){flagfile, "--heartbeat_interval_ms=200", NULL}), 0);
    assert_string_equal(c.socket, "@test-sock");
    assert_string_equal(c.secret, "s3cret");
    assert_true(c.allow_any_user);
    assert_int_equal(c.max_clients, 8);
    assert_int_equal(c.heartbeat_ms, 200);
    unlink(path);
    /* the SSD tier: Mooncake's flag, and crescent's path flag */
    assert_int_equal(
        parse(&c, (const char *[]){"--enable_offload", "--ssd_offload_path=/nvme/kv", NULL}), 0);
    assert_true(c.enable_offload);
    assert_string_equal(c.ssd_path, "/nvme/kv");
}

static void expect_refused(const char *const *args, const char *mention)
{
    crs_config c;
    assert_int_equal(parse(&c, args), CR_INVALID_PARAMS);
    assert_non_null(strstr(cr_last_error_message(), mention));
}

static void test_refusals(void **state)
{
    (void)state;
    expect_refused((const char *[]){"--no_such_flag=1", NULL}, "no_such_flag");
    expect_refused((const char *[]){"--port=70000", NULL}, "port");
    expect_refused((const char *[]){"--port", NULL}, "needs a value");
    expect_refused((const char *[]){"--global_segment_size=50%", NULL}, "global_segment_size");
    expect_refused((const char *[]){"--protocol=nvmeof", NULL}, "nvmeof");
    expect_refused((const char *[]){"--threads=0", NULL}, "threads");
    expect_refused((const char *[]){"--enable_http_server=maybe", NULL}, "enable_http_server");
    expect_refused((const char *[]){"--fromenv=port", NULL}, "fromenv");
    expect_refused((const char *[]){"stray", NULL}, "positional");
    expect_refused((const char *[]){"--port=0", NULL}, "--socket");
    expect_refused((const char *[]){"--socket=relative/path", NULL}, "socket");
    expect_refused((const char *[]){"--flagfile=/nonexistent/flags", NULL}, "flagfile");
    expect_refused((const char *[]){"--nothreads", NULL}, "nothreads");
}

static void test_help_version(void **state)
{
    (void)state;
    crs_config c;
    assert_int_equal(parse(&c, (const char *[]){"--help", NULL}), 0);
    assert_true(c.show_help);
    assert_non_null(strstr(crs_usage(), "--master_server_address"));
    assert_int_equal(parse(&c, (const char *[]){"--version", NULL}), 0);
    assert_true(c.show_version);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_mooncake_flags),
        cmocka_unit_test(test_crescent_flags_and_flagfile),
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_help_version),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
