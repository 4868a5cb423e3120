/*
 * rpc_test.c - the master RPC message codecs.
 *
 * Every opcode's request and reply is built in three variants (small, all
 * minimum values, all maximum values), encoded, decoded, compared field by
 * field and re-encoded to the same bytes. Rejection tests are mechanical
 * where they can be: every proper prefix of every small message, trailing
 * bytes, and a mutation engine that re-packs a valid body with one change
 * (a map entry dropped, nil or a float in place of a value, a key twice, an
 * integer key, a nil array element, an unknown key added) at every map and
 * array of the tree. Bounds, enums, ranges and opcodes are tested by hand.
 * Every rejection checks the status, that the output was not touched and
 * that an error message was recorded.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <msgpack.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/status.h"
#include "proto/frame.h"
#include "proto/rpc.h"

/* ------------------------------------------------------------------------ */
/* Sample data                                                              */
/* ------------------------------------------------------------------------ */

enum { V_SMALL, V_MIN, V_MAX, N_VARIANTS };

#define BIG_BATCH     CRP_RPC_MAX_BATCH
#define BIG_PUT_BATCH 40000 /* keys + sizes of a max batch put start within CRP_MAX_BODY */
#define BIG_SEGMENTS  1000
#define BIG_RESULTS   200
#define RESULT_REPS   3

static char S_KEY_MAX[CRP_RPC_MAX_KEY + 1];
static char S_NAME_MAX[CRP_MAX_NAME + 1];
static char S_SW_MAX[CRP_RPC_MAX_SOFTWARE + 1];
static char S_LOCAL_MAX[CRP_RPC_MAX_LOCAL + 1];
static char S_REGEX_MAX[CRP_RPC_MAX_REGEX + 1];
static char S_MSG_MAX[CRP_RPC_MAX_MSG + 1];

static char *keys_small[] = {"a", "", "layer/0/block/17", "\xd0\xba\xd0\xbb\xd1\x8e\xd1\x87"};
static uint64_t sizes_small[] = {1, 0, 4096, UINT64_MAX};
static char *pref_small[] = {"seg-a", "host:1234"};
static char *names_small[] = {"node-a:17000", "node-b:17000", ""};
static int32_t statuses_small[] = {0, 1, CR_OBJECT_NOT_FOUND, INT32_MIN};

static char (*big_keys)[12];
static char **big_key_ptrs;
static uint64_t *big_sizes;
static int32_t *big_statuses;
static char *pref_max[CRP_RPC_MAX_PREFERRED];
static crp_rpc_segment *big_segments;
static char **big_names;
static crp_rpc_replica reps_small[2];
static crp_rpc_replica reps_max[CRP_RPC_MAX_REPLICAS];
static crp_rpc_key_result results_small[3];
static crp_rpc_key_result *big_results;

static int setup_samples(void **state)
{
    (void)state;
    memset(S_KEY_MAX, 'k', CRP_RPC_MAX_KEY);
    memset(S_NAME_MAX, 'n', CRP_MAX_NAME);
    memset(S_SW_MAX, 's', CRP_RPC_MAX_SOFTWARE);
    memset(S_LOCAL_MAX, 'l', CRP_RPC_MAX_LOCAL);
    memset(S_REGEX_MAX, '.', CRP_RPC_MAX_REGEX);
    memset(S_MSG_MAX, 'm', CRP_RPC_MAX_MSG);

    big_keys = calloc(BIG_BATCH, sizeof(*big_keys));
    big_key_ptrs = calloc(BIG_BATCH, sizeof(*big_key_ptrs));
    big_sizes = calloc(BIG_BATCH, sizeof(*big_sizes));
    big_statuses = calloc(BIG_BATCH, sizeof(*big_statuses));
    big_segments = calloc(BIG_SEGMENTS, sizeof(*big_segments));
    big_names = calloc(BIG_SEGMENTS, sizeof(*big_names));
    big_results = calloc(BIG_RESULTS, sizeof(*big_results));
    if (big_keys == NULL || big_key_ptrs == NULL || big_sizes == NULL || big_statuses == NULL ||
        big_segments == NULL || big_names == NULL || big_results == NULL)
        return -1;
    for (size_t i = 0; i < BIG_BATCH; i++) {
        snprintf(big_keys[i], sizeof(big_keys[i]), "k%08zu", i);
        big_key_ptrs[i] = big_keys[i];
        big_sizes[i] = UINT64_MAX - i;
        big_statuses[i] = i % 2 == 0 ? INT32_MIN + (int32_t)i : INT32_MAX - (int32_t)i;
    }
    for (size_t i = 0; i < CRP_RPC_MAX_PREFERRED; i++)
        pref_max[i] = S_NAME_MAX;
    for (size_t i = 0; i < BIG_SEGMENTS; i++) {
        big_segments[i] = (crp_rpc_segment){S_NAME_MAX, UINT64_MAX - 1 - i, 1 + i, UINT64_MAX - i};
        big_names[i] = S_NAME_MAX;
    }
    reps_small[0] =
        (crp_rpc_replica){"node-a:17000", 0x7f0000001000ull, 4096, 1, CRP_RPC_REPLICA_COMPLETE};
    reps_small[1] =
        (crp_rpc_replica){"node-b:17000", 0x7f0000002000ull, 4096, 2, CRP_RPC_REPLICA_PROCESSING};
    for (size_t i = 0; i < CRP_RPC_MAX_REPLICAS; i++)
        reps_max[i] =
            (crp_rpc_replica){S_NAME_MAX, UINT64_MAX - i, i, UINT64_MAX, CRP_RPC_REPLICA_FAILED};
    results_small[0] = (crp_rpc_key_result){0, 2, reps_small, 42};
    results_small[1] = (crp_rpc_key_result){CR_NO_AVAILABLE_HANDLE, 0, NULL, 0};
    results_small[2] = (crp_rpc_key_result){0, 0, NULL, 0};
    for (size_t i = 0; i < BIG_RESULTS; i++) {
        if (i % 4 == 3)
            big_results[i] = (crp_rpc_key_result){INT32_MIN, 0, NULL, 0};
        else
            big_results[i] =
                (crp_rpc_key_result){0, RESULT_REPS, reps_max + i % 8, i % 2 ? UINT64_MAX : 0};
    }
    return 0;
}

static int teardown_samples(void **state)
{
    (void)state;
    free(big_keys);
    free(big_key_ptrs);
    free(big_sizes);
    free(big_statuses);
    free(big_segments);
    free(big_names);
    free(big_results);
    return 0;
}

static crp_rpc_uuid sample_uuid(int v)
{
    if (v == V_MIN)
        return (crp_rpc_uuid){0, 0};
    if (v == V_MAX)
        return (crp_rpc_uuid){UINT64_MAX, UINT64_MAX};
    return (crp_rpc_uuid){0x0123456789abcdefull, 0xfedcba9876543210ull};
}

static crp_rpc_segment sample_segment(int v)
{
    if (v == V_MIN)
        return (crp_rpc_segment){"", 0, 1, 0};
    if (v == V_MAX)
        return (crp_rpc_segment){S_NAME_MAX, 0, UINT64_MAX, UINT64_MAX};
    return (crp_rpc_segment){"node-a:17000", 0x7f0000000000ull, 1ull << 30, 3};
}

static crp_rpc_replica_config sample_config(int v)
{
    crp_rpc_replica_config c = {0};
    if (v == V_MAX) {
        c.replica_num = UINT32_MAX;
        c.hard_pin = true;
        c.soft_pin_action = CRP_RPC_SOFT_PIN_DISABLE;
        c.has_soft_pin_ttl = true;
        c.soft_pin_ttl_ms = UINT64_MAX;
        c.n_preferred = CRP_RPC_MAX_PREFERRED;
        c.preferred_segments = pref_max;
        c.prefer_same_node = true;
    } else if (v == V_SMALL) {
        c.replica_num = 2;
        c.soft_pin_action = CRP_RPC_SOFT_PIN_ENABLE;
        c.has_soft_pin_ttl = true;
        c.soft_pin_ttl_ms = 0;
        c.n_preferred = 2;
        c.preferred_segments = pref_small;
    }
    return c;
}

static char *sample_key(int v)
{
    return v == V_MIN ? "" : v == V_MAX ? S_KEY_MAX : "layer/3/block/42";
}

/* --- Requests, by shape ---------------------------------------------------- */

static void fill_rq_hello(crp_rpc_req *m, int v)
{
    m->u.hello.version = v == V_MAX ? UINT32_MAX : v == V_MIN ? 0 : CRP_RPC_VERSION;
    m->u.hello.caps = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : CRP_RPC_CAPS_DEFINED;
    m->u.hello.client_id = sample_uuid(v);
    m->u.hello.software = v == V_MAX ? S_SW_MAX : v == V_MIN ? "" : "crescent 0.1.0";
    m->u.hello.has_mac = v == V_MAX; /* the shared-secret answer: optional */
    memset(m->u.hello.client_nonce, 0xC1, CRP_NONCE_SIZE);
    memset(m->u.hello.mac, 0x3A, CRP_MAC_SIZE);
}

static void fill_rq_client(crp_rpc_req *m, int v)
{
    m->u.client.client_id = sample_uuid(v);
}

static void fill_rq_mount(crp_rpc_req *m, int v)
{
    m->u.mount.client_id = sample_uuid(v);
    m->u.mount.segment = sample_segment(v);
}

static crp_rpc_segment segs_small[2];

static void fill_rq_remount(crp_rpc_req *m, int v)
{
    m->u.remount.client_id = sample_uuid(v);
    if (v == V_MAX) {
        m->u.remount.n_segments = BIG_SEGMENTS;
        m->u.remount.segments = big_segments;
    } else if (v == V_SMALL) {
        segs_small[0] = sample_segment(V_SMALL);
        segs_small[1] = sample_segment(V_MAX);
        m->u.remount.n_segments = 2;
        m->u.remount.segments = segs_small;
    }
}

static void fill_rq_unmount(crp_rpc_req *m, int v)
{
    m->u.unmount.client_id = sample_uuid(v);
    m->u.unmount.name = sample_segment(v).name;
}

/* The gets' optional "swt" (stage wait); other ops of the key shapes do not carry it. */
static void fill_stage_wait(crp_rpc_req *m, int v)
{
    if (m->op == CRP_RPC_GET_REPLICA_LIST || m->op == CRP_RPC_BATCH_GET_REPLICA_LIST)
        m->stage_wait_ms = v == V_MAX ? UINT32_MAX : v == V_SMALL ? 200 : 0;
}

static void fill_rq_key(crp_rpc_req *m, int v)
{
    m->u.key.key = sample_key(v);
    fill_stage_wait(m, v);
}

static void sample_keys(int v, size_t *n, char ***keys)
{
    if (v == V_MAX) {
        *n = BIG_BATCH;
        *keys = big_key_ptrs;
    } else if (v == V_SMALL) {
        *n = 4;
        *keys = keys_small;
    }
}

static void fill_rq_keys(crp_rpc_req *m, int v)
{
    sample_keys(v, &m->u.keys.n_keys, &m->u.keys.keys);
    if (v != V_MAX) /* V_MAX: the batch fills the frame */
        fill_stage_wait(m, v);
}

static uint64_t tokens_small[4] = {1, 0, UINT64_MAX, 7};

static void fill_rq_leases(crp_rpc_req *m, int v)
{
    sample_keys(v, &m->u.leases.n_keys, &m->u.leases.keys);
    if (v == V_MAX)
        m->u.leases.n_keys = BIG_PUT_BATCH; /* with full-width tokens, as many as fit */
    m->u.leases.tokens = v == V_MAX ? big_sizes : v == V_SMALL ? tokens_small : NULL;
}

static void fill_rq_put_start(crp_rpc_req *m, int v)
{
    m->u.put_start.client_id = sample_uuid(v);
    m->u.put_start.key = sample_key(v);
    m->u.put_start.value_size = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : 1 << 20;
    m->u.put_start.config = sample_config(v);
    m->owned_ms = v == V_MAX ? UINT64_MAX : v == V_SMALL ? 30000 : 0;
}

static void fill_rq_owner_key(crp_rpc_req *m, int v)
{
    m->u.owner_key.client_id = sample_uuid(v);
    m->u.owner_key.key = sample_key(v);
    if (m->op == CRP_RPC_PUT_END || m->op == CRP_RPC_UPSERT_END) /* the ends' optional "gk" */
        m->grant_key = v == V_MAX ? S_KEY_MAX : v == V_SMALL ? "\x02grant/0123" : NULL;
    /* "ca" needs "gk" (so not in V_SMALL, whose fields the mutation test drops one by one) */
    m->commit_ahead = m->op == CRP_RPC_PUT_END && v == V_MAX;
}

static void fill_rq_batch_put_start(crp_rpc_req *m, int v)
{
    crp_rpc_batch_put_start_req *r = &m->u.batch_put_start;
    r->client_id = sample_uuid(v);
    sample_keys(v, &r->n_keys, &r->keys);
    if (v == V_MAX)
        r->n_keys = BIG_PUT_BATCH;
    r->value_sizes = v == V_MAX ? big_sizes : v == V_SMALL ? sizes_small : NULL;
    r->config = sample_config(v);
    m->owned_ms = v == V_SMALL ? 30000 : 0; /* V_MAX: the batch fills the frame */
}

static void fill_rq_owner_keys(crp_rpc_req *m, int v)
{
    m->u.owner_keys.client_id = sample_uuid(v);
    sample_keys(v, &m->u.owner_keys.n_keys, &m->u.owner_keys.keys);
    m->commit_ahead = m->op == CRP_RPC_BATCH_PUT_END && v == V_MAX; /* a batch's "ca" */
}

static void fill_rq_remove(crp_rpc_req *m, int v)
{
    m->u.remove.key = sample_key(v);
    m->u.remove.force = v != V_MIN;
}

static void fill_rq_regex(crp_rpc_req *m, int v)
{
    m->u.regex.pattern = v == V_MAX ? S_REGEX_MAX : v == V_MIN ? "" : "^layer/[0-9]+/";
    m->u.regex.force = v == V_MAX;
}

static void fill_rq_force(crp_rpc_req *m, int v)
{
    m->u.force.force = v != V_MIN;
}

static void fill_rq_batch_remove(crp_rpc_req *m, int v)
{
    sample_keys(v, &m->u.batch_remove.n_keys, &m->u.batch_remove.keys);
    m->u.batch_remove.force = v == V_SMALL;
}

static void fill_rq_replica_clear(crp_rpc_req *m, int v)
{
    crp_rpc_replica_clear_req *r = &m->u.replica_clear;
    r->client_id = sample_uuid(v);
    sample_keys(v, &r->n_keys, &r->keys);
    r->segment = v == V_MIN ? "" : sample_segment(v).name;
}

static void fill_rq_name(crp_rpc_req *m, int v)
{
    m->u.name.name = sample_segment(v).name;
}

static uint8_t blob_bytes[300] = {0x81, 0xa1, 'x', 0x01, 0x00, 0xff};

static void fill_rq_blob(crp_rpc_req *m, int v)
{
    m->u.blob.client_id = sample_uuid(v);
    m->u.blob.len = v == V_MIN ? 0 : v == V_MAX ? sizeof(blob_bytes) : 6;
    m->u.blob.data = v == V_MIN ? NULL : blob_bytes;
}

static void fill_rq_none(crp_rpc_req *m, int v)
{
    (void)m;
    (void)v;
}

static void fill_req(crp_rpc_req *m, int op, int v)
{
    memset(m, 0, sizeof(*m));
    m->op = (uint16_t)op;
    switch (op) {
#define FILL_(name, value, str, rq, rs)                                                            \
    case value:                                                                                    \
        fill_rq_##rq(m, v);                                                                        \
        break;
        CRP_RPC_OP_TABLE(FILL_)
#undef FILL_
    default:
        fail_msg("no such op %d", op);
    }
}

/* --- Replies, by shape ----------------------------------------------------- */

static void fill_rs_hello(crp_rpc_resp *m, int v)
{
    m->u.hello.version = v == V_MAX ? UINT32_MAX : v == V_MIN ? 0 : CRP_RPC_VERSION;
    m->u.hello.caps = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : CRP_RPC_CAP_BATCH;
    m->u.hello.software = v == V_MAX ? S_SW_MAX : v == V_MIN ? "" : "crescent-master 0.1.0";
    m->u.hello.view_version = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : 7;
    m->u.hello.has_server_nonce = v == V_MAX; /* a shared-secret challenge: optional */
    memset(m->u.hello.server_nonce, 0x5E, CRP_NONCE_SIZE);
    m->u.hello.has_mac = v != V_MIN;
    memset(m->u.hello.mac, 0x77, CRP_MAC_SIZE);
    /* the same-host offer: optional, absent at V_MIN */
    m->u.hello.local_socket = v == V_MAX ? S_LOCAL_MAX : v == V_MIN ? NULL : "crescent-master.0f";
    m->u.hello.local_port = v == V_MAX ? UINT16_MAX : 40000;
    m->u.hello.local_pid = v == V_MAX ? UINT32_MAX : 4242;
}

static void fill_rs_ping(crp_rpc_resp *m, int v)
{
    m->u.ping.client_status = v == V_MAX   ? CRP_RPC_CLIENT_NEED_REMOUNT
                              : v == V_MIN ? CRP_RPC_CLIENT_UNDEFINED
                                           : CRP_RPC_CLIENT_OK;
    m->u.ping.view_version = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : 7;
    m->u.ping.fenced_ms = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : 1500;
}

static void fill_rs_exist(crp_rpc_resp *m, int v)
{
    m->u.exist.exists = v != V_MIN;
}

static void fill_rs_statuses(crp_rpc_resp *m, int v)
{
    if (v == V_MAX) {
        m->u.statuses.n = BIG_BATCH;
        m->u.statuses.results = big_statuses;
    } else if (v == V_SMALL) {
        m->u.statuses.n = 4;
        m->u.statuses.results = statuses_small;
    }
}

static void sample_replicas(int v, size_t *n, crp_rpc_replica **reps)
{
    if (v == V_MAX) {
        *n = CRP_RPC_MAX_REPLICAS;
        *reps = reps_max;
    } else if (v == V_SMALL) {
        *n = 2;
        *reps = reps_small;
    }
}

static void fill_rs_get(crp_rpc_resp *m, int v)
{
    sample_replicas(v, &m->u.get.n_replicas, &m->u.get.replicas);
    m->u.get.lease_ttl_ms = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : 10000;
    m->u.get.lease_token = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : 3;
    m->u.get.version = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : (7ull << 40) + 5;
}

static void fill_rs_alloc(crp_rpc_resp *m, int v)
{
    sample_replicas(v, &m->u.alloc.n_replicas, &m->u.alloc.replicas);
}

static void sample_results(int v, size_t *n, crp_rpc_key_result **r)
{
    if (v == V_MAX) {
        *n = BIG_RESULTS;
        *r = big_results;
    } else if (v == V_SMALL) {
        *n = 3;
        *r = results_small;
    }
}

static void fill_rs_batch_get(crp_rpc_resp *m, int v)
{
    sample_results(v, &m->u.batch_get.n, &m->u.batch_get.results);
    m->u.batch_get.lease_ttl_ms = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : 10000;
}

static void fill_rs_batch_alloc(crp_rpc_resp *m, int v)
{
    sample_results(v, &m->u.batch_alloc.n, &m->u.batch_alloc.results);
}

static void fill_rs_count(crp_rpc_resp *m, int v)
{
    m->u.count.count = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : 12;
}

static void fill_rs_names(crp_rpc_resp *m, int v)
{
    if (v == V_MAX) {
        m->u.names.n_names = BIG_SEGMENTS;
        m->u.names.names = big_names;
    } else if (v == V_SMALL) {
        m->u.names.n_names = 3;
        m->u.names.names = names_small;
    }
}

static void fill_rs_segment_info(crp_rpc_resp *m, int v)
{
    m->u.segment_info.segment = sample_segment(v);
    m->u.segment_info.used = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : 4096;
    m->u.segment_info.client_id = sample_uuid(v);
}

static void fill_rs_key_info(crp_rpc_resp *m, int v)
{
    crp_rpc_key_info_resp *r = &m->u.key_info;
    r->value_size = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : 4096;
    sample_replicas(v, &r->n_replicas, &r->replicas);
    r->lease_ms_left = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : 9000;
    r->hard_pin = v == V_MAX;
    r->soft_pin_ms_left = v == V_MAX ? UINT64_MAX : v == V_MIN ? 0 : 60000;
    r->client_id = sample_uuid(v);
}

static void fill_rs_blob(crp_rpc_resp *m, int v)
{
    m->u.blob.len = v == V_MIN ? 0 : v == V_MAX ? sizeof(blob_bytes) : 6;
    m->u.blob.data = v == V_MIN ? NULL : blob_bytes;
}

static void fill_rs_end(crp_rpc_resp *m, int v)
{
    m->u.end.version = v == V_MIN ? 0 : v == V_MAX ? UINT64_MAX : (0xabcull << 40) + 7;
}

static void fill_rs_none(crp_rpc_resp *m, int v)
{
    (void)m;
    (void)v;
}

static void fill_resp(crp_rpc_resp *m, int op, int v)
{
    memset(m, 0, sizeof(*m));
    m->op = (uint16_t)op;
    m->message = v == V_MAX ? S_MSG_MAX : v == V_MIN ? "" : NULL;
    switch (op) {
#define FILL_(name, value, str, rq, rs)                                                            \
    case value:                                                                                    \
        fill_rs_##rs(m, v);                                                                        \
        break;
        CRP_RPC_OP_TABLE(FILL_)
#undef FILL_
    default:
        fail_msg("no such op %d", op);
    }
}

/* An error reply: no payload, except SERVICE_READY which always has one. */
static void fill_error_resp(crp_rpc_resp *m, int op)
{
    fill_resp(m, op, V_SMALL);
    if (op == CRP_RPC_SERVICE_READY) {
        m->status = CR_INVALID_VERSION;
        m->u.hello.version = CRP_RPC_VERSION + 1;
    } else {
        memset(&m->u, 0, sizeof(m->u));
        m->status = op % 2 == 0 ? CR_OBJECT_NOT_FOUND : INT32_MIN;
    }
    m->message = "object not found: layer/3/block/42";
}

/* ------------------------------------------------------------------------ */
/* Deep equality                                                            */
/* ------------------------------------------------------------------------ */

static void eq_str(const char *a, const char *b)
{
    assert_non_null(a);
    assert_non_null(b);
    assert_string_equal(a, b);
}

static void eq_uuid(const crp_rpc_uuid *a, const crp_rpc_uuid *b)
{
    assert_true(a->hi == b->hi);
    assert_true(a->lo == b->lo);
}

static void eq_segment(const crp_rpc_segment *a, const crp_rpc_segment *b)
{
    eq_str(a->name, b->name);
    assert_true(a->base == b->base);
    assert_true(a->size == b->size);
    assert_true(a->epoch == b->epoch);
}

static void eq_strs(size_t na, char *const *a, size_t nb, char *const *b)
{
    assert_int_equal(na, nb);
    for (size_t i = 0; i < na; i++)
        eq_str(a[i], b[i]);
}

static void eq_replicas(size_t na, const crp_rpc_replica *a, size_t nb, const crp_rpc_replica *b)
{
    assert_int_equal(na, nb);
    for (size_t i = 0; i < na; i++) {
        eq_str(a[i].segment, b[i].segment);
        assert_true(a[i].addr == b[i].addr);
        assert_true(a[i].size == b[i].size);
        assert_true(a[i].epoch == b[i].epoch);
        assert_int_equal(a[i].status, b[i].status);
    }
}

static void eq_config(const crp_rpc_replica_config *a, const crp_rpc_replica_config *b)
{
    assert_int_equal(a->replica_num, b->replica_num);
    assert_int_equal(a->hard_pin, b->hard_pin);
    assert_int_equal(a->soft_pin_action, b->soft_pin_action);
    assert_int_equal(a->has_soft_pin_ttl, b->has_soft_pin_ttl);
    if (a->has_soft_pin_ttl)
        assert_true(a->soft_pin_ttl_ms == b->soft_pin_ttl_ms);
    eq_strs(a->n_preferred, a->preferred_segments, b->n_preferred, b->preferred_segments);
    assert_int_equal(a->prefer_same_node, b->prefer_same_node);
}

static void eq_results(size_t na, const crp_rpc_key_result *a, size_t nb,
                       const crp_rpc_key_result *b)
{
    assert_int_equal(na, nb);
    for (size_t i = 0; i < na; i++) {
        assert_int_equal(a[i].status, b[i].status);
        if (a[i].status == 0) {
            eq_replicas(a[i].n_replicas, a[i].replicas, b[i].n_replicas, b[i].replicas);
            assert_true(a[i].lease_token == b[i].lease_token);
        } else {
            assert_int_equal(b[i].n_replicas, 0);
        }
    }
}

static void eq_rq_hello(const crp_rpc_req *a, const crp_rpc_req *b)
{
    assert_int_equal(a->u.hello.version, b->u.hello.version);
    assert_true(a->u.hello.caps == b->u.hello.caps);
    eq_uuid(&a->u.hello.client_id, &b->u.hello.client_id);
    eq_str(a->u.hello.software, b->u.hello.software);
    assert_int_equal(a->u.hello.has_mac, b->u.hello.has_mac);
    if (a->u.hello.has_mac) {
        assert_memory_equal(a->u.hello.client_nonce, b->u.hello.client_nonce, CRP_NONCE_SIZE);
        assert_memory_equal(a->u.hello.mac, b->u.hello.mac, CRP_MAC_SIZE);
    }
}

static void eq_rq_client(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_uuid(&a->u.client.client_id, &b->u.client.client_id);
}

static void eq_rq_mount(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_uuid(&a->u.mount.client_id, &b->u.mount.client_id);
    eq_segment(&a->u.mount.segment, &b->u.mount.segment);
}

static void eq_rq_remount(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_uuid(&a->u.remount.client_id, &b->u.remount.client_id);
    assert_int_equal(a->u.remount.n_segments, b->u.remount.n_segments);
    for (size_t i = 0; i < a->u.remount.n_segments; i++)
        eq_segment(&a->u.remount.segments[i], &b->u.remount.segments[i]);
}

static void eq_rq_unmount(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_uuid(&a->u.unmount.client_id, &b->u.unmount.client_id);
    eq_str(a->u.unmount.name, b->u.unmount.name);
}

static void eq_rq_key(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_str(a->u.key.key, b->u.key.key);
    assert_true(a->stage_wait_ms == b->stage_wait_ms);
}

static void eq_rq_keys(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_strs(a->u.keys.n_keys, a->u.keys.keys, b->u.keys.n_keys, b->u.keys.keys);
    assert_true(a->stage_wait_ms == b->stage_wait_ms);
}

static void eq_rq_leases(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_strs(a->u.leases.n_keys, a->u.leases.keys, b->u.leases.n_keys, b->u.leases.keys);
    for (size_t i = 0; i < a->u.leases.n_keys; i++)
        assert_true(a->u.leases.tokens[i] == b->u.leases.tokens[i]);
}

static void eq_rq_put_start(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_uuid(&a->u.put_start.client_id, &b->u.put_start.client_id);
    eq_str(a->u.put_start.key, b->u.put_start.key);
    assert_true(a->u.put_start.value_size == b->u.put_start.value_size);
    eq_config(&a->u.put_start.config, &b->u.put_start.config);
    assert_true(a->owned_ms == b->owned_ms);
}

static void eq_rq_owner_key(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_uuid(&a->u.owner_key.client_id, &b->u.owner_key.client_id);
    eq_str(a->u.owner_key.key, b->u.owner_key.key);
    if (a->grant_key == NULL)
        assert_null(b->grant_key);
    else
        eq_str(a->grant_key, b->grant_key);
    assert_int_equal(a->commit_ahead, b->commit_ahead);
}

static void eq_rq_batch_put_start(const crp_rpc_req *a, const crp_rpc_req *b)
{
    const crp_rpc_batch_put_start_req *x = &a->u.batch_put_start, *y = &b->u.batch_put_start;
    eq_uuid(&x->client_id, &y->client_id);
    eq_strs(x->n_keys, x->keys, y->n_keys, y->keys);
    for (size_t i = 0; i < x->n_keys; i++)
        assert_true(x->value_sizes[i] == y->value_sizes[i]);
    eq_config(&x->config, &y->config);
    assert_true(a->owned_ms == b->owned_ms);
}

static void eq_rq_owner_keys(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_uuid(&a->u.owner_keys.client_id, &b->u.owner_keys.client_id);
    eq_strs(a->u.owner_keys.n_keys, a->u.owner_keys.keys, b->u.owner_keys.n_keys,
            b->u.owner_keys.keys);
}

static void eq_rq_remove(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_str(a->u.remove.key, b->u.remove.key);
    assert_int_equal(a->u.remove.force, b->u.remove.force);
}

static void eq_rq_regex(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_str(a->u.regex.pattern, b->u.regex.pattern);
    assert_int_equal(a->u.regex.force, b->u.regex.force);
}

static void eq_rq_force(const crp_rpc_req *a, const crp_rpc_req *b)
{
    assert_int_equal(a->u.force.force, b->u.force.force);
}

static void eq_rq_batch_remove(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_strs(a->u.batch_remove.n_keys, a->u.batch_remove.keys, b->u.batch_remove.n_keys,
            b->u.batch_remove.keys);
    assert_int_equal(a->u.batch_remove.force, b->u.batch_remove.force);
}

static void eq_rq_replica_clear(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_uuid(&a->u.replica_clear.client_id, &b->u.replica_clear.client_id);
    eq_strs(a->u.replica_clear.n_keys, a->u.replica_clear.keys, b->u.replica_clear.n_keys,
            b->u.replica_clear.keys);
    eq_str(a->u.replica_clear.segment, b->u.replica_clear.segment);
}

static void eq_rq_name(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_str(a->u.name.name, b->u.name.name);
}

static void eq_rq_blob(const crp_rpc_req *a, const crp_rpc_req *b)
{
    eq_uuid(&a->u.blob.client_id, &b->u.blob.client_id);
    assert_int_equal(a->u.blob.len, b->u.blob.len);
    if (a->u.blob.len > 0)
        assert_memory_equal(a->u.blob.data, b->u.blob.data, a->u.blob.len);
}

static void eq_rq_none(const crp_rpc_req *a, const crp_rpc_req *b)
{
    (void)a;
    (void)b;
}

static void eq_req(const crp_rpc_req *a, const crp_rpc_req *b)
{
    assert_int_equal(a->op, b->op);
    switch (a->op) {
#define EQ_(name, value, str, rq, rs)                                                              \
    case value:                                                                                    \
        eq_rq_##rq(a, b);                                                                          \
        break;
        CRP_RPC_OP_TABLE(EQ_)
#undef EQ_
    default:
        fail_msg("no such op %d", a->op);
    }
}

static void eq_rs_hello(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    assert_int_equal(a->u.hello.version, b->u.hello.version);
    assert_true(a->u.hello.caps == b->u.hello.caps);
    eq_str(a->u.hello.software, b->u.hello.software);
    assert_true(a->u.hello.view_version == b->u.hello.view_version);
    assert_int_equal(a->u.hello.has_server_nonce, b->u.hello.has_server_nonce);
    if (a->u.hello.has_server_nonce)
        assert_memory_equal(a->u.hello.server_nonce, b->u.hello.server_nonce, CRP_NONCE_SIZE);
    assert_int_equal(a->u.hello.has_mac, b->u.hello.has_mac);
    if (a->u.hello.has_mac)
        assert_memory_equal(a->u.hello.mac, b->u.hello.mac, CRP_MAC_SIZE);
    assert_int_equal(a->u.hello.local_socket != NULL, b->u.hello.local_socket != NULL);
    if (a->u.hello.local_socket != NULL) {
        eq_str(a->u.hello.local_socket, b->u.hello.local_socket);
        assert_int_equal(a->u.hello.local_port, b->u.hello.local_port);
        assert_int_equal(a->u.hello.local_pid, b->u.hello.local_pid);
    }
}

static void eq_rs_ping(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    assert_int_equal(a->u.ping.client_status, b->u.ping.client_status);
    assert_true(a->u.ping.view_version == b->u.ping.view_version);
    assert_true(a->u.ping.fenced_ms == b->u.ping.fenced_ms);
}

static void eq_rs_exist(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    assert_int_equal(a->u.exist.exists, b->u.exist.exists);
}

static void eq_rs_statuses(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    assert_int_equal(a->u.statuses.n, b->u.statuses.n);
    for (size_t i = 0; i < a->u.statuses.n; i++)
        assert_int_equal(a->u.statuses.results[i], b->u.statuses.results[i]);
}

static void eq_rs_get(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    eq_replicas(a->u.get.n_replicas, a->u.get.replicas, b->u.get.n_replicas, b->u.get.replicas);
    assert_true(a->u.get.lease_ttl_ms == b->u.get.lease_ttl_ms);
    assert_true(a->u.get.lease_token == b->u.get.lease_token);
    assert_true(a->u.get.version == b->u.get.version);
}

static void eq_rs_alloc(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    eq_replicas(a->u.alloc.n_replicas, a->u.alloc.replicas, b->u.alloc.n_replicas,
                b->u.alloc.replicas);
}

static void eq_rs_batch_get(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    eq_results(a->u.batch_get.n, a->u.batch_get.results, b->u.batch_get.n, b->u.batch_get.results);
    assert_true(a->u.batch_get.lease_ttl_ms == b->u.batch_get.lease_ttl_ms);
}

static void eq_rs_batch_alloc(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    eq_results(a->u.batch_alloc.n, a->u.batch_alloc.results, b->u.batch_alloc.n,
               b->u.batch_alloc.results);
}

static void eq_rs_count(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    assert_true(a->u.count.count == b->u.count.count);
}

static void eq_rs_names(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    eq_strs(a->u.names.n_names, a->u.names.names, b->u.names.n_names, b->u.names.names);
}

static void eq_rs_segment_info(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    eq_segment(&a->u.segment_info.segment, &b->u.segment_info.segment);
    assert_true(a->u.segment_info.used == b->u.segment_info.used);
    eq_uuid(&a->u.segment_info.client_id, &b->u.segment_info.client_id);
}

static void eq_rs_key_info(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    const crp_rpc_key_info_resp *x = &a->u.key_info, *y = &b->u.key_info;
    assert_true(x->value_size == y->value_size);
    eq_replicas(x->n_replicas, x->replicas, y->n_replicas, y->replicas);
    assert_true(x->lease_ms_left == y->lease_ms_left);
    assert_int_equal(x->hard_pin, y->hard_pin);
    assert_true(x->soft_pin_ms_left == y->soft_pin_ms_left);
    eq_uuid(&x->client_id, &y->client_id);
}

static void eq_rs_blob(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    assert_int_equal(a->u.blob.len, b->u.blob.len);
    if (a->u.blob.len > 0)
        assert_memory_equal(a->u.blob.data, b->u.blob.data, a->u.blob.len);
}

static void eq_rs_end(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    assert_int_equal(a->u.end.version, b->u.end.version);
}

static void eq_rs_none(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    (void)a;
    (void)b;
}

static void eq_resp(const crp_rpc_resp *a, const crp_rpc_resp *b)
{
    assert_int_equal(a->op, b->op);
    assert_int_equal(a->status, b->status);
    if (a->message == NULL) {
        assert_null(b->message);
    } else {
        eq_str(a->message, b->message);
    }
    if (a->status != 0 && a->op != CRP_RPC_SERVICE_READY)
        return;
    switch (a->op) {
#define EQ_(name, value, str, rq, rs)                                                              \
    case value:                                                                                    \
        eq_rs_##rs(a, b);                                                                          \
        break;
        CRP_RPC_OP_TABLE(EQ_)
#undef EQ_
    default:
        fail_msg("no such op %d", a->op);
    }
}

/* ------------------------------------------------------------------------ */
/* Generic decode checks                                                    */
/* ------------------------------------------------------------------------ */

typedef enum dir { REQ, RESP } dir;

static int decode_dir(dir d, const void *data, size_t len, void *out)
{
    return d == REQ ? crp_rpc_req_decode(data, len, out) : crp_rpc_resp_decode(data, len, out);
}

static void clear_dir(dir d, void *m)
{
    if (d == REQ)
        crp_rpc_req_clear(m);
    else
        crp_rpc_resp_clear(m);
}

static int encode_dir(dir d, const void *m, crp_buf *out)
{
    return d == REQ ? crp_rpc_req_encode(m, out) : crp_rpc_resp_encode(m, out);
}

static void expect_reject_at(dir d, const void *data, size_t len, int want, const char *file,
                             int line)
{
    union {
        crp_rpc_req req;
        crp_rpc_resp resp;
    } out, before;
    memset(&out, 0xA5, sizeof(out));
    memcpy(&before, &out, sizeof(out));
    int rc = decode_dir(d, data, len, &out);
    if (rc == 0)
        clear_dir(d, &out);
    if (rc != want)
        fprintf(stderr, "%s:%d: %s decode of %zu bytes returned %d (%s), want %d\n", file, line,
                d == REQ ? "request" : "reply", len, rc, cr_last_error_message(), want);
    _assert_int_equal((LargestIntegralType)rc, (LargestIntegralType)want, file, line);
    _assert_true(memcmp(&out, &before, sizeof(out)) == 0, "output untouched", file, line);
    _assert_true(cr_last_error_message()[0] != '\0', "error message set", file, line);
}

#define expect_reject(d, data, n, want)                                                            \
    expect_reject_at((d), (data), (n), (want), __FILE__, __LINE__)

static void expect_error_mentions(const char *needle)
{
    const char *msg = cr_last_error_message();
    if (strstr(msg, needle) == NULL)
        fprintf(stderr, "error message \"%s\" lacks \"%s\"\n", msg, needle);
    assert_non_null(strstr(msg, needle));
}

/* Decode must succeed and re-encode to exactly `want` (canonical form). */
static void expect_canonical(dir d, const void *data, size_t len, const uint8_t *want,
                             size_t want_len)
{
    union {
        crp_rpc_req req;
        crp_rpc_resp resp;
    } m;
    crp_buf b = {0};
    int rc = decode_dir(d, data, len, &m);
    if (rc != 0)
        fail_msg("decode failed: %s", cr_last_error_message());
    assert_int_equal(encode_dir(d, &m, &b), 0);
    assert_int_equal(b.len, want_len);
    assert_memory_equal(b.data, want, want_len);
    clear_dir(d, &m);
    crp_buf_free(&b);
}

/* Encode m, decode, compare, re-encode to the same bytes. Returns the encoding. */
static void round_trip_req(const crp_rpc_req *m, crp_buf *wire)
{
    crp_rpc_req back;
    crp_buf again = {0};
    int rc = crp_rpc_req_encode(m, wire);
    if (rc != 0)
        fail_msg("encode %s request: %s", crp_rpc_op_name(m->op), cr_last_error_message());
    assert_true(wire->len <= CRP_MAX_BODY);
    memset(&back, 0x5A, sizeof(back));
    rc = crp_rpc_req_decode(wire->data, wire->len, &back);
    if (rc != 0)
        fail_msg("decode %s request: %s", crp_rpc_op_name(m->op), cr_last_error_message());
    eq_req(m, &back);
    assert_int_equal(crp_rpc_req_encode(&back, &again), 0);
    assert_int_equal(again.len, wire->len);
    assert_memory_equal(again.data, wire->data, wire->len);
    crp_rpc_req_clear(&back);
    crp_buf_free(&again);
}

static void round_trip_resp(const crp_rpc_resp *m, crp_buf *wire)
{
    crp_rpc_resp back;
    crp_buf again = {0};
    int rc = crp_rpc_resp_encode(m, wire);
    if (rc != 0)
        fail_msg("encode %s reply: %s", crp_rpc_op_name(m->op), cr_last_error_message());
    assert_true(wire->len <= CRP_MAX_BODY);
    memset(&back, 0x5A, sizeof(back));
    rc = crp_rpc_resp_decode(wire->data, wire->len, &back);
    if (rc != 0)
        fail_msg("decode %s reply: %s", crp_rpc_op_name(m->op), cr_last_error_message());
    eq_resp(m, &back);
    assert_int_equal(crp_rpc_resp_encode(&back, &again), 0);
    assert_int_equal(again.len, wire->len);
    assert_memory_equal(again.data, wire->data, wire->len);
    crp_rpc_resp_clear(&back);
    crp_buf_free(&again);
}

static const int ALL_OPS[] = {
#define OPS_(name, value, str, rq, rs) value,
    CRP_RPC_OP_TABLE(OPS_)
#undef OPS_
};
#define N_OPS (sizeof(ALL_OPS) / sizeof(ALL_OPS[0]))

/* ------------------------------------------------------------------------ */
/* Tests: op table, round trips                                             */
/* ------------------------------------------------------------------------ */

static void test_op_table(void **state)
{
    (void)state;
    assert_int_equal(N_OPS, CRP_RPC_OP_COUNT);
    for (size_t i = 0; i < N_OPS; i++) {
        assert_true(crp_rpc_op_valid(ALL_OPS[i]));
        assert_int_equal(crp_rpc_op_index(ALL_OPS[i]), (int)i);
        assert_string_not_equal(crp_rpc_op_name(ALL_OPS[i]), "?");
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(crp_rpc_op_name(ALL_OPS[i]), crp_rpc_op_name(ALL_OPS[j]));
    }
    assert_string_equal(crp_rpc_op_name(CRP_RPC_PUT_START), "put_start");
    assert_string_equal(crp_rpc_op_name(CRP_RPC_BATCH_GET_REPLICA_LIST), "batch_get_replica_list");
    assert_string_equal(crp_rpc_op_name(CRP_RPC_EXIST), "exist_key");
    assert_string_equal(crp_rpc_op_name(CRP_RPC_BATCH_REPLICA_CLEAR), "batch_replica_clear");
    assert_int_equal(CRP_RPC_BATCH_REPLICA_CLEAR, 54);
    assert_true((CRP_RPC_CAPS_DEFINED & CRP_RPC_CAP_REPLICA_CLEAR) != 0);
    static const int bad[] = {0, 3, 9, 13, 19, 25, 29, 36, 46, 55, 59, 63, 255, 65535, -1, 70000};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        assert_false(crp_rpc_op_valid(bad[i]));
        assert_int_equal(crp_rpc_op_index(bad[i]), -1);
        assert_string_equal(crp_rpc_op_name(bad[i]), "?");
    }
    assert_string_equal(crp_type_name(CRP_RPC_REQ), "RPC_REQ");
    assert_string_equal(crp_type_name(CRP_RPC_RESP), "RPC_RESP");
}

static void test_round_trip_requests(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_OPS; i++) {
        for (int v = 0; v < N_VARIANTS; v++) {
            crp_rpc_req m;
            crp_buf wire = {0};
            fill_req(&m, ALL_OPS[i], v);
            round_trip_req(&m, &wire);
            crp_buf_free(&wire);
        }
    }
}

static void test_round_trip_replies(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_OPS; i++) {
        for (int v = 0; v < N_VARIANTS; v++) {
            crp_rpc_resp m;
            crp_buf wire = {0};
            fill_resp(&m, ALL_OPS[i], v);
            round_trip_resp(&m, &wire);
            crp_buf_free(&wire);
        }
        crp_rpc_resp m;
        crp_buf wire = {0};
        fill_error_resp(&m, ALL_OPS[i]);
        round_trip_resp(&m, &wire);
        crp_buf_free(&wire);
    }
}

/* The exact bytes of two messages, so the format cannot drift unnoticed. */
static void test_golden_bytes(void **state)
{
    (void)state;
    crp_buf b = {0};
    crp_rpc_req rq = {.op = CRP_RPC_REMOVE};
    rq.u.remove.key = "ab";
    rq.u.remove.force = true;
    assert_int_equal(crp_rpc_req_encode(&rq, &b), 0);
    static const uint8_t want_rq[] = {0x83, 0xa2, 'o', 'p',  0x32, 0xa1, 'k',
                                      0xa2, 'a',  'b', 0xa1, 'f',  0xc3};
    assert_int_equal(b.len, sizeof(want_rq));
    assert_memory_equal(b.data, want_rq, sizeof(want_rq));

    crp_buf_reset(&b);
    crp_rpc_resp rs = {.op = CRP_RPC_REMOVE_ALL, .status = 0};
    rs.u.count.count = 300;
    assert_int_equal(crp_rpc_resp_encode(&rs, &b), 0);
    static const uint8_t want_rs[] = {0x83, 0xa2, 'o',  'p', 0x34, 0xa2, 's',
                                      't',  0x00, 0xa1, 'n', 0xcd, 0x01, 0x2c};
    assert_int_equal(b.len, sizeof(want_rs));
    assert_memory_equal(b.data, want_rs, sizeof(want_rs));

    /* An error reply carries no payload. */
    crp_buf_reset(&b);
    rs.status = CR_OBJECT_HAS_LEASE;
    assert_int_equal(crp_rpc_resp_encode(&rs, &b), 0);
    static const uint8_t want_err[] = {0x82, 0xa2, 'o',  'p',  0x34, 0xa2,
                                       's',  't',  0xd1, 0xfd, 0x3e};
    assert_int_equal(b.len, sizeof(want_err));
    assert_memory_equal(b.data, want_err, sizeof(want_err));
    crp_buf_free(&b);
}

/* ------------------------------------------------------------------------ */
/* Tests: truncation, trailing bytes, hostile structure                     */
/* ------------------------------------------------------------------------ */

static void check_truncation_and_trailing(dir d, const uint8_t *wire, size_t len)
{
    static const uint8_t junk[] = {0x00, 0xc0, 0x90, 0x80, 0xff, 0xc1};
    for (size_t n = 0; n < len; n++)
        expect_reject(d, wire, n, CR_ERR_MALFORMED_FRAME);
    uint8_t *longer = malloc(len + 2);
    assert_non_null(longer);
    memcpy(longer, wire, len);
    for (size_t j = 0; j < sizeof(junk); j++) {
        longer[len] = junk[j];
        expect_reject(d, longer, len + 1, CR_ERR_MALFORMED_FRAME);
    }
    longer[len] = 0x00;
    longer[len + 1] = 0x00;
    expect_reject(d, longer, len + 2, CR_ERR_MALFORMED_FRAME);
    free(longer);
}

static void test_truncation_and_trailing(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_OPS; i++) {
        crp_rpc_req rq;
        crp_rpc_resp rs;
        crp_buf b = {0};
        fill_req(&rq, ALL_OPS[i], V_SMALL);
        assert_int_equal(crp_rpc_req_encode(&rq, &b), 0);
        check_truncation_and_trailing(REQ, b.data, b.len);
        crp_buf_reset(&b);
        fill_resp(&rs, ALL_OPS[i], V_SMALL);
        assert_int_equal(crp_rpc_resp_encode(&rs, &b), 0);
        check_truncation_and_trailing(RESP, b.data, b.len);
        crp_buf_reset(&b);
        fill_error_resp(&rs, ALL_OPS[i]);
        assert_int_equal(crp_rpc_resp_encode(&rs, &b), 0);
        check_truncation_and_trailing(RESP, b.data, b.len);
        crp_buf_free(&b);
    }
}

static void test_hostile_structure(void **state)
{
    (void)state;
    /* Not maps at all. */
    static const uint8_t bodies[][3] = {
        {0x90}, {0xc0}, {0x01}, {0xa1, 'x'}, {0xc4, 0x01, 0x00}, {0x91, 0x80}, {0xc3}, {0x80},
    };
    static const size_t lens[] = {1, 1, 1, 2, 3, 2, 1, 1};
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        expect_reject(REQ, bodies[i], lens[i], CR_ERR_MALFORMED_FRAME);
        expect_reject(RESP, bodies[i], lens[i], CR_ERR_MALFORMED_FRAME);
    }
    expect_reject(REQ, NULL, 0, CR_ERR_MALFORMED_FRAME);
    expect_reject(RESP, NULL, 0, CR_ERR_MALFORMED_FRAME);

    /* Counts that promise far more than the input holds. */
    static const uint8_t huge_array[] = {0xdd, 0xff, 0xff, 0xff, 0xff, 0x00};
    static const uint8_t huge_map[] = {0xdf, 0xff, 0xff, 0xff, 0xff, 0x00, 0x00};
    static const uint8_t huge_keys[] = {0x82, 0xa2, 'o',  'p',  0x15, 0xa2, 'k',
                                        's',  0xdd, 0x7f, 0xff, 0xff, 0xff, 0xa0};
    static const uint8_t huge_str[] = {0x81, 0xa2, 'o', 'p', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'};
    static const uint8_t never_used[] = {0x81, 0xa2, 'o', 'p', 0xc1};
    dir dirs[] = {REQ, RESP};
    for (size_t i = 0; i < 2; i++) {
        expect_reject(dirs[i], huge_array, sizeof(huge_array), CR_ERR_MALFORMED_FRAME);
        expect_reject(dirs[i], huge_map, sizeof(huge_map), CR_ERR_MALFORMED_FRAME);
        expect_reject(dirs[i], huge_keys, sizeof(huge_keys), CR_ERR_MALFORMED_FRAME);
        expect_reject(dirs[i], huge_str, sizeof(huge_str), CR_ERR_MALFORMED_FRAME);
        expect_reject(dirs[i], never_used, sizeof(never_used), CR_ERR_MALFORMED_FRAME);
    }

    /* Deep nesting under an unknown key: a little is skipped, a lot refused. */
    uint8_t deep[160];
    for (int depth = 1; depth < 120; depth++) {
        size_t n = 0;
        static const uint8_t head[] = {0x83, 0xa2, 'o', 'p', 0x34, 0xa1, 'f', 0xc2, 0xa1, 'z'};
        memcpy(deep, head, sizeof(head));
        n = sizeof(head);
        for (int i = 0; i < depth; i++)
            deep[n++] = 0x91;
        deep[n++] = 0xc0;
        if (depth <= 10) {
            crp_rpc_req m;
            assert_int_equal(crp_rpc_req_decode(deep, n, &m), 0);
            assert_int_equal(m.op, CRP_RPC_REMOVE_ALL);
            crp_rpc_req_clear(&m);
        } else if (depth >= 16) {
            expect_reject(REQ, deep, n, CR_ERR_MALFORMED_FRAME);
        }
    }

    /* A body over CRP_MAX_BODY is refused before it is looked at. */
    size_t big = (size_t)CRP_MAX_BODY + 1;
    uint8_t *p = calloc(1, big);
    assert_non_null(p);
    expect_reject(REQ, p, big, CR_ERR_MALFORMED_FRAME);
    expect_reject(RESP, p, big, CR_ERR_MALFORMED_FRAME);
    free(p);
}

/* ------------------------------------------------------------------------ */
/* Tests: mutation engine                                                   */
/* ------------------------------------------------------------------------ */

typedef enum mutation {
    M_DROP,     /* remove a map entry */
    M_NIL,      /* value -> nil */
    M_FLOAT,    /* value -> 1.5 */
    M_DUP,      /* the entry twice */
    M_INTKEY,   /* key -> integer 7 */
    M_UNKNOWN,  /* add an unknown key with a nested value */
    M_ELEM_NIL, /* array element -> nil */
    M_COUNT
} mutation;

typedef struct target {
    const msgpack_object *obj; /* a map or an array */
    uint32_t index;
} target;

static size_t collect_targets(const msgpack_object *o, target *t, size_t n, size_t max)
{
    if (o->type == MSGPACK_OBJECT_MAP) {
        for (uint32_t i = 0; i < o->via.map.size; i++) {
            if (n < max)
                t[n++] = (target){o, i};
            n = collect_targets(&o->via.map.ptr[i].val, t, n, max);
        }
    } else if (o->type == MSGPACK_OBJECT_ARRAY) {
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (n < max)
                t[n++] = (target){o, i};
            n = collect_targets(&o->via.array.ptr[i], t, n, max);
        }
    }
    return n;
}

static void pack_mutated(msgpack_packer *pk, const msgpack_object *o, const target *t, mutation m);

static void pack_unknown(msgpack_packer *pk)
{
    msgpack_pack_str_with_body(pk, "zz", 2);
    msgpack_pack_array(pk, 3);
    msgpack_pack_double(pk, 2.5);
    msgpack_pack_map(pk, 1);
    msgpack_pack_str_with_body(pk, "k", 1);
    msgpack_pack_nil(pk);
    msgpack_pack_bin_with_body(pk, "\0\1", 2);
}

static void pack_mutated_map(msgpack_packer *pk, const msgpack_object *o, const target *t,
                             mutation m)
{
    bool here = o == t->obj;
    uint32_t n = o->via.map.size;
    if (here && m == M_DROP)
        n--;
    if (here && (m == M_DUP || m == M_UNKNOWN))
        n++;
    msgpack_pack_map(pk, n);
    if (here && m == M_UNKNOWN)
        pack_unknown(pk);
    for (uint32_t i = 0; i < o->via.map.size; i++) {
        const msgpack_object_kv *kv = &o->via.map.ptr[i];
        bool at = here && i == t->index;
        if (at && m == M_DROP)
            continue;
        if (at && m == M_INTKEY)
            msgpack_pack_uint8(pk, 7);
        else
            msgpack_pack_object(pk, kv->key);
        if (at && m == M_NIL)
            msgpack_pack_nil(pk);
        else if (at && m == M_FLOAT)
            msgpack_pack_double(pk, 1.5);
        else
            pack_mutated(pk, &kv->val, t, m);
        if (at && m == M_DUP) {
            msgpack_pack_object(pk, kv->key);
            pack_mutated(pk, &kv->val, t, m);
        }
    }
}

static void pack_mutated(msgpack_packer *pk, const msgpack_object *o, const target *t, mutation m)
{
    if (o->type == MSGPACK_OBJECT_MAP) {
        pack_mutated_map(pk, o, t, m);
    } else if (o->type == MSGPACK_OBJECT_ARRAY) {
        msgpack_pack_array(pk, o->via.array.size);
        for (uint32_t i = 0; i < o->via.array.size; i++) {
            if (o == t->obj && i == t->index && m == M_ELEM_NIL)
                msgpack_pack_nil(pk);
            else
                pack_mutated(pk, &o->via.array.ptr[i], t, m);
        }
    } else {
        msgpack_pack_object(pk, *o);
    }
}

static bool key_optional(const msgpack_object_kv *kv)
{
    static const char *const optional[] = {"msg", "spt", "fence", "lt", "sn", "smac",
                                           "ow",  "ov",  "swt",   "gk", "ls", "ca"};
    for (size_t i = 0; i < sizeof(optional) / sizeof(optional[0]); i++) {
        size_t n = strlen(optional[i]);
        if (kv->key.via.str.size == n && memcmp(kv->key.via.str.ptr, optional[i], n) == 0)
            return true;
    }
    return false;
}

/* Apply every applicable mutation at every map entry and array element of wire. */
static void check_mutations(dir d, const uint8_t *wire, size_t len)
{
    msgpack_unpacked u;
    size_t off = 0;
    target t[512];
    msgpack_unpacked_init(&u);
    assert_int_equal(msgpack_unpack_next(&u, (const char *)wire, len, &off),
                     MSGPACK_UNPACK_SUCCESS);
    size_t n = collect_targets(&u.data, t, 0, 512);
    assert_true(n < 512);

    for (size_t i = 0; i < n; i++) {
        bool is_map = t[i].obj->type == MSGPACK_OBJECT_MAP;
        for (int m = 0; m < M_COUNT; m++) {
            if (is_map != (m != M_ELEM_NIL))
                continue;
            if (m == M_UNKNOWN && t[i].index != 0)
                continue;
            msgpack_sbuffer sb;
            msgpack_packer pk;
            msgpack_sbuffer_init(&sb);
            msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
            pack_mutated(&pk, &u.data, &t[i], (mutation)m);
            if (m == M_UNKNOWN) {
                expect_canonical(d, sb.data, sb.size, wire, len);
            } else if (m == M_DROP && key_optional(&t[i].obj->via.map.ptr[t[i].index])) {
                union {
                    crp_rpc_req req;
                    crp_rpc_resp resp;
                } out;
                assert_int_equal(decode_dir(d, sb.data, sb.size, &out), 0);
                clear_dir(d, &out);
            } else {
                expect_reject(d, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
                if (is_map && m != M_INTKEY) {
                    const msgpack_object *k = &t[i].obj->via.map.ptr[t[i].index].key;
                    char name[16] = "";
                    if (k->via.str.size < sizeof(name))
                        memcpy(name, k->via.str.ptr, k->via.str.size);
                    expect_error_mentions(name);
                }
            }
            msgpack_sbuffer_destroy(&sb);
        }
    }
    msgpack_unpacked_destroy(&u);
}

static void test_mutations(void **state)
{
    (void)state;
    for (size_t i = 0; i < N_OPS; i++) {
        crp_rpc_req rq;
        crp_rpc_resp rs;
        crp_buf b = {0};
        fill_req(&rq, ALL_OPS[i], V_SMALL);
        assert_int_equal(crp_rpc_req_encode(&rq, &b), 0);
        check_mutations(REQ, b.data, b.len);
        crp_buf_reset(&b);
        fill_resp(&rs, ALL_OPS[i], V_SMALL);
        assert_int_equal(crp_rpc_resp_encode(&rs, &b), 0);
        check_mutations(RESP, b.data, b.len);
        crp_buf_reset(&b);
        fill_error_resp(&rs, ALL_OPS[i]);
        assert_int_equal(crp_rpc_resp_encode(&rs, &b), 0);
        check_mutations(RESP, b.data, b.len);
        crp_buf_free(&b);
    }
}

/* ------------------------------------------------------------------------ */
/* Tests: bounds, ranges, enums, opcodes                                    */
/* ------------------------------------------------------------------------ */

/*
 * Encoding must fail with CR_INVALID_PARAMS and leave the buffer as it
 * was: it already holds another message, which must survive byte for byte.
 */
static void expect_encode_invalid(dir d, const void *m, const char *mention)
{
    crp_buf b = {0};
    crp_rpc_req first = {.op = CRP_RPC_GET_ALL_SEGMENTS};
    assert_int_equal(crp_rpc_req_encode(&first, &b), 0);
    size_t len = b.len;
    uint8_t copy[16];
    assert_true(len <= sizeof(copy));
    memcpy(copy, b.data, len);
    int rc = encode_dir(d, m, &b);
    if (rc != CR_INVALID_PARAMS)
        fprintf(stderr, "encode returned %d (%s)\n", rc, cr_last_error_message());
    assert_int_equal(rc, CR_INVALID_PARAMS);
    assert_int_equal(b.len, len);
    assert_memory_equal(b.data, copy, len);
    if (mention != NULL)
        expect_error_mentions(mention);
    crp_buf_free(&b);
}

/* Pack {"op": op, <key>: <raw value bytes>, ...} by hand. */
typedef struct raw_field {
    const char *key;
    const uint8_t *val;
    size_t len;
} raw_field;

static void pack_raw_body(msgpack_sbuffer *sb, int op, const raw_field *f, size_t n)
{
    msgpack_packer pk;
    msgpack_sbuffer_init(sb);
    msgpack_packer_init(&pk, sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, n + 1);
    msgpack_pack_str_with_body(&pk, "op", 2);
    msgpack_pack_int(&pk, op);
    for (size_t i = 0; i < n; i++) {
        msgpack_pack_str_with_body(&pk, f[i].key, strlen(f[i].key));
        msgpack_sbuffer_write(sb, (const char *)f[i].val, f[i].len);
    }
}

static void test_key_bounds(void **state)
{
    (void)state;
    char *too_long = malloc(CRP_RPC_MAX_KEY + 2);
    assert_non_null(too_long);
    memset(too_long, 'x', CRP_RPC_MAX_KEY + 1);
    too_long[CRP_RPC_MAX_KEY + 1] = '\0';

    /* Encoders refuse a key one byte too long, alone or in a batch. */
    crp_rpc_req m = {.op = CRP_RPC_EXIST};
    m.u.key.key = too_long;
    expect_encode_invalid(REQ, &m, "'k'");
    m.u.key.key = NULL;
    expect_encode_invalid(REQ, &m, "NULL");
    char *keys[] = {"ok", too_long};
    m = (crp_rpc_req){.op = CRP_RPC_BATCH_REMOVE};
    m.u.batch_remove.n_keys = 2;
    m.u.batch_remove.keys = keys;
    expect_encode_invalid(REQ, &m, "key 1");
    keys[1] = NULL;
    expect_encode_invalid(REQ, &m, "key 1");

    /* Decoders refuse it too. */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "op", 2);
    msgpack_pack_int(&pk, CRP_RPC_EXIST);
    msgpack_pack_str_with_body(&pk, "k", 1);
    msgpack_pack_str_with_body(&pk, too_long, CRP_RPC_MAX_KEY + 1);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("too long");
    /* ... and one byte less is fine. */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "op", 2);
    msgpack_pack_int(&pk, CRP_RPC_EXIST);
    msgpack_pack_str_with_body(&pk, "k", 1);
    msgpack_pack_str_with_body(&pk, too_long, CRP_RPC_MAX_KEY);
    crp_rpc_req back;
    assert_int_equal(crp_rpc_req_decode(sb.data, sb.size, &back), 0);
    assert_int_equal(strlen(back.u.key.key), CRP_RPC_MAX_KEY);
    crp_rpc_req_clear(&back);

    /* A NUL inside a key. */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "op", 2);
    msgpack_pack_int(&pk, CRP_RPC_EXIST);
    msgpack_pack_str_with_body(&pk, "k", 1);
    msgpack_pack_str_with_body(&pk, "a\0b", 3);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("NUL");
    /* A key as bin instead of str. */
    msgpack_sbuffer_clear(&sb);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "op", 2);
    msgpack_pack_int(&pk, CRP_RPC_EXIST);
    msgpack_pack_str_with_body(&pk, "k", 1);
    msgpack_pack_bin_with_body(&pk, "ab", 2);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    msgpack_sbuffer_destroy(&sb);
    free(too_long);
}

static void test_batch_bounds(void **state)
{
    (void)state;
    /* One key more than CRP_RPC_MAX_BATCH: the encoder refuses. */
    char **keys = calloc(CRP_RPC_MAX_BATCH + 1, sizeof(*keys));
    assert_non_null(keys);
    for (size_t i = 0; i <= CRP_RPC_MAX_BATCH; i++)
        keys[i] = "";
    crp_rpc_req m = {.op = CRP_RPC_BATCH_EXIST};
    m.u.keys.n_keys = CRP_RPC_MAX_BATCH + 1;
    m.u.keys.keys = keys;
    expect_encode_invalid(REQ, &m, "too many");
    m.u.keys.keys = NULL;
    m.u.keys.n_keys = 1;
    expect_encode_invalid(REQ, &m, "NULL");

    /* Exactly CRP_RPC_MAX_BATCH empty keys round-trip. */
    m.u.keys.n_keys = CRP_RPC_MAX_BATCH;
    m.u.keys.keys = keys;
    crp_buf wire = {0};
    round_trip_req(&m, &wire);
    crp_buf_free(&wire);

    /* The decoder refuses CRP_RPC_MAX_BATCH + 1 keys. */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 2);
    msgpack_pack_str_with_body(&pk, "op", 2);
    msgpack_pack_int(&pk, CRP_RPC_BATCH_EXIST);
    msgpack_pack_str_with_body(&pk, "ks", 2);
    msgpack_pack_array(&pk, CRP_RPC_MAX_BATCH + 1);
    for (size_t i = 0; i <= CRP_RPC_MAX_BATCH; i++)
        msgpack_pack_str_with_body(&pk, "", 0);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("too many");
    msgpack_sbuffer_destroy(&sb);

    /* So does a statuses reply with one result too many. */
    msgpack_sbuffer_init(&sb);
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str_with_body(&pk, "op", 2);
    msgpack_pack_int(&pk, CRP_RPC_BATCH_REMOVE);
    msgpack_pack_str_with_body(&pk, "st", 2);
    msgpack_pack_int(&pk, 0);
    msgpack_pack_str_with_body(&pk, "r", 1);
    msgpack_pack_array(&pk, CRP_RPC_MAX_BATCH + 1);
    for (size_t i = 0; i <= CRP_RPC_MAX_BATCH; i++)
        msgpack_pack_int(&pk, 0);
    expect_reject(RESP, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    msgpack_sbuffer_destroy(&sb);

    /* 300 keys of 4096 bytes exceed CRP_MAX_BODY: refused while encoding. */
    char *long_key = malloc(CRP_RPC_MAX_KEY + 1);
    assert_non_null(long_key);
    memset(long_key, 'q', CRP_RPC_MAX_KEY);
    long_key[CRP_RPC_MAX_KEY] = '\0';
    for (size_t i = 0; i < 300; i++)
        keys[i] = long_key;
    m.u.keys.n_keys = 300;
    expect_encode_invalid(REQ, &m, "exceed");
    /* 250 of them fit. */
    m.u.keys.n_keys = 250;
    round_trip_req(&m, &wire);
    crp_buf_free(&wire);
    free(long_key);
    free(keys);
}

static void test_array_bounds(void **state)
{
    (void)state;
    crp_rpc_replica reps[CRP_RPC_MAX_REPLICAS + 1];
    for (size_t i = 0; i <= CRP_RPC_MAX_REPLICAS; i++)
        reps[i] = (crp_rpc_replica){"s", i, 1, 0, CRP_RPC_REPLICA_COMPLETE};
    crp_rpc_resp r = {.op = CRP_RPC_GET_REPLICA_LIST};
    r.u.get.n_replicas = CRP_RPC_MAX_REPLICAS + 1;
    r.u.get.replicas = reps;
    expect_encode_invalid(RESP, &r, "reps");

    /* Decoder side: 33 replicas. */
    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    msgpack_pack_map(&pk, 3);
    msgpack_pack_str_with_body(&pk, "op", 2);
    msgpack_pack_int(&pk, CRP_RPC_PUT_START);
    msgpack_pack_str_with_body(&pk, "st", 2);
    msgpack_pack_int(&pk, 0);
    msgpack_pack_str_with_body(&pk, "reps", 4);
    msgpack_pack_array(&pk, CRP_RPC_MAX_REPLICAS + 1);
    for (size_t i = 0; i <= CRP_RPC_MAX_REPLICAS; i++)
        msgpack_pack_nil(&pk);
    expect_reject(RESP, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("too many");
    msgpack_sbuffer_destroy(&sb);

    /* Preferred segments. */
    char *pref[CRP_RPC_MAX_PREFERRED + 1];
    for (size_t i = 0; i <= CRP_RPC_MAX_PREFERRED; i++)
        pref[i] = "seg";
    crp_rpc_req m = {.op = CRP_RPC_PUT_START};
    m.u.put_start.key = "k";
    m.u.put_start.config.replica_num = 1;
    m.u.put_start.config.n_preferred = CRP_RPC_MAX_PREFERRED + 1;
    m.u.put_start.config.preferred_segments = pref;
    expect_encode_invalid(REQ, &m, "pref");
    m.u.put_start.config.n_preferred = CRP_RPC_MAX_PREFERRED;
    crp_buf wire = {0};
    round_trip_req(&m, &wire);
    crp_buf_free(&wire);

    /* Segment names over CRP_MAX_NAME. */
    char name[CRP_MAX_NAME + 2];
    memset(name, 'n', sizeof(name) - 1);
    name[sizeof(name) - 1] = '\0';
    m = (crp_rpc_req){.op = CRP_RPC_MOUNT_SEGMENT};
    m.u.mount.segment = (crp_rpc_segment){name, 0, 1, 0};
    expect_encode_invalid(REQ, &m, "'n'");
    m = (crp_rpc_req){.op = CRP_RPC_QUERY_SEGMENT};
    m.u.name.name = name;
    expect_encode_invalid(REQ, &m, "'n'");

    /* Remount: too many segments refused by the decoder (count check first). */
    static const uint8_t too_many_segs[] = {
        0x83, 0xa2, 'o', 'p', 0x0b, 0xa3, 'c',  'i',  'd',  0xc4, 0x10, 0, 0,
        0,    0,    0,   0,   0,    0,    0,    0,    0,    0,    0,    0, 0,
        0,    0xa4, 's', 'e', 'g',  's',  0xdd, 0x00, 0x01, 0x00, 0x01};
    uint8_t *body = malloc(sizeof(too_many_segs) + 65537);
    assert_non_null(body);
    memcpy(body, too_many_segs, sizeof(too_many_segs));
    memset(body + sizeof(too_many_segs), 0xc0, 65537);
    expect_reject(REQ, body, sizeof(too_many_segs) + 65537, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("too many");
    free(body);

    /* The error text is cut at CRP_RPC_MAX_MSG bytes without splitting UTF-8. */
    char text[CRP_RPC_MAX_MSG + 8];
    memset(text, 'a', sizeof(text));
    memcpy(text + CRP_RPC_MAX_MSG - 1, "\xc3\xa9", 2); /* an e-acute straddling the cut */
    text[sizeof(text) - 1] = '\0';
    crp_rpc_resp e = {.op = CRP_RPC_REMOVE, .status = CR_OBJECT_HAS_LEASE, .message = text};
    crp_rpc_resp back;
    assert_int_equal(crp_rpc_resp_encode(&e, &wire), 0);
    assert_int_equal(crp_rpc_resp_decode(wire.data, wire.len, &back), 0);
    assert_int_equal(strlen(back.message), CRP_RPC_MAX_MSG - 1);
    assert_int_equal(back.status, CR_OBJECT_HAS_LEASE);
    crp_rpc_resp_clear(&back);
    crp_buf_free(&wire);
}

static void test_ranges_and_enums(void **state)
{
    (void)state;
    crp_rpc_req m;
    crp_rpc_resp r;

    /* Segments: size 0 and base + size overflowing. */
    m = (crp_rpc_req){.op = CRP_RPC_MOUNT_SEGMENT};
    m.u.mount.segment = (crp_rpc_segment){"s", 0, 0, 0};
    expect_encode_invalid(REQ, &m, "size 0");
    m.u.mount.segment = (crp_rpc_segment){"s", UINT64_MAX, 1, 0};
    expect_encode_invalid(REQ, &m, "overflows");
    m.u.mount.segment = (crp_rpc_segment){"s", UINT64_MAX - 1, 1, 0};
    crp_buf wire = {0};
    round_trip_req(&m, &wire);
    crp_buf_free(&wire);

    static const uint8_t cid[] = {0xc4, 0x10, 1,  2,  3,  4,  5,  6,  7,
                                  8,    9,    10, 11, 12, 13, 14, 15, 16};
    static const uint8_t seg_size0[] = {0x84, 0xa1, 'n', 0xa1, 's',  0xa1, 'b',
                                        0x00, 0xa1, 'l', 0x00, 0xa1, 'e',  0x00};
    static const uint8_t seg_overflow[] = {0x84, 0xa1, 'n',  0xa1, 's',  0xa1, 'b',  0xcf,
                                           0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                           0xa1, 'l',  0x01, 0xa1, 'e',  0x00};
    msgpack_sbuffer sb;
    raw_field f[2] = {{"cid", cid, sizeof(cid)}, {"seg", seg_size0, sizeof(seg_size0)}};
    pack_raw_body(&sb, CRP_RPC_MOUNT_SEGMENT, f, 2);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("size 0");
    msgpack_sbuffer_destroy(&sb);
    f[1] = (raw_field){"seg", seg_overflow, sizeof(seg_overflow)};
    pack_raw_body(&sb, CRP_RPC_MOUNT_SEGMENT, f, 2);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("overflows");
    msgpack_sbuffer_destroy(&sb);

    /* A client id of the wrong size. */
    static const uint8_t cid15[] = {0xc4, 0x0f, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    f[0] = (raw_field){"cid", cid15, sizeof(cid15)};
    pack_raw_body(&sb, CRP_RPC_PING, f, 1);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("not 16");
    msgpack_sbuffer_destroy(&sb);

    /* A get's stage wait ("swt") past 32 bits is refused, naming the field. */
    static const uint8_t key_k[] = {0xa1, 'k'};
    static const uint8_t swt_big[] = {0xcf, 0, 0, 0, 1, 0, 0, 0, 0};
    raw_field gs[2] = {{"k", key_k, sizeof(key_k)}, {"swt", swt_big, sizeof(swt_big)}};
    pack_raw_body(&sb, CRP_RPC_GET_REPLICA_LIST, gs, 2);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("swt");
    msgpack_sbuffer_destroy(&sb);

    /* An end's grant key ("gk") must be a string of at most CRP_RPC_MAX_KEY bytes; other
     * ops skip it like any unknown field. */
    static const uint8_t cid_ok[] = {0xc4, 0x10, 1,  2,  3,  4,  5,  6,  7,
                                     8,    9,    10, 11, 12, 13, 14, 15, 16};
    static const uint8_t gk_int[] = {0x07};
    raw_field ge[3] = {{"cid", cid_ok, sizeof(cid_ok)},
                       {"k", key_k, sizeof(key_k)},
                       {"gk", gk_int, sizeof(gk_int)}};
    pack_raw_body(&sb, CRP_RPC_PUT_END, ge, 3);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("gk");
    msgpack_sbuffer_destroy(&sb);
    pack_raw_body(&sb, CRP_RPC_PUT_REVOKE, ge, 3);
    assert_int_equal(crp_rpc_req_decode(sb.data, sb.size, &m), 0);
    assert_null(m.grant_key);
    crp_rpc_req_clear(&m);
    msgpack_sbuffer_destroy(&sb);
    static uint8_t gk_long[3 + CRP_RPC_MAX_KEY + 1];
    gk_long[0] = 0xda; /* str 16 */
    gk_long[1] = (uint8_t)((CRP_RPC_MAX_KEY + 1) >> 8);
    gk_long[2] = (uint8_t)((CRP_RPC_MAX_KEY + 1) & 0xff);
    memset(gk_long + 3, 'g', CRP_RPC_MAX_KEY + 1);
    ge[2] = (raw_field){"gk", gk_long, sizeof(gk_long)};
    pack_raw_body(&sb, CRP_RPC_UPSERT_END, ge, 3);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("gk");
    msgpack_sbuffer_destroy(&sb);

    /* Commit ahead ("ca") must be a bool, and is only for a PUT_END with a grant key. */
    static const uint8_t ca_true[] = {0xc3}, ca_int[] = {0x01}, gk_ok[] = {0xa2, 'g', '1'};
    raw_field ca[4] = {{"cid", cid_ok, sizeof(cid_ok)},
                       {"k", key_k, sizeof(key_k)},
                       {"gk", gk_ok, sizeof(gk_ok)},
                       {"ca", ca_true, sizeof(ca_true)}};
    pack_raw_body(&sb, CRP_RPC_PUT_END, ca, 4);
    assert_int_equal(crp_rpc_req_decode(sb.data, sb.size, &m), 0);
    assert_true(m.commit_ahead);
    eq_str(m.grant_key, "g1");
    crp_rpc_req_clear(&m);
    msgpack_sbuffer_destroy(&sb);
    pack_raw_body(&sb, CRP_RPC_UPSERT_END, ca, 4); /* puts only */
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("ca");
    msgpack_sbuffer_destroy(&sb);
    ca[2] = ca[3]; /* no "gk" */
    pack_raw_body(&sb, CRP_RPC_PUT_END, ca, 3);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("ca");
    msgpack_sbuffer_destroy(&sb);
    ca[2] = (raw_field){"gk", gk_ok, sizeof(gk_ok)};
    ca[3] = (raw_field){"ca", ca_int, sizeof(ca_int)};
    pack_raw_body(&sb, CRP_RPC_PUT_END, ca, 4);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("ca");
    msgpack_sbuffer_destroy(&sb);
    /* A BATCH_PUT_END may commit ahead without a grant (a "gk" there is skipped); an upsert's
     * may not; "ca" must be a bool there too. */
    static const uint8_t ks_one[] = {0x91, 0xa1, 'k'};
    raw_field bca[3] = {{"cid", cid_ok, sizeof(cid_ok)},
                        {"ks", ks_one, sizeof(ks_one)},
                        {"ca", ca_true, sizeof(ca_true)}};
    pack_raw_body(&sb, CRP_RPC_BATCH_PUT_END, bca, 3);
    assert_int_equal(crp_rpc_req_decode(sb.data, sb.size, &m), 0);
    assert_true(m.commit_ahead);
    assert_null(m.grant_key);
    assert_int_equal(m.u.owner_keys.n_keys, 1);
    crp_rpc_req_clear(&m);
    msgpack_sbuffer_destroy(&sb);
    pack_raw_body(&sb, CRP_RPC_BATCH_UPSERT_END, bca, 3);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("BATCH_PUT_END");
    msgpack_sbuffer_destroy(&sb);
    bca[2] = (raw_field){"ca", ca_int, sizeof(ca_int)};
    pack_raw_body(&sb, CRP_RPC_BATCH_PUT_END, bca, 3);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("ca");
    msgpack_sbuffer_destroy(&sb);
    pack_raw_body(&sb, CRP_RPC_BATCH_PUT_REVOKE, bca, 3); /* other ops skip it */
    assert_int_equal(crp_rpc_req_decode(sb.data, sb.size, &m), 0);
    assert_false(m.commit_ahead);
    crp_rpc_req_clear(&m);
    msgpack_sbuffer_destroy(&sb);

    /* The client id's byte order is fixed: hi first, big-endian. */
    f[0] = (raw_field){"cid", cid, sizeof(cid)};
    pack_raw_body(&sb, CRP_RPC_PING, f, 1);
    assert_int_equal(crp_rpc_req_decode(sb.data, sb.size, &m), 0);
    assert_true(m.u.client.client_id.hi == 0x0102030405060708ull);
    assert_true(m.u.client.client_id.lo == 0x090a0b0c0d0e0f10ull);
    crp_rpc_req_clear(&m);
    msgpack_sbuffer_destroy(&sb);

    /* Replica: range overflow and status out of range. */
    crp_rpc_replica rep = {"s", UINT64_MAX, 1, 0, CRP_RPC_REPLICA_COMPLETE};
    r = (crp_rpc_resp){.op = CRP_RPC_GET_REPLICA_LIST};
    r.u.get.n_replicas = 1;
    r.u.get.replicas = &rep;
    expect_encode_invalid(RESP, &r, "overflows");
    rep = (crp_rpc_replica){"s", 0, 1, 0, CRP_RPC_REPLICA_FAILED + 1};
    expect_encode_invalid(RESP, &r, "'t'");
    static const uint8_t st0[] = {0x00};
    static const uint8_t rep_bad_status[] = {0x91, 0x85, 0xa1, 's',  0xa1, 's',  0xa1, 'a', 0x00,
                                             0xa1, 'l',  0x01, 0xa1, 'e',  0x00, 0xa1, 't', 0x06};
    static const uint8_t lease[] = {0x00};
    raw_field g[3] = {
        {"st", st0, 1}, {"reps", rep_bad_status, sizeof(rep_bad_status)}, {"lease", lease, 1}};
    pack_raw_body(&sb, CRP_RPC_GET_REPLICA_LIST, g, 3);
    expect_reject(RESP, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("replica 0");
    msgpack_sbuffer_destroy(&sb);
    /* A master before object versions sends no "ov" (nor "lt"): version 0, no speculation. */
    static const uint8_t rep_ok[] = {0x91, 0x85, 0xa1, 's',  0xa1, 's',  0xa1, 'a', 0x00,
                                     0xa1, 'l',  0x01, 0xa1, 'e',  0x00, 0xa1, 't', 0x03};
    raw_field g_old[3] = {{"st", st0, 1}, {"reps", rep_ok, sizeof(rep_ok)}, {"lease", lease, 1}};
    pack_raw_body(&sb, CRP_RPC_GET_REPLICA_LIST, g_old, 3);
    crp_rpc_resp old_reply;
    assert_int_equal(crp_rpc_resp_decode(sb.data, sb.size, &old_reply), 0);
    assert_int_equal(old_reply.u.get.n_replicas, 1);
    assert_true(old_reply.u.get.version == 0 && old_reply.u.get.lease_token == 0);
    crp_rpc_resp_clear(&old_reply);
    msgpack_sbuffer_destroy(&sb);
    /* Nor "ov" in PUT_END's reply: version 0, the writer caches nothing. */
    raw_field e_old[1] = {{"st", st0, 1}};
    pack_raw_body(&sb, CRP_RPC_PUT_END, e_old, 1);
    assert_int_equal(crp_rpc_resp_decode(sb.data, sb.size, &old_reply), 0);
    assert_int_equal(old_reply.u.end.version, 0);
    crp_rpc_resp_clear(&old_reply);
    msgpack_sbuffer_destroy(&sb);

    /* Ping: client status out of range. */
    r = (crp_rpc_resp){.op = CRP_RPC_PING};
    r.u.ping.client_status = CRP_RPC_CLIENT_NEED_REMOUNT + 1;
    expect_encode_invalid(RESP, &r, "'cs'");
    static const uint8_t cs3[] = {0x03};
    raw_field h[3] = {{"st", st0, 1}, {"cs", cs3, 1}, {"view", lease, 1}};
    pack_raw_body(&sb, CRP_RPC_PING, h, 3);
    expect_reject(RESP, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    msgpack_sbuffer_destroy(&sb);

    /* Config: soft pin action out of range. */
    m = (crp_rpc_req){.op = CRP_RPC_UPSERT_START};
    m.u.put_start.key = "k";
    m.u.put_start.config.soft_pin_action = CRP_RPC_SOFT_PIN_DISABLE + 1;
    expect_encode_invalid(REQ, &m, "'spa'");

    /* Batch put start: sizes must match keys. */
    char *keys[] = {"a", "b"};
    uint64_t sizes[] = {1, 2};
    m = (crp_rpc_req){.op = CRP_RPC_BATCH_PUT_START};
    m.u.batch_put_start.n_keys = 2;
    m.u.batch_put_start.keys = keys;
    m.u.batch_put_start.value_sizes = NULL;
    expect_encode_invalid(REQ, &m, "szs");
    m.u.batch_put_start.value_sizes = sizes;
    crp_buf b = {0};
    assert_int_equal(crp_rpc_req_encode(&m, &b), 0);
    /* Replace "szs": [1, 2] (92 01 02) with [1] (91 01 c0 -> shift) by re-packing. */
    static const uint8_t ks2[] = {0x92, 0xa1, 'a', 0xa1, 'b'};
    static const uint8_t szs1[] = {0x91, 0x01};
    static const uint8_t cfg[] = {0x85, 0xa1, 'n', 0x01, 0xa2, 'h', 'p', 0xc2, 0xa3,
                                  's',  'p',  'a', 0x00, 0xa4, 'p', 'r', 'e',  'f',
                                  0x90, 0xa4, 's', 'a',  'm',  'e', 0xc2};
    raw_field k[4] = {{"cid", cid, sizeof(cid)},
                      {"ks", ks2, sizeof(ks2)},
                      {"szs", szs1, sizeof(szs1)},
                      {"cfg", cfg, sizeof(cfg)}};
    pack_raw_body(&sb, CRP_RPC_BATCH_PUT_START, k, 4);
    expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("1 entries for 2 keys");
    msgpack_sbuffer_destroy(&sb);
    /* The same body with matching sizes is accepted (the hand-built config is valid). */
    static const uint8_t szs2[] = {0x92, 0x01, 0x02};
    k[2] = (raw_field){"szs", szs2, sizeof(szs2)};
    pack_raw_body(&sb, CRP_RPC_BATCH_PUT_START, k, 4);
    assert_int_equal(crp_rpc_req_decode(sb.data, sb.size, &m), 0);
    assert_int_equal(m.u.batch_put_start.n_keys, 2);
    assert_true(m.u.batch_put_start.value_sizes[1] == 2);
    assert_false(m.u.batch_put_start.config.has_soft_pin_ttl);
    crp_rpc_req_clear(&m);
    msgpack_sbuffer_destroy(&sb);
    crp_buf_free(&b);

    /* Reply status: positive refused on both sides; per-key statuses likewise. */
    r = (crp_rpc_resp){.op = CRP_RPC_REMOVE, .status = 1};
    expect_encode_invalid(RESP, &r, "positive");
    static const uint8_t st1[] = {0x01};
    raw_field p[1] = {{"st", st1, 1}};
    pack_raw_body(&sb, CRP_RPC_REMOVE, p, 1);
    expect_reject(RESP, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    expect_error_mentions("positive");
    msgpack_sbuffer_destroy(&sb);
    crp_rpc_key_result res = {5, 0, NULL, 0};
    r = (crp_rpc_resp){.op = CRP_RPC_BATCH_PUT_START};
    r.u.batch_alloc.n = 1;
    r.u.batch_alloc.results = &res;
    expect_encode_invalid(RESP, &r, "positive");

    /* A status outside i32. */
    static const uint8_t st_big[] = {0xd3, 0x80, 0, 0, 0, 0, 0, 0, 0};
    p[0] = (raw_field){"st", st_big, sizeof(st_big)};
    pack_raw_body(&sb, CRP_RPC_REMOVE, p, 1);
    expect_reject(RESP, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
    msgpack_sbuffer_destroy(&sb);

    /* An error reply ignores (but still type-checks duplicates of) payload keys. */
    static const uint8_t st_err[] = {0xd1, 0xfd, 0x40}; /* -704 */
    static const uint8_t n_val[] = {0x05};
    raw_field q[2] = {{"st", st_err, sizeof(st_err)}, {"n", n_val, 1}};
    pack_raw_body(&sb, CRP_RPC_REMOVE_ALL, q, 2);
    assert_int_equal(crp_rpc_resp_decode(sb.data, sb.size, &r), 0);
    assert_int_equal(r.status, CR_OBJECT_NOT_FOUND);
    assert_true(r.u.count.count == 0);
    assert_null(r.message);
    crp_rpc_resp_clear(&r);
    msgpack_sbuffer_destroy(&sb);
}

static void test_opcodes(void **state)
{
    (void)state;
    /* Unknown op: CR_NOT_SUPPORTED from the decoder (the frame was well formed). */
    static const int unknown[] = {0, 3, 63, 1000, 65535};
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        msgpack_sbuffer sb;
        pack_raw_body(&sb, unknown[i], NULL, 0);
        expect_reject(REQ, sb.data, sb.size, CR_NOT_SUPPORTED);
        expect_error_mentions("unknown opcode");
        expect_reject(RESP, sb.data, sb.size, CR_NOT_SUPPORTED);
        msgpack_sbuffer_destroy(&sb);
    }
    /* Ops outside u16, negative, or of the wrong type are malformed. */
    static const uint8_t op_big[] = {0x81, 0xa2, 'o', 'p', 0xce, 0x00, 0x01, 0x00, 0x00};
    static const uint8_t op_neg[] = {0x81, 0xa2, 'o', 'p', 0xff};
    static const uint8_t op_str[] = {0x81, 0xa2, 'o', 'p', 0xa1, '1'};
    static const uint8_t op_missing[] = {0x81, 0xa1, 'k', 0xa1, 'x'};
    static const uint8_t op_twice[] = {0x82, 0xa2, 'o', 'p', 0x3c, 0xa2, 'o', 'p', 0x3c};
    const uint8_t *bad[] = {op_big, op_neg, op_str, op_missing, op_twice};
    size_t lens[] = {sizeof(op_big), sizeof(op_neg), sizeof(op_str), sizeof(op_missing),
                     sizeof(op_twice)};
    for (size_t i = 0; i < 5; i++) {
        expect_reject(REQ, bad[i], lens[i], CR_ERR_MALFORMED_FRAME);
        expect_reject(RESP, bad[i], lens[i], CR_ERR_MALFORMED_FRAME);
    }
    /* GET_ALL_SEGMENTS takes no field: {"op": 60} is the whole request. */
    static const uint8_t gas[] = {0x81, 0xa2, 'o', 'p', 0x3c};
    crp_rpc_req m;
    assert_int_equal(crp_rpc_req_decode(gas, sizeof(gas), &m), 0);
    assert_int_equal(m.op, CRP_RPC_GET_ALL_SEGMENTS);
    assert_null(m.arena);
    crp_rpc_req_clear(&m);

    /* Encoders refuse unknown ops. */
    crp_rpc_req rq = {.op = 99};
    expect_encode_invalid(REQ, &rq, "unknown opcode");
    crp_rpc_resp rs = {.op = 0};
    expect_encode_invalid(RESP, &rs, "unknown opcode");
}

/* BATCH_REPLICA_CLEAR: every field required, the segment name bounded. */
static void test_replica_clear_request(void **state)
{
    (void)state;
    static const uint8_t cid[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    char *long_name = malloc(CRP_MAX_NAME + 2);
    assert_non_null(long_name);
    memset(long_name, 'n', CRP_MAX_NAME + 1);
    long_name[CRP_MAX_NAME + 1] = '\0';

    msgpack_sbuffer sb;
    msgpack_packer pk;
    msgpack_sbuffer_init(&sb);
    msgpack_packer_init(&pk, &sb, msgpack_sbuffer_write);
    /* fields: bit 0 cid, bit 1 ks, bit 2 n; name_len = strlen of the name to send */
    for (int mask = 0; mask < 8; mask++) {
        for (int variant = 0; variant < 3; variant++) {
            if (variant > 0 && mask != 7)
                continue;
            msgpack_sbuffer_clear(&sb);
            msgpack_pack_map(&pk, 1 + (size_t)__builtin_popcount((unsigned)mask));
            msgpack_pack_str_with_body(&pk, "op", 2);
            msgpack_pack_int(&pk, CRP_RPC_BATCH_REPLICA_CLEAR);
            if (mask & 1) {
                msgpack_pack_str_with_body(&pk, "cid", 3);
                msgpack_pack_bin_with_body(&pk, cid, sizeof(cid));
            }
            if (mask & 2) {
                msgpack_pack_str_with_body(&pk, "ks", 2);
                msgpack_pack_array(&pk, 2);
                msgpack_pack_str_with_body(&pk, "a", 1);
                msgpack_pack_str_with_body(&pk, "b", 1);
            }
            if (mask & 4) {
                msgpack_pack_str_with_body(&pk, "n", 1);
                if (variant == 1)
                    msgpack_pack_str_with_body(&pk, long_name, CRP_MAX_NAME + 1);
                else if (variant == 2)
                    msgpack_pack_nil(&pk);
                else
                    msgpack_pack_str_with_body(&pk, "", 0);
            }
            if (mask != 7 || variant != 0) {
                expect_reject(REQ, sb.data, sb.size, CR_ERR_MALFORMED_FRAME);
                continue;
            }
            crp_rpc_req back;
            assert_int_equal(crp_rpc_req_decode(sb.data, sb.size, &back), 0);
            assert_int_equal(back.op, CRP_RPC_BATCH_REPLICA_CLEAR);
            assert_int_equal(back.u.replica_clear.n_keys, 2);
            assert_string_equal(back.u.replica_clear.keys[1], "b");
            assert_string_equal(back.u.replica_clear.segment, "");
            assert_true(back.u.replica_clear.client_id.hi == 0x0102030405060708ull);
            crp_rpc_req_clear(&back);
        }
    }
    msgpack_sbuffer_destroy(&sb);

    /* The encoder refuses a NULL or too long segment name. */
    char *keys[] = {"a"};
    crp_rpc_req m = {.op = CRP_RPC_BATCH_REPLICA_CLEAR};
    m.u.replica_clear = (crp_rpc_replica_clear_req){{1, 2}, 1, keys, NULL};
    expect_encode_invalid(REQ, &m, "'n'");
    m.u.replica_clear.segment = long_name;
    expect_encode_invalid(REQ, &m, "'n'");
    free(long_name);
}

static void test_version_check(void **state)
{
    (void)state;
    assert_int_equal(crp_rpc_check_version("master", CRP_RPC_VERSION), 0);
    assert_int_equal(crp_rpc_check_version("master", CRP_RPC_VERSION + 1), CR_INVALID_VERSION);
    expect_error_mentions("master");
    expect_error_mentions("version 2");
    assert_int_equal(crp_rpc_check_version("client", 0), CR_INVALID_VERSION);
    expect_error_mentions("upgrade the client");
    assert_int_equal(crp_rpc_check_version(NULL, 7), CR_INVALID_VERSION);

    /* A SERVICE_READY error reply still tells the client what the master speaks. */
    crp_rpc_resp r = {.op = CRP_RPC_SERVICE_READY, .status = CR_INVALID_VERSION};
    r.message = "client speaks RPC protocol version 9";
    r.u.hello = (crp_rpc_hello_resp){.version = CRP_RPC_VERSION,
                                     .caps = CRP_RPC_CAPS_DEFINED,
                                     .software = "crescent-master",
                                     .view_version = 4};
    crp_buf b = {0};
    crp_rpc_resp back;
    assert_int_equal(crp_rpc_resp_encode(&r, &b), 0);
    assert_int_equal(crp_rpc_resp_decode(b.data, b.len, &back), 0);
    assert_int_equal(back.status, CR_INVALID_VERSION);
    assert_int_equal(back.u.hello.version, CRP_RPC_VERSION);
    assert_string_equal(back.u.hello.software, "crescent-master");
    crp_rpc_resp_clear(&back);
    crp_buf_free(&b);
}

/* Which get replies make a reader wait for a stage (and may be held by the master). */
static void test_resp_is_staging(void **state)
{
    (void)state;
    crp_rpc_resp r = {.op = CRP_RPC_GET_REPLICA_LIST, .status = CR_ERR_OFFLOAD_STAGING};
    assert_true(crp_rpc_resp_is_staging(&r));
    r.status = CR_OBJECT_NOT_FOUND;
    assert_false(crp_rpc_resp_is_staging(&r));
    r.status = 0;
    assert_false(crp_rpc_resp_is_staging(&r));
    crp_rpc_key_result res[3] = {{.status = CR_OBJECT_NOT_FOUND},
                                 {.status = CR_ERR_OFFLOAD_STAGING},
                                 {.status = CR_ERR_OFFLOAD_STAGING}};
    r = (crp_rpc_resp){.op = CRP_RPC_BATCH_GET_REPLICA_LIST};
    r.u.batch_get.results = res;
    r.u.batch_get.n = 3;
    assert_true(crp_rpc_resp_is_staging(&r)); /* none ready, some being staged */
    res[0].status = 0;
    assert_false(crp_rpc_resp_is_staging(&r)); /* one ready: back to the caller */
    res[0].status = CR_OBJECT_NOT_FOUND;
    res[1].status = res[2].status = CR_OBJECT_NOT_FOUND;
    assert_false(crp_rpc_resp_is_staging(&r)); /* nothing to wait for */
    r.status = CR_RPC_FAIL;
    res[1].status = CR_ERR_OFFLOAD_STAGING;
    assert_false(crp_rpc_resp_is_staging(&r)); /* the call failed as a whole */
    r = (crp_rpc_resp){.op = CRP_RPC_EXIST, .status = CR_ERR_OFFLOAD_STAGING};
    assert_false(crp_rpc_resp_is_staging(&r));
}

static void test_clear(void **state)
{
    (void)state;
    /* Caller-built: clear frees nothing (the strings are static here) and zeroes. */
    crp_rpc_req m;
    fill_req(&m, CRP_RPC_BATCH_PUT_START, V_SMALL);
    crp_rpc_req_clear(&m);
    assert_int_equal(m.op, 0);
    assert_null(m.arena);
    assert_int_equal(m.u.batch_put_start.n_keys, 0);
    crp_rpc_resp r;
    fill_resp(&r, CRP_RPC_BATCH_GET_REPLICA_LIST, V_SMALL);
    crp_rpc_resp_clear(&r);
    assert_null(r.arena);
    /* Clearing twice, and clearing a zeroed struct, are fine. */
    crp_rpc_resp_clear(&r);
    crp_rpc_req zero = {0};
    crp_rpc_req_clear(&zero);

    /* A decoded message with many strings: one arena, freed by clear (ASan checks). */
    fill_req(&m, CRP_RPC_BATCH_EXIST, V_MAX);
    crp_buf b = {0};
    assert_int_equal(crp_rpc_req_encode(&m, &b), 0);
    crp_rpc_req back;
    assert_int_equal(crp_rpc_req_decode(b.data, b.len, &back), 0);
    assert_non_null(back.arena);
    assert_int_equal(back.u.keys.n_keys, BIG_BATCH);
    assert_string_equal(back.u.keys.keys[BIG_BATCH - 1], big_keys[BIG_BATCH - 1]);
    crp_rpc_req_clear(&back);
    crp_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_op_table),
        cmocka_unit_test(test_round_trip_requests),
        cmocka_unit_test(test_round_trip_replies),
        cmocka_unit_test(test_golden_bytes),
        cmocka_unit_test(test_truncation_and_trailing),
        cmocka_unit_test(test_hostile_structure),
        cmocka_unit_test(test_mutations),
        cmocka_unit_test(test_key_bounds),
        cmocka_unit_test(test_batch_bounds),
        cmocka_unit_test(test_array_bounds),
        cmocka_unit_test(test_ranges_and_enums),
        cmocka_unit_test(test_opcodes),
        cmocka_unit_test(test_replica_clear_request),
        cmocka_unit_test(test_version_check),
        cmocka_unit_test(test_clear),
        cmocka_unit_test(test_resp_is_staging),
    };
    return cmocka_run_group_tests(tests, setup_samples, teardown_samples);
}
