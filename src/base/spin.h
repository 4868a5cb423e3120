/*
 * spin.h - how long a waiting thread polls before it sleeps (design §2.7:
 * blocking waits spin briefly, then sleep).
 *
 * A crb_spin belongs to one place that waits again and again: an event
 * loop, a connection's reply wait, an engine's batch waits. Before a wait
 * its owner asks crb_spin_window how long to poll without sleeping; when the
 * window was not 0 it reports with crb_spin_done whether what it waited for
 * came within it.
 *
 * The mode comes from CRESCENT_BUSY_POLL_US (crb_spin_mode_from_env):
 *   - unset: adaptive. Windows of CRB_SPIN_ADAPTIVE_NS are tried while they
 *     pay off. From the third window in a row that runs out, the next 2, 4,
 *     up to CRB_SPIN_MAX_SKIP waits sleep at once before another window is
 *     tried; a window that catches its event ends the back-off (spin.c says
 *     why the cap is small). Request/reply traffic whose replies come within
 *     the window so keeps both ends awake (on a VM each wake-up of an idle
 *     CPU costs tens of microseconds), while sparse traffic, whose waits are
 *     longer, pays one window per CRB_SPIN_MAX_SKIP + 1 waits. At most half
 *     the CPUs online (at least one) hold an adaptive window at once in a
 *     process; a wait that finds them all taken sleeps at once, and so does
 *     every wait of the process for the next CRB_SPIN_CONTENDED_NS: with
 *     more threads waiting at once than that, polling would take CPU from
 *     their work, and a wake-up's cost is shared by a busy process anyway.
 *   - N > 0: every wait polls for up to N microseconds (the opt-in fixed
 *     busy-poll).
 *   - 0: no wait ever polls.
 *
 * Threading: any number of threads may share one crb_spin; its counters are
 * relaxed atomics (it is a heuristic: a race only blurs the back-off).
 */
#ifndef CRESCENT_BASE_SPIN_H
#define CRESCENT_BASE_SPIN_H

#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

/** The adaptive mode's window (ns): a loopback round trip with both ends polling is ~10 µs. */
#define CRB_SPIN_ADAPTIVE_NS 20000ull
/** The most waits the adaptive mode sleeps at once for in a row after windows that ran out. */
#define CRB_SPIN_MAX_SKIP 8u
/** How long a process's waits sleep at once after one found every window place taken (ns). */
#define CRB_SPIN_CONTENDED_NS 10000000ull
/** Mode value: adaptive (CRESCENT_BUSY_POLL_US unset). */
#define CRB_SPIN_ADAPTIVE (-1)
/** The largest CRESCENT_BUSY_POLL_US accepted (µs). */
#define CRB_SPIN_MAX_US 10000

typedef struct crb_spin {
    int64_t mode_ns;          /* CRB_SPIN_ADAPTIVE, 0 (never) or a fixed window (ns) */
    _Atomic uint32_t misses;  /* adaptive: windows in a row that ran out */
    _Atomic uint32_t skip;    /* adaptive: waits left that sleep at once */
    _Atomic uint64_t windows; /* windows handed out (statistics) */
    _Atomic uint64_t caught;  /* of those, reported caught (statistics) */
} crb_spin;

/**
 * Read CRESCENT_BUSY_POLL_US into *mode_ns: CRB_SPIN_ADAPTIVE when unset or
 * empty, else the microseconds given, in ns (0: never poll). A value that is
 * not a number from 0 to CRB_SPIN_MAX_US returns `status_on_error` (a
 * negative status of the caller's layer) with a message naming it; *mode_ns
 * is then not written.
 */
int crb_spin_mode_from_env(int status_on_error, int64_t *mode_ns);

/** Set up `s` for `mode_ns` (as from crb_spin_mode_from_env). Not thread-safe: before use. */
void crb_spin_init(crb_spin *s, int64_t mode_ns);

/** How long (ns) the next wait should poll before it sleeps; 0: sleep at once. */
uint64_t crb_spin_window(crb_spin *s);

/**
 * Between two polls of a window: lets a thread that is runnable on this CPU
 * go first (sched_yield), so that polling takes no CPU time from the work
 * that produces the event (on a small machine, the peer's copy); returns at
 * once when none is.
 */
static inline void crb_spin_pause(void)
{
    sched_yield();
}

/**
 * After a wait whose window (crb_spin_window) was not 0, once that window is
 * over: `caught` says whether the awaited event came within it. Every window
 * handed out must be closed so, exactly once (an adaptive window holds one
 * of the process's places until then).
 */
void crb_spin_done(crb_spin *s, bool caught);

/** How many adaptive windows may be open at once in this process (see the mode notes). */
int crb_spin_window_limit(void);

#endif /* CRESCENT_BASE_SPIN_H */
