/*
 * netns_engine_test.c - two engines on two "hosts" (network namespaces of
 * tests/testing/netbed.h) that share /etc/machine-id, as containers on one
 * machine do: with distinct CRESCENT_HOST_ID they must not take the
 * same-host paths (shm, cma) and must move verified bytes over the network.
 *
 * Host 0: a target (crescent-test-peer, --host 10.77.0.1) with registered,
 * patterned memory. Host 1: this process (it moves itself into host 1's
 * namespace), an initiator engine at 10.77.0.2. For every protocol the
 * build has (tcp, ucx, auto; a protocol the build lacks is refused with
 * CR_ERR_INVALID_CONFIG and skipped, named) it reads and writes 4 KiB..4 MiB
 * and checks every byte on both sides, and that no byte went through shm or
 * cma. Protocol "shm" between the two must fail with a named error, never
 * move bytes. Skips (77) where namespaces are not available.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crescent/engine.h"
#include "crescent/status.h"
#include "netbed.h"
#include "testing.h"

#define TARGET_LEN (8u << 20)
#define LOCAL_LEN  (8u << 20)

static tt_netbed bed;
static tt_child peer;

static uint8_t pattern(uint64_t i, uint64_t seed)
{
    return (uint8_t)((i * 131 + seed) & 0xff);
}

/* The target runs the same protocol as the initiator ("auto" leaves ucx out
 * where UCX has no RDMA device, so a ucx initiator needs a ucx target). UCX
 * is held to its tcp transport on both sides: UCX's own same-host test
 * (its machine id is shared here) would otherwise pick shared memory. */
static void start_peer(const char *protocol, uint64_t *target)
{
    const char *env[] = {"CRESCENT_HOST_ID=netns-host-a", "CRESCENT_LOG=warn", "UCX_TLS=tcp", NULL};
    const char *argv[] = {tt_bin("CRESCENT_PEER_BIN", "crescent-test-peer"),
                          "--host",
                          bed.addr[0],
                          "--protocol",
                          protocol,
                          NULL};
    const char *wrapped[32];
    assert_non_null(tt_netbed_wrap(&bed, 0, env, argv, wrapped, 32));
    if (tt_child_start(&peer, wrapped, 4096, 15000) < 0)
        fail_msg("peer did not start: '%s'", peer.line);
    const char *r = tt_child_cmd(&peer, 30000, "reg cpu:0 %u", TARGET_LEN);
    if (strncmp(r, "OK ", 3) != 0)
        fail_msg("peer reg: '%s'", r);
    *target = strtoull(r + 3, NULL, 10);
}

/* Is `protocol` in this build? (create fails with INVALID_CONFIG otherwise) */
static int make_engine(const char *protocol, cr_engine **out)
{
    cr_engine_config cfg;
    cr_engine_config_init(&cfg);
    cfg.local_hostname = bed.addr[1];
    cfg.protocol = protocol;
    cfg.request_timeout_ms = 10000;
    return cr_engine_create(&cfg, out);
}

static void one_protocol(const char *protocol, uint8_t *local)
{
    cr_engine *e = NULL;
    int rc = make_engine(protocol, &e);
    if (rc == CR_ERR_INVALID_CONFIG) {
        print_message("protocol %s: not in this build (%s); skipped\n", protocol,
                      cr_last_error_message());
        return;
    }
    assert_int_equal(rc, 0);
    uint64_t target = 0;
    start_peer(protocol, &target);
    assert_int_equal(cr_engine_register(e, local, LOCAL_LEN, "cpu:0", false), 0);
    cr_segment_handle seg;
    assert_int_equal(cr_engine_open_segment(e, peer.name, &seg), 0);
    static const uint64_t sizes[] = {4096, 65536, 1u << 20, 4u << 20};
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        uint64_t len = sizes[k], off = k * 4096;
        /* READ: the peer's memory holds pattern(addr) of its registration */
        memset(local, 0, len);
        assert_int_equal(
            cr_engine_transfer_sync(e, CR_OP_READ, local, seg, target + off, len, 10000), 0);
        for (uint64_t i = 0; i < len; i++)
            if (local[i] != pattern(off + i, target))
                fail_msg("%s: READ of %" PRIu64 " bytes: byte %" PRIu64 " wrong", protocol, len, i);
        /* WRITE a new pattern and let the peer check it */
        unsigned seed = 17 + (unsigned)k;
        for (uint64_t i = 0; i < len; i++)
            local[i] = pattern(i, seed);
        assert_int_equal(
            cr_engine_transfer_sync(e, CR_OP_WRITE, local, seg, target + off, len, 10000), 0);
        const char *r =
            tt_child_cmd(&peer, 30000, "check %" PRIu64 " %" PRIu64 " %u", target + off, len, seed);
        if (strcmp(r, "OK") != 0)
            fail_msg("%s: WRITE of %" PRIu64 " bytes: the peer says '%s'", protocol, len, r);
        /* restore the peer's pattern for the next READ */
        r = tt_child_cmd(&peer, 30000, "fill %" PRIu64 " %" PRIu64 " %" PRIu64, target,
                         (uint64_t)TARGET_LEN, target);
        assert_string_equal(r, "OK");
    }
    cr_engine_stats st;
    assert_int_equal(cr_engine_get_stats(e, &st), 0);
    print_message("protocol %s: tcp %" PRIu64 " bytes, shm %" PRIu64 ", cma %" PRIu64
                  ", local %" PRIu64 "\n",
                  protocol, st.bytes_tcp, st.bytes_shm, st.bytes_cma, st.bytes_local);
    assert_int_equal(st.bytes_shm, 0);
    assert_int_equal(st.bytes_cma, 0);
    assert_int_equal(st.bytes_local, 0);
    assert_true(st.tasks_completed >= 8);
    /* ... and went over the network: crescent's tcp, or UCX (over its tcp) */
    uint64_t ucx_bytes = 0;
    cr_engine_counter c[128];
    size_t nc = 0;
    if (cr_engine_counters(e, c, 128, &nc) == 0)
        for (size_t i = 0; i < nc && i < 128; i++)
            if (strcmp(c[i].transport, "ucx") == 0 && strcmp(c[i].name, "bytes") == 0)
                ucx_bytes = c[i].value;
    print_message("protocol %s: ucx %" PRIu64 " bytes\n", protocol, ucx_bytes);
    if (strcmp(protocol, "ucx") == 0)
        assert_true(ucx_bytes > 0 && st.bytes_tcp == 0);
    else
        assert_true(st.bytes_tcp > 0);
    cr_engine_destroy(e);
    assert_int_equal(tt_child_stop(&peer, 30000), 0);
}

static void two_hosts(void **state)
{
    (void)state;
    uint8_t *local = aligned_alloc(4096, LOCAL_LEN);
    assert_non_null(local);
    setenv("CRESCENT_HOST_ID", "netns-host-b", 1);
    setenv("UCX_TLS", "tcp", 1);
    static const char *const protocols[] = {"tcp", "ucx", "auto"};
    for (size_t p = 0; p < sizeof(protocols) / sizeof(protocols[0]); p++)
        one_protocol(protocols[p], local);

    uint64_t target = 0;
    start_peer("auto", &target);

    /* shm cannot reach another host: a named error, not bytes */
    cr_engine *e = NULL;
    int rc = make_engine("shm", &e);
    if (rc == 0) {
        assert_int_equal(cr_engine_register(e, local, LOCAL_LEN, "cpu:0", false), 0);
        cr_segment_handle seg;
        assert_int_equal(cr_engine_open_segment(e, peer.name, &seg), 0);
        memset(local, 0, 4096);
        rc = cr_engine_transfer_sync(e, CR_OP_READ, local, seg, target, 4096, 5000);
        print_message("protocol shm across hosts: %d %s (%s)\n", rc, cr_status_name(rc),
                      cr_last_error_message());
        assert_true(rc < 0);
        uint8_t zero[4096] = {0};
        assert_memory_equal(local, zero, sizeof(zero));
        cr_engine_destroy(e);
    }
    free(local);
    assert_int_equal(tt_child_stop(&peer, 30000), 0);
}

static int teardown(void **state)
{
    tt_teardown(state);
    tt_netbed_destroy(&bed);
    return 0;
}

int main(void)
{
    int rc = tt_netbed_create(&bed, 2, tt_bin("CRESCENT_NETWIRE_BIN", "crescent-test-netwire"));
    if (rc == TT_SKIP)
        return TT_SKIP;
    if (rc < 0)
        return 1;
    if (tt_netbed_enter(&bed, 1) < 0) {
        tt_netbed_destroy(&bed);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(two_hosts, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
