/*
 * log.c - stderr logger with a level chosen by CRESCENT_LOG.
 */
#include "base/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static int log_level = CRB_LOG_WARN;
static pthread_once_t log_once = PTHREAD_ONCE_INIT;

static void log_read_env(void)
{
    static const char *names[] = {"error", "warn", "info", "debug"};
    const char *v = getenv("CRESCENT_LOG");
    if (v == NULL)
        return;
    for (int i = 0; i < 4; i++)
        if (strcmp(v, names[i]) == 0)
            log_level = i;
}

int crb_log_enabled(int level)
{
    pthread_once(&log_once, log_read_env);
    return level <= log_level;
}

void crb_log(int level, const char *fmt, ...)
{
    static const char tags[] = "EWID";
    if (!crb_log_enabled(level))
        return;
    char line[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    fprintf(stderr, "crescent %c %ld.%03ld [%d] %s\n", tags[level], (long)ts.tv_sec,
            ts.tv_nsec / 1000000, (int)getpid(), line);
}

void crb_log_default_level(int level)
{
    pthread_once(&log_once, log_read_env);
    if (getenv("CRESCENT_LOG") == NULL && level >= CRB_LOG_ERROR && level <= CRB_LOG_DEBUG)
        log_level = level;
}
