/*
 * local_service.h - what the two same-host services (the shm fd service and
 * the cuda IPC service) share: a Unix SEQPACKET listener in the abstract
 * namespace in worker 0's loop, its connections, the peer-credential check,
 * and the greeting plus shared-secret proof every connection starts with
 * (docs/WIRE.md, "Same-host fd service"). Each service supplies only what
 * it answers once a connection is through that (serve).
 *
 * Threading: a service is started and stopped on the engine's init/fini
 * thread (stop after the workers have stopped); its connections live on
 * worker 0. The peer-side functions run on any thread, under the caller's
 * peer lock.
 */
#ifndef CRESCENT_ENGINE_TRANSPORTS_SHM_LOCAL_SERVICE_H
#define CRESCENT_ENGINE_TRANSPORTS_SHM_LOCAL_SERVICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "base/acceptor.h"
#include "engine/internal.h"
#include "proto/messages.h"

/* Connections one service holds at most (more are refused at accept). */
#define CRE_LOCAL_SERVICE_MAX_CONNS 1024

typedef struct cre_local_service cre_local_service;

/* One peer connected to a service (worker 0 owns them all). */
typedef struct cre_local_conn {
    crb_io io;
    cre_local_service *svc;
    bool allowed;                  /* may this peer's uid receive our memory? */
    bool authed;                   /* proved the shared secret (or the engine has none) */
    uint8_t nonce[CRP_NONCE_SIZE]; /* ours, sent in the greeting */
    struct cre_local_conn *prev, *next;
} cre_local_conn;

/* Answer one datagram of a connection past the proof (c->allowed says
 * whether its uid may receive our memory). false: close the connection. */
typedef bool (*cre_local_serve_fn)(cre_local_conn *c, const uint8_t *data, size_t len);

struct cre_local_service {
    cr_engine *engine;
    void *owner;       /* the transport's state, for serve */
    const char *what;  /* "shm service", "cuda service": in messages */
    const char *label; /* "shm", "cuda": in the HMAC of the proof */
    cre_local_serve_fn serve;
    crb_acceptor acceptor;
    bool started;
    char address[128]; /* "@name" once started; "" otherwise */
    cre_local_conn *conns;
};

/* Bind "@name" (address) and serve it in worker 0's loop behind an
 * acceptor (cap CRE_LOCAL_SERVICE_MAX_CONNS, spare fd at EMFILE,
 * back-off). The strings what/label must outlive the service. 0, or
 * CR_ERR_SYSTEM / CR_ERR_BIND; nothing is left open on failure and
 * svc->address stays "". */
int cre_local_service_start(cre_local_service *svc, cr_engine *e, void *owner, const char *address,
                            const char *what, const char *label, cre_local_serve_fn serve);
/* The listener back from a back-off (worker 0's tick; no-op elsewhere). */
void cre_local_service_tick(cre_local_service *svc, cre_worker *w, uint64_t now_ns);
/* Workers have stopped: close every connection and the listener. */
void cre_local_service_stop(cre_local_service *svc);

/* Service side: one datagram (a service's own reply bytes, or a
 * crp_shm_reply), with fd as SCM_RIGHTS when >= 0 (fd stays the caller's).
 * A failed send is logged (the peer sees the connection fail). */
void cre_local_send_datagram(int sock, const void *data, size_t len, int fd, const char *what);
void cre_local_send_reply(int sock, const crp_shm_reply *r, int fd, const char *what);

/* sockaddr for an abstract-namespace name written "@name". */
socklen_t cre_abstract_addr(const char *name, struct sockaddr_un *sa);

/* Peer side, each bounded by deadline (crb_now_ns clock). cre_local_recv:
 * one reply and the fd it carried (-1 if none; the caller owns it) —
 * CR_ERR_TIMEOUT, CR_ERR_CONNECTION or CR_ERR_MALFORMED_FRAME otherwise,
 * nothing left open. cre_local_send: one request. cre_local_authenticate:
 * read the greeting and, if the service wants the secret, prove it (label
 * as the service's): 0, or CR_ERR_AUTH_FAILED (no secret here, or refused)
 * and the errors above. `what` and `peer` name the service and the peer in
 * messages. */
int cre_local_recv(int sock, uint64_t deadline, const char *what, const char *peer,
                   crp_shm_reply *rep, int *fd);
int cre_local_send(int sock, uint64_t deadline, const char *what, const char *peer,
                   const crp_shm_request *req);
int cre_local_authenticate(cr_engine *e, int sock, uint64_t deadline, const char *label,
                           const char *what, const char *peer);

#endif
