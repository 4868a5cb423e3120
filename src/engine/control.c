/*
 * control.c - short control exchanges initiated by API threads: descriptor
 * fetch, notify, probe. Each call opens a connection to the peer's RPC port,
 * completes the CHALLENGE/HELLO handshake, sends one request, reads one
 * reply and closes. All steps share one deadline, so a silent or dead peer
 * costs at most timeout_ms. These are rare (descriptor refreshes, probes);
 * the data path uses persistent lanes instead.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/clock.h"
#include "base/error.h"
#include "engine/internal.h"

static int read_frame(int fd, crp_header *h, crp_buf *body, uint64_t deadline, const char *peer)
{
    uint8_t hb[CRP_HEADER_SIZE];
    int rc = crb_read_full(fd, hb, sizeof(hb), deadline);
    if (rc < 0)
        return crb_error(rc, "reading a reply header from %s: %s", peer, cr_last_error_message());
    rc = crp_header_decode(hb, h);
    if (rc < 0)
        return crb_error(rc, "reply from %s: %s", peer, cr_last_error_message());
    if (h->data_len != 0)
        return crb_error(CR_ERR_MALFORMED_FRAME, "control reply from %s carries data", peer);
    crp_buf_reset(body);
    if (h->body_len > 0) {
        if (body->cap < h->body_len) {
            uint8_t *nd = realloc(body->data, h->body_len);
            if (nd == NULL)
                return crb_error(CR_ERR_NO_MEMORY, "reply body of %u bytes", h->body_len);
            body->data = nd;
            body->cap = h->body_len;
        }
        rc = crb_read_full(fd, body->data, h->body_len, deadline);
        if (rc < 0)
            return crb_error(rc, "reading a reply body from %s: %s", peer, cr_last_error_message());
        body->len = h->body_len;
    }
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

static int send_frame(int fd, int type, const crp_buf *body, uint64_t deadline, const char *peer)
{
    uint8_t *f;
    size_t fl;
    int rc = cre_frame_build(type, 0, 1, 0, body, &f, &fl);
    if (rc < 0)
        return rc;
    rc = crb_write_full(fd, f, fl, deadline);
    free(f);
    if (rc < 0)
        return crb_error(rc, "sending %s to %s: %s", crp_type_name(type), peer,
                         cr_last_error_message());
    return 0;
}

static int handshake(cr_engine *e, int fd, uint64_t deadline, const char *peer, crp_buf *scratch)
{
    crp_header h;
    int rc = read_frame(fd, &h, scratch, deadline, peer);
    if (rc < 0)
        return rc;
    crp_challenge ch;
    if (h.type != CRP_CHALLENGE || crp_challenge_decode(scratch->data, scratch->len, &ch) < 0)
        return crb_error(CR_ERR_MALFORMED_FRAME, "%s did not open with a CHALLENGE", peer);
    crp_hello hello = {.version = CRP_VERSION,
                       .role = CRP_ROLE_CONTROL,
                       .name = e->segment_name,
                       .instance = e->instance};
    crb_random_bytes(hello.client_nonce, sizeof(hello.client_nonce));
    if (e->secret != NULL) {
        hello.has_mac = true;
        cre_auth_mac(e, "client", ch.nonce, hello.client_nonce, hello.mac);
    }
    crp_buf_reset(scratch);
    rc = crp_hello_encode(&hello, scratch);
    if (rc == 0)
        rc = send_frame(fd, CRP_HELLO, scratch, deadline, peer);
    if (rc < 0)
        return rc;
    rc = read_frame(fd, &h, scratch, deadline, peer);
    if (rc < 0)
        return rc;
    crp_hello_ack ack = {0};
    if (h.type != CRP_HELLO_ACK || crp_hello_ack_decode(scratch->data, scratch->len, &ack) < 0)
        return crb_error(CR_ERR_MALFORMED_FRAME, "%s sent no valid HELLO_ACK", peer);
    if (ack.version != CRP_VERSION)
        rc = crb_error(CR_ERR_VERSION_MISMATCH, "%s speaks protocol %u, we speak %u", peer,
                       ack.version, CRP_VERSION);
    else if (e->secret != NULL &&
             (!ack.has_mac || !cre_auth_check(e, "server", hello.client_nonce, ch.nonce, ack.mac)))
        rc = crb_error(CR_ERR_AUTH_FAILED, "%s did not prove the shared secret", peer);
    crp_hello_ack_clear(&ack);
    return rc;
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
    int rc = handshake(e, fd, deadline, peer, &scratch);
    if (rc == 0)
        rc = send_frame(fd, type, body, deadline, peer);
    crp_header h;
    if (rc == 0)
        rc = read_frame(fd, &h, &scratch, deadline, peer);
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
