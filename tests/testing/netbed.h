/*
 * netbed.h - a small multi-host test bed made of network namespaces that the
 * test creates itself: host 0 (the master's) and hosts 1..n-1 (clients),
 * each a namespace with one interface "eth0" at 10.77.0.<i+1>/24, cabled
 * to a bridge in a switch namespace by crescent-test-netwire (netwire.c:
 * tap pairs, per-link latency, jitter and loss). The addresses exist only
 * inside these namespaces; nothing is routed to or from the machine's own
 * network.
 *
 * Faults: tt_netbed_impair (latency/jitter/loss on one host's cable, in the
 * wire), tt_netbed_link (the host's bridge port down/up: a partition).
 * Processes run in a host with tt_netbed_wrap (ip netns exec + env); the
 * calling thread can move itself into a host with tt_netbed_enter.
 *
 * Needs root (CAP_SYS_ADMIN), ip(8) and /dev/net/tun: tt_netbed_create
 * returns TT_SKIP (77) where any of them is missing or refused, having left
 * nothing behind. Namespaces are named crnb<pid>h<i> / crnb<pid>sw, so runs
 * in parallel do not collide; stale ones of dead test processes are
 * removed at create. tt_netbed_destroy (also run at exit) removes
 * everything; if the test is killed the wire dies with it (PDEATHSIG) and
 * the next create removes the namespaces.
 *
 * Not thread-safe; one test thread.
 */
#ifndef CRESCENT_TESTS_NETBED_H
#define CRESCENT_TESTS_NETBED_H

#include <stdbool.h>
#include <stddef.h>

#include "proc.h"

#define TT_NETBED_MAX_HOSTS 8

typedef struct tt_netbed {
    int n_hosts;
    char ns[TT_NETBED_MAX_HOSTS][32]; /* host namespaces */
    char sw[32];                      /* the switch namespace (bridge br0) */
    char addr[TT_NETBED_MAX_HOSTS][16];
    ct_proc wire;
    bool created;
} tt_netbed;

/* Build n_hosts hosts (2..TT_NETBED_MAX_HOSTS); wire_bin is
 * crescent-test-netwire. 0, TT_SKIP (not permitted here; reason printed),
 * or -1 (a failure; reason on stderr). */
int tt_netbed_create(tt_netbed *b, int n_hosts, const char *wire_bin);
/* Remove namespaces and stop the wire. Idempotent. */
void tt_netbed_destroy(tt_netbed *b);
/* Latency (ms), jitter (ms, uniform +-) and loss (percent) on host's cable,
 * both directions. 0 or -1. */
int tt_netbed_impair(tt_netbed *b, int host, int delay_ms, int jitter_ms, double loss_pct);
/* The host's bridge port up or down (a partition of that host). 0 or -1. */
int tt_netbed_link(tt_netbed *b, int host, bool up);
/* Move the calling thread into host's namespace (children it spawns start
 * there too). 0 or -1. */
int tt_netbed_enter(tt_netbed *b, int host);
/*
 * argv that runs `argv` in host's namespace with the environment
 * assignments `env` ("K=V", NULL-terminated, may be NULL) added:
 * ip netns exec NS env K=V ... argv... Written to out (cap entries,
 * NULL-terminated); pointers borrow from b, env and argv. Returns out or
 * NULL when cap is too small.
 */
const char **tt_netbed_wrap(tt_netbed *b, int host, const char *const *env, const char *const *argv,
                            const char **out, size_t cap);

#endif
