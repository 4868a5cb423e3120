/*
 * object_table_test.c - one shard's data structures on their own: probing,
 * insertion with growth, deletion with backward shift (every remaining key
 * still found, no empty slot inside a run), colliding slot hashes, the LRU
 * list and the write list. Keys are given chosen slot hashes so runs,
 * wrap-around and growth are exercised deliberately, and a randomized
 * insert/delete sequence is checked against a plain array model.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "master/mem.h"
#include "master/object_table.h"

static crk_object *add(crk_shard *sh, const char *key, uint32_t h)
{
    assert_int_equal(crk_shard_reserve(sh), 0);
    size_t i = crk_shard_probe(sh, key, strlen(key), h);
    assert_null(sh->slots[i].obj); /* absent */
    crk_object *o = crk_obj_new(key, strlen(key), h, 1);
    assert_non_null(o);
    crk_shard_insert(sh, o);
    return o;
}

static crk_object *find(const crk_shard *sh, const char *key, uint32_t h)
{
    return sh->slots[crk_shard_probe(sh, key, strlen(key), h)].obj;
}

static void del(crk_shard *sh, crk_object *o)
{
    crk_shard_remove(sh, o);
    crk_free(o);
}

/* Every object is reachable from its home slot without crossing an empty one. */
static void check_runs(const crk_shard *sh)
{
    size_t mask = sh->nslots - 1, n = 0;
    for (size_t i = 0; i < sh->nslots; i++) {
        crk_object *o = sh->slots[i].obj;
        if (!o)
            continue;
        n++;
        assert_int_equal(sh->slots[i].hash, o->hash);
        for (size_t j = o->hash & mask; j != i; j = (j + 1) & mask)
            assert_non_null(sh->slots[j].obj);
    }
    assert_int_equal(n, sh->nobjs);
    assert_int_equal(atomic_load(&sh->keys), sh->nobjs);
    assert_true(sh->nobjs * 4 <= sh->nslots * 3);
}

static void probe_insert_remove_with_collisions(void **state)
{
    (void)state;
    crk_shard sh = {0};
    assert_int_equal(crk_shard_init(&sh), 0);
    assert_int_equal(sh.nslots, 16);
    /* Three keys with one home slot (15), wrapping to 0 and 1; one homed at 0. */
    crk_object *a = add(&sh, "a", 15), *b = add(&sh, "b", 15), *c = add(&sh, "c", 31);
    crk_object *d = add(&sh, "d", 16);
    check_runs(&sh);
    assert_ptr_equal(find(&sh, "a", 15), a);
    assert_ptr_equal(find(&sh, "b", 15), b);
    assert_ptr_equal(find(&sh, "c", 31), c);
    assert_ptr_equal(find(&sh, "d", 16), d);
    assert_null(find(&sh, "e", 15));
    assert_null(find(&sh, "a", 14)); /* same bytes, other hash: another key */
    /* Removing the first of the run shifts the others back. */
    del(&sh, a);
    check_runs(&sh);
    assert_null(find(&sh, "a", 15));
    assert_ptr_equal(find(&sh, "b", 15), b);
    assert_ptr_equal(find(&sh, "c", 31), c);
    assert_ptr_equal(find(&sh, "d", 16), d);
    del(&sh, d);
    del(&sh, b);
    del(&sh, c);
    check_runs(&sh);
    assert_int_equal(sh.nobjs, 0);
    crk_shard_destroy(&sh);
}

static void growth_keeps_every_key(void **state)
{
    (void)state;
    crk_shard sh = {0};
    assert_int_equal(crk_shard_init(&sh), 0);
    char key[32];
    enum { N = 5000 };
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        add(&sh, key, (uint32_t)(i * 7u) & 0xFFu); /* 256 distinct hashes: long runs */
    }
    check_runs(&sh);
    assert_true(sh.nslots >= N * 4 / 3);
    assert_ptr_equal(atomic_load(&sh.hint_slots), sh.slots);
    assert_int_equal(atomic_load(&sh.hint_mask), sh.nslots - 1);
    for (int i = 0; i < N; i++) {
        snprintf(key, sizeof(key), "k%d", i);
        crk_object *o = find(&sh, key, (uint32_t)(i * 7u) & 0xFFu);
        assert_non_null(o);
        assert_string_equal(o->key, key);
    }
    crk_shard_destroy(&sh); /* frees the objects */
}

static void random_ops_match_a_model(void **state)
{
    (void)state;
    enum { KEYS = 400, STEPS = 20000 };
    crk_shard sh = {0};
    assert_int_equal(crk_shard_init(&sh), 0);
    crk_object *model[KEYS] = {0};
    uint64_t x = 88172645463325252ull;
    char key[16];
    for (int step = 0; step < STEPS; step++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        int k = (int)(x % KEYS);
        uint32_t h = (uint32_t)(k % 37); /* many collisions */
        snprintf(key, sizeof(key), "key%d", k);
        if (model[k]) {
            assert_ptr_equal(find(&sh, key, h), model[k]);
            del(&sh, model[k]);
            model[k] = NULL;
        } else {
            assert_null(find(&sh, key, h));
            model[k] = add(&sh, key, h);
        }
        if (step % 997 == 0)
            check_runs(&sh);
    }
    check_runs(&sh);
    for (int k = 0; k < KEYS; k++) {
        snprintf(key, sizeof(key), "key%d", k);
        assert_ptr_equal(find(&sh, key, (uint32_t)(k % 37)), model[k]);
    }
    crk_shard_destroy(&sh);
}

static void lru_and_writes(void **state)
{
    (void)state;
    crk_shard sh = {0};
    assert_int_equal(crk_shard_init(&sh), 0);
    crk_object *a = add(&sh, "a", 1), *b = add(&sh, "b", 2), *c = add(&sh, "c", 3);
    crk_lru_push_tail(&sh, a);
    crk_lru_push_tail(&sh, b);
    crk_lru_push_tail(&sh, c);
    assert_int_equal(sh.lru_count, 3);
    assert_ptr_equal(sh.lru_head, a);
    crk_lru_move_to_tail(&sh, a);
    assert_ptr_equal(sh.lru_head, b);
    assert_ptr_equal(sh.lru_tail, a);
    crk_lru_unlink(&sh, c);
    crk_lru_unlink(&sh, c); /* not in the list: no-op */
    assert_int_equal(sh.lru_count, 2);
    assert_ptr_equal(sh.lru_head->lru_next, a);
    crk_lru_move_to_tail(&sh, c); /* not in the list: no-op */
    assert_int_equal(sh.lru_count, 2);
    /* crk_shard_remove takes an object out of the LRU too. */
    del(&sh, b);
    assert_int_equal(sh.lru_count, 1);
    assert_ptr_equal(sh.lru_head, a);

    crk_write *w1 = crk_calloc(1, sizeof(*w1)), *w2 = crk_calloc(1, sizeof(*w2));
    assert_non_null(w1);
    assert_non_null(w2);
    w1->obj = a;
    a->write = w1;
    w2->obj = c;
    c->write = w2;
    crk_write_push(&sh, w1);
    crk_write_push(&sh, w2);
    assert_int_equal(atomic_load(&sh.writes), 2);
    assert_ptr_equal(sh.w_head, w1);
    crk_write_drop(&sh, w1);
    assert_null(a->write);
    assert_ptr_equal(sh.w_head, w2);
    assert_ptr_equal(sh.w_tail, w2);
    assert_int_equal(atomic_load(&sh.writes), 1);
    crk_shard_destroy(&sh); /* frees c's write with c */
}

static void object_block_layout(void **state)
{
    (void)state;
    crk_object *o = crk_obj_new("abcdefghi", 9, 42, 3);
    assert_non_null(o);
    assert_int_equal(o->key_len, 9);
    assert_int_equal(o->nrep, 3);
    assert_int_equal(o->hash, 42);
    assert_string_equal(o->key, "abcdefghi");
    /* Replicas start 8-aligned after key + NUL. */
    assert_int_equal((uintptr_t)crk_obj_reps(o) - (uintptr_t)o->key, 16);
    assert_int_equal((uintptr_t)crk_obj_reps(o) % 8, 0);
    crk_free(o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(probe_insert_remove_with_collisions),
        cmocka_unit_test(growth_keeps_every_key),
        cmocka_unit_test(random_ops_match_a_model),
        cmocka_unit_test(lru_and_writes),
        cmocka_unit_test(object_block_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
