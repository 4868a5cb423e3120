/*
 * etcd_cluster_test.c - the etcd client against a real three-member etcd
 * cluster: killing the member the client talks to, the raft leader, costs
 * no failed call (the client moves on and retries through the election),
 * a lease stays alive across it, a watch resumes from its cursor on another
 * member without losing events, a member that comes back rejoins, and a
 * cluster without quorum fails calls with ERR_METADATA_UNAVAILABLE within
 * their deadline until quorum returns. Skips (77) without /usr/bin/etcd.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <jansson.h>

#include "base/clock.h"
#include "base/error.h"
#include "metadata/etcd.h"
#include "metadata/etcd_internal.h"
#include "testing.h"

#define N 3

static ct_server members[N];

static int group_setup(void **state)
{
    return ct_etcd_cluster_start(members, N, NULL) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
    for (int i = 0; i < N; i++)
        ct_server_stop(&members[i]);
    return 0;
}

static int member_of(const char *endpoint)
{
    for (int i = 0; i < N; i++)
        if (strcmp(members[i].endpoint, endpoint) == 0)
            return i;
    return -1;
}

/* Is member i the raft leader? (/v3/maintenance/status: leader == member_id) */
static bool is_leader(int i)
{
    crm_etcd_config cfg = {.endpoints = members[i].endpoint};
    crm_etcd *c;
    if (crm_etcd_open(&cfg, &c) != 0)
        return false;
    etcd_reply reply = {0};
    bool leader = false;
    if (crm_etcd_call(c, "/v3/maintenance/status", json_object(), crb_now_ms() + 3000, "status",
                      &reply, NULL) == 0) {
        json_t *j = json_loadb(reply.body.data, reply.body.len, 0, NULL);
        json_t *id = json_object_get(json_object_get(j, "header"), "member_id");
        json_t *lead = json_object_get(j, "leader");
        leader = json_is_string(id) && json_is_string(lead) &&
                 strcmp(json_string_value(id), json_string_value(lead)) == 0;
        json_decref(j);
        free(reply.body.data);
    }
    crm_etcd_close(c);
    return leader;
}

static int count_events(void *arg, const crm_etcd_event *ev)
{
    int *n = arg;
    (*n)++;
    return 0;
}

static void member_failover(void **state)
{
    /* The raft leader first: killing it forces an election under the calls. */
    int lead = -1;
    for (int tries = 0; lead < 0 && tries < 50; tries++) {
        for (int i = 0; i < N && lead < 0; i++)
            if (is_leader(i))
                lead = i;
        if (lead < 0)
            usleep(100 * 1000);
    }
    assert_true(lead >= 0);
    char list[256];
    snprintf(list, sizeof(list), "%s,%s,%s", members[lead].endpoint,
             members[(lead + 1) % N].endpoint, members[(lead + 2) % N].endpoint);
    crm_etcd_config cfg = {.endpoints = list, .request_timeout_ms = 4000};
    crm_etcd *c;
    assert_int_equal(crm_etcd_open(&cfg, &c), 0);
    crm_etcd_lease *l;
    /* TTL 5 s: long enough that keepalives survive a leader election on a
     * loaded machine (the election itself takes 1-3 s here under load). */
    assert_int_equal(crm_etcd_lease_grant(c, 5, NULL, NULL, &l), 0);
    int64_t rev0 = 0;
    assert_int_equal(crm_etcd_put(c, "c/held", "v", 1, crm_etcd_lease_id(l), &rev0), 0);
    int first = member_of(crm_etcd_current_endpoint(c));
    assert_int_equal(first, lead);

    /* Kill the member in use: every call still succeeds. */
    ct_server_kill(&members[first]);
    uint64_t t0 = ct_now_ms();
    for (int i = 0; i < 20; i++) {
        char key[32];
        snprintf(key, sizeof(key), "c/k%d", i);
        int rc = crm_etcd_put(c, key, "x", 1, 0, NULL);
        if (rc != 0)
            fail_msg("put %d after killing member %d: %s", i, first, cr_last_error_message());
    }
    printf("20 puts across the loss of member %d (the raft leader) took %llu ms; now at %s\n",
           first, (unsigned long long)(ct_now_ms() - t0), crm_etcd_current_endpoint(c));
    assert_int_not_equal(member_of(crm_etcd_current_endpoint(c)), first);

    /* The lease outlives its TTL on keepalives through the other members. */
    usleep(5500 * 1000);
    assert_int_equal(crm_etcd_lease_check(l, NULL), 0);
    crm_etcd_kv kv;
    assert_int_equal(crm_etcd_get(c, "c/held", &kv, NULL), 0);
    crm_etcd_kv_clear(&kv);

    /* A watch from before the kill replays every event since. */
    int events = 0;
    int64_t from = rev0 + 1;
    assert_int_equal(crm_etcd_watch(c, "c/k", true, &from, 1500, NULL, count_events, &events),
                     CR_ERR_TIMEOUT);
    assert_int_equal(events, 20);

    /* The member comes back and rejoins. */
    assert_int_equal(ct_server_restart(&members[first]), 0);
    char alone[64];
    snprintf(alone, sizeof(alone), "%s", members[first].endpoint);
    crm_etcd_config one = {.endpoints = alone, .request_timeout_ms = 4000};
    crm_etcd *c1;
    assert_int_equal(crm_etcd_open(&one, &c1), 0);
    t0 = ct_now_ms();
    int rc;
    while ((rc = crm_etcd_get(c1, "c/k19", &kv, NULL)) != 0 && ct_now_ms() - t0 < 10000)
        usleep(100 * 1000);
    if (rc != 0)
        fail_msg("restarted member %d did not catch up: %s", first, cr_last_error_message());
    crm_etcd_kv_clear(&kv);

    /* No quorum: a named error within the deadline, then recovery. */
    int a = (first + 1) % N, b = (first + 2) % N;
    ct_server_kill(&members[a]);
    ct_server_kill(&members[b]);
    crm_etcd_config quick = {.endpoints = alone, .request_timeout_ms = 1500};
    crm_etcd *cq;
    assert_int_equal(crm_etcd_open(&quick, &cq), 0);
    t0 = ct_now_ms();
    rc = crm_etcd_put(cq, "c/noquorum", "x", 1, 0, NULL);
    uint64_t took = ct_now_ms() - t0;
    printf("without quorum: %s after %llu ms: %s\n", cr_status_name(rc), (unsigned long long)took,
           cr_last_error_message());
    assert_int_equal(rc, CR_ERR_METADATA_UNAVAILABLE);
    assert_true(took < 2500);
    assert_int_equal(ct_server_restart(&members[a]), 0);
    t0 = ct_now_ms();
    while ((rc = crm_etcd_put(c1, "c/quorum", "x", 1, 0, NULL)) != 0 && ct_now_ms() - t0 < 10000)
        usleep(100 * 1000);
    if (rc != 0)
        fail_msg("no recovery with quorum back: %s", cr_last_error_message());
    assert_int_equal(ct_server_restart(&members[b]), 0);
    crm_etcd_close(cq);
    crm_etcd_close(c1);
    crm_etcd_lease_release(l, true);
    crm_etcd_close(c);
}

int main(void)
{
    tt_require_exe(CT_ETCD_BIN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(member_failover),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
