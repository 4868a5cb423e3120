/*
 * tool_util.h - small helpers the command-line tools share (crescent-bench,
 * crescent-demo, crescent-metadata-server): flag parsing, finding a sibling
 * binary of the build. The process spawner is proc.h (and master_proc.h,
 * servers.h); the table-driven flag parser is options.h.
 *
 * Not part of libcrescent; no state; any thread.
 */
#ifndef CRESCENT_TOOLS_TOOL_UTIL_H
#define CRESCENT_TOOLS_TOOL_UTIL_H

#include <stddef.h>

#include "proc.h" /* ct_read_line, the spawner */

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

#endif
