/*
 * store_c.h - Mooncake's store C interface, as libcrescent-mooncake-compat
 * provides it over crescent's store client.
 *
 * The declarations match Mooncake's own store_c.h: the same names, types and
 * return conventions (see docs/compat.md for what each call does here):
 *   - mooncake_store_create: a store handle (not set up yet), or NULL;
 *   - int / int64_t results: 0, a size, a count or 1/0 where Mooncake
 *     returns one, or a negative Mooncake ErrorCode (-600 invalid params,
 *     -704 object not found, -706 object has a lease, ...); -1 for NULL or
 *     malformed arguments and for a handle that is not set up;
 *   - batch calls return 0 once they ran and write one result per key.
 *
 * Strings passed in are copied before the call returns. Threading: any
 * thread may use a store at any time, except mooncake_store_destroy, which
 * no other call may overlap.
 */
#ifndef MOONCAKE_STORE_C_H
#define MOONCAKE_STORE_C_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef void *mooncake_store_t;

/* How a put places its replicas. */
struct mooncake_replicate_config {
    size_t replica_num;
    int with_soft_pin;
    int with_hard_pin;
    const char **preferred_segments;
    size_t preferred_segments_count;
};
typedef struct mooncake_replicate_config mooncake_replicate_config_t;

/* Lifecycle. */
mooncake_store_t mooncake_store_create(void);
void mooncake_store_destroy(mooncake_store_t store);
int mooncake_store_setup(mooncake_store_t store, const char *local_hostname,
                         const char *metadata_server, uint64_t global_segment_size,
                         uint64_t local_buffer_size, const char *protocol, const char *device_name,
                         const char *master_server_addr);
int mooncake_store_init_all(mooncake_store_t store, const char *protocol, const char *device_name,
                            uint64_t mount_segment_size);
int mooncake_store_health_check(mooncake_store_t store);

/* Writes. */
int mooncake_store_put(mooncake_store_t store, const char *key, const void *value, size_t size,
                       const mooncake_replicate_config_t *config);
int mooncake_store_put_from(mooncake_store_t store, const char *key, void *buffer, size_t size,
                            const mooncake_replicate_config_t *config);
int mooncake_store_batch_put_from(mooncake_store_t store, const char **keys, void **buffers,
                                  const size_t *sizes, size_t count,
                                  const mooncake_replicate_config_t *config, int *results_out);

/* Reads. */
int64_t mooncake_store_get_into(mooncake_store_t store, const char *key, void *buffer, size_t size);
int mooncake_store_batch_get_into(mooncake_store_t store, const char **keys, void **buffers,
                                  const size_t *sizes, size_t count, int64_t *results_out);

/* Existence, size, name. */
int mooncake_store_is_exist(mooncake_store_t store, const char *key);
int mooncake_store_batch_is_exist(mooncake_store_t store, const char **keys, size_t count,
                                  int *results_out);
int64_t mooncake_store_get_size(mooncake_store_t store, const char *key);
int mooncake_store_get_hostname(mooncake_store_t store, char *buf_out, size_t buf_len);

/* Removal. */
int mooncake_store_remove(mooncake_store_t store, const char *key, int force);
int64_t mooncake_store_remove_by_regex(mooncake_store_t store, const char *pattern, int force);
int64_t mooncake_store_remove_all(mooncake_store_t store, int force);

/* Memory for the zero-copy calls. */
int mooncake_store_register_buffer(mooncake_store_t store, void *buffer, size_t size);
int mooncake_store_unregister_buffer(mooncake_store_t store, void *buffer);

#ifdef __cplusplus
}
#endif

#endif /* MOONCAKE_STORE_C_H */
