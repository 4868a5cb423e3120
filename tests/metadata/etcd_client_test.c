/*
 * etcd_client_test.c - the etcd v3 client (src/metadata/etcd.h) against a
 * real etcd 3.4 server started by the test: key round trips, prefix
 * ranges, compare-and-swap, leases (keepalive holds a key past its TTL,
 * revoke removes it at once, an abandoned lease's key expires, a lease
 * revoked elsewhere or lost while etcd is down is reported), watch (ordered events, resumable
 * cursor, stop flag, compaction), endpoint failover (a refusing member and a member that never
 * accepts listed first; the last good member is remembered), and etcd going away (calls fail with
 * ERR_METADATA_UNAVAILABLE within their deadline, then work again after a restart). Skips (77)
 * without /usr/bin/etcd.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/error.h"
#include "metadata/etcd.h"
#include "testing.h"

static ct_server etcd;

static int group_setup(void **state)
{
    return ct_etcd_start(&etcd, NULL) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    ct_server_stop(&etcd);
    return 0;
}

static crm_etcd *open_client(const char *endpoints, int request_ms, int connect_ms)
{
    crm_etcd_config cfg = {
        .endpoints = endpoints, .request_timeout_ms = request_ms, .connect_timeout_ms = connect_ms};
    crm_etcd *c = NULL;
    int rc = crm_etcd_open(&cfg, &c);
    if (rc != 0)
        fail_msg("crm_etcd_open(%s): %s", endpoints, cr_last_error_message());
    return c;
}

static void sleep_ms(int ms)
{
    usleep((useconds_t)ms * 1000);
}

static void kv_round_trip(void **state)
{
    crm_etcd *c = open_client(etcd.endpoint, 3000, 0);
    crm_etcd_kv kv;
    assert_int_equal(crm_etcd_get(c, "t/kv/missing", &kv, NULL), CR_ETCD_KEY_NOT_EXIST);
    assert_non_null(strstr(cr_last_error_message(), "t/kv/missing"));
    uint8_t bin[300];
    for (size_t i = 0; i < sizeof(bin); i++)
        bin[i] = (uint8_t)(i * 7);
    int64_t rev1 = 0, rev2 = 0, rev = 0;
    assert_int_equal(crm_etcd_put(c, "t/kv/a", bin, sizeof(bin), 0, &rev1), 0);
    assert_int_equal(crm_etcd_put(c, "t/kv/b", "", 0, 0, &rev2), 0);
    assert_true(rev2 > rev1);
    assert_int_equal(crm_etcd_get(c, "t/kv/a", &kv, &rev), 0);
    assert_int_equal(kv.value_len, sizeof(bin));
    assert_memory_equal(kv.value, bin, sizeof(bin));
    assert_int_equal(kv.mod_revision, rev1);
    assert_true(rev >= rev2);
    crm_etcd_kv_clear(&kv);
    assert_int_equal(crm_etcd_get(c, "t/kv/b", &kv, NULL), 0);
    assert_int_equal(kv.value_len, 0);
    crm_etcd_kv_clear(&kv);
    assert_int_equal(crm_etcd_put(c, "t/kw", "x", 1, 0, NULL), 0);
    crm_etcd_range r;
    assert_int_equal(crm_etcd_read_range(c, "t/kv/", true, 0, &r), 0);
    assert_int_equal(r.n_kvs, 2);
    assert_string_equal(r.kvs[0].key, "t/kv/a");
    assert_string_equal(r.kvs[1].key, "t/kv/b");
    crm_etcd_range_clear(&r);
    assert_int_equal(crm_etcd_read_range(c, "t/kv/", true, 1, &r), 0);
    assert_int_equal(r.n_kvs, 1);
    assert_true(r.more);
    assert_int_equal(r.count, 2);
    crm_etcd_range_clear(&r);
    int64_t deleted = -1;
    assert_int_equal(crm_etcd_delete(c, "t/kv/", true, &deleted), 0);
    assert_int_equal(deleted, 2);
    assert_int_equal(crm_etcd_delete(c, "t/kv/a", false, &deleted), 0);
    assert_int_equal(deleted, 0);
    assert_int_equal(crm_etcd_get(c, "t/kw", &kv, NULL), 0);
    crm_etcd_kv_clear(&kv);
    assert_int_equal(crm_etcd_put(c, "", "x", 1, 0, NULL), CR_INVALID_PARAMS);
    /* A lease etcd does not know is etcd's error, named. */
    assert_int_equal(crm_etcd_put(c, "t/kv/c", "x", 1, 12345, NULL), CR_ETCD_OPERATION_ERROR);
    assert_non_null(strstr(cr_last_error_message(), "lease not found"));
    crm_etcd_close(c);
}

static void compare_and_swap(void **state)
{
    crm_etcd *c = open_client(etcd.endpoint, 3000, 0);
    crm_etcd_cas r;
    crm_etcd_delete(c, "t/cas", false, NULL);
    assert_int_equal(crm_etcd_create(c, "t/cas", "one", 3, 0, &r), 0);
    assert_true(r.succeeded);
    int64_t created_rev = r.revision;
    crm_etcd_cas_clear(&r);
    assert_int_equal(crm_etcd_create(c, "t/cas", "two", 3, 0, &r), 0);
    assert_false(r.succeeded);
    assert_true(r.exists);
    assert_memory_equal(r.current.value, "one", 3);
    assert_int_equal(r.current.mod_revision, created_rev);
    crm_etcd_cas_clear(&r);
    /* put only if nobody wrote since */
    assert_int_equal(crm_etcd_put_if_mod(c, "t/cas", "three", 5, 0, created_rev + 100, &r), 0);
    assert_false(r.succeeded);
    crm_etcd_cas_clear(&r);
    assert_int_equal(crm_etcd_put_if_mod(c, "t/cas", "three", 5, 0, created_rev, &r), 0);
    assert_true(r.succeeded);
    int64_t rev3 = r.revision;
    crm_etcd_cas_clear(&r);
    assert_int_equal(crm_etcd_delete_if_mod(c, "t/cas", created_rev, &r), 0);
    assert_false(r.succeeded);
    assert_memory_equal(r.current.value, "three", 5);
    crm_etcd_cas_clear(&r);
    assert_int_equal(crm_etcd_delete_if_mod(c, "t/cas", rev3, &r), 0);
    assert_true(r.succeeded);
    crm_etcd_cas_clear(&r);
    assert_int_equal(crm_etcd_put_if_mod(c, "t/cas", "four", 4, 0, 0, &r), 0);
    assert_true(r.succeeded); /* mod_revision 0: only if absent */
    crm_etcd_cas_clear(&r);
    /* A general txn: two compares, two ops. */
    crm_etcd_compare cmp[2] = {
        {.key = "t/cas", .target = CRM_ETCD_CMP_VALUE, .value = "four", .value_len = 4},
        {.key = "t/cas", .target = CRM_ETCD_CMP_VERSION, .result = CRM_ETCD_GREATER, .number = 0},
    };
    crm_etcd_op ops[2] = {{.type = CRM_ETCD_OP_PUT, .key = "t/cas2", .value = "y", .value_len = 1},
                          {.type = CRM_ETCD_OP_RANGE, .key = "t/cas", .prefix = true}};
    crm_etcd_txn_result t;
    assert_int_equal(crm_etcd_txn(c, cmp, 2, ops, 2, NULL, 0, &t), 0);
    assert_true(t.succeeded);
    assert_int_equal(t.n_results, 2);
    assert_int_equal(t.results[1].range.n_kvs, 2);
    crm_etcd_txn_result_clear(&t);
    crm_etcd_delete(c, "t/cas", true, NULL);
    crm_etcd_close(c);
}

/* POST a gateway request with a raw socket (for calls the client does not make). */
static void raw_post(uint16_t port, const char *path, const char *body)
{
    char req[512];
    snprintf(req, sizeof(req),
             "POST %s HTTP/1.0\r\nContent-Type: application/json\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             path, strlen(body), body);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    assert_int_equal(write(fd, req, strlen(req)), (ssize_t)strlen(req));
    char buf[512];
    while (read(fd, buf, sizeof(buf)) > 0) {
    }
    close(fd);
}

typedef struct lost_flag {
    atomic_int calls;
    atomic_int status;
    atomic_ullong at_ms;
} lost_flag;

static void on_lost(void *arg, crm_etcd_lease *l, int status)
{
    lost_flag *f = arg;
    atomic_store(&f->status, status);
    atomic_store(&f->at_ms, ct_now_ms());
    atomic_fetch_add(&f->calls, 1);
}

static void leases(void **state)
{
    crm_etcd *c = open_client(etcd.endpoint, 3000, 0);
    lost_flag f = {0};
    crm_etcd_lease *l;
    assert_int_equal(crm_etcd_lease_grant(c, 2, on_lost, &f, &l), 0);
    assert_int_equal(crm_etcd_lease_ttl(l), 2);
    uint64_t until0 = 0, until1 = 0;
    assert_int_equal(crm_etcd_lease_check(l, &until0), 0);
    assert_int_equal(crm_etcd_put(c, "t/lease/kept", "v", 1, crm_etcd_lease_id(l), NULL), 0);
    /* Kept alive well past its TTL. */
    sleep_ms(3500);
    crm_etcd_kv kv;
    assert_int_equal(crm_etcd_get(c, "t/lease/kept", &kv, NULL), 0);
    assert_int_equal(kv.lease, crm_etcd_lease_id(l));
    crm_etcd_kv_clear(&kv);
    assert_int_equal(crm_etcd_lease_check(l, &until1), 0);
    assert_true(until1 > until0);
    assert_int_equal(atomic_load(&f.calls), 0);
    /* Revoke deletes its keys at once. */
    assert_int_equal(crm_etcd_lease_release(l, true), 0);
    assert_int_equal(crm_etcd_get(c, "t/lease/kept", &kv, NULL), CR_ETCD_KEY_NOT_EXIST);
    assert_int_equal(atomic_load(&f.calls), 0);

    /* An abandoned lease (keepalive stopped, not revoked) expires within its TTL. */
    assert_int_equal(crm_etcd_lease_grant(c, 2, NULL, NULL, &l), 0);
    assert_int_equal(crm_etcd_put(c, "t/lease/dropped", "v", 1, crm_etcd_lease_id(l), NULL), 0);
    int64_t id = crm_etcd_lease_id(l);
    uint64_t t0 = ct_now_ms();
    assert_int_equal(crm_etcd_lease_release(l, false), 0);
    while (crm_etcd_get(c, "t/lease/dropped", &kv, NULL) == 0) {
        crm_etcd_kv_clear(&kv);
        if (ct_now_ms() - t0 > 6000)
            fail_msg("key of lease %lld still there after 6 s", (long long)id);
        sleep_ms(100);
    }
    printf("abandoned lease's key gone after %llu ms (TTL 2 s)\n",
           (unsigned long long)(ct_now_ms() - t0));

    /* A lease revoked behind our back is reported lost at the next keepalive. */
    lost_flag g = {0};
    assert_int_equal(crm_etcd_lease_grant(c, 3, on_lost, &g, &l), 0);
    crm_etcd *other = open_client(etcd.endpoint, 3000, 0);
    assert_int_equal(crm_etcd_revoke_lease_id(other, crm_etcd_lease_id(l)), 0);
    assert_int_equal(crm_etcd_revoke_lease_id(other, crm_etcd_lease_id(l)), 0); /* gone: ok */
    crm_etcd_close(other);
    t0 = ct_now_ms();
    while (atomic_load(&g.calls) == 0 && ct_now_ms() - t0 < 4000)
        sleep_ms(20);
    assert_int_equal(atomic_load(&g.calls), 1);
    assert_int_equal(atomic_load(&g.status), CR_ERR_LEASE_LOST);
    assert_int_equal(crm_etcd_lease_check(l, NULL), CR_ERR_LEASE_LOST);
    assert_int_equal(crm_etcd_lease_release(l, true), 0); /* nothing to revoke */
    assert_int_equal(crm_etcd_lease_grant(c, 0, NULL, NULL, &l), CR_INVALID_PARAMS);
    crm_etcd_close(c);
}

typedef struct watch_log {
    int n;
    char keys[16][32];
    int types[16];
    int64_t revs[16];
    int stop_after;
} watch_log;

static int on_event(void *arg, const crm_etcd_event *ev)
{
    watch_log *w = arg;
    if (w->n < 16) {
        snprintf(w->keys[w->n], sizeof(w->keys[0]), "%s", ev->kv.key);
        w->types[w->n] = ev->type;
        w->revs[w->n] = ev->kv.mod_revision;
    }
    w->n++;
    return w->n >= w->stop_after;
}

typedef struct writer_args {
    crm_etcd *c;
    int delay_ms;
} writer_args;

static void *writer(void *arg)
{
    writer_args *a = arg;
    sleep_ms(a->delay_ms);
    crm_etcd_put(a->c, "t/watch/x", "1", 1, 0, NULL);
    crm_etcd_put(a->c, "t/watch/y", "2", 1, 0, NULL);
    crm_etcd_delete(a->c, "t/watch/x", false, NULL);
    return NULL;
}

static atomic_bool stop_flag;

static void *stopper(void *arg)
{
    sleep_ms(300);
    atomic_store(&stop_flag, true);
    return NULL;
}

static void watch(void **state)
{
    crm_etcd *c = open_client(etcd.endpoint, 3000, 0);
    /* From now: events written after the watch started. */
    writer_args wa = {c, 300};
    pthread_t th;
    pthread_create(&th, NULL, writer, &wa);
    watch_log w = {.stop_after = 3};
    int64_t rev = 0;
    assert_int_equal(crm_etcd_watch(c, "t/watch/", true, &rev, 10000, NULL, on_event, &w), 0);
    pthread_join(th, NULL);
    assert_int_equal(w.n, 3);
    assert_string_equal(w.keys[0], "t/watch/x");
    assert_int_equal(w.types[0], CRM_ETCD_EVENT_PUT);
    assert_string_equal(w.keys[1], "t/watch/y");
    assert_int_equal(w.types[2], CRM_ETCD_EVENT_DELETE);
    assert_true(w.revs[0] < w.revs[1] && w.revs[1] < w.revs[2]);
    assert_int_equal(rev, w.revs[2] + 1);
    /* Replay from a revision: the same events again, one at a time. */
    int64_t from = w.revs[0];
    for (int i = 0; i < 3; i++) {
        watch_log one = {.stop_after = 1};
        assert_int_equal(crm_etcd_watch(c, "t/watch/", true, &from, 5000, NULL, on_event, &one), 0);
        assert_int_equal(one.revs[0], w.revs[i]);
    }
    /* Nothing happens: the duration ends it. */
    watch_log none = {.stop_after = 1};
    uint64_t t0 = ct_now_ms();
    assert_int_equal(crm_etcd_watch(c, "t/watch/none", false, &rev, 400, NULL, on_event, &none),
                     CR_ERR_TIMEOUT);
    assert_true(ct_now_ms() - t0 < 2000);
    /* The stop flag ends it promptly. */
    pthread_create(&th, NULL, stopper, NULL);
    t0 = ct_now_ms();
    assert_int_equal(crm_etcd_watch(c, "t/watch/none", false, &rev, 0, &stop_flag, on_event, &none),
                     CR_ETCD_CTX_CANCELLED);
    assert_true(ct_now_ms() - t0 < 1500);
    pthread_join(th, NULL);
    assert_int_equal(none.n, 0);
    crm_etcd_close(c);
}

static void compact(uint16_t port, int64_t revision)
{
    char body[64];
    snprintf(body, sizeof(body), "{\"revision\":\"%lld\",\"physical\":true}", (long long)revision);
    raw_post(port, "/v3/kv/compaction", body);
}

static void watch_compacted(void **state)
{
    crm_etcd *c = open_client(etcd.endpoint, 3000, 0);
    int64_t r1 = 0, r2 = 0;
    assert_int_equal(crm_etcd_put(c, "t/compact", "a", 1, 0, &r1), 0);
    assert_int_equal(crm_etcd_put(c, "t/compact", "b", 1, 0, &r2), 0);
    compact(etcd.port, r2);
    watch_log w = {.stop_after = 1};
    int64_t from = r1;
    assert_int_equal(crm_etcd_watch(c, "t/compact", false, &from, 5000, NULL, on_event, &w),
                     CR_ERR_ETCD_COMPACTED);
    assert_non_null(strstr(cr_last_error_message(), "compacted"));
    assert_int_equal(w.n, 0);
    crm_etcd_close(c);
}

/* A listener whose accept queue is full: connects to it never complete. */
static int blackhole(uint16_t *port, int fill[2])
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(fd, 0) != 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) != 0)
        return -1;
    *port = ntohs(a.sin_port);
    for (int i = 0; i < 2; i++) {
        fill[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        connect(fill[i], (struct sockaddr *)&a, sizeof(a));
    }
    sleep_ms(50);
    return fd;
}

static void endpoint_failover(void **state)
{
    /* A member that refuses, listed first: skipped at once, then remembered. */
    char list[256];
    uint16_t dead = ct_free_port(NULL);
    snprintf(list, sizeof(list), "127.0.0.1:%u,%s", (unsigned)dead, etcd.endpoint);
    crm_etcd *c = open_client(list, 3000, 500);
    char want[64];
    snprintf(want, sizeof(want), "127.0.0.1:%u", (unsigned)dead);
    assert_string_equal(crm_etcd_current_endpoint(c), want);
    assert_int_equal(crm_etcd_put(c, "t/fo", "v", 1, 0, NULL), 0);
    assert_string_equal(crm_etcd_current_endpoint(c), etcd.endpoint);
    crm_etcd_close(c);

    /* A member that never accepts costs at most the connect timeout. */
    uint16_t hole = 0;
    int fill[2] = {-1, -1};
    int hfd = blackhole(&hole, fill);
    assert_true(hfd >= 0);
    snprintf(list, sizeof(list), "127.0.0.1:%u;%s", (unsigned)hole, etcd.endpoint);
    c = open_client(list, 3000, 400);
    uint64_t t0 = ct_now_ms();
    crm_etcd_kv kv;
    assert_int_equal(crm_etcd_get(c, "t/fo", &kv, NULL), 0);
    uint64_t first = ct_now_ms() - t0;
    crm_etcd_kv_clear(&kv);
    t0 = ct_now_ms();
    assert_int_equal(crm_etcd_get(c, "t/fo", &kv, NULL), 0);
    uint64_t second = ct_now_ms() - t0;
    crm_etcd_kv_clear(&kv);
    printf("blackholed member first: first call %llu ms, second %llu ms (connect timeout 400)\n",
           (unsigned long long)first, (unsigned long long)second);
    assert_true(first >= 350 && first < 2000);
    assert_true(second < 350); /* the good member is remembered */
    /* Only dead members: a named error within the deadline. */
    crm_etcd_close(c);
    snprintf(list, sizeof(list), "127.0.0.1:%u,127.0.0.1:%u", (unsigned)hole, (unsigned)dead);
    c = open_client(list, 1000, 400);
    t0 = ct_now_ms();
    assert_int_equal(crm_etcd_get(c, "t/fo", &kv, NULL), CR_ERR_METADATA_UNAVAILABLE);
    uint64_t all_dead = ct_now_ms() - t0;
    assert_true(all_dead < 1800);
    assert_non_null(strstr(cr_last_error_message(), want));
    crm_etcd_close(c);
    close(fill[0]);
    close(fill[1]);
    close(hfd);
}

/* "Works again": the first successful get within 5 s (a resumed or restarted
 * etcd may need a moment on a loaded machine). */
static void get_works_again(crm_etcd *c, const char *key)
{
    uint64_t t0 = ct_now_ms();
    crm_etcd_kv kv;
    int rc;
    while ((rc = crm_etcd_get(c, key, &kv, NULL)) != 0 && ct_now_ms() - t0 < 5000)
        sleep_ms(100);
    if (rc != 0)
        fail_msg("etcd still failing 5 s after it came back: %s", cr_last_error_message());
    crm_etcd_kv_clear(&kv);
}

static void etcd_outage(void **state)
{
    crm_etcd *c = open_client(etcd.endpoint, 1000, 300);
    lost_flag f = {0};
    crm_etcd_lease *l;
    assert_int_equal(crm_etcd_put(c, "t/outage", "v", 1, 0, NULL), 0);

    /* Hung etcd (SIGSTOP): the call ends by its deadline. */
    ct_server_pause(&etcd, true);
    uint64_t t0 = ct_now_ms();
    crm_etcd_kv kv;
    assert_int_equal(crm_etcd_get(c, "t/outage", &kv, NULL), CR_ERR_METADATA_UNAVAILABLE);
    uint64_t hung = ct_now_ms() - t0;
    ct_server_pause(&etcd, false);
    assert_true(hung >= 900 && hung < 2000);
    get_works_again(c, "t/outage");

    /* Dead etcd: fast named failure; the lease is reported lost within its TTL.
     * (Granted only now: a 2 s lease need not survive the pause above on a
     * loaded machine.) */
    t0 = ct_now_ms();
    int grc;
    while ((grc = crm_etcd_lease_grant(c, 2, on_lost, &f, &l)) != 0 && ct_now_ms() - t0 < 5000)
        sleep_ms(100); /* a resumed etcd may answer a get before it grants leases again */
    if (grc != 0)
        fail_msg("lease grant still failing 5 s after etcd came back: %s", cr_last_error_message());
    uint64_t valid_until = 0;
    assert_int_equal(crm_etcd_lease_check(l, &valid_until), 0);
    ct_server_kill(&etcd);
    uint64_t killed = ct_now_ms();
    t0 = ct_now_ms();
    assert_int_equal(crm_etcd_get(c, "t/outage", &kv, NULL), CR_ERR_METADATA_UNAVAILABLE);
    assert_true(ct_now_ms() - t0 < 1200);
    assert_non_null(strstr(cr_last_error_message(), etcd.endpoint));
    while (atomic_load(&f.calls) == 0 && ct_now_ms() - killed < 5000)
        sleep_ms(20);
    assert_int_equal(atomic_load(&f.calls), 1);
    assert_int_equal(atomic_load(&f.status), CR_ERR_LEASE_LOST);
    uint64_t at = atomic_load(&f.at_ms);
    printf("lease lost reported %lld ms after its last known validity, %llu ms after the kill\n",
           (long long)at - (long long)valid_until, (unsigned long long)(at - killed));
    assert_true(at <= killed + 2000 + 500);
    assert_true(at + 50 >= valid_until); /* never before the lease could have lapsed */
    assert_int_equal(crm_etcd_lease_check(l, NULL), CR_ERR_LEASE_LOST);

    /* etcd comes back: calls work again. */
    assert_int_equal(ct_server_restart(&etcd), 0);
    get_works_again(c, "t/outage");
    assert_int_equal(crm_etcd_lease_release(l, true), 0);
    crm_etcd_close(c);
}

/* crm_etcd_close revokes a lease the owner forgot. */
static void close_revokes(void **state)
{
    crm_etcd *c = open_client(etcd.endpoint, 3000, 0);
    crm_etcd_lease *l;
    assert_int_equal(crm_etcd_lease_grant(c, 30, NULL, NULL, &l), 0);
    assert_int_equal(crm_etcd_put(c, "t/forgotten", "v", 1, crm_etcd_lease_id(l), NULL), 0);
    crm_etcd_close(c);
    c = open_client(etcd.endpoint, 3000, 0);
    crm_etcd_kv kv;
    assert_int_equal(crm_etcd_get(c, "t/forgotten", &kv, NULL), CR_ETCD_KEY_NOT_EXIST);
    crm_etcd_close(c);
}

int main(void)
{
    tt_require_exe(CT_ETCD_BIN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(kv_round_trip),   cmocka_unit_test(compare_and_swap),
        cmocka_unit_test(leases),          cmocka_unit_test(watch),
        cmocka_unit_test(watch_compacted), cmocka_unit_test(endpoint_failover),
        cmocka_unit_test(close_revokes),   cmocka_unit_test(etcd_outage),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
