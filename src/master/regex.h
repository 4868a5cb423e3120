/*
 * regex.h - the bounded regular expressions of remove_by_regex.
 *
 * PCRE2 (Debian's libpcre2-8) with every cost bounded, because the pattern
 * comes from any client (issue 11: a backtracking POSIX regexec held a
 * shard lock for 36 s, and regcomp of (a{1,32767}){1,32767} took 1.2 GB):
 *   - compile: at most CRK_REGEX_MAX_PATTERN bytes, parentheses nested at
 *     most 64 deep, and all of PCRE2's compile-time memory drawn from a
 *     1 MiB budget (a general context with a counting allocator); PCRE2's
 *     own limit on the compiled program (64 K code units, link size 2)
 *     refuses huge counted repeats in microseconds;
 *   - match: at most CRK_REGEX_MATCH_LIMIT backtracking steps per subject
 *     (PCRE2's match limit, ~2 ms at worst here), a depth limit, and a heap
 *     limit of 1 MiB. Exceeding any is CR_ERR_REGEX_BUDGET, never a long
 *     stall. The JIT is used when PCRE2 has it (it honours the match
 *     limit); otherwise the interpreter.
 * The syntax is Perl's (PCRE2), which is what Mooncake's std::regex
 * (ECMAScript) users write; matching is a search (unanchored unless the
 * pattern anchors itself) over the key's bytes (no UTF-8 mode).
 *
 * Threading: a compiled crk_regex owns one match-data block, so one thread
 * matches with it at a time; compile and free from any thread.
 */
#ifndef CRESCENT_MASTER_REGEX_H
#define CRESCENT_MASTER_REGEX_H

#include <stddef.h>

#define CRK_REGEX_MAX_PATTERN    4096
#define CRK_REGEX_MATCH_LIMIT    100000
#define CRK_REGEX_COMPILE_MEMORY (1u << 20)
#define CRK_REGEX_MATCH_HEAP_KIB 1024

typedef struct crk_regex crk_regex;

/**
 * Compile pattern (NUL-terminated). Errors: CR_INVALID_PARAMS naming the
 * offset and PCRE2's reason (syntax, too long, too large, nested too deep,
 * over the memory budget), CR_ERR_NO_MEMORY.
 */
int crk_regex_compile(const char *pattern, crk_regex **out);

/**
 * Search subject[0..len): 1 if it matches, 0 if not, CR_ERR_REGEX_BUDGET
 * when a limit was hit (the message says which), CR_INTERNAL_ERROR for any
 * other PCRE2 failure.
 */
int crk_regex_match(crk_regex *re, const char *subject, size_t len);

/** Free; NULL is ignored. */
void crk_regex_free(crk_regex *re);

#endif
