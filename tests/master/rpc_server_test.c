/*
 * rpc_server_test.c - the RPC server, dispatcher and pipelined master client
 * in one process: every op family round-trips, many threads pipeline on one
 * connection, a broken connection fails calls instead of hanging, and the
 * server survives a garbage body. Stage waits ("swt", docs/WIRE.md): a get of
 * a disk-only key is held until the holder reports the stage (the holder is
 * played in-process through crk_off_heartbeat), the connection's other
 * requests are answered meanwhile, a wait that ends answers "being staged",
 * and connections closed (or a server stopped) with gets held free cleanly.
 * Busy-poll (--rpc_busy_poll_us): a spinning server answers as before, burns
 * CPU while requests keep coming and stops spinning once they stop.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/clock.h"
#include "base/net.h"
#include "master/offload.h"
#include "master/rpc_server.h"
#include "proto/frame.h"
#include "proto/offload.h"
#include "store/master_client.h"

typedef struct fixture {
    crk_service *svc;
    crk_rpc_server *srv;
    crk_server_info info;
    char addr[64];
} fixture;

static int setup(void **state)
{
    static fixture f;
    memset(&f, 0, sizeof(f));
    crk_config cfg;
    crk_config_default(&cfg);
    cfg.restart_fence_ms = 1; /* no fence in these tests */
    assert_int_equal(crk_service_create(&cfg, crb_now_ms(), &f.svc), 0);
    f.info = (crk_server_info){.view_version = 42, .software = "test-master"};
    crk_rpc_server_options ro;
    crk_rpc_server_options_default(&ro);
    assert_int_equal(crk_rpc_server_start(f.svc, &f.info, &ro, &f.srv), 0);
    snprintf(f.addr, sizeof(f.addr), "127.0.0.1:%u", crk_rpc_server_port(f.srv));
    *state = &f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    crk_rpc_server_stop(f->srv);
    crk_service_destroy(f->svc);
    return 0;
}

static int call(crc_master *m, crp_rpc_req *req, crp_rpc_resp *resp)
{
    return crc_master_call(m, req, resp, 5000);
}

static uint64_t process_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* `n` EXIST calls 1 ms apart on a new connection to addr; returns the CPU
 * time this process (the server's threads and this one) spent meanwhile, in
 * parts of the wall time. */
static double paced_calls_cpu_share(const char *addr, int n)
{
    crc_master *m;
    assert_int_equal(crc_master_connect(addr, (crp_rpc_uuid){5, 5}, 2000, &m), 0);
    uint64_t cpu0 = process_cpu_ns(), t0 = crb_now_ns();
    for (int i = 0; i < n; i++) {
        crp_rpc_req req = {.op = CRP_RPC_EXIST};
        req.u.key.key = "paced";
        crp_rpc_resp resp;
        assert_int_equal(crc_master_call(m, &req, &resp, 5000), 0);
        assert_int_equal(resp.status, 0);
        assert_false(resp.u.exist.exists);
        crp_rpc_resp_clear(&resp);
        usleep(1000);
    }
    double share = (double)(process_cpu_ns() - cpu0) / (double)(crb_now_ns() - t0);
    crc_master_close(m);
    return share;
}

/* --rpc_busy_poll_us: an I/O thread that served a request polls instead of
 * sleeping for that long, so requests 1 ms apart keep one thread spinning
 * (about a core) where the default server (adaptive polling, base/spin.h:
 * its ~20 us windows run out and it backs off) sleeps between them; once the
 * requests stop, the spinning stops too (design.md §2.7: no CPU while idle).
 * The client's own polling is adaptive too and backs off the same way. */
static void busy_poll_spins_only_while_requests_come(void **state)
{
    fixture *f = *state;
    double sleeping = paced_calls_cpu_share(f->addr, 150);

    crk_rpc_server_options ro;
    crk_rpc_server_options_default(&ro);
    ro.busy_poll_us = 2000; /* longer than the pause between calls */
    crk_rpc_server *spin;
    assert_int_equal(crk_rpc_server_start(f->svc, &f->info, &ro, &spin), 0);
    char addr[64];
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", crk_rpc_server_port(spin));
    double spinning = paced_calls_cpu_share(addr, 150);
    crk_rpc_server_stop(spin);
    ro.busy_poll_us = 0;
    ro.adaptive_poll = true;
    assert_int_equal(crk_rpc_server_start(f->svc, &f->info, &ro, &spin), 0);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", crk_rpc_server_port(spin));
    double adaptive = paced_calls_cpu_share(addr, 150);

    uint64_t cpu0 = process_cpu_ns(), t0 = crb_now_ns();
    usleep(300 * 1000); /* idle: nothing is sent to either server */
    double idle = (double)(process_cpu_ns() - cpu0) / (double)(crb_now_ns() - t0);
    crk_rpc_server_stop(spin);
    print_message("cpu per wall second: default %.2f, spinning %.2f, adaptive %.2f, idle after "
                  "%.2f\n",
                  sleeping, spinning, adaptive, idle);
    assert_true(sleeping < 0.3);
    assert_true(adaptive < 0.3);
    assert_true(spinning > 0.4); /* a spinning thread may share its core with the test's */
    assert_true(idle < 0.1);
}

static void put_get_remove_round_trip(void **state)
{
    fixture *f = *state;
    crp_rpc_uuid id = {1, 2};
    crc_master *m;
    assert_int_equal(crc_master_connect(f->addr, id, 2000, &m), 0);
    assert_int_equal(crc_master_view(m), 42);
    crp_rpc_resp resp;
    crp_rpc_req req = {.op = CRP_RPC_MOUNT_SEGMENT};
    req.u.mount = (crp_rpc_mount_req){id, {"seg-a", 1 << 20, 64 << 20, 1}};
    assert_int_equal(call(m, &req, &resp), 0);
    assert_int_equal(resp.status, 0);
    crp_rpc_resp_clear(&resp);

    req = (crp_rpc_req){.op = CRP_RPC_PUT_START};
    req.u.put_start = (crp_rpc_put_start_req){id, "k", 4096, {.replica_num = 1}};
    assert_int_equal(call(m, &req, &resp), 0);
    assert_int_equal(resp.status, 0);
    assert_int_equal(resp.u.alloc.n_replicas, 1);
    assert_string_equal(resp.u.alloc.replicas[0].segment, "seg-a");
    crp_rpc_resp_clear(&resp);

    req = (crp_rpc_req){.op = CRP_RPC_EXIST};
    req.u.key.key = "k";
    assert_int_equal(call(m, &req, &resp), 0);
    assert_false(resp.u.exist.exists); /* invisible until put_end */
    crp_rpc_resp_clear(&resp);

    req = (crp_rpc_req){.op = CRP_RPC_PUT_END};
    req.u.owner_key = (crp_rpc_owner_key_req){id, "k"};
    assert_int_equal(call(m, &req, &resp), 0);
    assert_int_equal(resp.status, 0);
    crp_rpc_resp_clear(&resp);

    req = (crp_rpc_req){.op = CRP_RPC_GET_REPLICA_LIST};
    req.u.key.key = "k";
    assert_int_equal(call(m, &req, &resp), 0);
    assert_int_equal(resp.status, 0);
    assert_int_equal(resp.u.get.n_replicas, 1);
    assert_true(resp.u.get.lease_ttl_ms > 0);
    crp_rpc_resp_clear(&resp);

    req = (crp_rpc_req){.op = CRP_RPC_REMOVE};
    req.u.remove = (crp_rpc_remove_req){"k", false};
    assert_int_equal(call(m, &req, &resp), 0);
    assert_int_equal(resp.status, CR_OBJECT_HAS_LEASE);
    assert_non_null(resp.message);
    crp_rpc_resp_clear(&resp);
    req.u.remove.force = true;
    assert_int_equal(call(m, &req, &resp), 0);
    assert_int_equal(resp.status, 0);
    crp_rpc_resp_clear(&resp);

    req = (crp_rpc_req){.op = CRP_RPC_GET_REPLICA_LIST};
    req.u.key.key = "k";
    assert_int_equal(call(m, &req, &resp), 0);
    assert_int_equal(resp.status, CR_OBJECT_NOT_FOUND);
    crp_rpc_resp_clear(&resp);
    crc_master_close(m);
}

typedef struct pipeline_arg {
    crc_master *m;
    int thread;
    atomic_int *errors;
} pipeline_arg;

/* Odd threads send pairs (crc_master_call2: an EXIST and a PING in one write), even ones
 * single EXISTs, all on one connection: every reply reaches its caller, none times out (a
 * pair's caller must hear of its replies and of the read side handed over whichever of its
 * two requests they name). */
static void *pipeline_thread(void *p)
{
    pipeline_arg *a = p;
    char key[32];
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "t%d-%d", a->thread, i);
        crp_rpc_req req = {.op = CRP_RPC_EXIST};
        req.u.key.key = key;
        crp_rpc_resp resp;
        if (a->thread % 2 == 1) {
            crp_rpc_req ping = {.op = CRP_RPC_PING};
            ping.u.client.client_id = (crp_rpc_uuid){3, 4};
            crp_rpc_resp pong;
            if (crc_master_call2(a->m, &req, &resp, &ping, &pong, 5000) != 0 ||
                resp.op != CRP_RPC_EXIST || resp.status != 0 || resp.u.exist.exists ||
                pong.op != CRP_RPC_PING || pong.status != 0) {
                atomic_fetch_add(a->errors, 1);
                continue;
            }
            crp_rpc_resp_clear(&pong);
        } else if (crc_master_call(a->m, &req, &resp, 5000) != 0 || resp.status != 0 ||
                   resp.u.exist.exists) {
            atomic_fetch_add(a->errors, 1);
            continue;
        }
        crp_rpc_resp_clear(&resp);
    }
    return NULL;
}

static void many_threads_pipeline_on_one_connection(void **state)
{
    fixture *f = *state;
    crc_master *m;
    assert_int_equal(crc_master_connect(f->addr, (crp_rpc_uuid){3, 4}, 2000, &m), 0);
    atomic_int errors = 0;
    pthread_t th[8];
    pipeline_arg args[8];
    for (int i = 0; i < 8; i++) {
        args[i] = (pipeline_arg){m, i, &errors};
        pthread_create(&th[i], NULL, pipeline_thread, &args[i]);
    }
    for (int i = 0; i < 8; i++)
        pthread_join(th[i], NULL);
    assert_int_equal(atomic_load(&errors), 0);
    crc_master_close(m);
}

static void garbage_body_gets_an_error_and_the_connection_lives(void **state)
{
    fixture *f = *state;
    int fd = crb_connect("127.0.0.1", crk_rpc_server_port(f->srv), 2000);
    assert_true(fd >= 0);
    uint8_t frame[CRP_HEADER_SIZE + 3] = {0};
    crp_header h = {.version = CRP_VERSION, .type = CRP_RPC_REQ, .body_len = 3, .request_id = 7};
    crp_header_encode(&h, frame);
    memcpy(frame + CRP_HEADER_SIZE, "\xc1\xc1\xc1", 3);
    uint64_t deadline = crb_now_ns() + 2000000000ull;
    assert_int_equal(crb_write_full(fd, frame, sizeof(frame), deadline), 0);
    uint8_t hb[CRP_HEADER_SIZE];
    assert_int_equal(crb_read_full(fd, hb, sizeof(hb), deadline), 0);
    crp_header rh;
    assert_int_equal(crp_header_decode(hb, &rh), 0);
    assert_int_equal(rh.type, CRP_ERROR);
    assert_int_equal(rh.status, CR_ERR_MALFORMED_FRAME);
    assert_int_equal(rh.request_id, 7);
    uint8_t skip[1024];
    assert_int_equal(crb_read_full(fd, skip, rh.body_len, deadline), 0);
    /* The same connection still answers a valid request. */
    crp_rpc_req req = {.op = CRP_RPC_PING};
    req.u.client.client_id = (crp_rpc_uuid){5, 6};
    crp_buf body = {0};
    assert_int_equal(crp_rpc_req_encode(&req, &body), 0);
    h = (crp_header){.version = CRP_VERSION,
                     .type = CRP_RPC_REQ,
                     .body_len = (uint32_t)body.len,
                     .request_id = 8};
    crp_header_encode(&h, hb);
    assert_int_equal(crb_write_full(fd, hb, sizeof(hb), deadline), 0);
    assert_int_equal(crb_write_full(fd, body.data, body.len, deadline), 0);
    crp_buf_free(&body);
    assert_int_equal(crb_read_full(fd, hb, sizeof(hb), deadline), 0);
    assert_int_equal(crp_header_decode(hb, &rh), 0);
    assert_int_equal(rh.type, CRP_RPC_RESP);
    assert_int_equal(rh.request_id, 8);
    close(fd);
}

/* Work done in a call's `sent` callback (a put's copy under commit ahead) takes longer than
 * the call's timeout: the reply, in since, is still taken, and sent runs exactly once. */
static void slow_sent_work(void *arg)
{
    (*(int *)arg)++;
    usleep(300 * 1000);
}

static void sent_work_does_not_use_up_the_wait(void **state)
{
    fixture *f = *state;
    crc_master *m;
    assert_int_equal(crc_master_connect(f->addr, (crp_rpc_uuid){7, 9}, 2000, &m), 0);
    crp_rpc_req req = {.op = CRP_RPC_PING};
    req.u.client.client_id = (crp_rpc_uuid){7, 9};
    crp_rpc_resp resp;
    int ran = 0;
    assert_int_equal(crc_master_call_sent(m, &req, &resp, 100, slow_sent_work, &ran), 0);
    assert_int_equal(resp.status, 0);
    assert_int_equal(ran, 1);
    crp_rpc_resp_clear(&resp);
    crc_master_close(m);
}

static void dead_master_fails_calls_without_hanging(void **state)
{
    fixture *f = *state;
    crc_master *m;
    assert_int_equal(crc_master_connect(f->addr, (crp_rpc_uuid){7, 8}, 2000, &m), 0);
    crk_rpc_server_stop(f->srv);
    f->srv = NULL;
    crp_rpc_req req = {.op = CRP_RPC_PING};
    req.u.client.client_id = (crp_rpc_uuid){7, 8};
    crp_rpc_resp resp;
    uint64_t t0 = crb_now_ms();
    int rc = crc_master_call(m, &req, &resp, 1000);
    assert_true(rc == CR_RPC_FAIL || rc == CR_RPC_TIMEOUT);
    assert_true(crb_now_ms() - t0 < 3000);
    crc_master_close(m);
    /* restart for teardown */
    crk_rpc_server_options ro;
    crk_rpc_server_options_default(&ro);
    ro.threads = 1;
    assert_int_equal(crk_rpc_server_start(f->svc, &f->info, &ro, &f->srv), 0);
    /* connecting to a port where nothing listens is a clean error */
    assert_int_equal(crc_master_connect("127.0.0.1:1", (crp_rpc_uuid){1, 1}, 500, &m), CR_RPC_FAIL);
    assert_int_equal(crc_master_connect("no-port", (crp_rpc_uuid){1, 1}, 500, &m),
                     CR_INVALID_PARAMS);
}

static void prefer_same_node_places_on_own_segment(void **state)
{
    fixture *f = *state;
    crp_rpc_uuid ids[2] = {{11, 1}, {12, 2}};
    const char *names[2] = {"node-a", "node-b"};
    crc_master *m[2];
    crp_rpc_resp resp;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(crc_master_connect(f->addr, ids[i], 2000, &m[i]), 0);
        crp_rpc_req req = {.op = CRP_RPC_MOUNT_SEGMENT};
        req.u.mount =
            (crp_rpc_mount_req){ids[i], {(char *)names[i], (uint64_t)(i + 1) << 30, 64 << 20, 1}};
        assert_int_equal(call(m[i], &req, &resp), 0);
        assert_int_equal(resp.status, 0);
        crp_rpc_resp_clear(&resp);
    }
    for (int k = 0; k < 20; k++) { /* placement would otherwise spread them */
        char key[16];
        snprintf(key, sizeof(key), "same-%d", k);
        int who = k % 2;
        crp_rpc_req req = {.op = CRP_RPC_PUT_START};
        req.u.put_start = (crp_rpc_put_start_req){
            ids[who], key, 4096, {.replica_num = 1, .prefer_same_node = true}};
        assert_int_equal(call(m[who], &req, &resp), 0);
        assert_int_equal(resp.status, 0);
        assert_string_equal(resp.u.alloc.replicas[0].segment, names[who]);
        crp_rpc_resp_clear(&resp);
    }
    crc_master_close(m[0]);
    crc_master_close(m[1]);
}

/* --- stage waits ------------------------------------------------------------------------ */

#define HOLDER_SEG  "holder:1"
#define HOLDER_BASE 0x100000000ull

static int setup_offload(void **state)
{
    static fixture f;
    memset(&f, 0, sizeof(f));
    crk_config cfg;
    crk_config_default(&cfg);
    cfg.restart_fence_ms = 1;
    cfg.enable_offload = true;
    cfg.offload_on_evict = true;
    assert_int_equal(crk_service_create(&cfg, crb_now_ms(), &f.svc), 0);
    f.info = (crk_server_info){.view_version = 42, .software = "test-master"};
    crk_rpc_server_options ro;
    crk_rpc_server_options_default(&ro);
    assert_int_equal(crk_rpc_server_start(f.svc, &f.info, &ro, &f.srv), 0);
    snprintf(f.addr, sizeof(f.addr), "127.0.0.1:%u", crk_rpc_server_port(f.srv));
    crk_segment_spec spec = {.name = HOLDER_SEG, .base = HOLDER_BASE, .size = 1u << 20};
    uint64_t epoch = 0;
    assert_int_equal(crk_mount_segment(f.svc, (crk_client_id){9, 9}, &spec, crb_now_ms(), &epoch),
                     0);
    *state = &f;
    return 0;
}

/* One heartbeat of the holder (client {9, 9}) with items; its tasks into *tasks. */
static void holder_beat(fixture *f, crp_off_item *items, size_t n, crp_off_msg *tasks)
{
    crp_off_msg m = {.segment = HOLDER_SEG, .n_items = n, .items = n ? items : NULL};
    crp_buf req = {0}, reply = {0};
    assert_int_equal(crp_off_encode(&m, &req), 0);
    assert_int_equal(
        crk_off_heartbeat(f->svc, (crk_client_id){9, 9}, req.data, req.len, crb_now_ms(), &reply),
        0);
    assert_int_equal(crp_off_decode(reply.data, reply.len, tasks), 0);
    crp_buf_free(&req);
    crp_buf_free(&reply);
}

/* Make key a disk-only key of the holder (a re-announce after a master restart: version 1
 * is another instance's). */
static void announce_disk_key(fixture *f, const char *key)
{
    crp_off_item ann = {CRP_OFF_ANNOUNCE, 0, (char *)key, 1, 0, 4096, 0};
    crp_off_msg t;
    holder_beat(f, &ann, 1, &t);
    crp_off_clear(&t);
}

typedef struct held_get {
    crc_master *m;
    const char *key;
    const char *tenant; /* NULL: the default */
    uint32_t swt;
    crp_rpc_resp resp;
    int rc;
    uint64_t done_ms;
    atomic_bool done;
} held_get;

static void *held_get_main(void *p)
{
    held_get *g = p;
    crp_rpc_req req = {.op = CRP_RPC_GET_REPLICA_LIST};
    req.u.key.key = (char *)g->key;
    req.tenant = (char *)g->tenant;
    req.stage_wait_ms = g->swt;
    g->rc = crc_master_call(g->m, &req, &g->resp, 10000);
    g->done_ms = crb_now_ms();
    atomic_store(&g->done, true);
    return NULL;
}

static void get_held_until_the_stage_lands(void **state)
{
    fixture *f = *state;
    crc_master *m;
    assert_int_equal(crc_master_connect(f->addr, (crp_rpc_uuid){21, 1}, 2000, &m), 0);
    assert_true(crc_master_caps(m) & CRP_RPC_CAP_STAGE_WAIT);
    crp_off_msg t;
    holder_beat(f, NULL, 0, &t); /* the holder joins */
    crp_off_clear(&t);
    announce_disk_key(f, "dk");

    held_get g = {.m = m, .key = "dk", .swt = 5000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, held_get_main, &g), 0);
    usleep(200 * 1000);
    assert_false(atomic_load(&g.done)); /* held: the stage has not landed */
    /* The same connection answers another request meanwhile. */
    crp_rpc_req req = {.op = CRP_RPC_EXIST};
    req.u.key.key = "dk";
    crp_rpc_resp resp;
    uint64_t t0 = crb_now_ms();
    assert_int_equal(call(m, &req, &resp), 0);
    assert_true(resp.u.exist.exists);
    crp_rpc_resp_clear(&resp);
    assert_true(crb_now_ms() - t0 < 2000);
    assert_false(atomic_load(&g.done));
    /* The holder is told to stage it, and reports it staged: the held get is answered. */
    holder_beat(f, NULL, 0, &t);
    const crp_off_item *stage = NULL;
    for (size_t i = 0; i < t.n_items; i++)
        if (t.items[i].kind == CRP_OFF_STAGE && strcmp(t.items[i].key, "dk") == 0)
            stage = &t.items[i];
    assert_non_null(stage);
    crp_off_clear(&t);
    crp_off_item staged = {CRP_OFF_STAGE, 0, "dk", 1, 0x7000000, 4096, 5000};
    uint64_t reported = crb_now_ms();
    holder_beat(f, &staged, 1, &t);
    crp_off_clear(&t);
    pthread_join(th, NULL);
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.resp.status, 0);
    assert_int_equal(g.resp.u.get.n_replicas, 1);
    assert_true(g.resp.u.get.replicas[0].addr == 0x7000000);
    /* answered on the report, not at the end of its 5 s wait */
    assert_true(g.done_ms - reported < 2000);
    crp_rpc_resp_clear(&g.resp);
    crk_rpc_server_stats st;
    crk_rpc_server_stats_get(f->srv, &st);
    assert_int_equal(st.stage_waits, 1);
    assert_int_equal(st.stage_waits_expired, 0);
    crc_master_close(m);
}

static void held_get_ends_with_its_wait(void **state)
{
    fixture *f = *state;
    crc_master *m;
    assert_int_equal(crc_master_connect(f->addr, (crp_rpc_uuid){22, 1}, 2000, &m), 0);
    crp_off_msg t;
    holder_beat(f, NULL, 0, &t);
    crp_off_clear(&t);
    announce_disk_key(f, "dk2");
    /* Without "swt" the reply comes at once: nothing is held. */
    crp_rpc_req req = {.op = CRP_RPC_GET_REPLICA_LIST};
    req.u.key.key = "dk2";
    crp_rpc_resp resp;
    assert_int_equal(call(m, &req, &resp), 0);
    assert_int_equal(resp.status, CR_ERR_OFFLOAD_STAGING);
    crp_rpc_resp_clear(&resp);
    crk_rpc_server_stats st;
    crk_rpc_server_stats_get(f->srv, &st);
    assert_int_equal(st.stage_waits, 0);
    /* With a 150 ms wait and no report, "being staged" after ~150 ms. */
    req.stage_wait_ms = 150;
    uint64_t t0 = crb_now_ms();
    assert_int_equal(call(m, &req, &resp), 0);
    uint64_t took = crb_now_ms() - t0;
    assert_int_equal(resp.status, CR_ERR_OFFLOAD_STAGING);
    crp_rpc_resp_clear(&resp);
    assert_true(took >= 140);
    assert_true(took < 3000);
    crk_rpc_server_stats_get(f->srv, &st);
    assert_int_equal(st.stage_waits, 1);
    assert_int_equal(st.stage_waits_expired, 1);
    /* A memory hit (or a missing key) with "swt" is answered at once. */
    req.u.key.key = "no-such-key";
    assert_int_equal(call(m, &req, &resp), 0);
    assert_int_equal(resp.status, CR_OBJECT_NOT_FOUND);
    crp_rpc_resp_clear(&resp);
    crk_rpc_server_stats_get(f->srv, &st);
    assert_int_equal(st.stage_waits, 1);
    crc_master_close(m);
}

/* The service's get_replica_list asks so far (each ask of a held get counts). */
static uint64_t service_gets(fixture *f)
{
    crk_stats st;
    crk_get_stats(f->svc, &st);
    return st.requests[CRK_OP_GET_REPLICA_LIST];
}

/* Report key (internal name) staged at addr, after the heartbeat that hands out its STAGE. */
static void report_staged(fixture *f, const char *key, uint64_t addr)
{
    crp_off_msg t;
    holder_beat(f, NULL, 0, &t);
    crp_off_clear(&t);
    crp_off_item staged = {CRP_OFF_STAGE, 0, (char *)key, 1, addr, 4096, 5000};
    holder_beat(f, &staged, 1, &t);
    crp_off_clear(&t);
}

/* A held get is asked again only for reports of its own key (its bucket), a tenant's key
 * included (reports name the internal "\x1f<tenant>\x1f<key>"). */
static void held_get_wakes_for_its_own_key(void **state)
{
    fixture *f = *state;
    crc_master *m;
    assert_int_equal(crc_master_connect(f->addr, (crp_rpc_uuid){24, 1}, 2000, &m), 0);
    crp_off_msg t;
    holder_beat(f, NULL, 0, &t);
    crp_off_clear(&t);
    announce_disk_key(f, "\x1f"
                         "t1"
                         "\x1f"
                         "dkT");
    announce_disk_key(f, "other");
    /* "other" being staged too: a plain get queues its stage */
    crp_rpc_req req = {.op = CRP_RPC_GET_REPLICA_LIST};
    req.u.key.key = "other";
    crp_rpc_resp resp;
    assert_int_equal(call(m, &req, &resp), 0);
    assert_int_equal(resp.status, CR_ERR_OFFLOAD_STAGING);
    crp_rpc_resp_clear(&resp);

    held_get g = {.m = m, .key = "dkT", .tenant = "t1", .swt = 5000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, held_get_main, &g), 0);
    usleep(200 * 1000); /* held, and asked once more by the waiter */
    assert_false(atomic_load(&g.done));
    uint64_t asks = service_gets(f);
    for (int i = 0; i < 100; i++) { /* that ask done (a loaded machine may take longer) */
        usleep(30 * 1000);
        uint64_t now_asks = service_gets(f);
        if (now_asks == asks)
            break;
        asks = now_asks;
    }
    report_staged(f, "other", 0x7200000);
    usleep(200 * 1000);
    assert_false(atomic_load(&g.done));
    assert_true(service_gets(f) == asks); /* another key's report: not asked again */
    uint64_t reported = crb_now_ms();
    report_staged(f,
                  "\x1f"
                  "t1"
                  "\x1f"
                  "dkT",
                  0x7300000);
    pthread_join(th, NULL);
    assert_int_equal(g.rc, 0);
    assert_int_equal(g.resp.status, 0);
    assert_true(g.resp.u.get.replicas[0].addr == 0x7300000);
    assert_true(g.done_ms - reported < 2000);
    crp_rpc_resp_clear(&g.resp);
    crc_master_close(m);
}

typedef struct held_beat {
    crc_master *m;
    uint32_t swt;
    crp_off_msg tasks;
    int rc;
    uint64_t done_ms;
    atomic_bool done;
} held_beat;

/* An empty OFFLOAD_HEARTBEAT of the holder {9, 9} over RPC, with "swt". */
static void *held_beat_main(void *p)
{
    held_beat *b = p;
    crp_off_msg m = {.segment = HOLDER_SEG};
    crp_buf body = {0};
    b->rc = crp_off_encode(&m, &body);
    crp_rpc_req req = {.op = CRP_RPC_OFFLOAD_HEARTBEAT};
    req.u.blob = (crp_rpc_blob_req){{9, 9}, body.len, body.data};
    req.stage_wait_ms = b->swt;
    crp_rpc_resp resp;
    if (b->rc == 0)
        b->rc = crc_master_call(b->m, &req, &resp, 10000);
    if (b->rc == 0) {
        b->rc = resp.status;
        if (b->rc == 0)
            b->rc = crp_off_decode(resp.u.blob.data, resp.u.blob.len, &b->tasks);
        crp_rpc_resp_clear(&resp);
    }
    crp_buf_free(&body);
    b->done_ms = crb_now_ms();
    atomic_store(&b->done, true);
    return NULL;
}

/* A holder's heartbeat with "swt" and no task for it is held until a task is queued for that
 * holder (a get of one of its disk-only keys queues a STAGE), then answered with the task;
 * one with a task waiting is answered at once. */
static void heartbeat_held_until_a_task(void **state)
{
    fixture *f = *state;
    crc_master *holder, *reader;
    assert_int_equal(crc_master_connect(f->addr, (crp_rpc_uuid){9, 9}, 2000, &holder), 0);
    assert_int_equal(crc_master_connect(f->addr, (crp_rpc_uuid){25, 1}, 2000, &reader), 0);
    crp_off_msg t;
    holder_beat(f, NULL, 0, &t);
    crp_off_clear(&t);
    announce_disk_key(f, "dk5");

    held_beat b = {.m = holder, .swt = 5000};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, held_beat_main, &b), 0);
    usleep(200 * 1000);
    assert_false(atomic_load(&b.done)); /* no task: held */
    crp_rpc_req req = {.op = CRP_RPC_GET_REPLICA_LIST};
    req.u.key.key = "dk5";
    crp_rpc_resp resp;
    uint64_t asked = crb_now_ms();
    assert_int_equal(call(reader, &req, &resp), 0);
    assert_int_equal(resp.status, CR_ERR_OFFLOAD_STAGING); /* and a STAGE queued */
    crp_rpc_resp_clear(&resp);
    pthread_join(th, NULL);
    assert_int_equal(b.rc, 0);
    assert_true(b.done_ms - asked < 2000);
    assert_int_equal(b.tasks.n_items, 1);
    assert_int_equal(b.tasks.items[0].kind, CRP_OFF_STAGE);
    assert_string_equal(b.tasks.items[0].key, "dk5");
    crp_off_clear(&b.tasks);
    crk_rpc_server_stats st;
    crk_rpc_server_stats_get(f->srv, &st);
    assert_int_equal(st.task_waits, 1);
    assert_int_equal(st.stage_waits, 0);

    /* A task already waiting: answered at once, nothing held. */
    announce_disk_key(f, "dk6");
    req.u.key.key = "dk6";
    assert_int_equal(call(reader, &req, &resp), 0);
    crp_rpc_resp_clear(&resp);
    held_beat b2 = {.m = holder, .swt = 5000};
    held_beat_main(&b2);
    assert_int_equal(b2.rc, 0);
    assert_int_equal(b2.tasks.n_items, 1);
    crp_off_clear(&b2.tasks);
    crk_rpc_server_stats_get(f->srv, &st);
    assert_int_equal(st.task_waits, 1);
    crc_master_close(reader);
    crc_master_close(holder);
}

/* Send a GET_REPLICA_LIST with "swt" on a raw connection; the socket. */
static int send_held_get(fixture *f, const char *key, uint32_t swt)
{
    int fd = crb_connect("127.0.0.1", crk_rpc_server_port(f->srv), 2000);
    assert_true(fd >= 0);
    crp_rpc_req req = {.op = CRP_RPC_GET_REPLICA_LIST};
    req.u.key.key = (char *)key;
    req.stage_wait_ms = swt;
    crp_buf body = {0};
    assert_int_equal(crp_rpc_req_encode(&req, &body), 0);
    uint8_t hb[CRP_HEADER_SIZE];
    crp_header h = {.version = CRP_VERSION,
                    .type = CRP_RPC_REQ,
                    .body_len = (uint32_t)body.len,
                    .request_id = 1};
    crp_header_encode(&h, hb);
    uint64_t deadline = crb_now_ns() + 2000000000ull;
    assert_int_equal(crb_write_full(fd, hb, sizeof(hb), deadline), 0);
    assert_int_equal(crb_write_full(fd, body.data, body.len, deadline), 0);
    crp_buf_free(&body);
    return fd;
}

static void connections_closed_with_gets_held(void **state)
{
    fixture *f = *state;
    crp_off_msg t;
    holder_beat(f, NULL, 0, &t);
    crp_off_clear(&t);
    announce_disk_key(f, "dk3");
    /* closed while held: its gets come back to a torn-down connection */
    for (int i = 0; i < 4; i++)
        close(send_held_get(f, "dk3", 200));
    /* closed while held, then the stage lands */
    int fd = send_held_get(f, "dk3", 3000);
    usleep(100 * 1000);
    close(fd);
    usleep(50 * 1000);
    crp_off_item staged = {CRP_OFF_STAGE, 0, "dk3", 1, 0x7100000, 4096, 5000};
    holder_beat(f, NULL, 0, &t);
    crp_off_clear(&t);
    holder_beat(f, &staged, 1, &t);
    crp_off_clear(&t);
    usleep(300 * 1000); /* the 200 ms waits end */
    /* the server goes on answering */
    crc_master *m;
    assert_int_equal(crc_master_connect(f->addr, (crp_rpc_uuid){23, 1}, 2000, &m), 0);
    crp_rpc_req req = {.op = CRP_RPC_EXIST};
    req.u.key.key = "dk3";
    crp_rpc_resp resp;
    assert_int_equal(call(m, &req, &resp), 0);
    assert_true(resp.u.exist.exists);
    crp_rpc_resp_clear(&resp);
    crc_master_close(m);
    crk_rpc_server_stats st;
    crk_rpc_server_stats_get(f->srv, &st);
    /* (a request the server found with its connection already gone is not served at all) */
    assert_true(st.stage_waits >= 1 && st.stage_waits <= 5);
    uint64_t held = st.stage_waits;
    /* and stops cleanly with a get still held (teardown stops it) */
    announce_disk_key(f, "dk4");
    fd = send_held_get(f, "dk4", 5000);
    for (uint64_t until = crb_now_ms() + 3000; crb_now_ms() < until; usleep(10 * 1000)) {
        crk_rpc_server_stats_get(f->srv, &st);
        if (st.stage_waits == held + 1)
            break;
    }
    assert_int_equal(st.stage_waits, held + 1);
    crk_rpc_server_stop(f->srv);
    f->srv = NULL;
    close(fd);
}

/* Many connections hold gets while reports land and the connections close at different
 * moments (before, while and after their replies come back): every held get ends, the
 * server keeps answering, and (under the sanitizers) no connection is used after it is freed
 * or leaked. */
static void held_gets_under_churn(void **state)
{
    fixture *f = *state;
    crp_off_msg t;
    holder_beat(f, NULL, 0, &t);
    crp_off_clear(&t);
    enum { KEYS = 8, CONNS = 48 };
    char key[KEYS][16];
    for (int k = 0; k < KEYS; k++) {
        snprintf(key[k], sizeof(key[k]), "churn-%d", k);
        announce_disk_key(f, key[k]);
    }
    int fds[CONNS];
    for (int i = 0; i < CONNS; i++)
        fds[i] = send_held_get(f, key[i % KEYS], 100 + 10 * (uint32_t)(i % 7));
    for (int round = 0; round < 6; round++) {
        for (int i = round; i < CONNS; i += 6) { /* a sixth of them close each round */
            close(fds[i]);
            fds[i] = -1;
        }
        for (int k = round; k < KEYS; k += 3) {
            crp_off_item staged = {CRP_OFF_STAGE, 0,   key[k], 1, 0x8000000 + 0x10000 * (uint64_t)k,
                                   4096,          5000};
            holder_beat(f, NULL, 0, &t);
            crp_off_clear(&t);
            holder_beat(f, &staged, 1, &t);
            crp_off_clear(&t);
        }
        usleep(30 * 1000);
    }
    usleep(300 * 1000); /* every wait has ended */
    crk_rpc_server_stats st;
    crk_rpc_server_stats_get(f->srv, &st);
    /* (a get the server reads after its key's report is answered at once, not held) */
    assert_true(st.stage_waits > 0 && st.stage_waits <= CONNS);
    crc_master *m;
    assert_int_equal(crc_master_connect(f->addr, (crp_rpc_uuid){26, 1}, 2000, &m), 0);
    crp_rpc_req req = {.op = CRP_RPC_EXIST};
    req.u.key.key = key[0];
    crp_rpc_resp resp;
    assert_int_equal(call(m, &req, &resp), 0);
    assert_true(resp.u.exist.exists);
    crp_rpc_resp_clear(&resp);
    crc_master_close(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(put_get_remove_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(busy_poll_spins_only_while_requests_come, setup, teardown),
        cmocka_unit_test_setup_teardown(many_threads_pipeline_on_one_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(garbage_body_gets_an_error_and_the_connection_lives, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(dead_master_fails_calls_without_hanging, setup, teardown),
        cmocka_unit_test_setup_teardown(sent_work_does_not_use_up_the_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(prefer_same_node_places_on_own_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(get_held_until_the_stage_lands, setup_offload, teardown),
        cmocka_unit_test_setup_teardown(held_get_ends_with_its_wait, setup_offload, teardown),
        cmocka_unit_test_setup_teardown(held_get_wakes_for_its_own_key, setup_offload, teardown),
        cmocka_unit_test_setup_teardown(heartbeat_held_until_a_task, setup_offload, teardown),
        cmocka_unit_test_setup_teardown(held_gets_under_churn, setup_offload, teardown),
        cmocka_unit_test_setup_teardown(connections_closed_with_gets_held, setup_offload, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
