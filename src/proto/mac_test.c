/*
 * mac_test.c - crp_proof against RFC 4231's HMAC-SHA256 test case 2, the
 * label/nonce concatenation, cutting, and the comparison.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "proto/mac.h"

static const uint8_t rfc4231_case2[CRP_PROOF_SIZE] = {
    0x5b, 0xdc, 0xc1, 0x46, 0xbf, 0x60, 0x75, 0x4e, 0x6a, 0x04, 0x24, 0x26, 0x08, 0x95, 0x75, 0xc7,
    0x5a, 0x00, 0x3f, 0x08, 0x9d, 0x27, 0x39, 0x83, 0x9d, 0xec, 0x58, 0xb9, 0x64, 0xec, 0x38, 0x43};

static void known_vector(void **state)
{
    (void)state;
    /* "what do ya want for nothing?" as label | a | b */
    const char *b = " nothing?";
    uint8_t mac[CRP_PROOF_SIZE];
    crp_proof("Jefe", 4, "what do ya want ", (const uint8_t *)"for", 3, (const uint8_t *)b,
              strlen(b), mac);
    assert_memory_equal(mac, rfc4231_case2, CRP_PROOF_SIZE);
    /* The same bytes split differently give the same proof. */
    uint8_t again[CRP_PROOF_SIZE];
    crp_proof("Jefe", 4, "what do ya want for nothing?", NULL, 0, NULL, 0, again);
    assert_true(crp_proof_equal(mac, again));
}

static void inputs_matter(void **state)
{
    (void)state;
    uint8_t a[16] = {1}, b[16] = {2}, m1[CRP_PROOF_SIZE], m2[CRP_PROOF_SIZE];
    crp_proof("s", 1, "client", a, 16, b, 16, m1);
    crp_proof("s", 1, "server", a, 16, b, 16, m2);
    assert_false(crp_proof_equal(m1, m2)); /* the label */
    crp_proof("t", 1, "client", a, 16, b, 16, m2);
    assert_false(crp_proof_equal(m1, m2)); /* the secret */
    crp_proof("s", 1, "client", b, 16, a, 16, m2);
    assert_false(crp_proof_equal(m1, m2)); /* the nonces' order */
    /* Labels and nonces past their limits are cut, never overrun. */
    char label[100];
    memset(label, 'x', sizeof(label) - 1);
    label[sizeof(label) - 1] = '\0';
    uint8_t big[64] = {0};
    crp_proof("s", 1, label, big, sizeof(big), big, sizeof(big), m1);
    label[CRP_PROOF_LABEL_MAX] = '\0';
    crp_proof("s", 1, label, big, CRP_PROOF_NONCE_MAX, big, CRP_PROOF_NONCE_MAX, m2);
    assert_true(crp_proof_equal(m1, m2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(known_vector),
        cmocka_unit_test(inputs_matter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
