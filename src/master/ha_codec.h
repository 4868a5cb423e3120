/*
 * ha_codec.h - the HA replication stream's entries (docs/ha.md, "wire").
 *
 * A CRP_REPL_DATA frame's body is
 *     u64 first_seq (0: snapshot entries, which carry no sequence number)
 *     u32 count, then count x (u32 len, len bytes of one entry)
 * and an entry is a post-image (applying one twice changes nothing):
 *     u8 kind
 *     MOUNT    u64 epoch, u64 owner_hi, u64 owner_lo, u64 base, u64 size,
 *              u16 name_len, name bytes
 *     UNMOUNT  u64 epoch
 *     KEY      u16 key_len, key bytes, u8 flags (CRK_HA_F_*), u64 size,
 *              u64 soft_pin_left_ms, u8 nrep, nrep x (u64 epoch, u64 offset),
 *              and with CRK_HA_F_WRITING: u64 write_size, u8 wnrep,
 *              wnrep x (u64 epoch, u64 offset)
 *              (neither complete nor writing: the key is gone)
 *     DISK     u16 key_len, key bytes, u8 flags (CRK_HA_F_ON_DISK, or 0: no
 *              disk copy any more), u64 holder_hi, u64 holder_lo (the client
 *              whose SSD tier holds it), u64 version, u64 size: the key's
 *              disk copy (master/offload.h), independent of its KEY image
 *     SNAP_END u64 end_seq (the snapshot holds everything before it)
 *     RESET    nothing (forget everything; a snapshot follows)
 * Integers are little-endian. Replicas name their segment by mount epoch
 * (unique within a leader's service, kept across promotions).
 *
 * Decoding is bounds-checked: every length is checked against what is left,
 * names and keys against their limits, counts against CRK_MAX_REPLICAS;
 * failures are CR_ERR_MALFORMED_FRAME with what and where. Decoded entries
 * point into the input (valid while it is). Fuzzed by fuzz/fuzz_ha_entry.c.
 * Threading: no shared state.
 */
#ifndef CRESCENT_MASTER_HA_CODEC_H
#define CRESCENT_MASTER_HA_CODEC_H

#include <stddef.h>
#include <stdint.h>

#define CRK_HA_MAX_KEY   (4096 + 130) /* = CRK_MAX_KEY_LEN */
#define CRK_HA_MAX_NAME  256          /* = CRK_MAX_SEGMENT_NAME */
#define CRK_HA_MAX_REPS  8            /* = CRK_MAX_REPLICAS */
#define CRK_HA_MAX_FRAME (1u << 20)   /* = CRP_MAX_BODY */

enum crk_ha_kind {
    CRK_HA_MOUNT = 1,
    CRK_HA_UNMOUNT = 2,
    CRK_HA_KEY = 3,
    CRK_HA_SNAP_END = 4,
    CRK_HA_RESET = 5,
    CRK_HA_DISK = 6,
};

#define CRK_HA_F_COMPLETE 0x01u
#define CRK_HA_F_HARD_PIN 0x02u
#define CRK_HA_F_SOFT_PIN 0x04u
#define CRK_HA_F_WRITING  0x08u
#define CRK_HA_F_ON_DISK  0x01u /* DISK entries: the copy exists */

typedef struct crk_ha_rep {
    uint64_t epoch, offset;
} crk_ha_rep;

typedef struct crk_ha_entry {
    int kind;
    /* MOUNT / UNMOUNT (owner_hi/lo also for DISK) */
    uint64_t epoch, owner_hi, owner_lo, base, size;
    const char *name; /* not NUL-terminated */
    size_t name_len;
    /* KEY (size is the complete version's value size) */
    const char *key; /* not NUL-terminated */
    size_t key_len;
    uint8_t flags;
    uint64_t soft_left_ms;
    uint32_t nrep;
    uint64_t wsize;
    uint32_t wnrep;
    /* DISK (also key, key_len, flags, size; owner_hi/lo: the holder) */
    uint64_t disk_version;
    /* SNAP_END */
    uint64_t end_seq;
    /* KEY: the replicas last, so that decoding writes only the nrep and
     * wnrep in use (the rest are unspecified after crk_ha_entry_decode) */
    crk_ha_rep rep[CRK_HA_MAX_REPS];
    crk_ha_rep wrep[CRK_HA_MAX_REPS];
} crk_ha_entry;

/** A growable byte buffer (zero-initialise; free with crk_ha_buf_free). */
typedef struct crk_ha_buf {
    uint8_t *data;
    size_t len, cap;
} crk_ha_buf;

void crk_ha_buf_free(crk_ha_buf *b);

/** Append e's encoding (without the u32 length). CR_ERR_NO_MEMORY or
 *  CR_INVALID_PARAMS (a field over its limit); b is unchanged on failure. */
int crk_ha_entry_encode(const crk_ha_entry *e, crk_ha_buf *b);

/** Decode one entry of exactly n bytes. 0 or CR_ERR_MALFORMED_FRAME.
 *  Writes every field of *out but rep[nrep..] and wrep[wnrep..]. */
int crk_ha_entry_decode(const uint8_t *p, size_t n, crk_ha_entry *out);

/** A frame body's header: first_seq and count. 0 or CR_ERR_MALFORMED_FRAME. */
int crk_ha_frame_header(const uint8_t *body, size_t len, uint64_t *first_seq, uint32_t *count);

/** The entry at *off (start at 12, after the header); advances *off.
 *  0 or CR_ERR_MALFORMED_FRAME. */
int crk_ha_frame_entry(const uint8_t *body, size_t len, size_t *off, const uint8_t **entry,
                       size_t *entry_len);

#endif
