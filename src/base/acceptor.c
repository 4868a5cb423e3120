/*
 * acceptor.c - see acceptor.h.
 */
#include "base/acceptor.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"

#define BACKOFF_NS   (100ull * 1000000) /* listener paused after the fd limit */
#define LOG_EVERY_NS 1000000000ull

static crb_acceptor *acceptor_of(crb_io *io)
{
    return (crb_acceptor *)((char *)io - offsetof(crb_acceptor, io));
}

static void note_refused(crb_acceptor *a, const char *why, uint64_t now)
{
    atomic_fetch_add(&a->refused_total, 1);
    a->refused_since_log++;
    if (now - a->last_log_ns < LOG_EVERY_NS && a->last_log_ns != 0)
        return;
    crb_log(CRB_LOG_WARN, "%s: refused %u connection(s) in the last second: %s", a->what,
            a->refused_since_log, why);
    a->refused_since_log = 0;
    a->last_log_ns = now;
}

/* Accept one pending connection and drop it at once. */
static void accept_and_close(crb_acceptor *a)
{
    int fd = accept4(a->io.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0)
        close(fd);
}

static void on_listen(crb_io *io, uint32_t events)
{
    crb_acceptor *a = acceptor_of(io);
    for (;;) {
        int fd = accept4(io->fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        uint64_t now = crb_now_ns();
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return;
            if (errno == EMFILE || errno == ENFILE) {
                note_refused(a, "process is at its file descriptor limit", now);
                if (a->spare_fd >= 0) {
                    close(a->spare_fd);
                    a->spare_fd = -1;
                    accept_and_close(a);
                    a->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
                }
            } else {
                note_refused(a, strerror(errno), now);
            }
            /* Stop watching the listener for a while: it stays readable. */
            a->paused_until_ns = now + BACKOFF_NS;
            crb_loop_mod(io, 0);
            return;
        }
        if (a->max_conns != 0 && atomic_load(&a->open) >= a->max_conns) {
            note_refused(a, "connection limit reached", now);
            close(fd);
            continue;
        }
        atomic_fetch_add(&a->open, 1);
        a->on_accept(a, fd);
    }
}

int crb_acceptor_start(crb_acceptor *a, crb_loop *loop, int listen_fd, unsigned max_conns,
                       crb_accept_fn on_accept, void *owner, const char *what)
{
    memset(a, 0, sizeof(*a));
    a->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (a->spare_fd < 0)
        return crb_error(CR_ERR_SYSTEM, "%s: no spare descriptor: %s", what, strerror(errno));
    a->io.fd = listen_fd;
    a->io.on_event = on_listen;
    a->max_conns = max_conns;
    a->on_accept = on_accept;
    a->owner = owner;
    snprintf(a->what, sizeof(a->what), "%s", what);
    int rc = crb_loop_add(loop, &a->io, EPOLLIN);
    if (rc < 0) {
        close(a->spare_fd);
        a->spare_fd = -1;
        a->io.fd = -1;
    }
    return rc;
}

void crb_acceptor_tick(crb_acceptor *a, uint64_t now_ns)
{
    if (a->paused_until_ns != 0 && now_ns >= a->paused_until_ns) {
        a->paused_until_ns = 0;
        crb_loop_mod(&a->io, EPOLLIN);
    }
}

void crb_acceptor_closed(crb_acceptor *a)
{
    atomic_fetch_sub(&a->open, 1);
}

uint64_t crb_acceptor_refused(crb_acceptor *a)
{
    return atomic_load(&a->refused_total);
}

void crb_acceptor_stop(crb_acceptor *a)
{
    crb_loop_del(&a->io);
    if (a->io.fd >= 0)
        close(a->io.fd);
    a->io.fd = -1;
    if (a->spare_fd >= 0)
        close(a->spare_fd);
    a->spare_fd = -1;
}
