/*
 * gen_corpus.c - writes the fuzzers' seed corpora at build time.
 *
 * Usage: fuzz_gen_corpus <dir>. Creates <dir>/<target>/seed-N for every
 * fuzz target with a few valid encodings made by the real encoders, so the
 * seeds can never drift from the wire format.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "crescent/status.h"
#include "proto/frame.h"
#include "proto/messages.h"
#include "proto/offload.h"
#include "proto/rpc.h"
#include "proto/thin.h"

static const char *root;

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "gen_corpus: %s: %s\n", what, detail);
    exit(1);
}

static void make_dir(const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        die(path, strerror(errno));
}

static void write_seed(const char *target, int n, const void *data, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", root, target);
    make_dir(path);
    snprintf(path, sizeof(path), "%s/%s/seed-%d", root, target, n);
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        die(path, strerror(errno));
    if (len > 0 && fwrite(data, 1, len, f) != len)
        die(path, "short write");
    if (fclose(f) != 0)
        die(path, strerror(errno));
}

/* Write the buffer as a seed and reset it; rc is the encoder's result. */
static void seed(const char *target, int n, int rc, crp_buf *b)
{
    if (rc != 0)
        die(target, "encoder failed");
    write_seed(target, n, b->data, b->len);
    crp_buf_reset(b);
}

static void headers(void)
{
    static const crp_header h[] = {
        {CRP_VERSION, CRP_HELLO, 0, 64, 0, 1, 0},
        {CRP_VERSION, CRP_WRITE_REQ, 0, 3, 0, 0xffffffffull, 4096},
        {CRP_VERSION, CRP_READ_RESP, 0, 0, -3017, 7, 0},
        {CRP_VERSION, CRP_ERROR, 0, 20, -3018, 0, 0},
        {2, CRP_HELLO, 0, 0, 0, 0, 0},
    };
    uint8_t wire[CRP_HEADER_SIZE];
    for (size_t i = 0; i < sizeof(h) / sizeof(h[0]); i++) {
        crp_header_encode(&h[i], wire);
        write_seed("header", (int)i, wire, sizeof(wire));
    }
}

/* --- master RPC: one request, one reply and one error reply per opcode --- */

static char *rpc_keys[] = {"a", "layer/0/block/1", ""};
static uint64_t rpc_sizes[] = {4096, 1, 0};
static char *rpc_pref[] = {"node-a:17000"};
static crp_rpc_segment rpc_segs[] = {{"node-a:17000", 0x7f0000000000ull, 1ull << 30, 1},
                                     {"node-b:17000", 0x1000, 4096, 2}};
static crp_rpc_replica rpc_reps[] = {
    {"node-a:17000", 0x7f0000001000ull, 4096, 1, CRP_RPC_REPLICA_COMPLETE},
    {"node-b:17000", 0x2000, 4096, 2, CRP_RPC_REPLICA_PROCESSING}};
static crp_rpc_key_result rpc_results[] = {{0, 2, rpc_reps, 9},
                                           {CR_NO_AVAILABLE_HANDLE, 0, NULL, 0}};
static int32_t rpc_statuses[] = {0, 1, CR_OBJECT_NOT_FOUND};
static char *rpc_names[] = {"node-a:17000", "node-b:17000"};
static const crp_rpc_uuid rpc_cid = {0x0123456789abcdefull, 0x1122334455667788ull};
static const crp_rpc_replica_config rpc_cfg = {.replica_num = 2,
                                               .soft_pin_action = CRP_RPC_SOFT_PIN_ENABLE,
                                               .has_soft_pin_ttl = true,
                                               .soft_pin_ttl_ms = 60000,
                                               .n_preferred = 1,
                                               .preferred_segments = rpc_pref};

static void rq_hello(crp_rpc_req *m)
{
    m->u.hello = (crp_rpc_hello_req){.version = CRP_RPC_VERSION,
                                     .caps = CRP_RPC_CAPS_DEFINED,
                                     .client_id = rpc_cid,
                                     .software = "crescent",
                                     .has_mac = true, /* the master shared secret's answer */
                                     .client_nonce = {1, 2, 3},
                                     .mac = {4, 5, 6}};
}
static void rq_client(crp_rpc_req *m)
{
    m->u.client.client_id = rpc_cid;
}
static void rq_mount(crp_rpc_req *m)
{
    m->u.mount = (crp_rpc_mount_req){rpc_cid, rpc_segs[0]};
}
static void rq_remount(crp_rpc_req *m)
{
    m->u.remount = (crp_rpc_remount_req){rpc_cid, 2, rpc_segs};
}
static void rq_unmount(crp_rpc_req *m)
{
    m->u.unmount = (crp_rpc_unmount_req){rpc_cid, "node-a:17000"};
}
static void rq_key(crp_rpc_req *m)
{
    m->u.key.key = "layer/0/block/1";
}
static void rq_keys(crp_rpc_req *m)
{
    m->u.keys = (crp_rpc_keys_req){3, rpc_keys};
}
static uint64_t rpc_tokens[3] = {1, 2, 3};
static void rq_leases(crp_rpc_req *m)
{
    m->u.leases = (crp_rpc_leases_req){3, rpc_keys, rpc_tokens};
}
static void rq_put_start(crp_rpc_req *m)
{
    m->u.put_start = (crp_rpc_put_start_req){rpc_cid, "layer/0/block/1", 4096, rpc_cfg};
    m->owned_ms = 30000; /* an owned write (docs/WIRE.md) */
}
static void rq_owner_key(crp_rpc_req *m)
{
    m->u.owner_key = (crp_rpc_owner_key_req){rpc_cid, "layer/0/block/1"};
    if (m->op == CRP_RPC_PUT_END || m->op == CRP_RPC_UPSERT_END) /* a grant's end ("gk") */
        m->grant_key = "\x02"
                       "crescent-grant/0123456789abcdef0123456789abcdef";
    m->commit_ahead = m->op == CRP_RPC_PUT_END; /* committed ahead ("ca", docs/WIRE.md) */
}
static void rq_batch_put_start(crp_rpc_req *m)
{
    m->u.batch_put_start = (crp_rpc_batch_put_start_req){rpc_cid, 3, rpc_keys, rpc_sizes, rpc_cfg};
}
static void rq_owner_keys(crp_rpc_req *m)
{
    m->u.owner_keys = (crp_rpc_owner_keys_req){rpc_cid, 3, rpc_keys};
}
static void rq_remove(crp_rpc_req *m)
{
    m->u.remove = (crp_rpc_remove_req){"layer/0/block/1", true};
}
static void rq_regex(crp_rpc_req *m)
{
    m->u.regex = (crp_rpc_regex_req){"^layer/[0-9]+/", false};
}
static void rq_force(crp_rpc_req *m)
{
    m->u.force.force = true;
}
static void rq_batch_remove(crp_rpc_req *m)
{
    m->u.batch_remove = (crp_rpc_batch_remove_req){3, rpc_keys, false};
}
static void rq_replica_clear(crp_rpc_req *m)
{
    m->u.replica_clear = (crp_rpc_replica_clear_req){rpc_cid, 3, rpc_keys, "node-b:17000"};
}
static void rq_name(crp_rpc_req *m)
{
    m->u.name.name = "node-a:17000";
}
static uint8_t rpc_blob[] = {0x81, 0xa2, 'i', 't', 0x90};
static void rq_blob(crp_rpc_req *m)
{
    m->u.blob = (crp_rpc_blob_req){rpc_cid, sizeof(rpc_blob), rpc_blob};
}
static void rs_blob(crp_rpc_resp *m)
{
    m->u.blob = (crp_rpc_blob_resp){sizeof(rpc_blob), rpc_blob};
}
static void rq_none(crp_rpc_req *m)
{
    (void)m;
}

static void rs_hello(crp_rpc_resp *m)
{
    m->u.hello = (crp_rpc_hello_resp){.version = CRP_RPC_VERSION,
                                      .caps = CRP_RPC_CAPS_DEFINED,
                                      .software = "crescent-master",
                                      .view_version = 1,
                                      .has_server_nonce = true, /* a shared-secret challenge */
                                      .server_nonce = {7, 8},
                                      .has_mac = true,
                                      .mac = {9},
                                      .local_socket = "crescent-master.17.0011223344556677",
                                      .local_port = 40000,
                                      .local_pid = 17};
}
static void rs_ping(crp_rpc_resp *m)
{
    m->u.ping = (crp_rpc_ping_resp){CRP_RPC_CLIENT_NEED_REMOUNT, 3, 1500};
}
static void rs_exist(crp_rpc_resp *m)
{
    m->u.exist.exists = true;
}
static void rs_statuses(crp_rpc_resp *m)
{
    m->u.statuses = (crp_rpc_statuses_resp){3, rpc_statuses};
}
static void rs_get(crp_rpc_resp *m)
{
    m->u.get = (crp_rpc_get_resp){2, rpc_reps, 10000, 7};
}
static void rs_alloc(crp_rpc_resp *m)
{
    m->u.alloc = (crp_rpc_alloc_resp){2, rpc_reps};
}
static void rs_batch_get(crp_rpc_resp *m)
{
    m->u.batch_get = (crp_rpc_batch_get_resp){2, rpc_results, 10000};
}
static void rs_batch_alloc(crp_rpc_resp *m)
{
    m->u.batch_alloc = (crp_rpc_batch_alloc_resp){2, rpc_results};
}
static void rs_count(crp_rpc_resp *m)
{
    m->u.count.count = 300;
}
static void rs_names(crp_rpc_resp *m)
{
    m->u.names = (crp_rpc_names_resp){2, rpc_names};
}
static void rs_segment_info(crp_rpc_resp *m)
{
    m->u.segment_info = (crp_rpc_segment_info_resp){rpc_segs[1], 4096, rpc_cid};
}
static void rs_key_info(crp_rpc_resp *m)
{
    m->u.key_info = (crp_rpc_key_info_resp){4096, 2, rpc_reps, 9000, true, 0, rpc_cid};
}
static void rs_end(crp_rpc_resp *m)
{
    m->u.end.version = (0x5eedull << 40) + 3;
}

static void rs_none(crp_rpc_resp *m)
{
    (void)m;
}

static void rpc_seeds(crp_buf *b)
{
    int n_req = 0, n_resp = 0;
#define RPC_SEED_(name, value, str, rq, rs)                                                        \
    do {                                                                                           \
        crp_rpc_req q = {.op = value};                                                             \
        rq_##rq(&q);                                                                               \
        seed("rpc_req", n_req++, crp_rpc_req_encode(&q, b), b);                                    \
        crp_rpc_resp r = {.op = value};                                                            \
        rs_##rs(&r);                                                                               \
        seed("rpc_resp", n_resp++, crp_rpc_resp_encode(&r, b), b);                                 \
        r.status = value == CRP_RPC_SERVICE_READY ? CR_INVALID_VERSION : CR_OBJECT_NOT_FOUND;      \
        r.message = "object not found";                                                            \
        seed("rpc_resp", n_resp++, crp_rpc_resp_encode(&r, b), b);                                 \
    } while (0);
    CRP_RPC_OP_TABLE(RPC_SEED_)
#undef RPC_SEED_
}

/* etcd gateway replies as a real etcd 3.4 sends them; the first byte picks
 * the decoder in fuzz_etcd_reply.c (0 range, 1 txn, 2 watch, 3 grant,
 * 4 keepalive, 5 delete, 6 put, 7 error, 8 base64). */
static void etcd_replies(void)
{
#define H                                                                                          \
    "\"header\":{\"cluster_id\":\"15118495548433857066\",\"member_id\":\"1366803315\","            \
    "\"revision\":\"7\",\"raft_term\":\"2\"}"
    static const struct {
        char decoder;
        const char *body;
    } seeds[] = {
        {0, "{" H ",\"kvs\":[{\"key\":\"Zm9v\",\"create_revision\":\"2\",\"mod_revision\":\"3\","
            "\"version\":\"1\",\"value\":\"YmFy\",\"lease\":\"4111120366019810830\"}],\"count\":"
            "\"1\"}"},
        {0, "{" H "}"},
        {1, "{" H ",\"succeeded\":true,\"responses\":[{\"response_put\":{\"header\":{\"revision\":"
            "\"3\"}}}]}"},
        {1, "{" H ",\"responses\":[{\"response_range\":{\"header\":{\"revision\":\"3\"},\"kvs\":"
            "[{\"key\":\"bGVhZA==\",\"mod_revision\":\"3\",\"value\":\"YQ==\"}],\"count\":\"1\"}},"
            "{\"response_delete_range\":{\"deleted\":\"1\"}}]}"},
        {2, "{\"result\":{" H ",\"created\":true}}"},
        {2,
         "{\"result\":{" H ",\"events\":[{\"kv\":{\"key\":\"bGVhZA==\",\"create_revision\":\"3\","
         "\"mod_revision\":\"3\",\"version\":\"1\",\"value\":\"YQ==\"}},{\"type\":\"DELETE\","
         "\"kv\":"
         "{\"key\":\"bGVhZA==\",\"mod_revision\":\"5\"}}]}}"},
        {2, "{\"result\":{\"header\":{\"raft_term\":\"2\"},\"canceled\":true,\"compact_revision\":"
            "\"5\"}}"},
        {3, "{" H ",\"ID\":\"4111120366019810824\",\"TTL\":\"5\"}"},
        {4, "{\"result\":{" H ",\"ID\":\"4111120366019810830\",\"TTL\":\"5\"}}\n"},
        {4,
         "{\"error\":{\"grpc_code\":14,\"http_code\":503,\"message\":\"etcdserver: no leader\"}}"},
        {5, "{" H ",\"deleted\":\"1\"}"},
        {6, "{" H "}"},
        {7, "{\"error\":\"etcdserver: requested lease not found\",\"message\":\"etcdserver: "
            "requested lease not found\",\"code\":5}"},
        {8, "Zm9vYmE="},
    };
#undef H
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        char buf[1024];
        size_t n = strlen(seeds[i].body);
        buf[0] = seeds[i].decoder;
        memcpy(buf + 1, seeds[i].body, n);
        write_seed("etcd_reply", (int)i, buf, n + 1);
    }
}

/* Thin-client RPC: every op's request with all its fields, every reply. */
static void thin_seeds(crp_buf *b)
{
    static const int ops[] = {
#define THIN_OP_(name, value, str, rq, opt, rs) value,
        CRP_THIN_OP_TABLE(THIN_OP_)
#undef THIN_OP_
    };
    static char *keys[] = {"a", "layer/0/block/1", ""};
    static uint32_t counts[] = {1, 2, 0};
    static crp_thin_ext ext[] = {{0, 0, 4096}, {3, 1ull << 30, 8}, {0, 8192, 1}};
    static uint64_t offs[] = {0, 64, 4096};
    static uint64_t vals[] = {4096, 0, 1ull << 40};
    static int64_t results[] = {4096, CR_OBJECT_NOT_FOUND, 0};
    static char *names[] = {"node-a:17000", "node-b:17000"};
    static crp_thin_replica reps[] = {{"node-a:17000", 0x7f0000001000ull, 4096, true}};
    int n = 0;
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        crp_thin_req m = {.op = (uint16_t)ops[i],
                          .fields = crp_thin_req_required(ops[i]) | crp_thin_req_optional(ops[i]),
                          .flags = CRP_THIN_FLAG_SINGLE,
                          .n_keys = 3,
                          .keys = keys,
                          .counts = counts,
                          .n_ext = 3,
                          .ext = ext,
                          .offsets = offs,
                          .n_vals = 3,
                          .vals = vals,
                          .cfg = rpc_cfg,
                          .text = "^layer/",
                          .id = 2,
                          .addr = 0x7f0000000000ull,
                          .len = 2ull << 20,
                          .n_fds = 1,
                          .version = CRP_THIN_VERSION,
                          .pid = 4242,
                          .pool_size = 64ull << 20,
                          .buffer_size = 16ull << 20,
                          .session = 1,
                          .tenant = "default"};
        seed("thin_req", n, crp_thin_req_encode(&m, b), b);
        crp_thin_resp r = {.op = (uint16_t)ops[i],
                           .status = i % 3 == 0 ? CR_OBJECT_NOT_FOUND : 0,
                           .message = i % 3 == 0 ? "no such object" : NULL,
                           .fields = crp_thin_resp_allowed(ops[i]),
                           .n_results = 3,
                           .results = results,
                           .n_vals = 3,
                           .vals = vals,
                           .value = 7,
                           .n_names = 2,
                           .names = names,
                           .n_reps = 1,
                           .reps = reps,
                           .session = 1,
                           .caps = 0,
                           .segment = "127.0.0.1:17000",
                           .version = CRP_THIN_VERSION,
                           .auth = true,
                           .tenant = "default"};
        seed("thin_resp", n, crp_thin_resp_encode(&r, b), b);
        n++;
    }
}

/* HA replication frames (src/master/ha_codec.h), written byte by byte:
 * u64 first_seq, u32 count, then u32 len + entry. */
static void ha_entries(void)
{
    static const uint8_t key[] = {3, 1, 0, 'k', 0x09, 16, 0,  0, 0,  0, 0, 0, 0, 0, 0, 0,
                                  0, 0, 0, 0,   0,    1,  42, 0, 0,  0, 0, 0, 0, 0, 0, 16,
                                  0, 0, 0, 0,   0,    0,  16, 0, 0,  0, 0, 0, 0, 0, 1, 42,
                                  0, 0, 0, 0,   0,    0,  0,  0, 32, 0, 0, 0, 0, 0, 0};
    static const uint8_t mount[] = {1, 42, 0, 0, 0, 0, 0,  0, 0, 1, 0, 0, 0, 0,   0,
                                    0, 0,  2, 0, 0, 0, 0,  0, 0, 0, 0, 0, 0, 0,   0,
                                    0, 1,  0, 0, 0, 0, 16, 0, 0, 0, 0, 2, 0, 's', 'a'};
    static const uint8_t end[] = {4, 7, 0, 0, 0, 0, 0, 0, 0};
    /* DISK: key "k", on disk, holder (5, 6), version 77, size 1 MiB */
    static const uint8_t disk[] = {6, 1, 0,  'k', 1, 5, 0, 0, 0, 0, 0, 0, 0,  6, 0, 0, 0, 0, 0,
                                   0, 0, 77, 0,   0, 0, 0, 0, 0, 0, 0, 0, 16, 0, 0, 0, 0, 0};
    const struct {
        const uint8_t *p;
        size_t n;
    } e[] = {{key, sizeof(key)}, {mount, sizeof(mount)}, {end, sizeof(end)}, {disk, sizeof(disk)}};
    for (size_t i = 0; i < sizeof(e) / sizeof(e[0]); i++) {
        uint8_t frame[256] = {(uint8_t)(i + 1), 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0};
        frame[12] = (uint8_t)e[i].n;
        memcpy(frame + 16, e[i].p, e[i].n);
        write_seed("ha_entry", (int)i, frame, 16 + e[i].n);
    }
}

static void offload_seeds(crp_buf *b)
{
    crp_off_item items[3] = {
        {CRP_OFF_OFFLOAD, 0, "key-1", 7, 0x7f0000001000ull, 1 << 20, 0},
        {CRP_OFF_STAGE, CR_ERR_DISK_IO, "key-2", 9, 4096, 4096, 5000},
        {CRP_OFF_ANNOUNCE, 0, "key-3", 11, 0, 64, 0},
    };
    crp_off_msg m = {.segment = "127.0.0.1:17000", .n_stats = CRP_OFF_NSTATS, .more = true};
    m.stats[0] = 5;
    m.n_items = 3;
    m.items = items;
    seed("offload", 0, crp_off_encode(&m, b), b);
    m.n_items = 0;
    seed("offload", 1, crp_off_encode(&m, b), b);
}

int main(int argc, char **argv)
{
    crp_buf b = {0};
    if (argc != 2)
        die("usage", "fuzz_gen_corpus <dir>");
    root = argv[1];
    make_dir(root);

    headers();
    etcd_replies();
    ha_entries();
    thin_seeds(&b);
    offload_seeds(&b);

    crp_challenge c;
    for (int i = 0; i < CRP_NONCE_SIZE; i++)
        c.nonce[i] = (uint8_t)(i * 31);
    seed("challenge", 0, crp_challenge_encode(&c, &b), &b);

    crp_hello h = {.version = 1,
                   .caps = 3,
                   .role = CRP_ROLE_DATA,
                   .name = "node-a",
                   .instance = 0x1122334455667788ull};
    memcpy(h.client_nonce, c.nonce, CRP_NONCE_SIZE);
    seed("hello", 0, crp_hello_encode(&h, &b), &b);
    h.has_mac = true;
    memset(h.mac, 0xab, CRP_MAC_SIZE);
    h.role = CRP_ROLE_CONTROL;
    seed("hello", 1, crp_hello_encode(&h, &b), &b);

    crp_hello_ack a = {.version = 1, .caps = 1, .name = "server", .instance = 5};
    seed("hello_ack", 0, crp_hello_ack_encode(&a, &b), &b);
    a.has_mac = true;
    memset(a.mac, 0x11, CRP_MAC_SIZE);
    seed("hello_ack", 1, crp_hello_ack_encode(&a, &b), &b);

    crp_descriptor d = {.name = "seg", .host_id = "host-1", .instance = 9, .version = 1};
    seed("descriptor", 0, crp_descriptor_encode(&d, &b), &b);
    uint8_t ucx_addr[64] = {0, 1, 2, 3, 0xff};
    crp_endpoint eps[3] = {
        {"tcp", "10.0.0.1:7000", 0}, {"shm", "@crescent-1-2", 0}, {"ucx", (char *)ucx_addr, 64}};
    crp_blob blobs[2] = {{"shm", (uint8_t *)"\x01\x02", 2}, {"ucx", ucx_addr, 40}};
    crp_buffer_desc bufs[3] = {
        {0x7f0000000000ull, 1 << 20, 0, -1, true, 0, NULL},
        {0x1000, 4096, 1, 0, false, 2, blobs},
        {0x200000, 1 << 30, 2, 7, true, 1, &blobs[1]},
    };
    d.endpoints = eps;
    d.n_endpoints = 3;
    d.buffers = bufs;
    d.n_buffers = 3;
    seed("descriptor", 1, crp_descriptor_encode(&d, &b), &b);

    uint8_t msg[] = {'d', 'o', 'n', 'e', 0, 1};
    crp_notify n = {.from = "peer", .message = msg, .length = sizeof(msg)};
    seed("notify", 0, crp_notify_encode(&n, &b), &b);
    n.message = NULL;
    n.length = 0;
    seed("notify", 1, crp_notify_encode(&n, &b), &b);

    static const crp_data_req reqs[] = {
        {0, 1}, {0x7f0000001000ull, 4096}, {UINT64_MAX - 1, 1}, {200, 70000}};
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++)
        seed("data_req", (int)i, crp_data_req_encode(&reqs[i], &b), &b);

    crp_error e = {.message = "segment 'x' is not registered"};
    seed("error", 0, crp_error_encode(&e, &b), &b);
    e.message = "";
    seed("error", 1, crp_error_encode(&e, &b), &b);

    rpc_seeds(&b);

    /* UCX active-message headers: one input holds a request then a reply. */
    static const crp_am_req am_reqs[] = {{0, 1, 0x1000, 4096}, {1, 0xffffffff00000001ull, 0, 1}};
    static const crp_am_reply am_reps[] = {{1, 0}, {0xffffffff00000001ull, -3003}};
    for (size_t i = 0; i < 2; i++) {
        uint8_t x[CRP_AM_REQ_SIZE + CRP_AM_REPLY_SIZE];
        crp_am_req_encode(&am_reqs[i], x);
        crp_am_reply_encode(&am_reps[i], x + CRP_AM_REQ_SIZE);
        write_seed("am", (int)i, x, sizeof(x));
    }

    /* fd service datagrams: a selector byte (even: request, odd: reply), then the body. */
    crp_shm_request shm_reqs[] = {
        {.op = CRP_SHM_CONTROL_PAGE}, {.op = CRP_SHM_REGION, .id = 77}, {.op = CRP_SHM_AUTH}};
    memset(shm_reqs[2].client_nonce, 3, CRP_NONCE_SIZE);
    memset(shm_reqs[2].mac, 9, CRP_MAC_SIZE);
    crp_shm_reply shm_reps[] = {
        {.status = 0, .size = 4096}, {.status = -3019}, {.has_nonce = true, .auth = true}};
    for (int i = 0; i < 3; i++) {
        for (int kind = 0; kind < 2; kind++) {
            crp_buf body = {0};
            int rc = kind == 0 ? crp_shm_request_encode(&shm_reqs[i], &body)
                               : crp_shm_reply_encode(&shm_reps[i], &body);
            if (rc != 0)
                die("shm seed", cr_last_error_message());
            uint8_t x[512];
            x[0] = (uint8_t)kind;
            memcpy(x + 1, body.data, body.len);
            write_seed("shm", 2 * i + kind, x, body.len + 1);
            crp_buf_free(&body);
        }
    }

    crp_buf_free(&b);
    return 0;
}
