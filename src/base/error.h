/*
 * error.h - recording why a call failed.
 *
 * The function that first detects a failure calls crb_error(), which formats
 * the detail into the calling thread's last-error buffer (read back with
 * cr_last_error_message()) and returns the status so the caller can write
 * `return crb_error(CR_ERR_X, "what and where %s", v);`. Callers that merely
 * propagate a status do not call it again.
 */
#ifndef CRESCENT_BASE_ERROR_H
#define CRESCENT_BASE_ERROR_H

#include "crescent/status.h"

#if defined(__GNUC__)
#define CRB_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CRB_PRINTF(a, b)
#endif

/** Record a failure's detail for this thread and return `status`. */
int crb_error(int status, const char *fmt, ...) CRB_PRINTF(2, 3);

#endif
