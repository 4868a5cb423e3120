/*
 * conn.c - the non-blocking frame reader shared by server connections and
 * lanes, and frame assembly.
 *
 * The reader advances HEADER → BODY → DATA as bytes arrive. Small reads
 * (headers, bodies, small payloads) are served from a per-connection read
 * buffer that one recv() fills with whatever has arrived, so a burst of
 * small frames costs one system call instead of two or three per frame.
 * Reads of at least READ_DIRECT bytes bypass it once it is empty: large DATA
 * payloads are received straight into c->data_dst (registered memory chosen
 * by on_head) and never copied through an intermediate buffer. When on_head
 * refuses a payload it sets data_dst to NULL and the bytes are discarded.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/error.h"
#include "base/tsan.h"
#include "engine/internal.h"

#define READ_BUFFER (64 * 1024) /* per-connection read buffer */
#define READ_DIRECT (16 * 1024) /* reads this large skip the buffer once it is empty */

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

/*
 * Up to len bytes for the reader into dst (NULL: discard them): from the
 * read buffer first; an empty buffer is refilled by one recv() for a small
 * read, a large read goes to the socket directly. Returns bytes, 0 on
 * EAGAIN, negative when the conn must close.
 */
static ssize_t read_some(cre_conn *c, uint8_t *dst, size_t len)
{
    size_t avail = c->rbuf_len - c->rbuf_off;
    if (avail == 0 && (len < READ_DIRECT || dst == NULL)) {
        if (c->rbuf == NULL && (c->rbuf = malloc(READ_BUFFER)) == NULL)
            return CR_ERR_NO_MEMORY;
        ssize_t n = recv_some(c, c->rbuf, READ_BUFFER);
        if (n <= 0)
            return n;
        c->rbuf_off = 0;
        c->rbuf_len = (size_t)n;
        avail = (size_t)n;
    }
    if (avail == 0)
        return recv_some(c, dst, len);
    size_t take = len < avail ? len : avail;
    if (dst != NULL)
        memcpy(dst, c->rbuf + c->rbuf_off, take);
    c->rbuf_off += take;
    if (c->rbuf_off == c->rbuf_len)
        c->rbuf_off = c->rbuf_len = 0;
    return (ssize_t)take;
}

void cre_conn_reset_reader(cre_conn *c)
{
    reset_reader(c);
    c->rbuf_off = c->rbuf_len = 0;
}

int cre_conn_read(cre_conn *c, const cre_read_ops *ops)
{
    for (;;) {
        ssize_t n;
        switch (c->phase) {
        case CRE_READ_HEADER:
            n = read_some(c, c->hdr_bytes + c->hdr_got, CRP_HEADER_SIZE - c->hdr_got);
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
                n = read_some(c, c->body + c->body_got, c->hdr.body_len - c->body_got);
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
                uint8_t *dst = c->data_dst != NULL ? c->data_dst + c->data_got : NULL;
                if (want > SIZE_MAX)
                    want = SIZE_MAX;
                if (dst != NULL)
                    CRB_PAYLOAD_WRITES_BEGIN();
                n = read_some(c, dst, (size_t)want);
                if (dst != NULL)
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
