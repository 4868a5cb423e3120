/*
 * ucx.c - the ucx transport's ops table: contexts and rails (init), what
 * goes into our descriptor (worker addresses, packed rkeys), registration,
 * reading peers' descriptors, and cutting tasks into ops for the workers
 * (ucx_worker.c does the UCP work). See ucx.h for the threading model.
 *
 * What protects a target: peers can reach only memory we mapped for UCX
 * (ucp_mem_map at registration), they need its packed rkey, which is only
 * in our descriptor and only for buffers registered remote-accessible, and
 * cr_engine_unregister unmaps the buffer (ucp_mem_unmap) before it
 * returns. On RDMA NICs the NIC enforces this: an rkey of an unmapped
 * region is refused by the hardware. UCX's software paths (tcp, and the
 * shared-memory/CMA paths) check nothing on the target: a peer holding an
 * old rkey, or any process that can reach our UCX worker, can still read and
 * write the address it names. There, the transport does not use RMA: it
 * moves bytes with active messages that the target checks against its
 * registry like the tcp serving side does (ucx_am.c). And "auto" uses ucx
 * only when an RDMA device is present.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/log.h"
#include "engine/transports/ucx/ucx.h"

/* --- little-endian packing of blobs ------------------------------------ */

static int put_u16(crp_buf *b, uint16_t v)
{
    uint8_t x[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    return crp_buf_append(b, x, 2);
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

/* --- rails -------------------------------------------------------------- */

static void ucx_log_warn_once(bool *done, const char *msg)
{
    if (!*done)
        crb_log(CRB_LOG_WARN, "%s", msg);
    *done = true;
}

/* The rails device_name asks for: one per listed device. A device the
 * topology knows as an RDMA NIC gets its port (":1") as UCX names it. */
static int plan_rails(ucx_engine *ue, const char *list)
{
    ue->n_rails = 0;
    if (list == NULL || list[0] == '\0') {
        ue->rails[0].devices[0] = '\0';
        ue->rails[0].nic = -1;
        ue->n_rails = 1;
        return 0;
    }
    const char *p = list;
    while (*p != '\0') {
        size_t n = strcspn(p, ",");
        if (n > 0) {
            if (ue->n_rails == UCX_MAX_RAILS)
                return crb_error(CR_ERR_INVALID_CONFIG,
                                 "device_name '%.200s' lists more than %d devices", list,
                                 UCX_MAX_RAILS);
            ucx_rail *r = &ue->rails[ue->n_rails++];
            if (n >= sizeof(r->devices) - 3)
                return crb_error(CR_ERR_INVALID_CONFIG, "device name '%.*s' is too long", (int)n,
                                 p);
            memcpy(r->devices, p, n);
            r->devices[n] = '\0';
            r->nic = cre_topo_nic_index(&ue->topo, r->devices);
            if (r->nic >= 0 && strchr(r->devices, ':') == NULL)
                strcat(r->devices, ":1");
        }
        p += n;
        if (*p == ',')
            p++;
    }
    if (ue->n_rails == 0)
        return crb_error(CR_ERR_INVALID_CONFIG, "device_name '%.200s' lists no device", list);
    return 0;
}

/* UCX 1.13 has no peer-failure handling on its shared-memory transports,
 * so endpoints to a peer reached only through them run without it
 * (UCP_ERR_HANDLING_MODE_NONE, deadlines bound the transfers). Over posix
 * and sysv a dead peer's requests then just never finish; over cma (and
 * knem, xpmem), UCX aborts this process when the peer dies in a transfer
 * (process_vm_readv ESRCH is fatal without error handling). When UCX_TLS
 * names no transport with peer-failure handling, this writes into out the
 * same list with the single-copy transports left out ("sm"/"shm" become
 * "posix,sysv") and returns 1; 0 when the list can stay as it is.
 * CRESCENT_UCX_KEEP_CMA=1 keeps them (measuring only: a dead peer then
 * aborts the process). */
static int tls_without_single_copy(const char *tls, char *out, size_t cap)
{
    static const char *const with_peer_errors[] = {"tcp", "rc", "ud", "dc", "ib", "all"};
    static const char *const single_copy[] = {"cma", "knem", "xpmem"};
    if (tls == NULL || tls[0] == '\0' || tls[0] == '^')
        return 0; /* UCX's default or an exclusion list: network transports stay in */
    const char *keep = getenv("CRESCENT_UCX_KEEP_CMA");
    if (keep != NULL && strcmp(keep, "1") == 0)
        return 0;
    for (size_t i = 0; i < sizeof(with_peer_errors) / sizeof(with_peer_errors[0]); i++)
        if (strstr(tls, with_peer_errors[i]) != NULL)
            return 0;
    size_t used = 0;
    bool dropped = false;
    out[0] = '\0';
    for (const char *p = tls; *p != '\0';) {
        size_t n = strcspn(p, ",");
        char name[32];
        if (n > 0 && n < sizeof(name)) {
            memcpy(name, p, n);
            name[n] = '\0';
            const char *put = name;
            bool single = false;
            for (size_t i = 0; i < sizeof(single_copy) / sizeof(single_copy[0]); i++)
                single = single || strcmp(name, single_copy[i]) == 0;
            if (strcmp(name, "sm") == 0 || strcmp(name, "shm") == 0) {
                put = "posix,sysv";
                dropped = true;
            } else if (single) {
                put = NULL;
                dropped = true;
            }
            size_t len = put != NULL ? strlen(put) : 0;
            if (put != NULL && used + len + 2 <= cap) {
                used += (size_t)snprintf(out + used, cap - used, "%s%s", used ? "," : "", put);
            }
        }
        p += n;
        if (*p == ',')
            p++;
    }
    return dropped && used > 0 ? 1 : 0;
}

static int rail_open(ucx_rail *r)
{
    ucp_config_t *cfg;
    ucs_status_t st = ucp_config_read(NULL, NULL, &cfg);
    if (st != UCS_OK)
        return crb_error(CR_ERR_SYSTEM, "ucx: reading UCX's configuration: %s",
                         ucs_status_string(st));
    char tls[256];
    const char *user_tls = getenv("UCX_TLS");
    if (tls_without_single_copy(user_tls, tls, sizeof(tls)) == 1) {
        static bool warned;
        char msg[768];
        snprintf(msg, sizeof(msg),
                 "ucx: UCX_TLS=%.200s has no transport that detects a dead peer, and UCX aborts "
                 "the process when a cma peer dies mid-transfer; using %s (set "
                 "CRESCENT_UCX_KEEP_CMA=1 to keep cma, for measuring only)",
                 user_tls, tls);
        ucx_log_warn_once(&warned, msg);
        if ((st = ucp_config_modify(cfg, "TLS", tls)) != UCS_OK) {
            ucp_config_release(cfg);
            return crb_error(CR_ERR_INVALID_CONFIG, "ucx: UCX_TLS '%s': %s", tls,
                             ucs_status_string(st));
        }
    }
    if (r->devices[0] != '\0' &&
        (st = ucp_config_modify(cfg, "NET_DEVICES", r->devices)) != UCS_OK) {
        ucp_config_release(cfg);
        return crb_error(CR_ERR_INVALID_CONFIG, "ucx: device '%s': %s", r->devices,
                         ucs_status_string(st));
    }
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED,
        .features = UCP_FEATURE_RMA | UCP_FEATURE_AM | UCP_FEATURE_WAKEUP,
        .mt_workers_shared = 1,
    };
    st = ucp_init(&params, cfg, &r->context);
    ucp_config_release(cfg);
    if (st != UCS_OK)
        return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED, "ucx: ucp_init%s%s: %s",
                         r->devices[0] ? " for " : "", r->devices, ucs_status_string(st));
    return 0;
}

static void ucx_fini(cre_tp *tp);

static int ucx_init(cre_tp *tp, bool explicit_choice)
{
    cr_engine *e = tp->engine;
    ucx_engine *ue = tp->priv;
    ue->tp = tp;
    cre_topo_load(getenv("CRESCENT_SYSFS_ROOT"), &ue->topo);
    ue->software_rma = ue->topo.n_nics == 0;
    if (!explicit_choice && ue->software_rma)
        return crb_error(CR_ERR_TRANSPORT_UNSUPPORTED,
                         "no RDMA device (UCX's tcp would be slower than crescent's own)");
    /* Where UCX would not check our rkeys, move bytes with checked active
     * messages (ucx_am.c). CRESCENT_UCX_MODE=rma|am overrides, for tests
     * and measurements. */
    const char *mode = getenv("CRESCENT_UCX_MODE");
    if (mode != NULL && strcmp(mode, "rma") != 0 && strcmp(mode, "am") != 0 && mode[0] != '\0')
        return crb_error(CR_ERR_INVALID_CONFIG, "CRESCENT_UCX_MODE='%.32s' is not rma or am", mode);
    ue->use_am = mode != NULL && mode[0] != '\0' ? strcmp(mode, "am") == 0 : ue->software_rma;
    int rc = plan_rails(ue, e->device_names);
    for (size_t i = 0; rc == 0 && i < ue->n_rails; i++)
        rc = rail_open(&ue->rails[i]);
    if (rc == 0)
        rc = cre_ucx_workers_init(ue);
    if (rc < 0) {
        ucx_fini(tp);
        return rc;
    }
    if (ue->software_rma && !ue->use_am) {
        static bool warned;
        ucx_log_warn_once(&warned,
                          "ucx: one-sided RMA over UCX's software paths (CRESCENT_UCX_MODE=rma): "
                          "they do not check remote keys on the target, so a stale descriptor "
                          "can reach unregistered memory; use it only to measure");
    }
    return 0;
}

static void ucx_quiesce(cre_tp *tp)
{
    ucx_engine *ue = tp->priv;
    for (uint32_t w = 0; ue->ws != NULL && w < tp->engine->n_workers; w++) {
        cre_ucx_fail_queued(&ue->ws[w]); /* before the registry their tasks refer to goes */
        cre_ucx_am_quiesce(&ue->ws[w]);
    }
}

static void ucx_fini(cre_tp *tp)
{
    ucx_engine *ue = tp->priv;
    cre_ucx_workers_fini(ue);
    for (size_t i = 0; i < ue->n_rails; i++) {
        if (ue->rails[i].context != NULL)
            ucp_cleanup(ue->rails[i].context);
        ue->rails[i].context = NULL;
    }
}

/* Endpoint: u8 rails, u8 workers, then per rail, per worker: u16 length
 * and the UCP worker address. */
static int ucx_endpoint(cre_tp *tp, crp_buf *out)
{
    cr_engine *e = tp->engine;
    ucx_engine *ue = tp->priv;
    uint8_t head[2] = {(uint8_t)ue->n_rails, (uint8_t)e->n_workers};
    int rc = crp_buf_append(out, head, 2);
    for (size_t r = 0; rc == 0 && r < ue->n_rails; r++) {
        for (uint32_t w = 0; rc == 0 && w < e->n_workers; w++) {
            ucp_address_t *addr;
            size_t len;
            ucs_status_t st = ucp_worker_get_address(ue->ws[w].uw[r], &addr, &len);
            if (st != UCS_OK)
                return crb_error(CR_ERR_SYSTEM, "ucx: worker address: %s", ucs_status_string(st));
            rc = len > UINT16_MAX ? crb_error(CR_INTERNAL_ERROR, "ucx address of %zu bytes", len)
                                  : put_u16(out, (uint16_t)len);
            if (rc == 0)
                rc = crp_buf_append(out, addr, len);
            ucp_worker_release_address(ue->ws[w].uw[r], addr);
        }
    }
    if (rc == 0 && out->len > CRP_MAX_ENDPOINT)
        rc = crb_error(CR_ERR_INVALID_CONFIG,
                       "ucx: %zu bytes of worker addresses do not fit a descriptor endpoint (%d); "
                       "use fewer workers or devices",
                       out->len, CRP_MAX_ENDPOINT);
    return rc;
}

/* The rails a buffer is registered on: all, or with one NIC per rail the
 * NICs nearest its memory (its NUMA node). */
static uint32_t rails_for(ucx_engine *ue, const cre_buffer *b)
{
    uint32_t all = (1u << ue->n_rails) - 1;
    uint32_t nic_mask = 0;
    for (size_t r = 0; r < ue->n_rails; r++) {
        if (ue->rails[r].nic < 0)
            return all;
        nic_mask |= 1u << ue->rails[r].nic;
    }
    uint32_t near = cre_topo_nearest_nics(&ue->topo, cre_topo_numa_of((void *)(uintptr_t)b->addr),
                                          NULL, nic_mask);
    uint32_t out = 0;
    for (size_t r = 0; r < ue->n_rails; r++)
        if (near & (1u << ue->rails[r].nic))
            out |= 1u << r;
    return out ? out : all;
}

static void ucx_dereg(cre_tp *tp, cre_buffer *b);

/* Map the buffer on its rails and, if peers may reach it, pack its rkeys:
 * blob = u8 count, then per rail: u8 rail, u16 length, the packed rkey. */
static int ucx_reg(cre_tp *tp, cre_buffer *b, crp_buf *blob)
{
    ucx_engine *ue = tp->priv;
    if (!cre_kind_is_host(b->kind))
        return 0; /* device memory: not mapped for UCX here */
    ucx_buffer *ub = calloc(1, sizeof(*ub));
    if (ub == NULL)
        return crb_error(CR_ERR_NO_MEMORY, "ucx state of a buffer");
    b->tp_state[tp->index] = ub;
    uint32_t rails = rails_for(ue, b);
    uint64_t t0 = crb_now_ns();
    int rc = 0;
    uint8_t count = 0;
    size_t count_at = blob->len;
    if (b->remote_accessible)
        rc = crp_buf_append(blob, &count, 1);
    for (size_t r = 0; rc == 0 && r < ue->n_rails; r++) {
        if (!(rails & (1u << r)))
            continue;
        ucp_mem_map_params_t mp = {
            .field_mask = UCP_MEM_MAP_PARAM_FIELD_ADDRESS | UCP_MEM_MAP_PARAM_FIELD_LENGTH,
            .address = (void *)(uintptr_t)b->addr,
            .length = b->length,
        };
        ucs_status_t st = ucp_mem_map(ue->rails[r].context, &mp, &ub->memh[r]);
        if (st != UCS_OK) {
            ub->memh[r] = NULL;
            rc = crb_error(st == UCS_ERR_NO_MEMORY ? CR_ERR_NO_MEMORY : CR_ERR_SYSTEM,
                           "ucx: mapping [0x%llx, +%llu) on rail %zu: %s",
                           (unsigned long long)b->addr, (unsigned long long)b->length, r,
                           ucs_status_string(st));
            break;
        }
        if (!b->remote_accessible)
            continue;
        void *packed;
        size_t len;
        st = ucp_rkey_pack(ue->rails[r].context, ub->memh[r], &packed, &len);
        if (st != UCS_OK) {
            rc = crb_error(CR_ERR_SYSTEM, "ucx: packing an rkey: %s", ucs_status_string(st));
            break;
        }
        uint8_t rail = (uint8_t)r;
        rc = crp_buf_append(blob, &rail, 1);
        if (rc == 0)
            rc = put_u16(blob, (uint16_t)len);
        if (rc == 0)
            rc = crp_buf_append(blob, packed, len);
        ucp_rkey_buffer_release(packed);
        count++;
    }
    if (rc == 0 && b->remote_accessible)
        blob->data[count_at] = count;
    if (rc == 0 && blob->len > CRP_MAX_BLOB)
        rc = crb_error(CR_ERR_INVALID_CONFIG, "ucx: %zu bytes of rkeys exceed a blob (%d)",
                       blob->len, CRP_MAX_BLOB);
    atomic_fetch_add(&ue->reg_ns, crb_now_ns() - t0);
    atomic_fetch_add(&ue->regs, 1);
    if (rc < 0) {
        ucx_dereg(tp, b);
        crp_buf_free(blob);
    }
    return rc;
}

/* Unmap before unregistration returns: on RDMA the NIC then refuses the
 * rkeys peers hold. */
static void ucx_dereg(cre_tp *tp, cre_buffer *b)
{
    ucx_engine *ue = tp->priv;
    ucx_buffer *ub = b->tp_state[tp->index];
    if (ub == NULL)
        return;
    for (size_t r = 0; r < ue->n_rails; r++)
        if (ub->memh[r] != NULL)
            ucp_mem_unmap(ue->rails[r].context, ub->memh[r]);
    free(ub);
    b->tp_state[tp->index] = NULL;
}

static int ucx_peer_init(cre_tp *tp, cre_peer *p, void *pp)
{
    ucx_engine *ue = tp->priv;
    ucx_peer *up = pp;
    up->eps = calloc((size_t)tp->engine->n_workers * ue->n_rails, sizeof(*up->eps));
    return up->eps ? 0 : crb_error(CR_ERR_NO_MEMORY, "ucx endpoints of peer %s", p->name);
}

static void ucx_peer_fini(cre_tp *tp, cre_peer *p, void *pp)
{
    ucx_peer *up = pp;
    cre_ucx_peer_close(tp->priv, up);
    free(up->eps);
    up->eps = NULL;
}

static void ucx_peer_reset(cre_tp *tp, cre_peer *p, void *pp)
{
    ucx_peer *up = pp;
    atomic_fetch_add(&up->gen, 1); /* workers rebuild their endpoints */
}

static void ucx_desc_free(cre_tp *tp, void *state)
{
    ucx_desc *d = state;
    free(d->addr);
    free(d->addr_len);
    free(d->bufs);
    free(d);
}

/* Read the peer's worker addresses and each buffer's rkeys. Pointers point
 * into the snapshot, which outlives this state. Malformed parts are left
 * out: the buffer (or the peer) is then simply not reachable over ucx. */
static void *ucx_desc_parse(cre_tp *tp, cre_peer *p, const crp_descriptor *d)
{
    const crp_endpoint *ep = crp_descriptor_endpoint(d, "ucx");
    if (ep == NULL || ep->address_len < 2)
        return NULL;
    const uint8_t *a = (const uint8_t *)ep->address, *end = a + ep->address_len;
    ucx_desc *ud = calloc(1, sizeof(*ud));
    if (ud == NULL)
        return NULL;
    ud->instance = d->instance;
    ud->version = d->version;
    ud->n_rails = a[0];
    ud->n_workers = a[1];
    a += 2;
    size_t n_addr = ud->n_rails * ud->n_workers;
    if (ud->n_rails == 0 || ud->n_rails > UCX_MAX_RAILS || ud->n_workers == 0)
        goto err_free;
    ud->addr = calloc(n_addr, sizeof(*ud->addr));
    ud->addr_len = calloc(n_addr, sizeof(*ud->addr_len));
    ud->bufs = calloc(d->n_buffers ? d->n_buffers : 1, sizeof(*ud->bufs));
    if (ud->addr == NULL || ud->addr_len == NULL || ud->bufs == NULL)
        goto err_free;
    for (size_t i = 0; i < n_addr; i++) {
        if (end - a < 2 || end - a - 2 < get_u16(a) || get_u16(a) == 0)
            goto err_free;
        ud->addr_len[i] = get_u16(a);
        ud->addr[i] = a + 2;
        a += 2 + ud->addr_len[i];
    }
    ud->n_bufs = d->n_buffers;
    for (size_t i = 0; i < d->n_buffers; i++) {
        size_t len = 0;
        const uint8_t *x = crp_buffer_blob(&d->buffers[i], "ucx", &len);
        if (x == NULL || len < 1)
            continue;
        const uint8_t *xe = x + len;
        size_t count = *x++;
        ucx_remote_buf rb = {0};
        bool ok = true;
        for (size_t k = 0; k < count && ok; k++) {
            ok = xe - x >= 3 && x[0] < ud->n_rails && get_u16(x + 1) > 0 &&
                 xe - x - 3 >= get_u16(x + 1);
            if (ok) {
                rb.rails |= (uint8_t)(1u << x[0]);
                rb.rkey[x[0]] = x + 3;
                rb.rkey_len[x[0]] = get_u16(x + 1);
                x += 3 + get_u16(x + 1);
            }
        }
        if (ok)
            ud->bufs[i] = rb;
    }
    return ud;

err_free:
    crb_log(CRB_LOG_WARN,
            "ucx: the descriptor of %s has a malformed ucx endpoint; ucx is not "
            "used for it",
            p->name);
    ucx_desc_free(tp, ud);
    return NULL;
}

/* Rails on which both ends of the route are mapped. */
static uint32_t usable_rails(cre_tp *tp, const cre_route *r)
{
    const ucx_desc *ud = cre_route_state(r, tp);
    const ucx_buffer *ub = r->local_buf->tp_state[tp->index];
    if (ud == NULL || ub == NULL || r->remote_index >= ud->n_bufs)
        return 0;
    ucx_engine *ue = tp->priv;
    uint32_t mask = 0;
    for (size_t k = 0; k < ue->n_rails && k < ud->n_rails; k++)
        if ((ud->bufs[r->remote_index].rails & (1u << k)) && ub->memh[k] != NULL)
            mask |= 1u << k;
    return mask;
}

static bool ucx_can_serve(cre_tp *tp, const cre_route *r)
{
    return r->self_target == NULL && cre_kind_is_host(r->local_kind) &&
           cre_kind_is_host(r->remote_kind) && usable_rails(tp, r) != 0;
}

/* Cut the task into slices striped over the usable rails and queue them to
 * one worker (round-robin over tasks). */
static int ucx_submit(cre_tp *tp, const cre_route *r, cre_task *t)
{
    cr_engine *e = tp->engine;
    ucx_engine *ue = tp->priv;
    uint32_t rails = usable_rails(tp, r);
    const ucx_buffer *ub = r->local_buf->tp_state[tp->index];
    int rail_list[UCX_MAX_RAILS], n_rails = 0;
    for (int k = 0; k < UCX_MAX_RAILS; k++)
        if (rails & (1u << k))
            rail_list[n_rails++] = k;
    uint64_t n = (t->length + e->slice_size - 1) / e->slice_size;
    uint64_t deadline = crb_now_ns() + (uint64_t)e->request_timeout_ms * 1000000ull;
    ucx_op *first = NULL, *last = NULL;
    for (uint64_t i = 0; i < n; i++) {
        ucx_op *op = calloc(1, sizeof(*op));
        if (op == NULL) {
            while (first != NULL) {
                ucx_op *next = first->next;
                cre_desc_unref(first->desc);
                free(first);
                first = next;
            }
            return crb_error(CR_ERR_NO_MEMORY, "ucx: slicing a %llu-byte request",
                             (unsigned long long)t->length);
        }
        uint64_t off = i * e->slice_size;
        op->task = t;
        op->peer = r->peer;
        op->desc = r->desc;
        cre_desc_ref(r->desc);
        op->remote_index = r->remote_index;
        op->rail = rail_list[i % (uint64_t)n_rails];
        op->opcode = t->opcode;
        op->local = t->local + off;
        op->remote_addr = t->remote_addr + off;
        op->length = t->length - off < e->slice_size ? t->length - off : e->slice_size;
        op->local_memh = ub->memh[op->rail];
        op->deadline_ns = deadline;
        if (last != NULL)
            last->next = op;
        else
            first = op;
        last = op;
    }
    if (n_rails > 1 && n > 1)
        atomic_fetch_add(&ue->rails_striped, 1);
    atomic_store(&t->slices_left, (unsigned)n);
    ucx_wstate *ws = &ue->ws[atomic_fetch_add(&ue->next_ws, 1) % e->n_workers];
    cre_ucx_queue(ue, ws, first, last);
    return 0;
}

static void ucx_cancel(cre_tp *tp)
{
    cre_workers_kick_all(tp->engine);
}

static size_t ucx_counters(cre_tp *tp, cr_engine_counter *out, size_t cap)
{
    ucx_engine *ue = tp->priv;
    cr_engine_counter c[] = {
        {"ucx", "rails", ue->n_rails},
        {"ucx", "software_rma", ue->software_rma},
        {"ucx", "checked_active_messages", ue->use_am},
        {"ucx", "endpoints_created", atomic_load(&ue->eps_created)},
        {"ucx", "endpoints_failed", atomic_load(&ue->eps_failed)},
        {"ucx", "flushes", atomic_load(&ue->flushes)},
        {"ucx", "striped_requests", atomic_load(&ue->rails_striped)},
        {"ucx", "registrations", atomic_load(&ue->regs)},
        {"ucx", "registration_ns", atomic_load(&ue->reg_ns)},
    };
    size_t n = sizeof(c) / sizeof(c[0]);
    for (size_t i = 0; i < n && i < cap; i++)
        out[i] = c[i];
    return n;
}

const cre_transport_ops cre_transport_ucx = {
    .name = "ucx",
    .rank = 50,
    .reach = CRE_REACH_HOST | CRE_REACH_REMOTE,
    .engine_size = sizeof(ucx_engine),
    .peer_size = sizeof(ucx_peer),
    .init = ucx_init,
    .fini = ucx_fini,
    .endpoint = ucx_endpoint,
    .reg = ucx_reg,
    .dereg = ucx_dereg,
    .peer_init = ucx_peer_init,
    .peer_fini = ucx_peer_fini,
    .desc_parse = ucx_desc_parse,
    .desc_free = ucx_desc_free,
    .peer_reset = ucx_peer_reset,
    .quiesce = ucx_quiesce,
    .can_serve = ucx_can_serve,
    .submit = ucx_submit,
    .tick = cre_ucx_tick,
    .cancel = ucx_cancel,
    .counters = ucx_counters,
};
