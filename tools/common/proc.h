/*
 * proc.h - the one process spawner of the tests and the tools: fork + exec
 * a child with optional pipes on its stdin/stdout/stderr, read its lines
 * with a deadline, stop it with a signal and then SIGKILL after a bound.
 *
 * Design: every child gets PR_SET_PDEATHSIG (SIGKILL unless told otherwise)
 * before exec, so it dies with the process that started it even if that
 * one is killed -9; every live child is also recorded in one table, so
 * ct_proc_kill_all() (a test's teardown after an assertion jumped out, a
 * tool's error path) kills and reaps whatever is left. All pipe ends are
 * O_CLOEXEC, so a second child never inherits the first one's pipes. Between
 * fork and exec the child calls only async-signal-safe functions.
 *
 * PR_SET_PDEATHSIG fires when the *thread* that forked exits: spawn from a
 * thread that lives as long as the child (the main thread).
 *
 * Exit statuses returned here: the child's exit code (0..255), 128 + N when
 * it died of signal N, -1 when it had not exited within the bound (it has
 * then been killed and reaped).
 *
 * Part of crescent_tool_util (tools/common), which the tests link too
 * (tests/testing/); it uses libc only, so it sits below every layer.
 * Threads: the child table is locked; one ct_proc is driven by one thread.
 */
#ifndef CRESCENT_TOOLS_PROC_H
#define CRESCENT_TOOLS_PROC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct ct_proc {
    pid_t pid;  /* > 0 while running (not yet reaped) */
    int in_fd;  /* write end of its stdin pipe, or -1 */
    int out_fd; /* read end of its stdout pipe, or -1 */
    int err_fd; /* read end of its stderr pipe, or -1 */
} ct_proc;

/* How to start a child; a zeroed struct is: stdin /dev/null, stdout and
 * stderr inherited, SIGKILL on our death, argv[0] is the path to exec. */
typedef struct ct_spawn_opts {
    bool pipe_stdin, pipe_stdout, pipe_stderr;
    /* When set (and that stream is not piped): stdout and stderr are
     * appended to this file (a server's log). */
    const char *log_path;
    /* The file to exec instead of argv[0] (e.g. "/proc/self/exe"). */
    const char *exe;
    bool search_path;    /* execvp: argv[0] may be a bare name */
    int death_signal;    /* PR_SET_PDEATHSIG; 0 = SIGKILL */
    bool keep_stdin_tty; /* with !pipe_stdin: leave stdin inherited, not /dev/null */
} ct_spawn_opts;

/*
 * Start argv (NULL-terminated; argv[0] is the program) as described by o
 * (NULL = defaults). Returns 0 with *p filled, or -1 (errno set, nothing
 * left running or open). Flushes stdio first so the child inherits no
 * buffered output.
 */
int ct_proc_spawn(ct_proc *p, const char *const *argv, const ct_spawn_opts *o);

/*
 * Read one line (without '\n') from fd into buf within timeout_ms. Returns
 * 0, or -1 on timeout, end of file or error (buf then holds what was read).
 * A line longer than len - 1 bytes is cut there and 0 is returned.
 */
int ct_read_line(int fd, char *buf, size_t len, int timeout_ms);
/* ct_read_line on the child's stdout. */
int ct_proc_read_line(ct_proc *p, char *buf, size_t len, int timeout_ms);
/*
 * Read stdout lines until one starts with `prefix` (lines before it are
 * skipped) or timeout_ms pass; the whole line in buf. 0, or -1 (timeout,
 * EOF: the child died before it was ready).
 */
int ct_proc_wait_line(ct_proc *p, const char *prefix, char *buf, size_t len, int timeout_ms);
/* Write `line` plus '\n' to its stdin (all of it). 0 or -1. */
int ct_proc_send(ct_proc *p, const char *line);
/* ct_proc_send, then one reply line into buf within timeout_ms. 0 or -1. */
int ct_proc_cmd(ct_proc *p, const char *line, char *buf, size_t len, int timeout_ms);
/* Close our end of its stdin (the child sees EOF). */
void ct_proc_close_stdin(ct_proc *p);

/*
 * Wait up to timeout_ms for the child to exit (timeout_ms < 0: forever).
 * Returns its status as described above and releases it (fds closed); -2
 * when it is still running after the bound (it keeps running; nothing is
 * released); -1 when no child runs.
 */
int ct_proc_wait(ct_proc *p, int timeout_ms);
/*
 * Stop: send `sig` (0 = none, e.g. after ct_proc_send("quit") or closing
 * stdin), wait up to timeout_ms, then SIGKILL. Returns the exit status, or
 * -1 if it had to be killed. A child that was not running returns -1.
 */
int ct_proc_stop(ct_proc *p, int sig, int timeout_ms);
/* An idle ct_proc (no child, no fds): what ct_proc_spawn's failure leaves. */
void ct_proc_init(ct_proc *p);
/* SIGKILL (after SIGCONT, in case it was stopped), reap, close fds. Nothing
 * when no child runs (pid <= 0: a zeroed ct_proc is safe to kill). */
void ct_proc_kill(ct_proc *p);
/* Kill and reap every child started by ct_proc_spawn still running. */
void ct_proc_kill_all(void);
/* SIGSTOP pid and wait (up to 2 s) until /proc says it is stopped: the
 * signal takes effect asynchronously, after kill() returns. 0, or -1 if
 * it did not stop in time. */
int ct_stop_process(pid_t pid);
/*
 * For a process that did not do what a test waited for (exit, answer): write
 * every thread's stack to stderr with `gdb -p` (bounded to 30 s), so a rare
 * hang seen once in CI can be diagnosed from its log. Nothing when gdb is
 * missing or cannot attach (ptrace refused). The process keeps running.
 */
void ct_dump_stacks(pid_t pid);

/*
 * Run argv to completion within timeout_ms with stdout and stderr captured
 * into out / err (NUL-terminated, truncated to their sizes; either may be
 * NULL to inherit). Returns the exit status (see above).
 */
int ct_run(const char *const *argv, char *out, size_t out_len, char *err, size_t err_len,
           int timeout_ms);

/* A TCP port on `host` (an IPv4 address; NULL = 127.0.0.1) that nothing
 * listens on right now (bound, then released); 0 on failure. */
uint16_t ct_free_port(const char *host);

/* Monotonic milliseconds; a sleep that resumes after signals. */
uint64_t ct_now_ms(void);
void ct_sleep_ms(int ms);

#endif
