/*
 * compact.c - compaction of mostly-dead buckets, and the background thread
 * that runs it.
 *
 * A compaction takes the closed bucket with the largest dead share (at
 * least compaction_dead_ratio of its file), snapshots its live entries,
 * reads their values in groups of up to 8 MiB (through the I/O thread, into
 * bounce buffers; each value is checked against its checksum), and hands
 * them back as MOVE records, which the writer appends with their original
 * sequence numbers. A move lands in the index only if the key still points
 * at the old record (same seq, same place); a key overwritten or removed
 * meanwhile keeps its newer state and the moved copy is dead on arrival.
 * Finally the victim is doomed like an evicted bucket: whatever is still
 * listed there leaves the index, tombstones still needed are carried
 * forward, and the file is unlinked after all of that has landed.
 *
 * Gets running meanwhile look the key up under the index lock and hold a
 * reference on the bucket they read: before the move lands they read the
 * old record, after it the new one, both complete and verified; after the
 * unlink the old file stays readable through its open descriptor until the
 * last such reader lets go. So a get returns the right bytes or, for a key
 * removed meanwhile, a clean miss.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/clock.h"
#include "base/log.h"
#include "disk/internal.h"

#define GROUP_BYTES (8u << 20)

typedef struct live_rec {
    crf_entry *copy; /* a private copy of the entry (key, meta, location) */
    uint8_t *bounce;
    size_t bounce_len;
    uint64_t bounce_off;
} live_rec;

static int cmp_off(const void *a, const void *b)
{
    const live_rec *x = a, *y = b;
    return x->copy->rec_off < y->copy->rec_off ? -1 : x->copy->rec_off > y->copy->rec_off;
}

/* mu held: the best victim, or NULL. */
static crf_bucket *pick_victim(crf_store *s, bool force)
{
    crf_bucket *best = NULL;
    double best_ratio = 0;
    for (size_t i = 0; i < s->n_buckets; i++) {
        crf_bucket *b = s->buckets[i];
        if (b->writable || b->doomed || b->compacting || b->dead_bytes == 0 || b->bytes == 0 ||
            atomic_load(&b->pending_applies) > 0) /* records still landing in it */
            continue;
        if (!force && !crf_bucket_wants_compaction(s, b))
            continue;
        /* Room for the copies before the old file goes. */
        if (s->used_bytes + b->live_bytes + b->tomb_bytes + CRF_BLOCK > s->cfg.capacity_bytes)
            continue;
        double ratio = (double)b->dead_bytes / (double)b->bytes;
        if (best == NULL || ratio > best_ratio) {
            best = b;
            best_ratio = ratio;
        }
    }
    return best;
}

/* Read, verify and move one group of records. */
static int move_group(crf_store *s, crf_bucket *victim, live_rec *lr, size_t n)
{
    crf_read *reads = calloc(n, sizeof(*reads));
    crf_rec *recs = calloc(n, sizeof(*recs));
    int *results = calloc(n, sizeof(*results));
    int rc = 0;
    if (reads == NULL || recs == NULL || results == NULL) {
        rc = crb_error(CR_ERR_NO_MEMORY, "disk: compaction group of %zu", n);
        goto out;
    }
    crf_req r;
    crf_req_init(&r, CRF_REQ_READ);
    for (size_t i = 0; i < n; i++) {
        crf_entry *e = lr[i].copy;
        uint64_t vo = e->rec_off + e->value_rel;
        uint64_t start = s->direct ? crf_round_down(vo, CRF_BLOCK) : vo;
        uint64_t end = s->direct ? crf_round_up(vo + e->value_len, CRF_BLOCK) : vo + e->value_len;
        lr[i].bounce_off = start;
        lr[i].bounce_len = (size_t)(end - start);
        lr[i].bounce = crf_bounce_get(&s->bounce, lr[i].bounce_len > 0 ? lr[i].bounce_len : 1);
        crf_read *rd = &reads[i];
        rd->bucket = victim;
        rd->req = &r;
        rd->item = i;
        if (lr[i].bounce == NULL) {
            rd->n_seg = 0;
            rd->status = CR_ERR_NO_MEMORY;
            continue;
        }
        if (e->value_len > 0) {
            crf_iop *g = &rd->seg[rd->n_seg++];
            g->buf = lr[i].bounce;
            g->off = start;
            g->len = end - start;
            g->need = vo + e->value_len - start;
        }
    }
    /* Reads with no segment complete at once in the I/O thread. */
    r.reads = reads;
    r.n = n;
    if ((rc = crf_submit_wait(s, &r)) != 0) {
        crf_req_fini(&r);
        goto out;
    }
    crf_req_fini(&r);
    size_t nm = 0;
    for (size_t i = 0; i < n; i++) {
        crf_entry *e = lr[i].copy;
        if (reads[i].status != 0)
            continue;
        const uint8_t *value = lr[i].bounce + (e->rec_off + e->value_rel - lr[i].bounce_off);
        if (crf_value_hash(value, e->value_len) != e->value_hash) {
            atomic_fetch_add_explicit(&s->n_checksum_failures, 1, memory_order_relaxed);
            crb_log(CRB_LOG_WARN, "disk: compaction: checksum mismatch in bucket %llu at %llu",
                    (unsigned long long)victim->id, (unsigned long long)e->rec_off);
            continue; /* left behind: the doom drops it from the index */
        }
        crf_rec *m = &recs[nm++];
        m->kind = CRF_RK_MOVE;
        m->type = CRF_REC_PUT;
        m->key = crf_entry_key(e);
        m->key_len = e->key_len;
        m->meta = e->meta_len > 0 ? crf_entry_meta(e) : NULL;
        m->meta_len = e->meta_len;
        m->value = value;
        m->value_len = e->value_len;
        m->value_hash = e->value_hash;
        m->seq = e->seq;
        m->from = victim;
        m->from_off = e->rec_off;
        m->item = nm - 1;
    }
    if (nm > 0) {
        crf_req w;
        crf_req_init(&w, CRF_REQ_RECORDS);
        w.recs = recs;
        w.n = nm;
        w.results = results;
        for (size_t i = 0; i < nm; i++)
            recs[i].req = &w;
        rc = crf_submit_wait(s, &w);
        crf_req_fini(&w);
    }
out:
    for (size_t i = 0; i < n; i++) {
        crf_bounce_put(&s->bounce, lr[i].bounce, lr[i].bounce_len > 0 ? lr[i].bounce_len : 1);
        lr[i].bounce = NULL;
    }
    free(reads);
    free(recs);
    free(results);
    return rc;
}

static int compact_one(crf_store *s, crf_bucket *victim, live_rec *lr, size_t n)
{
    qsort(lr, n, sizeof(*lr), cmp_off);
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0;) {
        size_t j = i;
        uint64_t bytes = 0;
        while (j < n && (j == i || bytes + lr[j].copy->value_len <= GROUP_BYTES)) {
            bytes += lr[j].copy->value_len;
            j++;
        }
        rc = move_group(s, victim, lr + i, j - i);
        i = j;
    }
    if (rc != 0)
        return rc;
    crf_req d;
    crf_req_init(&d, CRF_REQ_DOOM);
    d.target = victim;
    rc = crf_submit_wait(s, &d);
    crf_req_fini(&d);
    if (rc == 0) {
        atomic_fetch_add_explicit(&s->n_compactions, 1, memory_order_relaxed);
        crb_log(CRB_LOG_DEBUG, "disk: compacted bucket %llu (%zu live records)",
                (unsigned long long)victim->id, n);
    }
    return rc;
}

int crf_compact(crf_store *s, uint32_t max_buckets, bool force)
{
    if (s == NULL)
        return crb_error(CR_INVALID_PARAMS, "crf_compact: NULL store");
    if (crf_on_io_thread(s))
        return crb_error(CR_INVALID_PARAMS, "crf_compact: called from the disk I/O thread");
    int done = 0, rc = 0;
    pthread_mutex_lock(&s->compact_mu);
    while ((uint32_t)done < max_buckets) {
        pthread_mutex_lock(&s->mu);
        crf_bucket *v = pick_victim(s, force);
        live_rec *lr = NULL;
        size_t n = 0;
        if (v != NULL) {
            lr = calloc(v->live_count > 0 ? v->live_count : 1, sizeof(*lr));
            if (lr == NULL) {
                pthread_mutex_unlock(&s->mu);
                rc = crb_error(CR_ERR_NO_MEMORY, "crf_compact: %llu records",
                               (unsigned long long)v->live_count);
                break;
            }
            for (crf_entry *e = v->live_head; e != NULL; e = e->bnext) {
                crf_entry *c =
                    crf_entry_new(crf_entry_key(e), e->key_len, crf_entry_meta(e), e->meta_len);
                if (c == NULL)
                    break;
                c->rec_off = e->rec_off;
                c->value_rel = e->value_rel;
                c->value_len = e->value_len;
                c->value_hash = e->value_hash;
                c->seq = e->seq;
                lr[n++].copy = c;
            }
            v->compacting = true;
            crf_bucket_ref(v);
        }
        pthread_mutex_unlock(&s->mu);
        if (v == NULL)
            break;
        rc = compact_one(s, v, lr, n);
        for (size_t i = 0; i < n; i++)
            free(lr[i].copy);
        free(lr);
        pthread_mutex_lock(&s->mu);
        v->compacting = false;
        pthread_mutex_unlock(&s->mu);
        crf_bucket_unref(v);
        if (rc != 0)
            break;
        done++;
    }
    pthread_mutex_unlock(&s->compact_mu);
    return done > 0 || rc == 0 ? done : rc;
}

static void *maint_main(void *arg)
{
    crf_store *s = arg;
    pthread_mutex_lock(&s->maint_mu);
    while (!s->maint_stop) {
        if (!s->maint_kick) {
            struct timespec ts = crb_deadline_ts(1000);
            pthread_cond_timedwait(&s->maint_cv, &s->maint_mu, &ts);
            continue;
        }
        s->maint_kick = false;
        pthread_mutex_unlock(&s->maint_mu);
        int rc = crf_compact(s, 8, false);
        if (rc < 0 && rc != CR_ERR_SHUTDOWN)
            crb_log(CRB_LOG_WARN, "disk: background compaction: %s", cr_last_error_message());
        pthread_mutex_lock(&s->maint_mu);
    }
    pthread_mutex_unlock(&s->maint_mu);
    return NULL;
}

int crf_compact_start(crf_store *s)
{
    int rc = pthread_create(&s->maint_thread, NULL, maint_main, s);
    if (rc != 0)
        return crb_error(CR_ERR_SYSTEM, "disk: start the compaction thread: %s", strerror(rc));
    s->maint_started = true;
    return 0;
}

void crf_compact_stop(crf_store *s)
{
    if (!s->maint_started)
        return;
    pthread_mutex_lock(&s->maint_mu);
    s->maint_stop = true;
    pthread_cond_signal(&s->maint_cv);
    pthread_mutex_unlock(&s->maint_mu);
    pthread_join(s->maint_thread, NULL);
    s->maint_started = false;
}
