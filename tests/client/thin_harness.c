/*
 * thin_harness.c - see thin_harness.h.
 */
#include "thin_harness.h"

#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int next_socket;

int th_daemon_start(th_daemon *d, const char *master_addr, const char *socket,
                    const char *const *extra)
{
    const char *bin = getenv("CRESCENT_CLIENT_BIN");
    if (bin == NULL)
        bin = "crescent-client";
    char sock[96], master[128], sockflag[128];
    if (socket != NULL)
        snprintf(sock, sizeof(sock), "%s", socket);
    else
        snprintf(sock, sizeof(sock), "@crescent-test-%d-%d", (int)getpid(), next_socket++);
    snprintf(master, sizeof(master), "--master_server_address=%s", master_addr);
    snprintf(sockflag, sizeof(sockflag), "--socket=%s", sock);
    const char *argv[48] = {bin,
                            master,
                            sockflag,
                            "--metadata_server=P2PHANDSHAKE",
                            "--host=127.0.0.1",
                            "--global_segment_size=512MB",
                            "--threads=2",
                            "--enable_http_server",
                            "--http_port=0",
                            "--http_host=127.0.0.1",
                            "--heartbeat_interval_ms=200",
                            "--protocol=auto"};
    int argc = 12;
    for (int i = 0; extra != NULL && extra[i] != NULL && argc < 47; i++)
        argv[argc++] = extra[i];
    argv[argc] = NULL;
    memset(d, 0, sizeof(*d));
    if (sh_proc_spawn(&d->p, bin, argv, 0) < 0) {
        perror("harness: spawning crescent-client");
        return -1;
    }
    char s[96], seg[300];
    unsigned http = 0;
    if (sh_proc_read_line(&d->p, 20000) < 0 ||
        sscanf(d->p.line, "crescent-client: serving %95s segment %299s tenant %*s pid %*d http %u",
               s, seg, &http) != 3) {
        fprintf(stderr, "harness: crescent-client did not start: '%s'\n", d->p.line);
        sh_proc_kill(&d->p);
        return -1;
    }
    snprintf(d->socket, sizeof(d->socket), "%s", s);
    snprintf(d->segment, sizeof(d->segment), "%s", seg);
    d->http_port = (uint16_t)http;
    return 0;
}

int th_daemon_stop(th_daemon *d)
{
    return sh_proc_signal_stop(&d->p, SIGTERM, 20000);
}

void th_daemon_kill(th_daemon *d)
{
    sh_proc_kill(&d->p);
}

int th_client_start(sh_client *c, const th_daemon *d, const char *const *extra)
{
    const char *args[40] = {"--thin", d->socket};
    int n = 2;
    for (int i = 0; extra != NULL && extra[i] != NULL && n < 39; i++)
        args[n++] = extra[i];
    args[n] = NULL;
    return sh_client_start(c, "unused:1", args);
}

int th_fd_count(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *dir = opendir(path);
    if (dir == NULL)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL)
        if (e->d_name[0] != '.')
            n++;
    closedir(dir);
    return n - 1; /* the directory's own descriptor */
}

void th_fd_list(pid_t pid, char *out, size_t len)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    size_t used = 0;
    out[0] = '\0';
    DIR *dir = opendir(path);
    if (dir == NULL)
        return;
    struct dirent *e;
    while ((e = readdir(dir)) != NULL && used + 1 < len) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(dir))
            continue;
        char link[352], target[128];
        snprintf(link, sizeof(link), "%s/%s", path, e->d_name);
        ssize_t n = readlink(link, target, sizeof(target) - 1);
        target[n > 0 ? n : 0] = '\0';
        int w = snprintf(out + used, len - used, "%s%s=%s", used ? " " : "", e->d_name, target);
        if (w < 0)
            break;
        used += (size_t)w < len - used ? (size_t)w : len - used - 1;
    }
    closedir(dir);
}

long long th_shared_mapped(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    char line[4352];
    long long total = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long a, b;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s", &a, &b, perms) == 3 && perms[3] == 's')
            total += (long long)(b - a);
    }
    fclose(f);
    return total;
}

double th_metric(const th_daemon *d, const char *name)
{
    static char body[1 << 20];
    if (d->http_port == 0 || sh_http_get(d->http_port, "/metrics", body, sizeof(body)) != 200)
        return -1;
    size_t n = strlen(name);
    for (char *p = body; p != NULL && *p != '\0';) {
        if (strncmp(p, name, n) == 0 && p[n] == ' ')
            return strtod(p + n + 1, NULL);
        p = strchr(p, '\n');
        if (p != NULL)
            p++;
    }
    return -1;
}
