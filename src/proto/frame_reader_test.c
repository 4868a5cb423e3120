/*
 * frame_reader_test.c - the incremental and the blocking frame reader over
 * a socketpair: bursts, frames split at every byte, payloads landing in the
 * owner's memory, pauses, size limits and deadlines.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/clock.h"
#include "crescent/status.h"
#include "proto/frame_reader.h"

typedef struct seen {
    int frames, heads;
    int types[64];
    uint64_t ids[64];
    uint8_t bodies[64][64];
    uint32_t body_lens[64];
    uint8_t *payload_dst;
    int pause_after; /* pause once this many frames were seen (0: never) */
} seen;

static int on_head(void *ctx, const crp_header *h, const uint8_t *body, uint8_t **dst)
{
    seen *s = ctx;
    s->heads++;
    if (h->data_len > 0)
        *dst = s->payload_dst;
    return 0;
}

static int on_frame(void *ctx, const crp_header *h, const uint8_t *body)
{
    seen *s = ctx;
    int i = s->frames++;
    s->types[i] = h->type;
    s->ids[i] = h->request_id;
    s->body_lens[i] = h->body_len;
    memcpy(s->bodies[i], body, h->body_len < 64 ? h->body_len : 64);
    return s->pause_after && s->frames == s->pause_after ? CRP_READER_PAUSED : 0;
}

static const crp_reader_ops ops = {on_head, on_frame, NULL};

static void pair(int sv[2])
{
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    fcntl(sv[0], F_SETFL, O_NONBLOCK);
}

static void frame(crp_buf *out, int type, uint64_t id, const char *body, uint64_t data_len)
{
    assert_int_equal(crp_frame_append(out, type, 0, id, data_len, body, body ? strlen(body) : 0),
                     0);
}

static void test_burst_of_small_frames(void **state)
{
    int sv[2];
    pair(sv);
    crp_buf out = {0};
    for (int i = 0; i < 40; i++)
        frame(&out, CRP_RPC_REQ, (uint64_t)i + 1, i % 2 ? "odd" : "even-body", 0);
    assert_int_equal(write(sv[1], out.data, out.len), (ssize_t)out.len);
    crp_reader r;
    crp_reader_init(&r, 1024);
    seen s = {0};
    assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), 0);
    assert_int_equal(s.frames, 40);
    for (int i = 0; i < 40; i++) {
        assert_int_equal(s.ids[i], (uint64_t)i + 1);
        assert_memory_equal(s.bodies[i], i % 2 ? "odd" : "even-body", s.body_lens[i]);
    }
    assert_int_equal(crp_reader_buffered(&r), 0);
    crp_reader_fini(&r);
    crp_buf_free(&out);
    close(sv[0]);
    close(sv[1]);
}

static int count_frame(void *ctx, const crp_header *h, const uint8_t *body)
{
    (void)h;
    (void)body;
    ++*(int *)ctx;
    return 0;
}

/* A recv that came back short emptied the socket: once its bytes are used
 * the reader returns without another recv, and what follows (here the end
 * of the stream) is seen by the next call. A full buffer is read again. */
static void test_short_read_needs_no_second_recv(void **state)
{
    (void)state;
    static const crp_reader_ops counting = {NULL, count_frame, NULL};
    for (int big = 0; big < 2; big++) {
        int sv[2];
        pair(sv);
        crp_buf out = {0};
        int sent = big ? 3000 : 1; /* 3000 frames: more than one buffer */
        for (int i = 0; i < sent; i++)
            frame(&out, CRP_RPC_REQ, (uint64_t)i + 1, "a small request body", 0);
        assert_true(big ? out.len > CRP_READER_BUFFER : out.len < CRP_READER_BUFFER);
        assert_int_equal(write(sv[1], out.data, out.len), (ssize_t)out.len);
        assert_int_equal(shutdown(sv[1], SHUT_WR), 0);
        crp_reader r;
        crp_reader_init(&r, 1024);
        int got = 0;
        assert_int_equal(crp_reader_read(&r, sv[0], &counting, &got), 0);
        assert_int_equal(got, sent);
        assert_int_equal(crp_reader_read(&r, sv[0], &counting, &got), CR_ERR_CONNECTION);
        assert_int_equal(got, sent);
        crp_reader_fini(&r);
        crp_buf_free(&out);
        close(sv[0]);
        close(sv[1]);
    }
}

static void set_wait(int fd, int ms)
{
    fcntl(fd, F_SETFL, 0); /* blocking: crp_reader_wait_next's contract */
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
}

/* crp_reader_wait_next: one recv waits (instead of poll + recv), ends at
 * SO_RCVTIMEO as "nothing now", takes bytes that arrive during the wait, and
 * never waits once the call delivered a frame. */
static void test_wait_next(void **state)
{
    (void)state;
    int sv[2];
    pair(sv);
    crp_reader r;
    crp_reader_init(&r, 1024);
    seen s = {0};

    set_wait(sv[0], 100); /* nothing comes: waits, then "nothing now" */
    crp_reader_wait_next(&r);
    uint64_t t0 = crb_now_ns();
    assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), 0);
    uint64_t waited = crb_now_ns() - t0;
    assert_true(waited >= 80000000ull && waited < 1000000000ull);
    assert_int_equal(s.frames, 0);

    pid_t child = fork(); /* a frame arrives during the wait */
    assert_true(child >= 0);
    if (child == 0) {
        usleep(50000);
        crp_buf out = {0};
        crp_frame_append(&out, CRP_RPC_REQ, 0, 1, 0, "late", 4);
        _exit(write(sv[1], out.data, out.len) == (ssize_t)out.len ? 0 : 1);
    }
    set_wait(sv[0], 5000);
    crp_reader_wait_next(&r);
    t0 = crb_now_ns();
    assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), 0);
    waited = crb_now_ns() - t0;
    int st = 0;
    assert_int_equal(waitpid(child, &st, 0), child);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_int_equal(s.frames, 1);
    assert_memory_equal(s.bodies[0], "late", 4); /* (a read that did not wait: 0 frames) */
    assert_true(waited < 4000000000ull);

    crp_buf out = {0}; /* frames already buffered: served, no wait after them */
    for (int i = 0; i < 3; i++)
        frame(&out, CRP_RPC_REQ, (uint64_t)i + 2, "buffered", 0);
    assert_int_equal(write(sv[1], out.data, out.len), (ssize_t)out.len);
    s.pause_after = 2;
    assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), CRP_READER_PAUSED);
    assert_int_equal(s.frames, 2);
    s.pause_after = 0;
    crp_reader_wait_next(&r);
    t0 = crb_now_ns();
    assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), 0);
    assert_true(crb_now_ns() - t0 < 2000000000ull); /* not the 5 s wait */
    assert_int_equal(s.frames, 4);
    crp_buf_free(&out);
    crp_reader_fini(&r);
    close(sv[0]);
    close(sv[1]);
}

static void test_split_at_every_byte(void **state)
{
    int sv[2];
    pair(sv);
    crp_buf out = {0};
    frame(&out, CRP_RPC_REQ, 7, "hello", 0);
    frame(&out, CRP_NOTIFY, 8, "world!", 0);
    crp_reader r;
    crp_reader_init(&r, 1024);
    seen s = {0};
    for (size_t i = 0; i < out.len; i++) {
        assert_int_equal(write(sv[1], out.data + i, 1), 1);
        assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), 0);
    }
    assert_int_equal(s.frames, 2);
    assert_memory_equal(s.bodies[0], "hello", 5);
    assert_memory_equal(s.bodies[1], "world!", 6);
    crp_reader_fini(&r);
    crp_buf_free(&out);
    close(sv[0]);
    close(sv[1]);
}

/* Small and large payloads land in the owner's memory, bodies stay intact. */
static void test_payload_lands_in_destination(void **state)
{
    int sv[2];
    pair(sv);
    size_t sizes[] = {100, 200000};
    uint8_t *dst = malloc(200000);
    uint8_t *src = malloc(200000);
    for (size_t i = 0; i < 200000; i++)
        src[i] = (uint8_t)(i * 31 + 7);
    crp_reader r;
    crp_reader_init(&r, 1024);
    for (size_t k = 0; k < 2; k++) {
        memset(dst, 0, 200000);
        seen s = {.payload_dst = dst};
        crp_buf out = {0};
        frame(&out, CRP_WRITE_REQ, 9, "req-body", sizes[k]);
        assert_int_equal(write(sv[1], out.data, out.len), (ssize_t)out.len);
        size_t sent = 0;
        fcntl(sv[1], F_SETFL, O_NONBLOCK);
        while (sent < sizes[k]) {
            ssize_t n = write(sv[1], src + sent, sizes[k] - sent);
            if (n > 0)
                sent += (size_t)n;
            assert_true(crp_reader_read(&r, sv[0], &ops, &s) >= 0);
        }
        fcntl(sv[1], F_SETFL, 0);
        while (s.frames == 0)
            assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), 0);
        assert_int_equal(s.frames, 1);
        assert_memory_equal(s.bodies[0], "req-body", 8);
        assert_memory_equal(dst, src, sizes[k]);
        crp_buf_free(&out);
    }
    crp_reader_fini(&r);
    free(dst);
    free(src);
    close(sv[0]);
    close(sv[1]);
}

static void test_pause_keeps_buffered_frames(void **state)
{
    int sv[2];
    pair(sv);
    crp_buf out = {0};
    for (int i = 0; i < 5; i++)
        frame(&out, CRP_RPC_REQ, (uint64_t)i, "x", 0);
    assert_int_equal(write(sv[1], out.data, out.len), (ssize_t)out.len);
    crp_reader r;
    crp_reader_init(&r, 1024);
    seen s = {.pause_after = 2};
    assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), CRP_READER_PAUSED);
    assert_int_equal(s.frames, 2);
    assert_true(crp_reader_buffered(&r) > 0);
    s.pause_after = 0;
    /* Nothing more arrives on the socket: the buffered frames are served. */
    assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), 0);
    assert_int_equal(s.frames, 5);
    crp_reader_fini(&r);
    crp_buf_free(&out);
    close(sv[0]);
    close(sv[1]);
}

/* A quiet reader gives its buffers back, but never while it holds bytes or a
 * part-read frame; `received` counts every byte taken from the socket. */
static void test_shrink_and_received(void **state)
{
    int sv[2];
    pair(sv);
    crp_buf out = {0};
    frame(&out, CRP_RPC_REQ, 1, "first", 0);
    frame(&out, CRP_RPC_REQ, 2, "second", 0);
    crp_reader r;
    crp_reader_init(&r, 1024);
    seen s = {.pause_after = 1};
    assert_int_equal(write(sv[1], out.data, out.len), (ssize_t)out.len);
    assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), CRP_READER_PAUSED);
    assert_int_equal(r.received, out.len);
    assert_false(crp_reader_shrink(&r)); /* the second frame is buffered */
    s.pause_after = 0;
    assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), 0);
    assert_int_equal(s.frames, 2);
    assert_true(crp_reader_shrink(&r));
    assert_null(r.buf);
    /* Half a header: kept. */
    assert_int_equal(write(sv[1], out.data, 3), 3);
    assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), 0);
    assert_false(crp_reader_shrink(&r));
    /* The rest arrives: the frame is whole, nothing was lost. */
    assert_int_equal(write(sv[1], out.data + 3, out.len - 3), (ssize_t)(out.len - 3));
    assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), 0);
    assert_int_equal(s.frames, 4);
    assert_memory_equal(s.bodies[2], "first", 5);
    assert_memory_equal(s.bodies[3], "second", 6);
    assert_int_equal(r.received, 2 * out.len);
    crp_reader_fini(&r);
    crp_buf_free(&out);
    close(sv[0]);
    close(sv[1]);
}

static void test_body_limit_and_garbage(void **state)
{
    int sv[2];
    pair(sv);
    char big[300];
    memset(big, 'b', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    crp_buf out = {0};
    frame(&out, CRP_HELLO, 1, big, 0);
    assert_int_equal(write(sv[1], out.data, out.len), (ssize_t)out.len);
    crp_reader r;
    crp_reader_init(&r, 256); /* a pre-authentication limit */
    seen s = {0};
    assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), CR_ERR_MALFORMED_FRAME);
    assert_int_equal(s.frames, 0);
    crp_reader_reset(&r);
    uint8_t junk[CRP_HEADER_SIZE];
    memset(junk, 0x5a, sizeof(junk));
    assert_int_equal(write(sv[1], junk, sizeof(junk)), (ssize_t)sizeof(junk));
    int rc = crp_reader_read(&r, sv[0], &ops, &s);
    /* The first refused frame's body may still be buffered; either way the
     * stream is refused, never served. */
    assert_true(rc == CR_ERR_MALFORMED_FRAME || rc == CR_ERR_VERSION_MISMATCH);
    assert_int_equal(s.frames, 0);
    close(sv[1]);
    crp_reader_reset(&r);
    assert_int_equal(crp_reader_read(&r, sv[0], &ops, &s), CR_ERR_CONNECTION);
    crp_reader_fini(&r);
    crp_buf_free(&out);
    close(sv[0]);
}

static void test_blocking_read_with_deadline(void **state)
{
    int sv[2];
    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    crp_buf out = {0}, body = {0};
    frame(&out, CRP_DESC_REPLY, 3, "descriptor", 0);
    assert_int_equal(write(sv[1], out.data, out.len), (ssize_t)out.len);
    crp_header h;
    assert_int_equal(crp_read_frame(sv[0], 1024, crb_now_ns() + 1000000000ull, &h, &body), 0);
    assert_int_equal(h.type, CRP_DESC_REPLY);
    assert_int_equal(h.request_id, 3);
    assert_int_equal(body.len, 10);
    assert_memory_equal(body.data, "descriptor", 10);
    uint64_t t0 = crb_now_ns();
    assert_int_equal(crp_read_frame(sv[0], 1024, crb_now_ns() + 50000000ull, &h, &body),
                     CR_ERR_TIMEOUT);
    assert_true(crb_now_ns() - t0 < 2000000000ull);
    crp_buf_reset(&out);
    frame(&out, CRP_DESC_REPLY, 4, "too long for the limit", 0);
    assert_int_equal(write(sv[1], out.data, out.len), (ssize_t)out.len);
    assert_int_equal(crp_read_frame(sv[0], 8, crb_now_ns() + 1000000000ull, &h, &body),
                     CR_ERR_MALFORMED_FRAME);
    crp_buf_free(&out);
    crp_buf_free(&body);
    close(sv[0]);
    close(sv[1]);
}
/* A windowed payload: the owner gets it window by window (staging memory
 * smaller than the payload), every byte in order, and the frame after the
 * last window; an owner that stops taking windows has the rest discarded. */
typedef struct windowed {
    crp_reader *r;
    uint8_t window[4096];
    uint8_t *got;
    size_t got_len, calls, frames, stop_after;
} windowed;

static int w_on_head(void *ctx, const crp_header *h, const uint8_t *body, uint8_t **dst)
{
    windowed *w = ctx;
    *dst = w->window;
    crp_reader_window(w->r, sizeof(w->window));
    return 0;
}

static int w_on_frame(void *ctx, const crp_header *h, const uint8_t *body)
{
    ((windowed *)ctx)->frames++;
    return 0;
}

static int w_on_data(void *ctx, const crp_header *h, size_t filled, uint8_t **next,
                     size_t *next_len)
{
    windowed *w = ctx;
    memcpy(w->got + w->got_len, w->window, filled);
    w->got_len += filled;
    w->calls++;
    *next = w->stop_after && w->calls == w->stop_after ? NULL : w->window;
    *next_len = sizeof(w->window);
    return 0;
}

static const crp_reader_ops w_ops = {w_on_head, w_on_frame, w_on_data};

static void test_windowed_payload(void **state)
{
    int sv[2];
    pair(sv);
    size_t size = 100000; /* 24 full windows and a partial one */
    uint8_t *src = malloc(size);
    for (size_t i = 0; i < size; i++)
        src[i] = (uint8_t)(i * 13 + 5);
    for (int variant = 0; variant < 2; variant++) {
        crp_reader r;
        crp_reader_init(&r, 1024);
        windowed w = {.r = &r, .got = calloc(1, size), .stop_after = variant == 1 ? 3 : 0};
        crp_buf out = {0};
        frame(&out, CRP_WRITE_REQ, 5, "w", size);
        assert_int_equal(write(sv[1], out.data, out.len), (ssize_t)out.len);
        fcntl(sv[1], F_SETFL, O_NONBLOCK);
        size_t sent = 0;
        while (sent < size || w.frames == 0) {
            if (sent < size) {
                ssize_t n = write(sv[1], src + sent, size - sent);
                if (n > 0)
                    sent += (size_t)n;
            }
            assert_true(crp_reader_read(&r, sv[0], &w_ops, &w) >= 0);
        }
        fcntl(sv[1], F_SETFL, 0);
        assert_int_equal(w.frames, 1);
        if (variant == 0) {
            assert_int_equal(w.calls, (size + 4095) / 4096);
            assert_int_equal(w.got_len, size);
            assert_memory_equal(w.got, src, size);
        } else {
            assert_int_equal(w.calls, 3);
            assert_int_equal(w.got_len, 3 * 4096);
            assert_memory_equal(w.got, src, 3 * 4096);
        }
        crp_buf_free(&out);
        crp_reader_fini(&r);
        free(w.got);
    }
    free(src);
    close(sv[0]);
    close(sv[1]);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_burst_of_small_frames),
        cmocka_unit_test(test_split_at_every_byte),
        cmocka_unit_test(test_short_read_needs_no_second_recv),
        cmocka_unit_test(test_wait_next),
        cmocka_unit_test(test_payload_lands_in_destination),
        cmocka_unit_test(test_pause_keeps_buffered_frames),
        cmocka_unit_test(test_shrink_and_received),
        cmocka_unit_test(test_body_limit_and_garbage),
        cmocka_unit_test(test_blocking_read_with_deadline),
        cmocka_unit_test(test_windowed_payload),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
