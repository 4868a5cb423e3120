/*
 * tool_util.h - small helpers the command-line tools share (crescent-bench,
 * crescent-demo, crescent-metadata-server): flag parsing, finding a sibling
 * binary of the build, and reading a child's output line by line.
 *
 * Not part of libcrescent; no state; any thread.
 */
#ifndef CRESCENT_TOOLS_TOOL_UTIL_H
#define CRESCENT_TOOLS_TOOL_UTIL_H

#include <stddef.h>

/*
 * If argv[*i] is "name" (value in the next argument) or "name=value", set
 * *value and return 1 (advancing *i past a separate value); return 0 for
 * another argument and -1 when "name" is the last argument.
 */
int ct_flag_value(int argc, char **argv, int *i, const char *name, const char **value);

/*
 * The crescent-master next to the running tool in a build tree
 * (<dir of this executable>/../master/crescent-master) if it is executable,
 * written to buf; else "crescent-master" for a PATH search.
 */
const char *ct_default_master_bin(char *buf, size_t len);

/*
 * Read one line (without its '\n') from fd into buf within timeout_ms.
 * Returns 0, or -1 on timeout, end of file, error, or a line longer than
 * len - 1 bytes is cut there (0 is returned with the cut line).
 */
int ct_read_line(int fd, char *buf, size_t len, int timeout_ms);

#endif
