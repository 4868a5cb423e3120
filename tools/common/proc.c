/*
 * proc.c - see proc.h.
 *
 * The child table is a fixed array under a mutex: a pid is added right
 * after fork and removed when the child is reaped, so ct_proc_kill_all
 * never signals a pid that may have been reused.
 */
#include "proc.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CT_MAX_CHILDREN 128

static pid_t g_children[CT_MAX_CHILDREN];
static pthread_mutex_t g_children_lock = PTHREAD_MUTEX_INITIALIZER;

static void track(pid_t pid)
{
    pthread_mutex_lock(&g_children_lock);
    for (int i = 0; i < CT_MAX_CHILDREN; i++) {
        if (g_children[i] == 0) {
            g_children[i] = pid;
            break;
        }
    }
    pthread_mutex_unlock(&g_children_lock);
}

static void untrack(pid_t pid)
{
    pthread_mutex_lock(&g_children_lock);
    for (int i = 0; i < CT_MAX_CHILDREN; i++)
        if (g_children[i] == pid)
            g_children[i] = 0;
    pthread_mutex_unlock(&g_children_lock);
}

uint64_t ct_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

void ct_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

static void close_pair(int fds[2])
{
    close_fd(&fds[0]);
    close_fd(&fds[1]);
}

/* In the child: make fd the descriptor `to` (clearing O_CLOEXEC). */
static int move_fd(int fd, int to)
{
    if (fd == to)
        return fcntl(fd, F_SETFD, 0);
    return dup2(fd, to) < 0 ? -1 : 0;
}

static void child_fail(const char *what)
{
    /* async-signal-safe: write(2) only */
    static const char msg[] = "ct_proc: cannot start child: ";
    ssize_t ignored = write(2, msg, sizeof(msg) - 1);
    ignored = write(2, what, strlen(what));
    ignored = write(2, "\n", 1);
    (void)ignored;
    _exit(127);
}

int ct_proc_spawn(ct_proc *p, const char *const *argv, const ct_spawn_opts *o)
{
    static const ct_spawn_opts defaults = {0};
    if (o == NULL)
        o = &defaults;
    p->pid = 0;
    p->in_fd = p->out_fd = p->err_fd = -1;
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    if ((o->pipe_stdin && pipe2(in, O_CLOEXEC) < 0) ||
        (o->pipe_stdout && pipe2(out, O_CLOEXEC) < 0) ||
        (o->pipe_stderr && pipe2(err, O_CLOEXEC) < 0))
        goto err_close_pipes;
    const char *exe = o->exe != NULL ? o->exe : argv[0];
    int death = o->death_signal != 0 ? o->death_signal : SIGKILL;
    pid_t parent = getpid();
    if (o->pipe_stdin) /* a child that died reads as an error, not SIGPIPE here */
        signal(SIGPIPE, SIG_IGN);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0)
        goto err_close_pipes;
    if (pid == 0) {
        signal(SIGPIPE, SIG_DFL);
        prctl(PR_SET_PDEATHSIG, death);
        if (getppid() != parent) /* the parent died before prctl */
            _exit(127);
        int log = -1;
        if (o->log_path != NULL && (!o->pipe_stdout || !o->pipe_stderr))
            log = open(o->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        if (o->pipe_stdin) {
            if (move_fd(in[0], 0) < 0)
                child_fail("stdin");
        } else if (!o->keep_stdin_tty) {
            int null = open("/dev/null", O_RDONLY);
            if (null >= 0 && move_fd(null, 0) < 0)
                child_fail("stdin");
        }
        if (o->pipe_stdout) {
            if (move_fd(out[1], 1) < 0)
                child_fail("stdout");
        } else if (log >= 0 && dup2(log, 1) < 0)
            child_fail("stdout");
        if (o->pipe_stderr) {
            if (move_fd(err[1], 2) < 0)
                child_fail("stderr");
        } else if (log >= 0 && dup2(log, 2) < 0)
            child_fail("stderr");
        if (o->search_path)
            execvp(exe, (char *const *)argv);
        else
            execv(exe, (char *const *)argv);
        child_fail(exe);
    }
    close_fd(&in[0]);
    close_fd(&out[1]);
    close_fd(&err[1]);
    p->pid = pid;
    p->in_fd = in[1];
    p->out_fd = out[0];
    p->err_fd = err[0];
    track(pid);
    return 0;

err_close_pipes : {
    int saved = errno;
    close_pair(in);
    close_pair(out);
    close_pair(err);
    errno = saved;
    return -1;
}
}

int ct_read_line(int fd, char *buf, size_t len, int timeout_ms)
{
    size_t n = 0;
    uint64_t deadline = ct_now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    int rc = 0;
    buf[0] = '\0';
    while (n + 1 < len) {
        uint64_t now = ct_now_ms();
        if (now >= deadline) {
            rc = -1;
            break;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int pr = poll(&pfd, 1, (int)(deadline - now));
        if (pr < 0 && errno == EINTR)
            continue;
        if (pr <= 0) {
            rc = -1;
            break;
        }
        char ch;
        ssize_t r = read(fd, &ch, 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = -1;
            break;
        }
        if (ch == '\n')
            break;
        buf[n++] = ch;
    }
    buf[n] = '\0';
    return rc;
}

int ct_proc_read_line(ct_proc *p, char *buf, size_t len, int timeout_ms)
{
    if (p->out_fd < 0) {
        buf[0] = '\0';
        return -1;
    }
    return ct_read_line(p->out_fd, buf, len, timeout_ms);
}

int ct_proc_wait_line(ct_proc *p, const char *prefix, char *buf, size_t len, int timeout_ms)
{
    uint64_t deadline = ct_now_ms() + (uint64_t)timeout_ms;
    size_t n = strlen(prefix);
    for (;;) {
        uint64_t now = ct_now_ms();
        if (now >= deadline)
            return -1;
        if (ct_proc_read_line(p, buf, len, (int)(deadline - now)) < 0)
            return -1;
        if (strncmp(buf, prefix, n) == 0)
            return 0;
    }
}

int ct_proc_send(ct_proc *p, const char *line)
{
    if (p->pid <= 0 || p->in_fd < 0)
        return -1;
    size_t len = strlen(line);
    const char *parts[2] = {line, "\n"};
    size_t lens[2] = {len, 1};
    for (int i = 0; i < 2; i++) {
        size_t off = 0;
        while (off < lens[i]) {
            ssize_t w = write(p->in_fd, parts[i] + off, lens[i] - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                return -1;
            off += (size_t)w;
        }
    }
    return 0;
}

int ct_proc_cmd(ct_proc *p, const char *line, char *buf, size_t len, int timeout_ms)
{
    if (ct_proc_send(p, line) < 0) {
        buf[0] = '\0';
        return -1;
    }
    return ct_proc_read_line(p, buf, len, timeout_ms);
}

void ct_proc_close_stdin(ct_proc *p)
{
    close_fd(&p->in_fd);
}

static void release(ct_proc *p)
{
    untrack(p->pid);
    p->pid = 0;
    close_fd(&p->in_fd);
    close_fd(&p->out_fd);
    close_fd(&p->err_fd);
}

static int decode(int st)
{
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (WIFSIGNALED(st))
        return 128 + WTERMSIG(st);
    return -1;
}

int ct_proc_wait(ct_proc *p, int timeout_ms)
{
    if (p->pid <= 0)
        return -1;
    uint64_t deadline = ct_now_ms() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms);
    for (;;) {
        int st = 0;
        pid_t r = waitpid(p->pid, &st, timeout_ms < 0 ? 0 : WNOHANG);
        if (r == p->pid) {
            release(p);
            return decode(st);
        }
        if (r < 0 && errno != EINTR) {
            release(p); /* not our child any more (reaped elsewhere) */
            return -1;
        }
        if (timeout_ms >= 0 && ct_now_ms() >= deadline)
            return -2;
        if (r == 0)
            ct_sleep_ms(5);
    }
}

void ct_proc_kill(ct_proc *p)
{
    if (p->pid <= 0)
        return;
    kill(p->pid, SIGCONT);
    kill(p->pid, SIGKILL);
    while (waitpid(p->pid, NULL, 0) < 0 && errno == EINTR) {
    }
    release(p);
}

void ct_proc_init(ct_proc *p)
{
    p->pid = 0;
    p->in_fd = p->out_fd = p->err_fd = -1;
}

int ct_proc_stop(ct_proc *p, int sig, int timeout_ms)
{
    if (p->pid <= 0)
        return -1;
    if (sig != 0) {
        kill(p->pid, SIGCONT);
        kill(p->pid, sig);
    }
    int st = ct_proc_wait(p, timeout_ms);
    if (st == -2) {
        fprintf(stderr, "ct_proc: pid %d did not exit within %d ms; killing it\n", (int)p->pid,
                timeout_ms);
        ct_proc_kill(p);
        return -1;
    }
    return st;
}

void ct_proc_kill_all(void)
{
    pid_t pids[CT_MAX_CHILDREN];
    pthread_mutex_lock(&g_children_lock);
    memcpy(pids, g_children, sizeof(pids));
    memset(g_children, 0, sizeof(g_children));
    pthread_mutex_unlock(&g_children_lock);
    for (int i = 0; i < CT_MAX_CHILDREN; i++) {
        if (pids[i] > 0) {
            kill(pids[i], SIGCONT);
            kill(pids[i], SIGKILL);
            while (waitpid(pids[i], NULL, 0) < 0 && errno == EINTR) {
            }
        }
    }
}

/* Append what fd has to buf (truncating); false at EOF or error. */
static bool drain(int fd, char *buf, size_t len, size_t *used)
{
    char tmp[4096];
    ssize_t r = read(fd, tmp, sizeof(tmp));
    if (r < 0 && errno == EINTR)
        return true;
    if (r <= 0)
        return false;
    if (buf != NULL && len > 0) {
        size_t room = len - 1 - *used;
        size_t k = (size_t)r < room ? (size_t)r : room;
        memcpy(buf + *used, tmp, k);
        *used += k;
        buf[*used] = '\0';
    }
    return true;
}

int ct_run(const char *const *argv, char *out, size_t out_len, char *err, size_t err_len,
           int timeout_ms)
{
    if (out != NULL && out_len > 0)
        out[0] = '\0';
    if (err != NULL && err_len > 0)
        err[0] = '\0';
    ct_spawn_opts o = {.pipe_stdout = out != NULL, .pipe_stderr = err != NULL};
    ct_proc p;
    if (ct_proc_spawn(&p, argv, &o) < 0)
        return -1;
    size_t used[2] = {0, 0};
    char *bufs[2] = {out, err};
    size_t lens[2] = {out_len, err_len};
    struct pollfd pf[2] = {{.fd = p.out_fd, .events = POLLIN}, {.fd = p.err_fd, .events = POLLIN}};
    uint64_t deadline = ct_now_ms() + (uint64_t)timeout_ms;
    while ((pf[0].fd >= 0 || pf[1].fd >= 0) && ct_now_ms() < deadline) {
        if (poll(pf, 2, 100) <= 0)
            continue;
        for (int i = 0; i < 2; i++) {
            if (pf[i].fd >= 0 && pf[i].revents != 0 && !drain(pf[i].fd, bufs[i], lens[i], &used[i]))
                pf[i].fd = -1; /* closed with p below */
        }
    }
    uint64_t now = ct_now_ms();
    int left = now < deadline ? (int)(deadline - now) : 0;
    return ct_proc_stop(&p, 0, left + 2000);
}

uint16_t ct_free_port(const char *host)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    struct sockaddr_in a = {.sin_family = AF_INET};
    if (inet_pton(AF_INET, host != NULL ? host : "127.0.0.1", &a.sin_addr) != 1) {
        close(fd);
        return 0;
    }
    socklen_t len = sizeof(a);
    uint16_t port = 0;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

void ct_dump_stacks(pid_t pid)
{
    char pid_arg[24];
    snprintf(pid_arg, sizeof(pid_arg), "%d", (int)pid);
    const char *gdb = "/usr/bin/gdb";
    if (access(gdb, X_OK) != 0) {
        fprintf(stderr, "--- no %s: pid %d's stacks not shown ---\n", gdb, (int)pid);
        return;
    }
    const char *argv[] = {gdb, "-batch", "-nx", "-p", pid_arg, "-ex", "thread apply all bt", NULL};
    fprintf(stderr, "--- stacks of pid %d (gdb) ---\n", (int)pid);
    if (ct_run(argv, NULL, 0, NULL, 0, 30000) != 0)
        fprintf(stderr, "--- gdb could not show pid %d's stacks ---\n", (int)pid);
    else
        fprintf(stderr, "--- end of pid %d's stacks ---\n", (int)pid);
}

int ct_stop_process(pid_t pid)
{
    if (kill(pid, SIGSTOP) != 0)
        return -1;
    char path[64], stat[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    for (int i = 0; i < 1000; i++) {
        FILE *f = fopen(path, "r");
        size_t n = f != NULL ? fread(stat, 1, sizeof(stat) - 1, f) : 0;
        if (f != NULL)
            fclose(f);
        stat[n] = '\0';
        const char *p = strrchr(stat, ')'); /* the state follows the command's ')' */
        if (p != NULL && p[1] == ' ' && (p[2] == 'T' || p[2] == 't'))
            return 0;
        usleep(2000);
    }
    return -1;
}
