/*
 * tsan.h - ThreadSanitizer annotations for payload bytes moved by syscalls.
 *
 * The engine moves registered (user) memory with send/recv on behalf of
 * peers in other processes. Whether a serving worker's sendmsg of a buffer
 * comes before another worker's recv into it is decided by the peer's
 * protocol (it waits for the read before writing), which runs through the
 * kernel and another process, so ThreadSanitizer cannot see the ordering and
 * reports a race that cannot happen. The workers therefore hide only those
 * payload syscalls from TSan; every other access, including the engine's own
 * headers and state, stays checked. Without TSan these compile to nothing.
 */
#ifndef CRESCENT_BASE_TSAN_H
#define CRESCENT_BASE_TSAN_H

#if defined(__SANITIZE_THREAD__)
#define CRB_TSAN_ENABLED 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define CRB_TSAN_ENABLED 1
#endif
#endif

#ifdef CRB_TSAN_ENABLED
void AnnotateIgnoreReadsBegin(const char *file, int line);
void AnnotateIgnoreReadsEnd(const char *file, int line);
void AnnotateIgnoreWritesBegin(const char *file, int line);
void AnnotateIgnoreWritesEnd(const char *file, int line);
/* Bracket a syscall that reads payload from registered memory. */
#define CRB_PAYLOAD_READS_BEGIN() AnnotateIgnoreReadsBegin(__FILE__, __LINE__)
#define CRB_PAYLOAD_READS_END()   AnnotateIgnoreReadsEnd(__FILE__, __LINE__)
/* Bracket a syscall that writes payload into registered memory. */
#define CRB_PAYLOAD_WRITES_BEGIN() AnnotateIgnoreWritesBegin(__FILE__, __LINE__)
#define CRB_PAYLOAD_WRITES_END()   AnnotateIgnoreWritesEnd(__FILE__, __LINE__)
#else
#define CRB_PAYLOAD_READS_BEGIN()  ((void)0)
#define CRB_PAYLOAD_READS_END()    ((void)0)
#define CRB_PAYLOAD_WRITES_BEGIN() ((void)0)
#define CRB_PAYLOAD_WRITES_END()   ((void)0)
#endif

#endif
