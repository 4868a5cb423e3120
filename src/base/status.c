/*
 * status.c - names and messages for the status table, and the per-thread
 * "last error" detail string that every failing public call fills in.
 */
#include "base/error.h"

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"

const char *cr_status_name(int status)
{
    switch (status) {
#define CR_STATUS_NAME_(name, value, msg)                                                          \
    case (value):                                                                                  \
        return #name;
        CR_STATUS_TABLE(CR_STATUS_NAME_)
#undef CR_STATUS_NAME_
    default:
        return "UNKNOWN";
    }
}

const char *cr_strerror(int status)
{
    switch (status) {
#define CR_STATUS_MSG_(name, value, msg)                                                           \
    case (value):                                                                                  \
        return msg;
        CR_STATUS_TABLE(CR_STATUS_MSG_)
#undef CR_STATUS_MSG_
    default:
        return "unknown status";
    }
}

static _Thread_local char last_error_message[512];

const char *cr_last_error_message(void)
{
    return last_error_message;
}

/*
 * Remove every "<name>: " that starts `detail` or follows ": " in it. A
 * caller that wraps an inner failure of the same status ("put 'k': %s" with
 * the inner "NO_AVAILABLE_HANDLE: put_start 'k': ...", or a message relayed
 * from the master) would otherwise repeat the status name once per level.
 */
static void drop_repeated_name(char *detail, const char *name)
{
    size_t nl = strlen(name);
    char *r = detail, *w = detail;
    bool at_start = true;
    while (*r != '\0') {
        if (at_start && strncmp(r, name, nl) == 0 && r[nl] == ':' && r[nl + 1] == ' ') {
            r += nl + 2;
            continue;
        }
        at_start = r[0] == ':' && r[1] == ' ';
        if (at_start) {
            *w++ = *r++; /* copy ": " and look again at what follows */
            *w++ = *r++;
            continue;
        }
        *w++ = *r++;
    }
    *w = '\0';
}

/*
 * Collapse a ": "-separated part that repeats the part just before it
 * ("remove 'k': remove 'k': leased ..."): the store relays a master message
 * that already names the operation and key behind its own "remove 'k': ".
 */
static void drop_repeated_parts(char *detail)
{
    char *prev = detail;
    for (;;) {
        char *sep = strstr(prev, ": ");
        if (sep == NULL)
            return;
        size_t plen = (size_t)(sep - prev);
        char *next = sep + 2;
        if (plen > 0 && strncmp(next, prev, plen) == 0 && strncmp(next + plen, ": ", 2) == 0) {
            memmove(prev, next, strlen(next) + 1); /* keep one copy, look again */
            continue;
        }
        prev = next;
    }
}

int crb_error(int status, const char *fmt, ...)
{
    char detail[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    const char *name = cr_status_name(status);
    drop_repeated_name(detail, name);
    drop_repeated_parts(detail);
    snprintf(last_error_message, sizeof(last_error_message), "%s: %s", name, detail);
    crb_log(CRB_LOG_DEBUG, "%s", last_error_message);
    return status;
}
