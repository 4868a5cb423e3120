/*
 * thin_badinput_test.c - crescent-client against hostile or broken thin
 * clients, over raw connections to its socket: a frame with a bad header, a
 * body that does not decode, requests before HELLO, a HELLO without its
 * pool, with a pipe or a too small memfd as the pool, an ATTACH with a wrong
 * token, an extent outside the pool, a descriptor count the frame does not
 * carry. Each gets its named status (or the connection closed, for a broken
 * header) and the daemon keeps serving a well-behaved client afterwards.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "crescent/status.h"
#include "proto/frame.h"
#include "proto/frame_reader.h"
#include "proto/thin.h"
#include "thin_harness.h"

static sh_master m;
static th_daemon d;

static int setup(void **state)
{
    (void)state;
    if (sh_master_start(&m, NULL) < 0 || th_daemon_start(&d, m.addr, NULL, NULL) < 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    int a = th_daemon_stop(&d), b = sh_master_stop(&m);
    sh_kill_all();
    return a == 0 && b == 0 ? 0 : -1;
}

/* A raw connection that has read the CHALLENGE. */
static int raw_connect(void)
{
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(d.socket);
    memcpy(a.sun_path + 1, d.socket + 1, n - 1);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(
        connect(fd, (struct sockaddr *)&a, (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n)),
        0);
    crp_header h;
    crp_buf body = {0};
    assert_int_equal(crp_read_frame(fd, CRP_MAX_BODY, UINT64_MAX, &h, &body), 0);
    assert_int_equal(h.type, CRP_THIN_RESP);
    crp_buf_free(&body);
    return fd;
}

/* Send a frame (body bytes as given) with fds; read one reply or EOF. */
static int exchange(int fd, const void *body, size_t len, const int *fds, size_t n_fds,
                    crp_thin_resp *resp)
{
    crp_buf out = {0};
    assert_int_equal(crp_frame_append(&out, CRP_THIN_REQ, 0, 7, 0, body, len), 0);
    struct iovec iov = {out.data, out.len};
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(sizeof(int) * 4)];
    } ctl;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    if (n_fds > 0) {
        memset(&ctl, 0, sizeof(ctl));
        msg.msg_control = ctl.b;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * n_fds);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int) * n_fds);
        memcpy(CMSG_DATA(cm), fds, sizeof(int) * n_fds);
    }
    assert_int_equal(sendmsg(fd, &msg, MSG_NOSIGNAL), (ssize_t)out.len);
    crp_buf_free(&out);
    crp_header h;
    crp_buf rb = {0};
    int rc = crp_read_frame(fd, CRP_MAX_BODY, UINT64_MAX, &h, &rb);
    if (rc == 0)
        rc = crp_thin_resp_decode(rb.data, rb.len, resp);
    crp_buf_free(&rb);
    return rc;
}

static int encode(const crp_thin_req *req, crp_buf *b)
{
    crp_buf_reset(b);
    return crp_thin_req_encode(req, b);
}

/* The connection is closed by the daemon (EOF within 5 s). */
static void expect_closed(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    assert_int_equal(poll(&p, 1, 5000), 1);
    char c;
    assert_int_equal(read(fd, &c, 1), 0);
}

static crp_thin_req hello(uint64_t pool, uint64_t lb)
{
    return (crp_thin_req){.op = CRP_THIN_HELLO,
                          .fields = CRP_THIN_F_HELLO | CRP_THIN_F_NFD,
                          .version = CRP_THIN_VERSION,
                          .pid = (uint64_t)getpid(),
                          .pool_size = pool,
                          .buffer_size = lb,
                          .n_fds = 1};
}

static void test_bad_header(void **state)
{
    (void)state;
    int fd = raw_connect();
    uint8_t junk[64];
    memset(junk, 0x41, sizeof(junk));
    assert_int_equal(write(fd, junk, sizeof(junk)), (ssize_t)sizeof(junk));
    expect_closed(fd);
    close(fd);
}

static void test_undecodable_body(void **state)
{
    (void)state;
    int fd = raw_connect();
    crp_thin_resp r;
    static const uint8_t garbage[] = {0x81, 0xa2, 'o', 'p', 0xc1};
    assert_int_equal(exchange(fd, garbage, sizeof(garbage), NULL, 0, &r), 0);
    assert_int_equal(r.status, CR_ERR_MALFORMED_FRAME);
    crp_thin_resp_clear(&r);
    expect_closed(fd); /* before HELLO, a bad body ends the connection */
    close(fd);
}

static void test_request_before_hello(void **state)
{
    (void)state;
    int fd = raw_connect();
    crp_buf b = {0};
    crp_thin_req req = {.op = CRP_THIN_HEALTH};
    assert_int_equal(encode(&req, &b), 0);
    crp_thin_resp r;
    assert_int_equal(exchange(fd, b.data, b.len, NULL, 0, &r), 0);
    assert_int_equal(r.status, CR_ILLEGAL_CLIENT);
    crp_thin_resp_clear(&r);
    expect_closed(fd);
    close(fd);
    crp_buf_free(&b);
}

static void test_bad_pools(void **state)
{
    (void)state;
    crp_buf b = {0};
    crp_thin_resp r;
    /* HELLO naming a descriptor it does not bring */
    int fd = raw_connect();
    crp_thin_req req = hello(2 << 20, 2 << 20);
    assert_int_equal(encode(&req, &b), 0);
    assert_int_equal(exchange(fd, b.data, b.len, NULL, 0, &r), 0);
    assert_int_equal(r.status, CR_ERR_REGION_INVALID);
    crp_thin_resp_clear(&r);
    close(fd);
    /* a pipe as the pool */
    int p[2];
    assert_int_equal(pipe(p), 0);
    fd = raw_connect();
    assert_int_equal(exchange(fd, b.data, b.len, &p[0], 1, &r), 0);
    assert_int_equal(r.status, CR_ERR_REGION_INVALID);
    crp_thin_resp_clear(&r);
    close(fd);
    close(p[0]);
    close(p[1]);
    /* a memfd smaller than the pool it claims */
    int mfd = memfd_create("small", MFD_CLOEXEC);
    assert_int_equal(ftruncate(mfd, 1 << 20), 0);
    fd = raw_connect();
    assert_int_equal(exchange(fd, b.data, b.len, &mfd, 1, &r), 0);
    assert_int_equal(r.status, CR_ERR_REGION_INVALID);
    crp_thin_resp_clear(&r);
    close(fd);
    /* sizes that are not page multiples */
    req = hello(12345, 2 << 20);
    assert_int_equal(encode(&req, &b), 0);
    fd = raw_connect();
    assert_int_equal(exchange(fd, b.data, b.len, &mfd, 1, &r), 0);
    assert_int_equal(r.status, CR_ERR_REGION_INVALID);
    crp_thin_resp_clear(&r);
    close(fd);
    close(mfd);
    /* ATTACH with a session that does not exist / a wrong token */
    req = (crp_thin_req){.op = CRP_THIN_HELLO,
                         .fields = CRP_THIN_F_HELLO | CRP_THIN_F_ATTACH,
                         .version = CRP_THIN_VERSION,
                         .pool_size = 2 << 20,
                         .buffer_size = 2 << 20,
                         .session = 999};
    assert_int_equal(encode(&req, &b), 0);
    fd = raw_connect();
    assert_int_equal(exchange(fd, b.data, b.len, NULL, 0, &r), 0);
    assert_int_equal(r.status, CR_ILLEGAL_CLIENT);
    crp_thin_resp_clear(&r);
    close(fd);
    /* a version from the future */
    req = hello(2 << 20, 2 << 20);
    req.version = CRP_THIN_VERSION + 1;
    assert_int_equal(encode(&req, &b), 0);
    fd = raw_connect();
    assert_int_equal(exchange(fd, b.data, b.len, NULL, 0, &r), 0);
    assert_int_equal(r.status, CR_ERR_VERSION_MISMATCH);
    crp_thin_resp_clear(&r);
    close(fd);
    crp_buf_free(&b);
}

static void test_bad_requests_in_session(void **state)
{
    (void)state;
    crp_buf b = {0};
    crp_thin_resp r;
    int mfd = memfd_create("pool", MFD_CLOEXEC);
    assert_int_equal(ftruncate(mfd, 4 << 20), 0);
    int fd = raw_connect();
    crp_thin_req req = hello(2 << 20, 2 << 20);
    assert_int_equal(encode(&req, &b), 0);
    assert_int_equal(exchange(fd, b.data, b.len, &mfd, 1, &r), 0);
    assert_int_equal(r.status, 0);
    assert_true(r.fields & CRP_THIN_R_SESSION);
    uint64_t sid = r.session;
    crp_thin_resp_clear(&r);
    close(mfd);

    /* an extent outside the pool fails that key alone */
    char *keys[1] = {"k"};
    uint32_t counts[1] = {1};
    crp_thin_ext ext[1] = {{CRP_THIN_REGION_POOL, (2 << 20) - 10, 100}};
    req = (crp_thin_req){.op = CRP_THIN_PUT,
                         .fields = CRP_THIN_F_KEYS | CRP_THIN_F_EXT | CRP_THIN_F_FLAGS,
                         .n_keys = 1,
                         .keys = keys,
                         .counts = counts,
                         .n_ext = 1,
                         .ext = ext};
    assert_int_equal(encode(&req, &b), 0);
    assert_int_equal(exchange(fd, b.data, b.len, NULL, 0, &r), 0);
    assert_int_equal(r.n_results, 1);
    assert_int_equal(r.results[0], CR_ERR_OUT_OF_RANGE);
    crp_thin_resp_clear(&r);
    /* a region that was never registered */
    ext[0] = (crp_thin_ext){77, 0, 100};
    assert_int_equal(encode(&req, &b), 0);
    assert_int_equal(exchange(fd, b.data, b.len, NULL, 0, &r), 0);
    assert_int_equal(r.results[0], CR_ERR_ADDRESS_NOT_REGISTERED);
    crp_thin_resp_clear(&r);
    /* REGISTER that brings no descriptor */
    req = (crp_thin_req){.op = CRP_THIN_REGISTER,
                         .fields = CRP_THIN_F_REGION | CRP_THIN_F_NFD,
                         .addr = 4096,
                         .len = 4096,
                         .n_fds = 1};
    assert_int_equal(encode(&req, &b), 0);
    assert_int_equal(exchange(fd, b.data, b.len, NULL, 0, &r), 0);
    assert_int_equal(r.status, CR_ERR_REGION_INVALID);
    crp_thin_resp_clear(&r);
    /* an undecodable body inside a session: answered, the connection stays */
    static const uint8_t garbage[] = {0x91, 0x01};
    assert_int_equal(exchange(fd, garbage, sizeof(garbage), NULL, 0, &r), 0);
    assert_int_equal(r.status, CR_ERR_MALFORMED_FRAME);
    crp_thin_resp_clear(&r);
    req = (crp_thin_req){.op = CRP_THIN_HEALTH};
    assert_int_equal(encode(&req, &b), 0);
    assert_int_equal(exchange(fd, b.data, b.len, NULL, 0, &r), 0);
    assert_int_equal(r.status, 0);
    crp_thin_resp_clear(&r);
    /* a second connection with the right session id but a wrong token */
    req = (crp_thin_req){.op = CRP_THIN_HELLO,
                         .fields = CRP_THIN_F_HELLO | CRP_THIN_F_ATTACH,
                         .version = CRP_THIN_VERSION,
                         .pool_size = 2 << 20,
                         .buffer_size = 2 << 20,
                         .session = sid};
    memset(req.token, 0x99, sizeof(req.token));
    assert_int_equal(encode(&req, &b), 0);
    int fd2 = raw_connect();
    assert_int_equal(exchange(fd2, b.data, b.len, NULL, 0, &r), 0);
    assert_int_equal(r.status, CR_ILLEGAL_CLIENT);
    crp_thin_resp_clear(&r);
    close(fd2);
    close(fd);
    crp_buf_free(&b);

    /* and a real client is served as ever */
    sh_client c;
    assert_int_equal(th_client_start(&c, &d, NULL), 0);
    assert_int_equal(sh_rc(&c, "put fine 4096 1"), 0);
    const char *got = sh_cmd(&c, "get fine 1");
    assert_non_null(strstr(got, " ok"));
    assert_int_equal(sh_client_stop(&c), 0);
    assert_true(th_metric(&d, "crescent_client_protocol_errors_total") >= 2);
}

int main(void)
{
    if (getenv("CRESCENT_CLIENT_BIN") == NULL || getenv("CRESCENT_STORE_CLIENT_BIN") == NULL)
        return 77;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_header),
        cmocka_unit_test(test_undecodable_body),
        cmocka_unit_test(test_request_before_hello),
        cmocka_unit_test(test_bad_pools),
        cmocka_unit_test(test_bad_requests_in_session),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
