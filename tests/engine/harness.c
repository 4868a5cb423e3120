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
