/*
 * kv_table.h - a string -> bytes hash map used by the HTTP metadata server.
 *
 * Keys are NUL-terminated strings, values are arbitrary bytes (they may
 * contain NULs, and may be empty). The table owns copies of both.
 *
 * Threading: none. The table does no locking; its owner serialises access
 * (crd_http_server holds one mutex around every call).
 */
#ifndef CRESCENT_METADATA_KV_TABLE_H
#define CRESCENT_METADATA_KV_TABLE_H

#include <stddef.h>

typedef struct crd_kv_table crd_kv_table;

/** Create an empty table. Errors: CR_ERR_NO_MEMORY. */
int crd_kv_table_create(crd_kv_table **out);

/** Free the table and everything in it. NULL is ignored. */
void crd_kv_table_destroy(crd_kv_table *t);

/** Store a copy of value[0..len) under key, replacing any previous value. */
int crd_kv_table_put(crd_kv_table *t, const char *key, const void *value, size_t len);

/**
 * Like crd_kv_table_put but takes ownership of `value` (from malloc; NULL is
 * allowed when len is 0) on success, saving a copy. On failure the caller
 * still owns it.
 */
int crd_kv_table_put_owned(crd_kv_table *t, const char *key, void *value, size_t len);

/**
 * Copy the value of key into a fresh malloc'd buffer (*value, never NULL on
 * success even for an empty value; caller frees) of *len bytes.
 * Errors: CR_ERR_NOT_FOUND, CR_ERR_NO_MEMORY.
 */
int crd_kv_table_get(const crd_kv_table *t, const char *key, void **value, size_t *len);

/** Remove key. Errors: CR_ERR_NOT_FOUND when it is not there. */
int crd_kv_table_del(crd_kv_table *t, const char *key);

/** Remove every key for which doomed(key, ctx) is non-zero; returns how many went. */
size_t crd_kv_table_del_if(crd_kv_table *t, int (*doomed)(const char *key, void *ctx), void *ctx);

/** Number of keys stored. */
size_t crd_kv_table_count(const crd_kv_table *t);

/** Total bytes of all values stored (keys not counted). */
size_t crd_kv_table_value_bytes(const crd_kv_table *t);

#endif
