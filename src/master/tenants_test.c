/*
 * tenants_test.c - tenant namespaces through the dispatcher (master/tenants.h):
 * the same key in two tenants and in the default one are three objects;
 * single and batch operations of one tenant see only its keys; removal by
 * regex (matched against the key as the tenant wrote it) and remove-all are
 * scoped; the default tenant behaves as before (and cannot name a tenant's
 * internal keys: a key that starts with 0x1F is refused); bad tenant names
 * are refused; per-tenant stats count keys and bytes; a tenant's reads given
 * back (RELEASE_LEASES) end its own key's lease.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdlib.h>
#include <string.h>

#include "master/dispatch.h"
#include "master/internal.h"
#include "master/tenants.h"
#include "test_util.h"

static crk_service *svc;
static crk_scratch sc;
static const crk_server_info info = {.view_version = 1, .software = "test"};
static crp_rpc_uuid cid = {0xC0FFEEull, 1};

static int setup(void **state)
{
    (void)state;
    svc = tu_service(NULL, 1);
    tu_mount(svc, tu_client(1), "seg-a", 0x100000, 64ull << 20, 1);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    crk_scratch_free(&sc);
    crk_service_destroy(svc);
    return 0;
}

static crp_rpc_resp call(crp_rpc_req *req, const char *tenant)
{
    req->tenant = (char *)tenant;
    crp_rpc_resp resp;
    crk_scratch_reset(&sc);
    crk_dispatch(svc, &info, NULL, req, 10, &resp, &sc);
    return resp;
}

static int put(const char *tenant, const char *key, uint64_t size)
{
    crp_rpc_req req = {.op = CRP_RPC_PUT_START};
    req.u.put_start = (crp_rpc_put_start_req){cid, (char *)key, size, {.replica_num = 1}};
    crp_rpc_resp r = call(&req, tenant);
    if (r.status != 0)
        return r.status;
    req = (crp_rpc_req){.op = CRP_RPC_PUT_END};
    req.u.owner_key = (crp_rpc_owner_key_req){cid, (char *)key};
    return call(&req, tenant).status;
}

static int64_t size_of(const char *tenant, const char *key)
{
    crp_rpc_req req = {.op = CRP_RPC_GET_REPLICA_LIST};
    req.u.key.key = (char *)key;
    crp_rpc_resp r = call(&req, tenant);
    return r.status < 0 ? r.status : (int64_t)r.u.get.replicas[0].size;
}

static int64_t count_op(int op, const char *tenant, const char *pattern)
{
    crp_rpc_req req = {.op = (uint16_t)op};
    if (op == CRP_RPC_REMOVE_BY_REGEX)
        req.u.regex = (crp_rpc_regex_req){(char *)pattern, true};
    else
        req.u.force.force = true;
    crp_rpc_resp r = call(&req, tenant);
    return r.status < 0 ? r.status : (int64_t)r.u.count.count;
}

static void test_namespaces(void **state)
{
    (void)state;
    assert_int_equal(put(NULL, "k", 100), 0);
    assert_int_equal(put("a", "k", 200), 0);
    assert_int_equal(put("b", "k", 300), 0);
    assert_int_equal(size_of(NULL, "k"), 100);
    assert_int_equal(size_of("default", "k"), 100); /* "default" is the default tenant */
    assert_int_equal(size_of("a", "k"), 200);
    assert_int_equal(size_of("b", "k"), 300);
    assert_int_equal(size_of("c", "k"), CR_OBJECT_NOT_FOUND);
    /* batch forms see their tenant's keys only */
    assert_int_equal(put("a", "only-a", 10), 0);
    char *keys[] = {"k", "only-a"};
    crp_rpc_req req = {.op = CRP_RPC_BATCH_EXIST};
    req.u.keys = (crp_rpc_keys_req){2, keys};
    crp_rpc_resp r = call(&req, "a");
    assert_int_equal(r.status, 0);
    assert_int_equal(r.u.statuses.results[0], 1);
    assert_int_equal(r.u.statuses.results[1], 1);
    r = call(&req, "b");
    assert_int_equal(r.u.statuses.results[0], 1);
    assert_int_equal(r.u.statuses.results[1], 0);
    r = call(&req, NULL);
    assert_int_equal(r.u.statuses.results[1], 0);
    /* per-tenant stats */
    crk_tenant_stat ts[8];
    size_t n = crk_tenant_stats(svc, ts, 8);
    assert_int_equal(n, 3);
    assert_string_equal(ts[0].name, "default");
    assert_int_equal(ts[0].keys, 1);
    assert_int_equal(ts[0].bytes, 100);
    for (size_t i = 1; i < n; i++) {
        if (strcmp(ts[i].name, "a") == 0) {
            assert_int_equal(ts[i].keys, 2);
            assert_int_equal(ts[i].bytes, 210);
        } else {
            assert_string_equal(ts[i].name, "b");
            assert_int_equal(ts[i].keys, 1);
        }
    }
}

/* A read given back in a tenant is counted off that tenant's key (not the default tenant's
 * key of the same name): with no reader left, a forced remove frees its memory at once
 * instead of when the lease ends. */
static void test_lease_release_in_tenant(void **state)
{
    (void)state;
    assert_int_equal(put("a", "leased", 100), 0);
    assert_int_equal(put(NULL, "leased", 100), 0);
    crp_rpc_req get = {.op = CRP_RPC_GET_REPLICA_LIST};
    get.u.key.key = "leased";
    crp_rpc_resp r = call(&get, "a");
    assert_int_equal(r.status, 0);
    uint64_t token = r.u.get.lease_token;
    assert_true(token != 0);
    char *keys[] = {"leased"};
    crp_rpc_req rel = {.op = CRP_RPC_RELEASE_LEASES};
    rel.u.leases = (crp_rpc_leases_req){1, keys, &token};
    assert_int_equal(call(&rel, "a").status, 0);
    uint64_t before = crk_allocated(svc);
    crp_rpc_req rm = {.op = CRP_RPC_REMOVE};
    rm.u.remove = (crp_rpc_remove_req){.key = "leased", .force = true};
    assert_int_equal(call(&rm, "a").status, 0);
    assert_true(crk_allocated(svc) < before); /* freed now, not at the lease's end */
    assert_int_equal(size_of("a", "leased"), CR_OBJECT_NOT_FOUND);
    assert_int_equal(size_of(NULL, "leased"), 100); /* the default tenant's key is untouched */
}

static void test_scoped_removal(void **state)
{
    (void)state;
    for (int i = 0; i < 3; i++) {
        char k[32];
        snprintf(k, sizeof(k), "layer/%d", i);
        assert_int_equal(put(NULL, k, 8), 0);
        assert_int_equal(put("a", k, 8), 0);
        assert_int_equal(put("b", k, 8), 0);
    }
    /* anchored patterns see the tenant's own key */
    assert_int_equal(count_op(CRP_RPC_REMOVE_BY_REGEX, "a", "^layer/[01]$"), 2);
    assert_int_equal(size_of("a", "layer/2"), 8);
    assert_int_equal(size_of("b", "layer/0"), 8);
    assert_int_equal(size_of(NULL, "layer/0"), 8);
    /* remove_all of b leaves a and the default tenant alone */
    int64_t before_default = size_of(NULL, "layer/1");
    assert_true(count_op(CRP_RPC_REMOVE_ALL, "b", NULL) >= 3);
    assert_int_equal(size_of("b", "layer/0"), CR_OBJECT_NOT_FOUND);
    assert_int_equal(size_of("a", "layer/2"), 8);
    assert_int_equal(size_of(NULL, "layer/1"), before_default);
    /* the default tenant's remove_all is its own namespace too */
    assert_true(count_op(CRP_RPC_REMOVE_ALL, NULL, NULL) >= 3);
    assert_int_equal(size_of(NULL, "layer/1"), CR_OBJECT_NOT_FOUND);
    assert_int_equal(size_of("a", "layer/2"), 8);
    assert_int_equal(count_op(CRP_RPC_REMOVE_BY_REGEX, "a", "(["), CR_INVALID_PARAMS);
}

static void test_reserved_and_bad_names(void **state)
{
    (void)state;
    /* a default-tenant key cannot name a tenant's internal key */
    assert_int_equal(size_of(NULL, "\x1f"
                                   "a\x1f"
                                   "layer/2"),
                     CR_INVALID_KEY);
    assert_int_equal(put(NULL, "\x1fsneaky", 8), CR_INVALID_KEY);
    char *keys[] = {"fine", "\x1f"
                            "a\x1f"
                            "layer/2"};
    crp_rpc_req req = {.op = CRP_RPC_BATCH_EXIST};
    req.u.keys = (crp_rpc_keys_req){2, keys};
    crp_rpc_resp r = call(&req, NULL);
    assert_int_equal(r.status, 0);
    assert_int_equal(r.u.statuses.results[1], CR_INVALID_KEY);
    /* tenant names: the reserved byte and overlong names are refused */
    assert_int_equal(size_of("x\x1fy", "k"), CR_INVALID_PARAMS);
    char longname[CRK_TENANT_MAX + 2];
    memset(longname, 't', sizeof(longname) - 1);
    longname[sizeof(longname) - 1] = '\0';
    assert_int_equal(size_of(longname, "k"), CR_INVALID_PARAMS);
    longname[CRK_TENANT_MAX] = '\0';
    assert_int_equal(size_of(longname, "k"), CR_OBJECT_NOT_FOUND);
    /* a 4096-byte key fits a tenant's namespace */
    char *big = malloc(4097);
    memset(big, 'q', 4096);
    big[4096] = '\0';
    assert_int_equal(put(longname, big, 4), 0);
    assert_int_equal(size_of(longname, big), 4);
    free(big);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_namespaces),
        cmocka_unit_test(test_scoped_removal),
        cmocka_unit_test(test_reserved_and_bad_names),
        cmocka_unit_test(test_lease_release_in_tenant),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
