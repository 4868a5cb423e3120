/*
 * control.c - short control exchanges initiated by API threads: descriptor
 * fetch, notify, probe. Each call opens a connection to the peer's RPC port,
 * completes the CHALLENGE/HELLO handshake, sends one request, reads one
 * reply and closes. All steps share one deadline, so a silent or dead peer
 * costs at most timeout_ms. These are rare (descriptor refreshes, probes);
 * the data path uses persistent connections instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/internal.h"

/* One reply frame; an ERROR frame becomes its status. */
static int read_reply(int fd, crp_header *h, crp_buf *body, uint64_t deadline, const char *peer)
{
    int rc = crp_read_frame(fd, CRP_MAX_BODY, deadline, h, body);
    if (rc < 0)
        return crb_error(rc, "reading a reply from %s: %s", peer, cr_last_error_message());
    if (h->type == CRP_ERROR) {
        crp_error err = {0};
        crp_error_decode(body->data, body->len, &err);
        int st = h->status < 0 ? h->status : CR_ERR_REMOTE;
        rc = crb_error(st, "peer %s refused: %s", peer, err.message ? err.message : "");
        crp_error_clear(&err);
        return rc;
    }
    return 0;
}

static int send_frame(int fd, const crp_buf *frame, uint64_t deadline, const char *peer)
{
    int rc = crb_write_full(fd, frame->data, frame->len, deadline);
    if (rc < 0)
        return crb_error(rc, "sending to %s: %s", peer, cr_last_error_message());
    return 0;
}

int cre_handshake(cr_engine *e, int fd, int role, uint64_t deadline, const char *peer,
                  crp_buf *scratch, uint64_t *instance)
{
    crp_header h;
    int rc = read_reply(fd, &h, scratch, deadline, peer);
    if (rc < 0)
        return rc;
    crp_challenge ch;
    if (h.type != CRP_CHALLENGE || crp_challenge_decode(scratch->data, scratch->len, &ch) < 0)
        return crb_error(CR_ERR_MALFORMED_FRAME, "%s did not open with a CHALLENGE", peer);
    uint8_t client_nonce[CRP_NONCE_SIZE];
    crp_buf_reset(scratch);
    rc = cre_hello_build(e, (uint8_t)role, ch.nonce, client_nonce, scratch);
    if (rc == 0)
        rc = send_frame(fd, scratch, deadline, peer);
    if (rc == 0)
        rc = read_reply(fd, &h, scratch, deadline, peer);
    if (rc < 0)
        return rc;
    if (h.type != CRP_HELLO_ACK)
        return crb_error(CR_ERR_MALFORMED_FRAME, "%s answered HELLO with %s", peer,
                         crp_type_name(h.type));
    return cre_hello_ack_check(e, peer, scratch->data, scratch->len, ch.nonce, client_nonce,
                               instance);
}

int cre_control_call(cr_engine *e, const char *host, uint16_t port, int type, const crp_buf *body,
                     int timeout_ms, crp_header *reply_hdr, crp_buf *reply_body)
{
    char peer[CRB_HOST_MAX + 8];
    snprintf(peer, sizeof(peer), "%s:%u", host, (unsigned)port);
    uint64_t deadline = crb_now_ns() + (uint64_t)timeout_ms * 1000000ull;
    int fd = crb_connect(host, port, timeout_ms);
    if (fd < 0)
        return fd;
    crp_buf scratch = {0};
    uint64_t instance;
    int rc = cre_handshake(e, fd, CRP_ROLE_CONTROL, deadline, peer, &scratch, &instance);
    if (rc == 0) {
        crp_buf_reset(&scratch);
        rc = crp_frame_append(&scratch, type, 0, 1, 0, body ? body->data : NULL,
                              body ? body->len : 0);
    }
    if (rc == 0)
        rc = send_frame(fd, &scratch, deadline, peer);
    crp_header h;
    if (rc == 0)
        rc = read_reply(fd, &h, &scratch, deadline, peer);
    if (rc == 0) {
        *reply_hdr = h;
        crp_buf_free(reply_body);
        *reply_body = scratch;
        scratch = (crp_buf){0};
    }
    crp_buf_free(&scratch);
    close(fd);
    return rc;
}
