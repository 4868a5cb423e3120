/*
 * frame_reader.h - the one place frames (frame.h) are reassembled from a
 * byte stream: incrementally from a non-blocking socket for the event loops
 * (engine workers, master RPC threads, the store's master client), and as a
 * blocking read with a deadline for one-shot exchanges (control calls,
 * benchmarks, handshakes).
 *
 * The incremental reader advances HEADER -> BODY -> DATA as bytes arrive.
 * Small reads (headers, bodies, small payloads) are served from a read
 * buffer that one recv() fills with whatever has arrived, so a burst of
 * small frames costs one system call, not two or three per frame; a body
 * that lies whole in that buffer is handed out in place (no copy). Reads of
 * at least CRP_READER_DIRECT bytes bypass the buffer once it is empty, so a
 * large data payload is received straight into the destination the owner
 * chose for it (registered memory) and never bounced.
 *
 * A refill whose recv() returns less than the buffer holds has emptied the
 * socket, so once those bytes are used up at a frame boundary the reader
 * returns 0 ("nothing more now") without another recv() that would only
 * say EAGAIN (nginx reads stream sockets the same way). Owners wait on a
 * level-triggered poll/epoll, which reports whatever arrives afterwards,
 * end of stream included; an edge-triggered owner is safe too, because
 * bytes arriving after that recv raise a new edge.
 *
 * Bounds: a frame whose body is larger than the reader's max_body is refused
 * (CR_ERR_MALFORMED_FRAME) before any of it is read, so an owner can hold a
 * connection that has not authenticated to what a HELLO needs. Memory held
 * per reader: the read buffer (CRP_READER_BUFFER) plus a body buffer that is
 * kept only up to CRP_READER_KEEP_BODY bytes between frames.
 *
 * Threading: a reader is owned by one thread at a time (the one reading its
 * socket); nothing here locks.
 */
#ifndef CRESCENT_PROTO_FRAME_READER_H
#define CRESCENT_PROTO_FRAME_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proto/frame.h"
#include "proto/messages.h"

#define CRP_READER_BUFFER    (64u * 1024) /* per-reader read buffer */
#define CRP_READER_DIRECT    (16u * 1024) /* reads this large skip the buffer once empty */
#define CRP_READER_KEEP_BODY (64u * 1024) /* larger body buffers are freed after their frame */

/** Returned (positive) by crp_reader_read when a handler asked to pause. */
#define CRP_READER_PAUSED 1

typedef struct crp_reader {
    uint32_t max_body; /* bodies above this are refused; set by the owner */
    uint64_t received; /* bytes received so far (owners watch it for progress) */
    /* read buffer: bytes [off, len) are unread */
    uint8_t *buf;
    size_t off, len;
    bool drained;   /* the last refill's recv came back short: the socket was empty then */
    bool wait_once; /* crp_reader_wait_next: the next recv may block */
    /* the frame being assembled */
    int phase;
    uint8_t hdr_bytes[CRP_HEADER_SIZE];
    size_t hdr_got;
    crp_header hdr;
    const uint8_t *body; /* the complete body: into buf or body_copy */
    uint8_t *body_copy;
    size_t body_cap, body_got;
    uint8_t *data_dst; /* where DATA goes; NULL discards it */
    uint64_t data_got;
    size_t data_window; /* > 0: data_dst is a window of this many bytes */
    size_t window_got;  /* bytes in the current window */
} crp_reader;

/**
 * What the owner does with frames. Both handlers return 0 to go on,
 * CRP_READER_PAUSED to stop reading after this frame (the frame is
 * consumed; buffered bytes stay for the next call), or a negative status to
 * drop the connection (crp_reader_read returns it).
 */
typedef struct crp_reader_ops {
    /* Header and body are complete (body valid until on_frame returns).
     * For a frame with data_len > 0 set *data_dst to where the payload must
     * land (data_len bytes), or leave it NULL to discard the payload. May be
     * NULL when no frame carries data. */
    int (*on_head)(void *ctx, const crp_header *h, const uint8_t *body, uint8_t **data_dst);
    /* The whole frame, payload included, has arrived. */
    int (*on_frame)(void *ctx, const crp_header *h, const uint8_t *body);
    /* Windowed payloads only (crp_reader_window): `filled` bytes have
     * arrived in the current window (a full window, or the payload's last
     * bytes). Set *next / *next_len to the window for what follows, or
     * *next to NULL to discard the rest. May be NULL otherwise. */
    int (*on_data)(void *ctx, const crp_header *h, size_t filled, uint8_t **next, size_t *next_len);
} crp_reader_ops;

/** A reader for frames with bodies of at most max_body bytes. Never fails. */
void crp_reader_init(crp_reader *r, uint32_t max_body);

/** Free the reader's buffers. Safe on a zeroed reader. */
void crp_reader_fini(crp_reader *r);

/**
 * Forget a partly read frame and every buffered byte (a lane's new socket).
 */
void crp_reader_reset(crp_reader *r);

/**
 * The next recv() of this reader waits for data (no MSG_DONTWAIT), for an
 * owner that would otherwise poll() and then read: one system call instead
 * of two. The socket must be blocking with SO_RCVTIMEO set, so the wait
 * ends; a timeout reads as "nothing now" (crp_reader_read returns 0). It
 * applies to one recv only, and not once a frame has been delivered in
 * that crp_reader_read call (the owner may have what it waited for).
 * Owner's thread only.
 */
void crp_reader_wait_next(crp_reader *r);

/**
 * From on_head: the payload goes to *data_dst in windows of `len` bytes
 * (staging memory smaller than the payload); ops->on_data is called as
 * each window fills. Owner's thread only.
 */
void crp_reader_window(crp_reader *r, size_t len);

/**
 * Give back the read buffer and the body buffer if nothing is buffered and
 * no frame is part-read (a connection gone quiet); the next read allocates
 * them again. Returns whether they were freed. Owner's thread only.
 */
bool crp_reader_shrink(crp_reader *r);

/** Bytes received but not yet consumed by a frame. */
size_t crp_reader_buffered(const crp_reader *r);

/**
 * Consume frames from fd (read with MSG_DONTWAIT, so fd may be blocking)
 * until nothing more is waiting, a handler pauses, or an error. Frames
 * already buffered are served before the socket is read. Returns 0 when the
 * socket has nothing more now, CRP_READER_PAUSED, or a negative status: the
 * peer closed (CR_ERR_CONNECTION), a malformed or oversized header
 * (CR_ERR_MALFORMED_FRAME / CR_ERR_VERSION_MISMATCH, via crb_error), no
 * memory, or a handler's status.
 */
int crp_reader_read(crp_reader *r, int fd, const crp_reader_ops *ops, void *ctx);

/**
 * Blocking: read exactly one frame without data from fd before deadline_ns
 * (crb_now_ns clock): its header into *h and its body into *body (resized as
 * needed; len = body_len). Refuses bodies above max_body and frames that
 * carry data. Errors: CR_ERR_TIMEOUT, CR_ERR_CONNECTION,
 * CR_ERR_MALFORMED_FRAME, CR_ERR_VERSION_MISMATCH, CR_ERR_NO_MEMORY. On
 * failure *body keeps its allocation (free it with crp_buf_free).
 */
int crp_read_frame(int fd, uint32_t max_body, uint64_t deadline_ns, crp_header *h, crp_buf *body);

/**
 * Encode header + body into one contiguous frame appended to out (data_len
 * is written to the header; the payload itself is sent by the caller).
 * Errors: CR_ERR_NO_MEMORY (out unchanged), CR_ERR_MALFORMED_FRAME for a
 * body above CRP_MAX_BODY.
 */
int crp_frame_append(crp_buf *out, int type, int32_t status, uint64_t request_id, uint64_t data_len,
                     const void *body, size_t body_len);

#endif
