/*
 * tool_util.c - see tool_util.h.
 */
#include "tool_util.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

int ct_flag_value(int argc, char **argv, int *i, const char *name, const char **value)
{
    const char *arg = argv[*i];
    size_t n = strlen(name);
    if (strncmp(arg, name, n) != 0)
        return 0;
    if (arg[n] == '=') {
        *value = arg + n + 1;
        return 1;
    }
    if (arg[n] != '\0')
        return 0;
    if (*i + 1 >= argc)
        return -1;
    *value = argv[++*i];
    return 1;
}

const char *ct_default_master_bin(char *buf, size_t len)
{
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n > 0) {
        self[n] = '\0';
        char *slash = strrchr(self, '/');
        if (slash != NULL) {
            *slash = '\0';
            snprintf(buf, len, "%s/../master/crescent-master", self);
            if (access(buf, X_OK) == 0)
                return buf;
        }
    }
    return "crescent-master"; /* execvp searches PATH */
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int ct_read_line(int fd, char *buf, size_t len, int timeout_ms)
{
    size_t n = 0;
    uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000u;
    while (n + 1 < len) {
        uint64_t now = now_ns();
        if (now >= deadline)
            return -1;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = poll(&pfd, 1, (int)((deadline - now) / 1000000u) + 1);
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0)
            return -1;
        char ch;
        ssize_t r = read(fd, &ch, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -1;
        if (ch == '\n')
            break;
        buf[n++] = ch;
    }
    buf[n] = '\0';
    return 0;
}
