/*
 * status.c - names and messages for the status table, and the per-thread
 * "last error" detail string that every failing public call fills in.
 */
#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>

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

int crb_error(int status, const char *fmt, ...)
{
    char detail[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof(detail), fmt, ap);
    va_end(ap);
    snprintf(last_error_message, sizeof(last_error_message), "%s: %s", cr_status_name(status),
             detail);
    crb_log(CRB_LOG_DEBUG, "%s", last_error_message);
    return status;
}
