/*
 * conn.c - the non-blocking frame reader shared by server connections and
 * lanes, and frame assembly.
 *
 * The reader advances HEADER → BODY → DATA as bytes arrive. DATA bytes go
 * straight into c->data_dst (registered memory chosen by on_head), so large
 * payloads are never copied through an intermediate buffer; when on_head
 * refuses a payload it sets data_dst to NULL and the bytes are drained.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/error.h"
#include "base/tsan.h"
#include "engine/internal.h"

static uint8_t drain_scratch[64 * 1024]; /* contents never read */

int cre_frame_build(int type, int32_t status, uint64_t request_id, uint64_t data_len,
                    const crp_buf *body, uint8_t **out, size_t *out_len)
{
    size_t blen = body ? body->len : 0;
    uint8_t *f = malloc(CRP_HEADER_SIZE + blen);
    if (f == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "frame of %zu bytes", blen);
    crp_header h = {.version = CRP_VERSION,
                    .type = (uint8_t)type,
                    .body_len = (uint32_t)blen,
                    .status = status,
                    .request_id = request_id,
                    .data_len = data_len};
    crp_header_encode(&h, f);
    if (blen)
        memcpy(f + CRP_HEADER_SIZE, body->data, blen);
    *out = f;
    *out_len = CRP_HEADER_SIZE + blen;
    return 0;
}

static void reset_reader(cre_conn *c)
{
    c->phase = CRE_READ_HEADER;
    c->hdr_got = 0;
    c->body_got = 0;
    c->data_got = 0;
    c->data_dst = NULL;
}

/* recv into p; returns bytes, 0 on EAGAIN, negative when the conn must close */
static ssize_t recv_some(cre_conn *c, void *p, size_t len)
{
    for (;;) {
        ssize_t n = recv(c->fd, p, len, 0);
        if (n > 0)
            return n;
        if (n == 0)
            return CR_ERR_CONNECTION;
        if (errno == EINTR)
            continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return 0;
        return CR_ERR_CONNECTION;
    }
}

int cre_conn_read(cre_conn *c, const cre_read_ops *ops)
{
    for (;;) {
        ssize_t n;
        switch (c->phase) {
        case CRE_READ_HEADER:
            n = recv_some(c, c->hdr_bytes + c->hdr_got, CRP_HEADER_SIZE - c->hdr_got);
            if (n <= 0)
                return (int)n;
            c->hdr_got += (size_t)n;
            if (c->hdr_got < CRP_HEADER_SIZE)
                continue;
            if (crp_header_decode(c->hdr_bytes, &c->hdr) < 0)
                return CR_ERR_MALFORMED_FRAME;
            if (c->hdr.body_len > c->body_cap) {
                uint8_t *nb = realloc(c->body, c->hdr.body_len);
                if (nb == NULL)
                    return CR_ERR_NO_MEMORY;
                c->body = nb;
                c->body_cap = c->hdr.body_len;
            }
            c->phase = CRE_READ_BODY;
            /* fall through */
        case CRE_READ_BODY:
            if (c->body_got < c->hdr.body_len) {
                n = recv_some(c, c->body + c->body_got, c->hdr.body_len - c->body_got);
                if (n <= 0)
                    return (int)n;
                c->body_got += (size_t)n;
                if (c->body_got < c->hdr.body_len)
                    continue;
            }
            c->data_dst = NULL;
            int hrc = ops->on_head(c);
            if (hrc < 0)
                return hrc;
            c->phase = CRE_READ_DATA;
            /* fall through */
        case CRE_READ_DATA:
            if (c->data_got < c->hdr.data_len) {
                uint64_t want = c->hdr.data_len - c->data_got;
                void *dst;
                if (c->data_dst != NULL) {
                    dst = c->data_dst + c->data_got;
                } else {
                    dst = drain_scratch;
                    if (want > sizeof(drain_scratch))
                        want = sizeof(drain_scratch);
                }
                if (c->data_dst != NULL)
                    CRB_PAYLOAD_WRITES_BEGIN();
                n = recv_some(c, dst, (size_t)want);
                if (c->data_dst != NULL)
                    CRB_PAYLOAD_WRITES_END();
                if (n <= 0)
                    return (int)n;
                c->data_got += (uint64_t)n;
                if (c->data_got < c->hdr.data_len)
                    continue;
            }
            int frc = ops->on_frame(c);
            if (frc < 0)
                return frc;
            reset_reader(c);
            break;
        }
    }
}
