/*
 * gen_corpus.c - writes the fuzzers' seed corpora at build time.
 *
 * Usage: fuzz_gen_corpus <dir>. Creates <dir>/<target>/seed-N for every
 * fuzz target with a few valid encodings made by the real encoders, so the
 * seeds can never drift from the wire format.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "proto/frame.h"
#include "proto/messages.h"

static const char *root;

static void die(const char *what, const char *detail)
{
    fprintf(stderr, "gen_corpus: %s: %s\n", what, detail);
    exit(1);
}

static void make_dir(const char *path)
{
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        die(path, strerror(errno));
}

static void write_seed(const char *target, int n, const void *data, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", root, target);
    make_dir(path);
    snprintf(path, sizeof(path), "%s/%s/seed-%d", root, target, n);
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        die(path, strerror(errno));
    if (len > 0 && fwrite(data, 1, len, f) != len)
        die(path, "short write");
    if (fclose(f) != 0)
        die(path, strerror(errno));
}

/* Write the buffer as a seed and reset it; rc is the encoder's result. */
static void seed(const char *target, int n, int rc, crp_buf *b)
{
    if (rc != 0)
        die(target, "encoder failed");
    write_seed(target, n, b->data, b->len);
    crp_buf_reset(b);
}

static void headers(void)
{
    static const crp_header h[] = {
        {CRP_VERSION, CRP_HELLO, 0, 64, 0, 1, 0},
        {CRP_VERSION, CRP_WRITE_REQ, 0, 3, 0, 0xffffffffull, 4096},
        {CRP_VERSION, CRP_READ_RESP, 0, 0, -3017, 7, 0},
        {CRP_VERSION, CRP_ERROR, 0, 20, -3018, 0, 0},
        {2, CRP_HELLO, 0, 0, 0, 0, 0},
    };
    uint8_t wire[CRP_HEADER_SIZE];
    for (size_t i = 0; i < sizeof(h) / sizeof(h[0]); i++) {
        crp_header_encode(&h[i], wire);
        write_seed("header", (int)i, wire, sizeof(wire));
    }
}

int main(int argc, char **argv)
{
    crp_buf b = {0};
    if (argc != 2)
        die("usage", "fuzz_gen_corpus <dir>");
    root = argv[1];
    make_dir(root);

    headers();

    crp_challenge c;
    for (int i = 0; i < CRP_NONCE_SIZE; i++)
        c.nonce[i] = (uint8_t)(i * 31);
    seed("challenge", 0, crp_challenge_encode(&c, &b), &b);

    crp_hello h = {.version = 1,
                   .caps = 3,
                   .role = CRP_ROLE_DATA,
                   .name = "node-a",
                   .instance = 0x1122334455667788ull};
    memcpy(h.client_nonce, c.nonce, CRP_NONCE_SIZE);
    seed("hello", 0, crp_hello_encode(&h, &b), &b);
    h.has_mac = true;
    memset(h.mac, 0xab, CRP_MAC_SIZE);
    h.role = CRP_ROLE_CONTROL;
    seed("hello", 1, crp_hello_encode(&h, &b), &b);

    crp_hello_ack a = {.version = 1, .caps = 1, .name = "server", .instance = 5};
    seed("hello_ack", 0, crp_hello_ack_encode(&a, &b), &b);
    a.has_mac = true;
    memset(a.mac, 0x11, CRP_MAC_SIZE);
    seed("hello_ack", 1, crp_hello_ack_encode(&a, &b), &b);

    crp_descriptor d = {.name = "seg", .host_id = "host-1", .instance = 9, .version = 1};
    seed("descriptor", 0, crp_descriptor_encode(&d, &b), &b);
    crp_endpoint eps[2] = {{"tcp", "10.0.0.1:7000"}, {"local", "host-1"}};
    crp_buffer_desc bufs[3] = {
        {0x7f0000000000ull, 1 << 20, 0, -1, true, NULL},
        {0x1000, 4096, 1, 0, false, "/crescent-1"},
        {0x200000, 1 << 30, 2, 7, true, NULL},
    };
    d.endpoints = eps;
    d.n_endpoints = 2;
    d.buffers = bufs;
    d.n_buffers = 3;
    seed("descriptor", 1, crp_descriptor_encode(&d, &b), &b);

    uint8_t msg[] = {'d', 'o', 'n', 'e', 0, 1};
    crp_notify n = {.from = "peer", .message = msg, .length = sizeof(msg)};
    seed("notify", 0, crp_notify_encode(&n, &b), &b);
    n.message = NULL;
    n.length = 0;
    seed("notify", 1, crp_notify_encode(&n, &b), &b);

    static const crp_data_req reqs[] = {
        {0, 1}, {0x7f0000001000ull, 4096}, {UINT64_MAX - 1, 1}, {200, 70000}};
    for (size_t i = 0; i < sizeof(reqs) / sizeof(reqs[0]); i++)
        seed("data_req", (int)i, crp_data_req_encode(&reqs[i], &b), &b);

    crp_error e = {.message = "segment 'x' is not registered"};
    seed("error", 0, crp_error_encode(&e, &b), &b);
    e.message = "";
    seed("error", 1, crp_error_encode(&e, &b), &b);

    crp_buf_free(&b);
    return 0;
}
