/*
 * rpc_server_test.c - the RPC server, dispatcher and pipelined master client
 * in one process: every op family round-trips, many threads pipeline on one
 * connection, a broken connection fails calls instead of hanging, and the
 * server survives a garbage body.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/clock.h"
#include "base/net.h"
#include "master/rpc_server.h"
#include "proto/frame.h"
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

static void *pipeline_thread(void *p)
{
    pipeline_arg *a = p;
    char key[32];
    for (int i = 0; i < 300; i++) {
        snprintf(key, sizeof(key), "t%d-%d", a->thread, i);
        crp_rpc_req req = {.op = CRP_RPC_EXIST};
        req.u.key.key = key;
        crp_rpc_resp resp;
        if (crc_master_call(a->m, &req, &resp, 5000) != 0 || resp.status != 0 ||
            resp.u.exist.exists)
            atomic_fetch_add(a->errors, 1);
        else
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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(put_get_remove_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(many_threads_pipeline_on_one_connection, setup, teardown),
        cmocka_unit_test_setup_teardown(garbage_body_gets_an_error_and_the_connection_lives, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(dead_master_fails_calls_without_hanging, setup, teardown),
        cmocka_unit_test_setup_teardown(prefer_same_node_places_on_own_segment, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
