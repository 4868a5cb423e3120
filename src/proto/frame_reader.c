/*
 * frame_reader.c - see frame_reader.h.
 *
 * The read buffer is refilled only when it is empty, so bytes handed out in
 * place (a body) stay put until the next refill, which cannot happen before
 * the frame's handler has returned. Bodies of frames that carry data are
 * copied out first, because the payload read may refill the buffer.
 */
#include "proto/frame_reader.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "base/error.h"
#include "base/net.h"
#include "base/tsan.h"

enum { PHASE_HEADER, PHASE_BODY, PHASE_DATA };

void crp_reader_init(crp_reader *r, uint32_t max_body)
{
    memset(r, 0, sizeof(*r));
    r->max_body = max_body > CRP_MAX_BODY ? CRP_MAX_BODY : max_body;
}

void crp_reader_fini(crp_reader *r)
{
    free(r->buf);
    free(r->body_copy);
    r->buf = r->body_copy = NULL;
    r->body_cap = 0;
    r->off = r->len = 0;
}

static void next_frame(crp_reader *r)
{
    r->phase = PHASE_HEADER;
    r->hdr_got = 0;
    r->body = NULL;
    r->body_got = 0;
    r->data_dst = NULL;
    r->data_got = 0;
    r->data_window = 0;
    r->window_got = 0;
    if (r->body_cap > CRP_READER_KEEP_BODY) {
        free(r->body_copy);
        r->body_copy = NULL;
        r->body_cap = 0;
    }
}

void crp_reader_reset(crp_reader *r)
{
    next_frame(r);
    r->off = r->len = 0;
    r->drained = r->wait_once = false;
}

void crp_reader_window(crp_reader *r, size_t len)
{
    r->data_window = len;
    r->window_got = 0;
}

bool crp_reader_shrink(crp_reader *r)
{
    if (r->off != r->len || r->phase != PHASE_HEADER || r->hdr_got != 0)
        return false;
    free(r->buf);
    free(r->body_copy);
    r->buf = r->body_copy = NULL;
    r->body_cap = 0;
    r->off = r->len = 0;
    return true;
}

size_t crp_reader_buffered(const crp_reader *r)
{
    return r->len - r->off;
}

void crp_reader_wait_next(crp_reader *r)
{
    r->wait_once = true;
}

/* recv into p: bytes, 0 on EAGAIN (or the end of a wait_once's SO_RCVTIMEO),
 * negative when the connection must close */
static ssize_t recv_some(crp_reader *r, int fd, void *p, size_t len)
{
    int flags = r->wait_once ? 0 : MSG_DONTWAIT;
    r->wait_once = false;
    for (;;) {
        ssize_t n = recv(fd, p, len, flags);
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

/* Refill the (empty) read buffer with one recv. */
static ssize_t refill(crp_reader *r, int fd)
{
    if (r->buf == NULL && (r->buf = malloc(CRP_READER_BUFFER)) == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "frame reader buffer");
    ssize_t n = recv_some(r, fd, r->buf, CRP_READER_BUFFER);
    if (n > 0) {
        r->off = 0;
        r->len = (size_t)n;
        r->received += (uint64_t)n;
        r->drained = (size_t)n < CRP_READER_BUFFER;
    }
    return n;
}

/*
 * Up to len bytes into dst (NULL: discard): from the buffer first; an empty
 * buffer is refilled for a small read, a large read goes to the socket
 * directly. Bytes, 0 on EAGAIN, negative when the connection must close.
 */
static ssize_t read_some(crp_reader *r, int fd, uint8_t *dst, size_t len)
{
    if (r->off == r->len) {
        if (len >= CRP_READER_DIRECT && dst != NULL) {
            ssize_t n = recv_some(r, fd, dst, len);
            if (n > 0)
                r->received += (uint64_t)n;
            r->drained = false;
            return n;
        }
        ssize_t n = refill(r, fd);
        if (n <= 0)
            return n;
    }
    size_t avail = r->len - r->off;
    size_t take = len < avail ? len : avail;
    if (dst != NULL)
        memcpy(dst, r->buf + r->off, take);
    r->off += take;
    return (ssize_t)take;
}

static int take_header(crp_reader *r)
{
    int rc = crp_header_decode(r->hdr_bytes, &r->hdr);
    if (rc < 0)
        return rc;
    if (r->hdr.body_len > r->max_body)
        return crb_error(CR_ERR_MALFORMED_FRAME,
                         "%s frame with a %u-byte body; this connection accepts at most %u",
                         crp_type_name(r->hdr.type), r->hdr.body_len, r->max_body);
    r->phase = PHASE_BODY;
    return 0;
}

static int reserve_body(crp_reader *r)
{
    size_t need = r->hdr.body_len ? r->hdr.body_len : 1;
    if (need <= r->body_cap)
        return 0;
    uint8_t *nb = realloc(r->body_copy, need);
    if (nb == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "frame body of %u bytes", r->hdr.body_len);
    r->body_copy = nb;
    r->body_cap = need;
    return 0;
}

int crp_reader_read(crp_reader *r, int fd, const crp_reader_ops *ops, void *ctx)
{
    for (;;) {
        ssize_t n;
        int rc;
        switch (r->phase) {
        case PHASE_HEADER:
            if (r->hdr_got == 0 && r->off == r->len && r->drained && !r->wait_once) {
                r->drained = false; /* the socket was empty at the last recv */
                return 0;
            }
            if (r->hdr_got == 0 && r->len - r->off >= CRP_HEADER_SIZE) {
                memcpy(r->hdr_bytes, r->buf + r->off, CRP_HEADER_SIZE);
                r->off += CRP_HEADER_SIZE;
                r->hdr_got = CRP_HEADER_SIZE;
            } else {
                n = read_some(r, fd, r->hdr_bytes + r->hdr_got, CRP_HEADER_SIZE - r->hdr_got);
                if (n <= 0)
                    return (int)n;
                r->hdr_got += (size_t)n;
                if (r->hdr_got < CRP_HEADER_SIZE)
                    continue;
            }
            rc = take_header(r);
            if (rc < 0)
                return rc;
            /* fall through */
        case PHASE_BODY:
            if (r->body == NULL) {
                size_t blen = r->hdr.body_len;
                if (r->body_got == 0 && r->len - r->off >= blen && r->hdr.data_len == 0 &&
                    r->buf != NULL) {
                    r->body = r->buf + r->off; /* in place */
                    r->off += blen;
                } else {
                    rc = reserve_body(r);
                    if (rc < 0)
                        return rc;
                    while (r->body_got < blen) {
                        n = read_some(r, fd, r->body_copy + r->body_got, blen - r->body_got);
                        if (n <= 0)
                            return (int)n;
                        r->body_got += (size_t)n;
                    }
                    r->body = r->body_copy;
                }
            }
            r->data_dst = NULL;
            if (ops->on_head != NULL) {
                rc = ops->on_head(ctx, &r->hdr, r->body, &r->data_dst);
                if (rc < 0)
                    return rc;
            }
            r->phase = PHASE_DATA;
            /* fall through */
        case PHASE_DATA:
            while (r->data_got < r->hdr.data_len) {
                uint64_t want = r->hdr.data_len - r->data_got;
                uint8_t *dst = r->data_dst != NULL ? r->data_dst + r->data_got : NULL;
                if (r->data_window > 0) { /* through the owner's window */
                    size_t room = r->data_window - r->window_got;
                    if (want > room)
                        want = room;
                    dst = r->data_dst != NULL ? r->data_dst + r->window_got : NULL;
                }
                if (want > SIZE_MAX)
                    want = SIZE_MAX;
                if (dst != NULL)
                    CRB_PAYLOAD_WRITES_BEGIN();
                n = read_some(r, fd, dst, (size_t)want);
                if (dst != NULL)
                    CRB_PAYLOAD_WRITES_END();
                if (n <= 0)
                    return (int)n;
                r->data_got += (uint64_t)n;
                if (r->data_window == 0)
                    continue;
                r->window_got += (size_t)n;
                if (r->window_got < r->data_window && r->data_got < r->hdr.data_len)
                    continue;
                uint8_t *next = NULL;
                size_t next_len = 0;
                rc = ops->on_data != NULL
                         ? ops->on_data(ctx, &r->hdr, r->window_got, &next, &next_len)
                         : crb_error(CR_INTERNAL_ERROR, "windowed payload without on_data");
                if (rc < 0)
                    return rc;
                r->window_got = 0;
                r->data_dst = next;
                r->data_window = next != NULL ? next_len : 0;
                if (next != NULL && next_len == 0)
                    return crb_error(CR_INTERNAL_ERROR, "on_data gave an empty window");
                if (next == NULL)
                    r->data_dst = NULL; /* the rest is discarded */
            }
            rc = ops->on_frame(ctx, &r->hdr, r->body);
            r->wait_once = false; /* the owner may have what it waited for */
            next_frame(r);
            if (rc != 0)
                return rc;
            break;
        }
    }
}

int crp_read_frame(int fd, uint32_t max_body, uint64_t deadline_ns, crp_header *h, crp_buf *body)
{
    uint8_t hb[CRP_HEADER_SIZE];
    crp_header hdr;
    int rc = crb_read_full(fd, hb, sizeof(hb), deadline_ns);
    if (rc < 0)
        return rc;
    rc = crp_header_decode(hb, &hdr);
    if (rc < 0)
        return rc;
    if (hdr.data_len != 0)
        return crb_error(CR_ERR_MALFORMED_FRAME, "%s frame carries %llu data bytes here",
                         crp_type_name(hdr.type), (unsigned long long)hdr.data_len);
    if (hdr.body_len > max_body)
        return crb_error(CR_ERR_MALFORMED_FRAME, "%s frame with a %u-byte body; at most %u here",
                         crp_type_name(hdr.type), hdr.body_len, max_body);
    crp_buf_reset(body);
    if (hdr.body_len > 0) {
        if (body->cap < hdr.body_len) {
            uint8_t *nd = realloc(body->data, hdr.body_len);
            if (nd == NULL)
                return crb_error(CR_ERR_NO_MEMORY, "frame body of %u bytes", hdr.body_len);
            body->data = nd;
            body->cap = hdr.body_len;
        }
        rc = crb_read_full(fd, body->data, hdr.body_len, deadline_ns);
        if (rc < 0)
            return rc;
        body->len = hdr.body_len;
    }
    *h = hdr;
    return 0;
}

int crp_frame_append(crp_buf *out, int type, int32_t status, uint64_t request_id, uint64_t data_len,
                     const void *body, size_t body_len)
{
    if (body_len > CRP_MAX_BODY)
        return crb_error(CR_ERR_MALFORMED_FRAME, "%s body of %zu bytes exceeds %u",
                         crp_type_name(type), body_len, CRP_MAX_BODY);
    crp_header h = {.version = CRP_VERSION,
                    .type = (uint8_t)type,
                    .body_len = (uint32_t)body_len,
                    .status = status,
                    .request_id = request_id,
                    .data_len = data_len};
    uint8_t hb[CRP_HEADER_SIZE];
    crp_header_encode(&h, hb);
    size_t keep = out->len;
    if (crp_buf_append(out, hb, sizeof(hb)) < 0 ||
        (body_len > 0 && crp_buf_append(out, body, body_len) < 0)) {
        out->len = keep;
        return crb_error(CR_ERR_NO_MEMORY, "frame of %zu bytes", body_len);
    }
    return 0;
}
