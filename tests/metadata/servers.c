/*
 * servers.c - see servers.h. Readiness is probed over a plain socket (GET
 * /health for etcd, PING for redis) so the harness depends on nothing it
 * tests. A server that exits during start-up (a port taken between
 * test_free_port and its bind) is retried on fresh ports, three times.
 */
#include "servers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_REGISTERED 16
#define READY_MS       15000

static test_server *registered[MAX_REGISTERED];
static bool atexit_installed;

uint64_t test_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

void servers_require(const char *bin)
{
    if (access(bin, X_OK) != 0) {
        printf("skipped: %s is not installed (scripts/install-deps.sh installs it)\n", bin);
        exit(77);
    }
}

uint16_t test_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    uint16_t port = 0;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    remove(path);
    return 0;
}

static void remove_tree(const char *dir, bool keep_root)
{
    if (dir[0] == '\0')
        return;
    nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    if (keep_root)
        mkdir(dir, 0700);
}

static void cleanup_all(void)
{
    for (int i = 0; i < MAX_REGISTERED; i++)
        if (registered[i] != NULL)
            server_stop(registered[i]);
}

static void register_server(test_server *s)
{
    if (!atexit_installed) {
        atexit(cleanup_all);
        atexit_installed = true;
    }
    if (s->registered)
        return;
    for (int i = 0; i < MAX_REGISTERED; i++) {
        if (registered[i] == NULL) {
            registered[i] = s;
            s->registered = true;
            return;
        }
    }
}

static void unregister_server(test_server *s)
{
    for (int i = 0; i < MAX_REGISTERED; i++)
        if (registered[i] == s)
            registered[i] = NULL;
    s->registered = false;
}

/* Send `req`, read until `want` appears or the deadline; true if it did. */
static bool probe(uint16_t port, const char *req, const char *want)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return false;
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bool ok = false;
    char buf[2048];
    size_t got = 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0)
        goto out;
    if (send(fd, req, strlen(req), MSG_NOSIGNAL) != (ssize_t)strlen(req))
        goto out;
    uint64_t end = test_now_ms() + 1000;
    while (got + 1 < sizeof(buf) && test_now_ms() < end) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        ssize_t n = recv(fd, buf + got, sizeof(buf) - 1 - got, 0);
        if (n <= 0)
            break;
        got += (size_t)n;
        buf[got] = '\0';
        if (strstr(buf, want) != NULL) {
            ok = true;
            break;
        }
    }
out:
    close(fd);
    return ok;
}

static bool ready(const test_server *s)
{
    if (s->kind == SERVER_ETCD)
        return probe(s->port, "GET /health HTTP/1.0\r\n\r\n", "\"health\":\"true\"");
    return probe(s->port, "PING\r\n", "+PONG");
}

static pid_t spawn(const test_server *s, const char *log)
{
    char client[96], peer[96], name[64];
    snprintf(client, sizeof(client), "http://127.0.0.1:%u", (unsigned)s->port);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%u", (unsigned)s->peer_port);
    snprintf(name, sizeof(name), "%s", s->name);
    char port[16];
    snprintf(port, sizeof(port), "%u", (unsigned)s->port);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(127);
    int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
        close(fd);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0)
        dup2(devnull, 0);
    if (s->kind == SERVER_ETCD) {
        char data[200];
        snprintf(data, sizeof(data), "%s/data", s->dir);
        execl(ETCD_BIN, ETCD_BIN, "--name", name, "--data-dir", data, "--listen-client-urls",
              client, "--advertise-client-urls", client, "--listen-peer-urls", peer,
              "--initial-advertise-peer-urls", peer, "--initial-cluster", s->cluster,
              "--initial-cluster-state", "new", "--initial-cluster-token", s->token, "--logger",
              "zap", "--log-level", "warn", (char *)NULL);
    } else {
        execl(REDIS_BIN, REDIS_BIN, "--port", port, "--bind", "127.0.0.1", "--dir", s->dir,
              "--save", "", "--appendonly", "no", "--protected-mode", "no", "--daemonize", "no",
              (char *)NULL);
    }
    _exit(127);
}

static int launch(test_server *s)
{
    char log[200];
    snprintf(log, sizeof(log), "%s/server.log", s->dir);
    s->pid = spawn(s, log);
    if (s->pid < 0)
        return -1;
    register_server(s);
    return 0;
}

/* Wait until every server answers, or one exited (returns 1: retry). */
static int wait_ready(test_server *servers, int n)
{
    uint64_t end = test_now_ms() + READY_MS;
    bool done[16] = {false};
    int left = n;
    while (left > 0 && test_now_ms() < end) {
        for (int i = 0; i < n; i++) {
            if (done[i])
                continue;
            int st;
            if (waitpid(servers[i].pid, &st, WNOHANG) == servers[i].pid) {
                servers[i].pid = 0;
                return 1;
            }
            if (ready(&servers[i])) {
                done[i] = true;
                left--;
            }
        }
        if (left > 0)
            sleep_ms(50);
    }
    return left == 0 ? 0 : -1;
}

static void make_dir(test_server *s, const char *what)
{
    snprintf(s->dir, sizeof(s->dir), "/tmp/crescent-%s-XXXXXX", what);
    if (mkdtemp(s->dir) == NULL)
        s->dir[0] = '\0';
}

static void print_log(const test_server *s)
{
    char log[200], line[512];
    snprintf(log, sizeof(log), "%s/server.log", s->dir);
    FILE *f = fopen(log, "r");
    if (f == NULL)
        return;
    fprintf(stderr, "--- %s log (%s) ---\n", s->name, log);
    while (fgets(line, sizeof(line), f) != NULL)
        fputs(line, stderr);
    fclose(f);
}

int etcd_cluster_start(test_server *members, int n)
{
    if (n < 1 || n > 16)
        return -1;
    for (int attempt = 0; attempt < 3; attempt++) {
        char cluster[1024] = "";
        for (int i = 0; i < n; i++) {
            test_server *s = &members[i];
            memset(s, 0, sizeof(*s));
            s->kind = SERVER_ETCD;
            snprintf(s->name, sizeof(s->name), "m%d", i);
            s->port = test_free_port();
            s->peer_port = test_free_port();
            snprintf(s->endpoint, sizeof(s->endpoint), "127.0.0.1:%u", (unsigned)s->port);
            size_t used = strlen(cluster);
            snprintf(cluster + used, sizeof(cluster) - used, "%s%s=http://127.0.0.1:%u",
                     i > 0 ? "," : "", s->name, (unsigned)s->peer_port);
            make_dir(s, "etcd");
            if (s->dir[0] == '\0')
                return -1;
        }
        for (int i = 0; i < n; i++) {
            snprintf(members[i].cluster, sizeof(members[i].cluster), "%s", cluster);
            snprintf(members[i].token, sizeof(members[i].token), "crescent-%d-%u", (int)getpid(),
                     (unsigned)members[0].port);
            if (launch(&members[i]) < 0)
                return -1;
        }
        int rc = wait_ready(members, n);
        if (rc == 0)
            return 0;
        for (int i = 0; i < n; i++) {
            if (rc < 0)
                print_log(&members[i]);
            server_stop(&members[i]);
        }
        if (rc < 0)
            return -1;
    }
    return -1;
}

int etcd_start(test_server *s)
{
    return etcd_cluster_start(s, 1);
}

int redis_start(test_server *s)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        memset(s, 0, sizeof(*s));
        s->kind = SERVER_REDIS;
        snprintf(s->name, sizeof(s->name), "redis");
        s->port = test_free_port();
        snprintf(s->endpoint, sizeof(s->endpoint), "127.0.0.1:%u", (unsigned)s->port);
        make_dir(s, "redis");
        if (s->dir[0] == '\0' || launch(s) < 0)
            return -1;
        int rc = wait_ready(s, 1);
        if (rc == 0)
            return 0;
        if (rc < 0)
            print_log(s);
        server_stop(s);
        if (rc < 0)
            return -1;
    }
    return -1;
}

int server_restart(test_server *s)
{
    if (s->pid > 0)
        return -1;
    for (int attempt = 0; attempt < 50; attempt++) {
        if (launch(s) < 0)
            return -1;
        int rc = wait_ready(s, 1);
        if (rc == 0)
            return 0;
        if (rc < 0) {
            print_log(s);
            return -1;
        }
        sleep_ms(100); /* the old process's port may linger briefly */
    }
    return -1;
}

void server_kill(test_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGCONT);
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        s->pid = 0;
    }
}

void server_pause(test_server *s, bool paused)
{
    if (s->pid > 0)
        kill(s->pid, paused ? SIGSTOP : SIGCONT);
}

void server_stop(test_server *s)
{
    if (s->pid > 0) {
        kill(s->pid, SIGCONT);
        kill(s->pid, SIGTERM);
        int st;
        bool gone = false;
        for (int i = 0; i < 500 && !gone; i++) {
            gone = waitpid(s->pid, &st, WNOHANG) == s->pid;
            if (!gone)
                sleep_ms(10);
        }
        if (!gone) {
            kill(s->pid, SIGKILL);
            waitpid(s->pid, NULL, 0);
        }
        s->pid = 0;
    }
    remove_tree(s->dir, false);
    s->dir[0] = '\0';
    unregister_server(s);
}

void server_wipe(test_server *s)
{
    remove_tree(s->dir, true);
}
