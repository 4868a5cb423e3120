/*
 * netbed.c - see netbed.h. Every configuration step is one ip(8) command run
 * to completion (ct_run) and checked.
 */
#include "netbed.h"

#include <dirent.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testing.h"

static tt_netbed *g_bed; /* destroyed at exit */

/* Run ip with the given words; 0 when it exited 0 (its stderr printed otherwise). */
static int ip(const char *fmt, ...)
{
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    const char *argv[32] = {"/usr/sbin/ip"};
    int n = 1;
    char *save = NULL;
    for (char *w = strtok_r(line, " ", &save); w != NULL && n < 31; w = strtok_r(NULL, " ", &save))
        argv[n++] = w;
    argv[n] = NULL;
    char err[1024];
    int st = ct_run(argv, NULL, 0, err, sizeof(err), 10000);
    if (st != 0) {
        fprintf(stderr, "netbed: ip");
        for (int i = 1; i < n; i++)
            fprintf(stderr, " %s", argv[i]);
        fprintf(stderr, ": exit %d: %s", st, err);
    }
    return st == 0 ? 0 : -1;
}

/* Remove namespaces crnb<pid>* of processes that no longer exist. */
static void remove_stale(void)
{
    DIR *d = opendir("/var/run/netns");
    if (d == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        int pid = 0;
        if (sscanf(e->d_name, "crnb%d", &pid) == 1 && pid > 0 && kill(pid, 0) != 0)
            ip("netns del %s", e->d_name);
    }
    closedir(d);
}

void tt_netbed_destroy(tt_netbed *b)
{
    if (b == NULL || !b->created)
        return;
    ct_proc_stop(&b->wire, SIGTERM, 2000);
    for (int i = 0; i < b->n_hosts; i++)
        if (b->ns[i][0] != '\0')
            ip("netns del %s", b->ns[i]);
    if (b->sw[0] != '\0')
        ip("netns del %s", b->sw);
    b->created = false;
    if (g_bed == b)
        g_bed = NULL;
}

static void destroy_at_exit(void)
{
    tt_netbed_destroy(g_bed);
}

int tt_netbed_create(tt_netbed *b, int n_hosts, const char *wire_bin)
{
    memset(b, 0, sizeof(*b));
    ct_proc_init(&b->wire);
    if (n_hosts < 2 || n_hosts > TT_NETBED_MAX_HOSTS)
        return -1;
    if (access("/usr/sbin/ip", X_OK) != 0) {
        printf("skipped: ip(8) is not installed (iproute2; scripts/install-deps.sh)\n");
        return TT_SKIP;
    }
    if (access("/dev/net/tun", R_OK | W_OK) != 0) {
        printf("skipped: /dev/net/tun is not available\n");
        return TT_SKIP;
    }
    remove_stale();
    int pid = (int)getpid();
    snprintf(b->sw, sizeof(b->sw), "crnb%dsw", pid);
    const char *probe[] = {"/usr/sbin/ip", "netns", "add", b->sw, NULL};
    char err[512];
    if (ct_run(probe, NULL, 0, err, sizeof(err), 10000) != 0) {
        printf("skipped: cannot create network namespaces here: %s", err);
        b->sw[0] = '\0';
        return TT_SKIP;
    }
    b->created = true;
    b->n_hosts = n_hosts;
    g_bed = b;
    static bool atexit_done;
    if (!atexit_done) {
        atexit(destroy_at_exit);
        atexit_done = true;
    }
    char links[TT_NETBED_MAX_HOSTS][96];
    const char *wargv[TT_NETBED_MAX_HOSTS + 2] = {wire_bin};
    for (int i = 0; i < n_hosts; i++) {
        snprintf(b->ns[i], sizeof(b->ns[i]), "crnb%dh%d", pid, i);
        snprintf(b->addr[i], sizeof(b->addr[i]), "10.77.0.%d", i + 1);
        if (ip("netns add %s", b->ns[i]) < 0 || ip("-n %s link set lo up", b->ns[i]) < 0)
            goto err_destroy;
        snprintf(links[i], sizeof(links[i]), "%s:eth0:%s:p%d", b->ns[i], b->sw, i);
        wargv[i + 1] = links[i];
    }
    wargv[n_hosts + 1] = NULL;
    ct_spawn_opts o = {.pipe_stdin = true, .pipe_stdout = true};
    char line[256];
    if (ct_proc_spawn(&b->wire, wargv, &o) < 0 ||
        ct_proc_read_line(&b->wire, line, sizeof(line), 10000) < 0 ||
        strncmp(line, "READY", 5) != 0) {
        fprintf(stderr, "netbed: %s did not start: '%s'\n", wire_bin, line);
        if (strncmp(line, "FAIL tap", 8) == 0) {
            tt_netbed_destroy(b);
            printf("skipped: tap devices refused here: %s\n", line);
            return TT_SKIP;
        }
        goto err_destroy;
    }
    if (ip("-n %s link add br0 type bridge", b->sw) < 0 || ip("-n %s link set br0 up", b->sw) < 0)
        goto err_destroy;
    for (int i = 0; i < n_hosts; i++) {
        if (ip("-n %s link set p%d master br0", b->sw, i) < 0 ||
            ip("-n %s link set p%d up", b->sw, i) < 0 ||
            ip("-n %s addr add %s/24 dev eth0", b->ns[i], b->addr[i]) < 0 ||
            ip("-n %s link set eth0 up", b->ns[i]) < 0)
            goto err_destroy;
    }
    return 0;

err_destroy:
    tt_netbed_destroy(b);
    return -1;
}

int tt_netbed_impair(tt_netbed *b, int host, int delay_ms, int jitter_ms, double loss_pct)
{
    char cmd[128], reply[128];
    snprintf(cmd, sizeof(cmd), "set %d %d %d %.3f", host, delay_ms, jitter_ms, loss_pct);
    if (ct_proc_cmd(&b->wire, cmd, reply, sizeof(reply), 5000) < 0 || strcmp(reply, "OK") != 0) {
        fprintf(stderr, "netbed: wire '%s': '%s'\n", cmd, reply);
        return -1;
    }
    return 0;
}

int tt_netbed_link(tt_netbed *b, int host, bool up)
{
    return ip("-n %s link set p%d %s", b->sw, host, up ? "up" : "down");
}

int tt_netbed_enter(tt_netbed *b, int host)
{
    char path[96];
    snprintf(path, sizeof(path), "/var/run/netns/%s", b->ns[host]);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = setns(fd, CLONE_NEWNET);
    close(fd);
    return rc < 0 ? -1 : 0;
}

const char **tt_netbed_wrap(tt_netbed *b, int host, const char *const *env, const char *const *argv,
                            const char **out, size_t cap)
{
    size_t n = 0;
    const char *head[] = {"/usr/sbin/ip", "netns", "exec", b->ns[host], "/usr/bin/env"};
    for (size_t i = 0; i < 5; i++) {
        if (n + 1 >= cap)
            return NULL;
        out[n++] = head[i];
    }
    for (size_t i = 0; env != NULL && env[i] != NULL; i++) {
        if (n + 1 >= cap)
            return NULL;
        out[n++] = env[i];
    }
    for (size_t i = 0; argv[i] != NULL; i++) {
        if (n + 1 >= cap)
            return NULL;
        out[n++] = argv[i];
    }
    out[n] = NULL;
    return out;
}
