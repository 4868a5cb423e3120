/*
 * harness.h - driving peer processes (tests/engine/peer.c) from the
 * multi-process engine tests, over the shared test harness
 * (tests/testing/testing.h: spawned with PR_SET_PDEATHSIG, READY line with
 * a deadline). Every peer a test starts, it stops (peer_stop or peer_kill);
 * the path of the peer binary comes from CRESCENT_PEER_BIN.
 */
#ifndef CRESCENT_TESTS_HARNESS_H
#define CRESCENT_TESTS_HARNESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "crescent/engine.h"
#include "testing.h"

typedef struct test_peer {
    tt_child child;
    char name[300];   /* its segment name, from READY */
    const char *line; /* the last reply line (child.line) */
} test_peer;

/* Start a peer with extra args (NULL-terminated). Returns 0 when READY. */
int peer_start(test_peer *p, const char *const *args);
/* Send a command line, read one reply line into p->line. */
const char *peer_cmd(test_peer *p, const char *fmt, ...);
/* Register memory in the peer; returns its address or 0. */
uint64_t peer_reg(test_peer *p, const char *loc, uint64_t size, int read_only);
/* "quit" and wait up to 30 s; returns the exit status (0 expected), -1
 * when it had to be killed. */
int peer_stop(test_peer *p);
/* SIGKILL and reap. */
void peer_kill(test_peer *p);

/* The protocol this run of a test exercises: CRESCENT_TEST_PROTOCOL
 * ("tcp" unless set; CMake registers the engine tests once per transport the
 * build has, e.g. ucx with UCX_TLS=tcp and with UCX_TLS=sm). Peers started
 * by peer_start use it too. */
const char *test_protocol(void);
/* Exit 77 (skipped) when this build or machine cannot run test_protocol(). */
void test_require_protocol(void);
/* Bytes an engine moved through the transport named `transport`. */
uint64_t test_bytes_via(cr_engine *e, const char *transport);
/* Bytes moved by the paths test_protocol() selects: "shm" is a mode served by
 * the shm transport (shareable memory) and cma (any other memory). */
uint64_t test_bytes_via_protocol(cr_engine *e);
/* Does every transfer of test_protocol() finish inside cr_batch_submit (the
 * same-host copies run on the submitting thread)? Then nothing is ever in
 * flight, and the cases about in-flight transfers (a stopped or killed peer,
 * cancel before send, unregister waiting) do not apply: they skip. */
bool test_copies_in_submit(void);
/* A counter of cr_engine_counters (0 when absent). */
uint64_t test_counter(cr_engine *e, const char *transport, const char *name);
/* Does the target check every request against its registry? False only for
 * one-sided RMA over UCX's software paths (CRESCENT_UCX_MODE=rma), where
 * nothing on the target can (on RDMA NICs the NIC does). */
bool test_target_checks_ranges(cr_engine *e);

/* Pattern used by the peer: byte i of a region filled with seed s. */
static inline uint8_t test_pattern(uint64_t i, uint64_t seed)
{
    return (uint8_t)((i * 131 + seed) & 0xff);
}

#endif
