/*
 * netwire.c - crescent-test-netwire: the "cables" of the network-namespace
 * test bed (netbed.h). Each link is a pair of tap devices, one in a host's
 * namespace and one in the switch namespace (a bridge port); this process
 * copies Ethernet frames between the two ends, and can add latency with
 * jitter and random loss per link.
 *
 * Why userspace: the kernel that runs the tests here has no sch_netem
 * (tc qdisc ... netem: "Specified qdisc kind is unknown"), so the delay and
 * the loss are applied to whole frames here instead: each frame read from
 * one end is dropped with the link's loss probability, or queued with a
 * release time of now + delay + uniform jitter (never earlier than the
 * frame queued before it, so a direction keeps its order, as a cable
 * does) and written to the other end when due. A partition is a real cable
 * down/up of the bridge port (ip link), done by the test.
 *
 *   crescent-test-netwire NS_A:TAP_A:NS_B:TAP_B ...   (namespaces from ip netns)
 *   stdin:  "set LINK DELAY_MS JITTER_MS LOSS_PERCENT" -> "OK" | "ERR ..."
 *           "stats LINK" -> "OK fwd=<n> lost=<n> overflow=<n>"
 *           EOF or "quit" -> exit 0
 *   stdout: "READY <links>" once every tap exists, or "FAIL <why>".
 *
 * Bounded: at most WIRE_QUEUE frames wait per direction (more are dropped,
 * counted as overflow), frames are at most WIRE_FRAME bytes. One thread.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#define WIRE_MAX_LINKS 16
#define WIRE_QUEUE     4096
#define WIRE_FRAME     2048

typedef struct frame {
    uint64_t due_us;
    uint16_t len;
    uint8_t data[WIRE_FRAME];
} frame;

typedef struct direction {
    int from, to; /* tap fds */
    frame *q;     /* ring of WIRE_QUEUE */
    size_t head, count;
    uint64_t last_due;
    uint64_t fwd, lost, overflow;
} direction;

typedef struct cable {
    direction dir[2];
    uint64_t delay_us, jitter_us;
    uint32_t loss_ppm;
} cable;

static cable links[WIRE_MAX_LINKS];
static int n_links;
static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint64_t rand64(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static uint64_t now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

/* Open (creating) tap `name` inside namespace `ns`; the fd stays bound to it. */
static int open_tap(int home_ns, const char *ns, const char *name)
{
    char path[256];
    snprintf(path, sizeof(path), "/var/run/netns/%s", ns);
    int nsfd = open(path, O_RDONLY | O_CLOEXEC);
    if (nsfd < 0 || setns(nsfd, CLONE_NEWNET) < 0) {
        if (nsfd >= 0)
            close(nsfd);
        return -1;
    }
    close(nsfd);
    int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI;
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name);
    if (fd >= 0 && ioctl(fd, TUNSETIFF, &ifr) < 0) {
        close(fd);
        fd = -1;
    }
    int saved = errno;
    if (setns(home_ns, CLONE_NEWNET) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    errno = saved;
    return fd;
}

static void pump_in(cable *l, direction *d)
{
    for (int burst = 0; burst < 256; burst++) {
        uint8_t buf[WIRE_FRAME];
        ssize_t n = read(d->from, buf, sizeof(buf));
        if (n <= 0)
            return;
        if (l->loss_ppm > 0 && rand64() % 1000000u < l->loss_ppm) {
            d->lost++;
            continue;
        }
        if (d->count == WIRE_QUEUE) {
            d->overflow++;
            continue;
        }
        uint64_t due = now_us() + l->delay_us;
        if (l->jitter_us > 0) {
            uint64_t j = rand64() % (2 * l->jitter_us + 1);
            due = due + j >= l->jitter_us ? due + j - l->jitter_us : 0;
        }
        if (due < d->last_due)
            due = d->last_due;
        d->last_due = due;
        frame *f = &d->q[(d->head + d->count) % WIRE_QUEUE];
        f->due_us = due;
        f->len = (uint16_t)n;
        memcpy(f->data, buf, (size_t)n);
        d->count++;
    }
}

/* Write what is due; the time until the next frame is due (-1: none). */
static int64_t pump_out(direction *d, uint64_t now)
{
    while (d->count > 0) {
        frame *f = &d->q[d->head];
        if (f->due_us > now)
            return (int64_t)(f->due_us - now);
        /* a down port (EIO) or a full queue (EAGAIN) drops the frame, as a wire would */
        if (write(d->to, f->data, f->len) == f->len)
            d->fwd++;
        else
            d->lost++;
        d->head = (d->head + 1) % WIRE_QUEUE;
        d->count--;
    }
    return -1;
}

static void command(char *line)
{
    int idx, delay, jitter;
    double loss;
    if (strncmp(line, "set ", 4) == 0 &&
        sscanf(line + 4, "%d %d %d %lf", &idx, &delay, &jitter, &loss) == 4) {
        if (idx < 0 || idx >= n_links || delay < 0 || jitter < 0 || jitter > delay + 1000 ||
            loss < 0 || loss > 100) {
            printf("ERR bad set: %s\n", line);
        } else {
            links[idx].delay_us = (uint64_t)delay * 1000u;
            links[idx].jitter_us = (uint64_t)jitter * 1000u;
            links[idx].loss_ppm = (uint32_t)(loss * 10000.0);
            printf("OK\n");
        }
    } else if (strncmp(line, "stats ", 6) == 0 && sscanf(line + 6, "%d", &idx) == 1 && idx >= 0 &&
               idx < n_links) {
        const cable *l = &links[idx];
        printf("OK fwd=%llu lost=%llu overflow=%llu\n",
               (unsigned long long)(l->dir[0].fwd + l->dir[1].fwd),
               (unsigned long long)(l->dir[0].lost + l->dir[1].lost),
               (unsigned long long)(l->dir[0].overflow + l->dir[1].overflow));
    } else {
        printf("ERR unknown command: %s\n", line);
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc - 1 > WIRE_MAX_LINKS) {
        printf("FAIL usage: %s NS_A:TAP_A:NS_B:TAP_B ... (at most %d)\n", argv[0], WIRE_MAX_LINKS);
        return 2;
    }
    int home = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home < 0) {
        printf("FAIL /proc/self/ns/net: %s\n", strerror(errno));
        return 1;
    }
    rng ^= (uint64_t)getpid() << 20;
    for (int i = 1; i < argc; i++) {
        char spec[256], *save = NULL;
        snprintf(spec, sizeof(spec), "%s", argv[i]);
        char *na = strtok_r(spec, ":", &save), *ta = strtok_r(NULL, ":", &save);
        char *nb = strtok_r(NULL, ":", &save), *tb = strtok_r(NULL, ":", &save);
        if (na == NULL || ta == NULL || nb == NULL || tb == NULL) {
            printf("FAIL bad link '%s'\n", argv[i]);
            return 2;
        }
        cable *l = &links[n_links++];
        int a = open_tap(home, na, ta), b = open_tap(home, nb, tb);
        if (a < 0 || b < 0) {
            printf("FAIL tap %s/%s or %s/%s: %s\n", na, ta, nb, tb, strerror(errno));
            return 1;
        }
        l->dir[0] = (direction){.from = a, .to = b};
        l->dir[1] = (direction){.from = b, .to = a};
        for (int d = 0; d < 2; d++) {
            l->dir[d].q = malloc(sizeof(frame) * WIRE_QUEUE);
            if (l->dir[d].q == NULL) {
                printf("FAIL out of memory\n");
                return 1;
            }
        }
    }
    printf("READY %d\n", n_links);
    fflush(stdout);

    struct pollfd pf[2 * WIRE_MAX_LINKS + 1];
    char cmd[512];
    size_t cmd_len = 0;
    for (;;) {
        uint64_t now = now_us();
        int64_t wait_us = -1;
        for (int i = 0; i < n_links; i++)
            for (int d = 0; d < 2; d++) {
                int64_t w = pump_out(&links[i].dir[d], now);
                if (w >= 0 && (wait_us < 0 || w < wait_us))
                    wait_us = w;
            }
        int n = 0;
        pf[n++] = (struct pollfd){.fd = 0, .events = POLLIN};
        for (int i = 0; i < n_links; i++)
            for (int d = 0; d < 2; d++)
                pf[n++] = (struct pollfd){.fd = links[i].dir[d].from, .events = POLLIN};
        int timeout = wait_us < 0 ? 1000 : (int)((wait_us + 999) / 1000);
        if (poll(pf, (nfds_t)n, timeout) < 0 && errno != EINTR)
            return 1;
        if (pf[0].revents != 0) {
            ssize_t r = read(0, cmd + cmd_len, sizeof(cmd) - 1 - cmd_len);
            if (r <= 0)
                return 0; /* our test is gone or done */
            cmd_len += (size_t)r;
            cmd[cmd_len] = '\0';
            char *nl;
            while ((nl = strchr(cmd, '\n')) != NULL) {
                *nl = '\0';
                if (strcmp(cmd, "quit") == 0)
                    return 0;
                command(cmd);
                size_t used = (size_t)(nl + 1 - cmd);
                memmove(cmd, nl + 1, cmd_len - used + 1);
                cmd_len -= used;
            }
            if (cmd_len == sizeof(cmd) - 1)
                cmd_len = 0; /* an over-long line is dropped */
        }
        int k = 1;
        for (int i = 0; i < n_links; i++)
            for (int d = 0; d < 2; d++, k++)
                if (pf[k].revents & POLLIN)
                    pump_in(&links[i], &links[i].dir[d]);
    }
}
