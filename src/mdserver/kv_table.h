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

#include <stdbool.h>
#include <stddef.h>

typedef struct crd_kv_table crd_kv_table;

/*
 * Value memory. Values of CRD_VALUE_MAP_MIN bytes or more are mapped
 * (mmap) rather than taken from the heap, so that deleting them gives the
 * memory back to the system at once (issue 11 item 12: 3000 deleted 64 KiB
 * values kept 192 MiB in malloc's arenas). Every value the table owns comes
 * from crd_value_alloc(len) with exactly its length.
 */
#define CRD_VALUE_MAP_MIN ((size_t)64 << 10)

/** n bytes (n > 0) for a value; NULL without memory. */
void *crd_value_alloc(size_t n);
/** Free a value of n bytes from crd_value_alloc. NULL is ignored. */
void crd_value_free(void *p, size_t n);

/** Create an empty table. Errors: CR_ERR_NO_MEMORY. */
int crd_kv_table_create(crd_kv_table **out);

/** Free the table and everything in it. NULL is ignored. */
void crd_kv_table_destroy(crd_kv_table *t);

/** Store a copy of value[0..len) under key, replacing any previous value. */
int crd_kv_table_put(crd_kv_table *t, const char *key, const void *value, size_t len);

/**
 * Like crd_kv_table_put but takes ownership of `value` (from
 * crd_value_alloc(len); NULL when len is 0) on success, saving a copy. On
 * failure the caller still owns it.
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

/** Total bytes of all keys stored. */
size_t crd_kv_table_key_bytes(const crd_kv_table *t);

/** Is key stored? */
bool crd_kv_table_contains(const crd_kv_table *t, const char *key);

#endif
