/*
 * fake_transport.h - two transports for unit tests of the engine core
 * (batches, routing, descriptor snapshots) without a network.
 *
 * They are compiled into a test-only copy of the engine (the engine's own
 * sources, unchanged, with a transport list that names these two first:
 * tests/engine/unit/CMakeLists.txt), so every engine such a test creates
 * with protocol "auto" has them installed ahead of the real ones:
 *
 *   fake_refuse (rank -2)  serves every host-memory request while
 *                          fake_ctl.refuse is set, and refuses it at first
 *                          use with CR_ERR_TRANSPORT_UNSUPPORTED; it then
 *                          marks the peer (its per-peer area) and declines
 *                          that peer in can_serve, as a real transport that
 *                          learns a peer's policy does.
 *   fake (rank -1)         copies with memcpy (both engines live in the
 *                          test's process, so a remote address is a valid
 *                          pointer here); with fake_ctl.hold set it queues
 *                          tasks "in flight" until fake_complete() finishes
 *                          them, and cancel finishes canceled queued ones
 *                          with CR_ERR_CANCELED.
 *
 * Both count what the core asked of them (fake_ctl), so a test can check
 * routing, fallback and the descriptor snapshot lifecycle (desc_parse per
 * new snapshot, desc_free when the last reference goes).
 *
 * Threads: the counters are atomic and the queue is locked; the core may
 * call submit/cancel from any thread.
 */
#ifndef CRESCENT_TESTS_ENGINE_FAKE_TRANSPORT_H
#define CRESCENT_TESTS_ENGINE_FAKE_TRANSPORT_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct fake_control {
    atomic_bool refuse; /* fake_refuse takes requests (and refuses them) */
    atomic_bool serve;  /* fake takes requests */
    atomic_bool hold;   /* fake queues instead of completing at submit */
    /* counters */
    atomic_uint refuse_submits, fake_submits, fake_completed, fake_canceled;
    atomic_uint desc_parses, desc_frees, peer_resets;
} fake_control;

extern fake_control fake_ctl;

/* Reset counters and switches (serve on, refuse and hold off). */
void fake_reset(void);
/* Tasks fake holds right now. */
size_t fake_pending(void);
/* Finish up to n held tasks (oldest first) with `status` (0: copy the bytes
 * first). Returns how many were finished. */
size_t fake_complete(size_t n, int status);

#endif
