/*
 * tool_util.c - see tool_util.h.
 */
#include "tool_util.h"

#include <limits.h>
#include <stdio.h>
#include <string.h>
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
