/*
 * metadata_server_itest.c - crescent-metadata-server as a real process.
 *
 *   metadata_server_itest <path to crescent-metadata-server> process|flags
 *
 * "process": start the server with --port 0, read the port from its ready
 * line, put/get/delete through the http backend, stop it with SIGTERM (exit
 * 0 expected), then check the client fails with CR_ERR_METADATA promptly
 * instead of hanging; the same with Mooncake's "--flag=value" spellings and
 * SIGINT; and a second server on a taken port must exit 1.
 * "flags": bad command lines exit 2 naming the offending flag; --help exits 0.
 *
 * Every child is a ct_proc of the shared harness (tests/testing): it gets
 * PR_SET_PDEATHSIG and is tracked, so a failing assertion (longjmp out of
 * the test) still ends in the group teardown (tt_teardown) killing it.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdbool.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>

#include "base/clock.h"
#include "base/error.h"
#include "metadata/backend.h"
#include "testing.h"

static const char *server_path;

typedef ct_proc child;

/* Start the server with args (NULL-terminated, without argv[0]). */
static void spawn(const char *const *args, bool capture_stderr, child *c)
{
    const char *argv[16] = {server_path};
    int n = 1;
    for (; args[n - 1] != NULL && n < 15; n++)
        argv[n] = args[n - 1];
    argv[n] = NULL;
    ct_spawn_opts o = {.pipe_stdout = true, .pipe_stderr = capture_stderr};
    assert_int_equal(ct_proc_spawn(c, argv, &o), 0);
}

/* Read from fd until newline, EOF or timeout; returns the text read (NUL-terminated). */
static size_t read_until(int fd, char *buf, size_t cap, int timeout_ms, bool stop_at_newline)
{
    size_t len = 0;
    uint64_t deadline = crb_now_ms() + (uint64_t)timeout_ms;
    buf[0] = '\0';
    while (len + 1 < cap) {
        uint64_t now = crb_now_ms();
        if (now >= deadline)
            break;
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int r = poll(&p, 1, (int)(deadline - now));
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        ssize_t got = read(fd, buf + len, 1);
        if (got <= 0)
            break;
        len++;
        buf[len] = '\0';
        if (stop_at_newline && buf[len - 1] == '\n')
            break;
    }
    return len;
}

/* Wait for the child to exit within timeout_ms; returns its exit code (128 +
 * N for signal N), or -1 when it is still running. */
static int wait_exit(child *c, int timeout_ms)
{
    int st = ct_proc_wait(c, timeout_ms);
    return st == -2 ? -1 : st;
}

static void close_child(child *c)
{
    ct_proc_kill(c);
}

/* Start a server and parse the port out of its ready line. */
static uint16_t start_server(const char *const *args, child *c)
{
    spawn(args, false, c);
    char line[256];
    read_until(c->out_fd, line, sizeof(line), 10000, true);
    const char *prefix = "crescent-metadata-server listening on 127.0.0.1:";
    if (strncmp(line, prefix, strlen(prefix)) != 0)
        fail_msg("unexpected ready line '%s'", line);
    unsigned long port = strtoul(line + strlen(prefix), NULL, 10);
    assert_true(port > 0 && port < 65536);
    return (uint16_t)port;
}

static void check_get(crm_backend *b, const char *key, const void *want, size_t want_len)
{
    void *v = NULL;
    size_t len = 0;
    int rc = b->ops->get(b, key, &v, &len);
    if (rc != 0)
        fail_msg("get '%s': %s", key, cr_last_error_message());
    assert_int_equal(len, want_len);
    assert_memory_equal(v, want, want_len);
    free(v);
}

/* Drive a running server through the backend, stop it with sig, check the aftermath. */
static void exercise_and_stop(child *c, uint16_t port, int sig)
{
    char url[128];
    snprintf(url, sizeof(url), "http://127.0.0.1:%u/metadata", (unsigned)port);
    crm_backend *b = NULL;
    assert_int_equal(crm_backend_open(url, 2000, &b), 0);

    const unsigned char desc[] = {0x83, 0xa4, 'n', 'a', 'm', 'e', 0x00, 0x01, 0x00};
    assert_int_equal(b->ops->put(b, "mooncake/ram/node0", desc, sizeof(desc)), 0);
    assert_int_equal(b->ops->put(b, "mooncake/rpc_meta/node0", "10.0.0.1:15001", 14), 0);
    check_get(b, "mooncake/ram/node0", desc, sizeof(desc));
    check_get(b, "mooncake/rpc_meta/node0", "10.0.0.1:15001", 14);
    assert_int_equal(b->ops->put(b, "mooncake/rpc_meta/node0", "10.0.0.2:15002", 14), 0);
    check_get(b, "mooncake/rpc_meta/node0", "10.0.0.2:15002", 14);
    assert_int_equal(b->ops->del(b, "mooncake/ram/node0"), 0);
    void *v = NULL;
    size_t len = 0;
    assert_int_equal(b->ops->get(b, "mooncake/ram/node0", &v, &len), CR_ERR_METADATA_NOT_FOUND);

    assert_int_equal(kill(c->pid, sig), 0);
    int status = wait_exit(c, 10000);
    if (status == -1)
        fail_msg("server did not exit within 10 s of signal %d", sig);
    assert_true(status < 128); /* exited, not killed by a signal */
    assert_int_equal(status, 0);

    /* The server is gone: a prompt CR_ERR_METADATA, not a hang. */
    uint64_t t0 = crb_now_ms();
    assert_int_equal(b->ops->get(b, "mooncake/rpc_meta/node0", &v, &len), CR_ERR_METADATA);
    assert_non_null(strstr(cr_last_error_message(), url));
    assert_int_equal(b->ops->put(b, "k", "v", 1), CR_ERR_METADATA);
    assert_true(crb_now_ms() - t0 < 2 * 2000 + 1000);
    crm_backend_close(b);
}

static void test_process_sigterm(void **state)
{
    child c = {.out_fd = -1, .in_fd = -1, .err_fd = -1};
    const char *args[] = {"--port", "0", NULL};
    uint16_t port = start_server(args, &c);
    exercise_and_stop(&c, port, SIGTERM);
    close_child(&c);
}

static void test_process_mooncake_flags_sigint(void **state)
{
    child c = {.out_fd = -1, .in_fd = -1, .err_fd = -1};
    const char *args[] = {"--host=127.0.0.1", "--port=0", NULL};
    uint16_t port = start_server(args, &c);
    exercise_and_stop(&c, port, SIGINT);
    close_child(&c);
}

static void test_port_taken_exits_1(void **state)
{
    child a = {.out_fd = -1, .in_fd = -1, .err_fd = -1},
          b = {.out_fd = -1, .in_fd = -1, .err_fd = -1};
    const char *args[] = {"--port", "0", NULL};
    uint16_t port = start_server(args, &a);
    char port_text[16];
    snprintf(port_text, sizeof(port_text), "%u", (unsigned)port);
    const char *args2[] = {"--host", "127.0.0.1", "--port", port_text, NULL};
    spawn(args2, true, &b);
    char err[512];
    read_until(b.err_fd, err, sizeof(err), 10000, false);
    int status = wait_exit(&b, 10000);
    assert_true(status != -1 && status < 128);
    assert_int_equal(status, 1);
    if (strstr(err, port_text) == NULL)
        fail_msg("error does not name the port: %s", err);
    close_child(&b);
    kill(a.pid, SIGTERM);
    status = wait_exit(&a, 10000);
    assert_true(status != -1 && status < 128);
    assert_int_equal(status, 0);
    close_child(&a);
}

/* Run with args; expect exit code `code` and `needle` in stderr (or stdout for code 0). */
static void expect_exit(const char *const *args, int code, const char *needle)
{
    child c = {.out_fd = -1, .in_fd = -1, .err_fd = -1};
    spawn(args, true, &c);
    char out[2048];
    read_until(code == 0 ? c.out_fd : c.err_fd, out, sizeof(out), 10000, false);
    int status = wait_exit(&c, 10000);
    if (status == -1)
        fail_msg("'%s' did not exit", args[0]);
    assert_true(status < 128);
    if (status != code)
        fail_msg("'%s' exited %d, want %d", args[0], status, code);
    if (strstr(out, needle) == NULL)
        fail_msg("'%s': output does not mention '%s': %s", args[0], needle, out);
    close_child(&c);
}

static void test_bad_flags(void **state)
{
    const char *a1[] = {"--bogus", NULL};
    expect_exit(a1, 2, "'--bogus'");
    const char *a2[] = {"--port", NULL};
    expect_exit(a2, 2, "'--port'");
    const char *a3[] = {"--port=abc", NULL};
    expect_exit(a3, 2, "abc");
    const char *a4[] = {"--port", "70000", NULL};
    expect_exit(a4, 2, "70000");
    const char *a5[] = {"--port=-1", NULL};
    expect_exit(a5, 2, "-1");
    const char *a6[] = {"--host", NULL};
    expect_exit(a6, 2, "'--host'");
    const char *a7[] = {"--host=", NULL};
    expect_exit(a7, 2, "--host");
    const char *a8[] = {"-p", "8080", NULL};
    expect_exit(a8, 2, "'-p'");
    const char *a9[] = {"--port", "0", "stray", NULL};
    expect_exit(a9, 2, "'stray'");
    const char *a10[] = {"--hostname=x", NULL};
    expect_exit(a10, 2, "'--hostname=x'");
    const char *ok[] = {"--help", NULL};
    expect_exit(ok, 0, "usage:");
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s <crescent-metadata-server> process|flags\n", argv[0]);
        return 2;
    }
    server_path = argv[1];
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest process_tests[] = {
        cmocka_unit_test(test_process_sigterm),
        cmocka_unit_test(test_process_mooncake_flags_sigint),
        cmocka_unit_test(test_port_taken_exits_1),
    };
    const struct CMUnitTest flag_tests[] = {
        cmocka_unit_test(test_bad_flags),
    };
    int failed;
    if (strcmp(argv[2], "process") == 0)
        failed = cmocka_run_group_tests_name("process", process_tests, NULL, tt_teardown);
    else if (strcmp(argv[2], "flags") == 0)
        failed = cmocka_run_group_tests_name("flags", flag_tests, NULL, tt_teardown);
    else
        return 2;
    curl_global_cleanup();
    return failed;
}
