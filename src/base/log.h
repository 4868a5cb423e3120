/*
 * log.h - leveled logging to stderr.
 *
 * The level comes from CRESCENT_LOG (error, warn, info, debug; default warn),
 * read once. Thread-safe: each line is written with one fprintf call.
 */
#ifndef CRESCENT_BASE_LOG_H
#define CRESCENT_BASE_LOG_H

#include "base/error.h"

enum crb_log_level {
    CRB_LOG_ERROR = 0,
    CRB_LOG_WARN = 1,
    CRB_LOG_INFO = 2,
    CRB_LOG_DEBUG = 3,
};

/** Is `level` enabled? Cheap; use it to skip building expensive messages. */
int crb_log_enabled(int level);

void crb_log(int level, const char *fmt, ...) CRB_PRINTF(2, 3);

/** Set the level unless CRESCENT_LOG chose one (daemons default to info). */
void crb_log_default_level(int level);

#endif
