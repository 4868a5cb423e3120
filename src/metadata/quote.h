/*
 * quote.h - printable excerpts of server replies for error messages.
 *
 * Threading: pure.
 */
#ifndef CRESCENT_METADATA_QUOTE_H
#define CRESCENT_METADATA_QUOTE_H

#include <stddef.h>

#define CRM_QUOTE_MAX 96

/**
 * At most CRM_QUOTE_MAX bytes of p[0..n) with every byte outside printable
 * ASCII replaced by a space and trailing spaces dropped; NUL-terminated.
 * p may be NULL (an empty excerpt).
 */
void crm_quote(const char *p, size_t n, char out[CRM_QUOTE_MAX + 1]);

#endif
