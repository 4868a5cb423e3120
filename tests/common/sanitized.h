/*
 * sanitized.h - is this test built with a sanitizer? Tests that measure a
 * process's memory (RSS, address space) only report it then: ASan's
 * quarantine and shadow memory make those figures meaningless.
 */
#ifndef CRESCENT_TESTS_SANITIZED_H
#define CRESCENT_TESTS_SANITIZED_H

#include <stdbool.h>

#ifndef __has_feature
#define __has_feature(x) 0
#endif

static inline bool crt_sanitized(void)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) ||                               \
    __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
    return true;
#else
    return false;
#endif
}

/* Built with ThreadSanitizer (every memory access instrumented: several times
 * slower, so a test of how fast a server drains an attack cannot hold). */
static inline bool crt_thread_sanitized(void)
{
#if defined(__SANITIZE_THREAD__) || __has_feature(thread_sanitizer)
    return true;
#else
    return false;
#endif
}

#endif
