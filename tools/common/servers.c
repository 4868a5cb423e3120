/*
 * servers.c - see servers.h. The processes are ct_proc children with their
 * output appended to <dir>/server.log (printed when a start fails).
 */
#include "servers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_REGISTERED 16
#define READY_MS       15000

static ct_server *registered[MAX_REGISTERED];
static bool atexit_installed;

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
            ct_server_stop(registered[i]);
}

static void register_server(ct_server *s)
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

static void unregister_server(ct_server *s)
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
    uint64_t end = ct_now_ms() + 1000;
    while (got + 1 < sizeof(buf) && ct_now_ms() < end) {
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

static bool ready(const ct_server *s)
{
    if (s->kind == CT_SERVER_ETCD)
        return probe(s->port, "GET /health HTTP/1.0\r\n\r\n", "\"health\":\"true\"");
    return probe(s->port, "PING\r\n", "+PONG");
}

static int launch(ct_server *s)
{
    char log[200];
    snprintf(log, sizeof(log), "%s/server.log", s->dir);
    char client[96], peer[96], data[200], port[16];
    snprintf(client, sizeof(client), "http://127.0.0.1:%u", (unsigned)s->port);
    snprintf(peer, sizeof(peer), "http://127.0.0.1:%u", (unsigned)s->peer_port);
    snprintf(data, sizeof(data), "%s/data", s->dir);
    snprintf(port, sizeof(port), "%u", (unsigned)s->port);
    const char *etcd[] = {s->bin,     "--name",
                          s->name,    "--data-dir",
                          data,       "--listen-client-urls",
                          client,     "--advertise-client-urls",
                          client,     "--listen-peer-urls",
                          peer,       "--initial-advertise-peer-urls",
                          peer,       "--initial-cluster",
                          s->cluster, "--initial-cluster-state",
                          "new",      "--initial-cluster-token",
                          s->token,   "--logger",
                          "zap",      "--log-level",
                          "warn",     NULL};
    const char *redis[] = {s->bin,      "--port",       port,   "--bind",
                           "127.0.0.1", "--dir",        s->dir, "--save",
                           "",          "--appendonly", "no",   "--protected-mode",
                           "no",        "--daemonize",  "no",   NULL};
    ct_spawn_opts o = {.log_path = log};
    if (ct_proc_spawn(&s->proc, s->kind == CT_SERVER_ETCD ? etcd : redis, &o) < 0)
        return -1;
    register_server(s);
    return 0;
}

/* Wait until every server answers, or one exited (returns 1: retry). */
static int wait_ready(ct_server *servers, int n)
{
    uint64_t end = ct_now_ms() + READY_MS;
    bool done[16] = {false};
    int left = n;
    while (left > 0 && ct_now_ms() < end) {
        for (int i = 0; i < n; i++) {
            if (done[i])
                continue;
            if (ct_proc_wait(&servers[i].proc, 0) != -2)
                return 1; /* it exited */
            if (ready(&servers[i])) {
                done[i] = true;
                left--;
            }
        }
        if (left > 0)
            ct_sleep_ms(50);
    }
    return left == 0 ? 0 : -1;
}

/* The server's private directory: on tmpfs (/dev/shm) where there is one, so
 * that etcd's fsyncs cost nothing and a busy disk on a loaded CI machine
 * cannot stall its leases (what the tests exercise is the servers' protocol,
 * not their disk); else under /tmp. */
static void make_dir(ct_server *s, const char *what)
{
    static const char *const parents[] = {"/dev/shm", "/tmp"};
    for (size_t i = 0; i < sizeof(parents) / sizeof(parents[0]); i++) {
        snprintf(s->dir, sizeof(s->dir), "%s/crescent-%s-XXXXXX", parents[i], what);
        if (mkdtemp(s->dir) != NULL)
            return;
    }
    s->dir[0] = '\0';
}

static void print_log(const ct_server *s)
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

int ct_etcd_cluster_start(ct_server *members, int n, const char *bin)
{
    if (n < 1 || n > 16)
        return -1;
    for (int attempt = 0; attempt < 3; attempt++) {
        char cluster[1024] = "";
        for (int i = 0; i < n; i++) {
            ct_server *s = &members[i];
            memset(s, 0, sizeof(*s));
            s->kind = CT_SERVER_ETCD;
            snprintf(s->bin, sizeof(s->bin), "%s", bin != NULL ? bin : CT_ETCD_BIN);
            snprintf(s->name, sizeof(s->name), "m%d", i);
            s->port = ct_free_port(NULL);
            s->peer_port = ct_free_port(NULL);
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
            ct_server_stop(&members[i]);
        }
        if (rc < 0)
            return -1;
    }
    return -1;
}

int ct_etcd_start(ct_server *s, const char *bin)
{
    return ct_etcd_cluster_start(s, 1, bin);
}

int ct_redis_start(ct_server *s, const char *bin)
{
    for (int attempt = 0; attempt < 3; attempt++) {
        memset(s, 0, sizeof(*s));
        s->kind = CT_SERVER_REDIS;
        snprintf(s->bin, sizeof(s->bin), "%s", bin != NULL ? bin : CT_REDIS_BIN);
        snprintf(s->name, sizeof(s->name), "redis");
        s->port = ct_free_port(NULL);
        snprintf(s->endpoint, sizeof(s->endpoint), "127.0.0.1:%u", (unsigned)s->port);
        make_dir(s, "redis");
        if (s->dir[0] == '\0' || launch(s) < 0)
            return -1;
        int rc = wait_ready(s, 1);
        if (rc == 0)
            return 0;
        if (rc < 0)
            print_log(s);
        ct_server_stop(s);
        if (rc < 0)
            return -1;
    }
    return -1;
}

int ct_server_restart(ct_server *s)
{
    if (s->proc.pid > 0)
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
        ct_sleep_ms(100); /* the old process's port may linger briefly */
    }
    return -1;
}

void ct_server_kill(ct_server *s)
{
    ct_proc_kill(&s->proc);
}

void ct_server_pause(ct_server *s, bool paused)
{
    if (s->proc.pid <= 0)
        return;
    if (paused)
        (void)ct_stop_process(s->proc.pid); /* stopped for sure when this returns */
    else
        kill(s->proc.pid, SIGCONT);
}

void ct_server_stop(ct_server *s)
{
    if (s->proc.pid > 0)
        ct_proc_stop(&s->proc, SIGTERM, 5000);
    remove_tree(s->dir, false);
    s->dir[0] = '\0';
    unregister_server(s);
}

void ct_server_wipe(ct_server *s)
{
    remove_tree(s->dir, true);
}

bool ct_server_running(const ct_server *s)
{
    return s->proc.pid > 0;
}
