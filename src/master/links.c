/*
 * links.c - which clients are connected to this master, for placement.
 *
 * A holder killed with SIGKILL (or cut off) keeps its segments mounted until
 * client_ttl_ms of silence expires it, and its segment, holding less than the
 * live ones, is the first a placement picks (emptiest first): every put placed
 * there fails its transfer until the expiry. The RPC server knows sooner:
 * every connection bound to a client id (its first request named the id) is
 * counted here, and when a client's last such connection closes its segments
 * are marked orphaned. Placement passes orphaned segments over while any
 * other segment has room and takes them only as a last resort (a client that
 * is merely reconnecting loses nothing but preference). A new bound
 * connection of the client clears the mark. Clients never seen on a
 * connection (in-process users of the service, segments an HA promotion
 * restored) are never marked.
 *
 * The counts live in a small hash table under links_lock, taken with no
 * other service lock held; it takes seg_lock (read) inside to mark segments.
 * A client's entry goes when its count reaches 0 (the mark on its segments
 * is the state that remains), so the table holds the connected clients only.
 */
#include <stdlib.h>

#include "base/error.h"
#include "master/internal.h"
#include "master/mem.h"

struct crk_link {
    struct crk_link *next;
    crk_client_id id;
    uint32_t conns; /* bound connections open now */
};

static size_t link_bucket(crk_client_id id)
{
    uint64_t h = (id.hi ^ (id.lo * 0x9E3779B97F4A7C15ull)) >> 32;
    return (size_t)(h % CRK_LINK_BUCKETS);
}

/* Mark (or clear) every segment of `id` orphaned. seg_lock taken for reading. */
static void mark_segments(crk_service *s, crk_client_id id, bool orphan)
{
    pthread_rwlock_rdlock(&s->seg_lock);
    for (size_t i = 0; i < s->nsegs; i++)
        if (crk_id_eq(s->segs[i]->owner, id))
            atomic_store_explicit(&s->segs[i]->orphan, orphan, CRK_RELAXED);
    pthread_rwlock_unlock(&s->seg_lock);
}

void crk_client_linked(crk_service *s, crk_client_id id, bool up)
{
    if (!crk_id_valid(id))
        return;
    size_t b = link_bucket(id);
    pthread_mutex_lock(&s->links_lock);
    crk_link *l = s->links[b];
    while (l != NULL && !crk_id_eq(l->id, id))
        l = l->next;
    if (l == NULL && up) {
        l = crk_calloc(1, sizeof(*l));
        if (l == NULL) { /* not counted: its segments are simply never marked */
            pthread_mutex_unlock(&s->links_lock);
            return;
        }
        l->id = id;
        l->next = s->links[b];
        s->links[b] = l;
    }
    bool changed = false;
    if (l != NULL && up)
        changed = l->conns++ == 0;
    else if (l != NULL && l->conns > 0)
        changed = --l->conns == 0;
    if (changed) /* under links_lock, so marks follow the counts in order */
        mark_segments(s, id, !up);
    if (l != NULL && l->conns == 0) {
        crk_link **pp = &s->links[b];
        while (*pp != l)
            pp = &(*pp)->next;
        *pp = l->next;
        crk_free(l);
    }
    pthread_mutex_unlock(&s->links_lock);
}

void crk_links_destroy(crk_service *s)
{
    for (size_t b = 0; b < CRK_LINK_BUCKETS; b++) {
        while (s->links[b] != NULL) {
            crk_link *l = s->links[b];
            s->links[b] = l->next;
            crk_free(l);
        }
    }
}
