/* harness.c - see harness.h. */
#include "harness.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PEER_LINE_MAX 4096

int peer_start(test_peer *p, const char *const *args)
{
    const char *argv[32] = {tt_bin("CRESCENT_PEER_BIN", "./crescent-test-peer")};
    int argc = 1;
    for (int i = 0; args != NULL && args[i] != NULL && argc < 31; i++)
        argv[argc++] = args[i];
    argv[argc] = NULL;
    memset(p, 0, sizeof(*p));
    int rc = tt_child_start(&p->child, argv, PEER_LINE_MAX, 10000);
    p->line = p->child.line;
    if (rc < 0) {
        tt_child_kill(&p->child);
        p->line = "DEAD";
        return -1;
    }
    snprintf(p->name, sizeof(p->name), "%s", p->child.name);
    return 0;
}

const char *peer_cmd(test_peer *p, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    p->line = tt_child_vcmd(&p->child, 30000, fmt, ap);
    va_end(ap);
    return p->line;
}

uint64_t peer_reg(test_peer *p, const char *loc, uint64_t size, int read_only)
{
    const char *r =
        peer_cmd(p, "reg %s %llu %s", loc, (unsigned long long)size, read_only ? "ro" : "rw");
    if (strncmp(r, "OK ", 3) != 0)
        return 0;
    return strtoull(r + 3, NULL, 10);
}

int peer_stop(test_peer *p)
{
    /* A peer that does not exit within 30 s is a failure to report, not a
     * reason for the test to hang until CTest's timeout. */
    int st = tt_child_stop(&p->child, 30000);
    p->line = "DEAD";
    return st;
}

void peer_kill(test_peer *p)
{
    tt_child_kill(&p->child);
    p->line = "DEAD";
}

const char *test_protocol(void)
{
    const char *p = getenv("CRESCENT_TEST_PROTOCOL");
    return p != NULL && p[0] != '\0' ? p : "tcp";
}

void test_require_protocol(void)
{
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.protocol = test_protocol();
    cr_engine *e;
    int rc = cr_engine_create(&cfg, &e);
    if (rc == CR_ERR_INVALID_CONFIG || rc == CR_ERR_TRANSPORT_UNSUPPORTED) {
        printf("skipped: protocol %s is not available here: %s\n", cfg.protocol,
               cr_last_error_message());
        exit(77);
    }
    if (rc == 0)
        cr_engine_destroy(e);
}

uint64_t test_counter(cr_engine *e, const char *transport, const char *name)
{
    cr_engine_counter c[128];
    size_t n = 0;
    if (cr_engine_counters(e, c, 128, &n) < 0)
        return 0;
    for (size_t i = 0; i < n && i < 128; i++)
        if (strcmp(c[i].transport, transport) == 0 && strcmp(c[i].name, name) == 0)
            return c[i].value;
    return 0;
}

uint64_t test_bytes_via(cr_engine *e, const char *transport)
{
    return test_counter(e, transport, "bytes");
}

uint64_t test_bytes_via_protocol(cr_engine *e)
{
    if (strcmp(test_protocol(), "shm") == 0)
        return test_bytes_via(e, "shm") + test_bytes_via(e, "cma");
    return test_bytes_via(e, test_protocol());
}

bool test_copies_in_submit(void)
{
    return strcmp(test_protocol(), "shm") == 0;
}

bool test_target_checks_ranges(cr_engine *e)
{
    return !(test_counter(e, "ucx", "software_rma") == 1 &&
             test_counter(e, "ucx", "checked_active_messages") == 0);
}
