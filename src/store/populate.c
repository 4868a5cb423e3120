/*
 * populate.c - when the pages of this client's global segment are committed.
 *
 * The segment is a memfd mapped MAP_NORESERVE (design §2.9): by default a
 * page is committed when it is first written, which is what lets a client
 * offer more memory than it will use. The price is paid on the data path: the
 * first write into a never-touched page allocates and zeroes it, and on a
 * virtual machine the host may have to back it too. Measured on the 2-vCPU
 * KVM guest of docs/PERFORMANCE.md: a memcpy into fresh memfd pages runs at
 * 0.4-0.75 GB/s against 5-8 GB/s into committed ones, and a tcp put into a
 * freshly mounted holder runs at ~0.3x the engine's own write.
 *
 * CRESCENT_SEGMENT_POPULATE chooses (read once per store setup):
 *   lazy (also "0")    pages are committed as they are written. The default,
 *                      except for a store with an SSD tier (below).
 *   mount (also "1")   every page is committed during cr_store_setup with
 *                      MADV_POPULATE_WRITE, before the segment is mounted
 *                      (Mooncake's default: its segments are MAP_POPULATE).
 *                      Setup takes as long as committing the memory takes and
 *                      fails with CR_ERR_NO_MEMORY if it cannot be committed.
 *   background         a SCHED_IDLE thread commits the segment front to back
 *                      in 2 MiB steps after the mount, while the store serves;
 *                      it stops at the first failure (logged) and at close.
 *                      The default for a store with an SSD tier
 *                      (enable_ssd_offload): its segment fills by design (the
 *                      tier takes values only once the memory is full), so
 *                      its pages are committed ahead of the puts instead of
 *                      on their data path. Measured (docs/PERFORMANCE.md,
 *                      "SSD tier: where the offload stream's time goes"): a
 *                      1 MiB put into a never-touched page range took
 *                      0.9-1 ms against ~0.2 ms warm; the 1 MiB offload
 *                      stream ran at 0.61-0.79x (median 0.74) the disk's
 *                      O_DIRECT write end to end with lazy pages, 0.68-0.82x
 *                      (0.78) in the background, 0.80-0.85x with mount.
 * MADV_POPULATE_WRITE never changes a page's contents, so committing a page
 * that a peer is writing at the same moment is safe. Kernels without it
 * (before 5.14) get a warning and the lazy behaviour.
 */
#include <errno.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>

#include "base/error.h"
#include "base/log.h"
#include "store/internal.h"

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

#define POPULATE_STEP (2ull << 20)

static int populate_range(uint8_t *p, uint64_t len)
{
    if (madvise(p, len, MADV_POPULATE_WRITE) == 0)
        return 0;
    if (errno == EINVAL)
        return crb_error(CR_ERR_NOT_IMPLEMENTED,
                         "MADV_POPULATE_WRITE is not supported by this kernel (5.14 or later)");
    return crb_error(CR_ERR_NO_MEMORY, "committing %llu bytes of the segment: %s",
                     (unsigned long long)len, strerror(errno));
}

int crc_populate_mode(bool disk_tier, int *mode)
{
    const char *v = getenv("CRESCENT_SEGMENT_POPULATE");
    if (v == NULL || v[0] == '\0')
        *mode = disk_tier ? CRC_POPULATE_BACKGROUND : CRC_POPULATE_LAZY;
    else if (strcmp(v, "0") == 0 || strcasecmp(v, "lazy") == 0)
        *mode = CRC_POPULATE_LAZY;
    else if (strcmp(v, "1") == 0 || strcasecmp(v, "mount") == 0)
        *mode = CRC_POPULATE_MOUNT;
    else if (strcasecmp(v, "background") == 0)
        *mode = CRC_POPULATE_BACKGROUND;
    else
        return crb_error(CR_INVALID_PARAMS,
                         "CRESCENT_SEGMENT_POPULATE='%s' is not lazy, mount or background", v);
    return 0;
}

int crc_populate_now(cr_store *s)
{
    for (uint64_t off = 0; off < s->segment_size; off += 64 * POPULATE_STEP) {
        uint64_t len =
            s->segment_size - off < 64 * POPULATE_STEP ? s->segment_size - off : 64 * POPULATE_STEP;
        int rc = populate_range(s->segment + off, len);
        if (rc == CR_ERR_NOT_IMPLEMENTED) {
            crb_log(CRB_LOG_WARN, "store: %s; the segment stays lazy", cr_last_error_message());
            return 0;
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

static void *populate_main(void *arg)
{
    cr_store *s = arg;
    struct sched_param sp = {0};
    pthread_setschedparam(pthread_self(), SCHED_IDLE, &sp); /* a hint: lowest priority */
    for (uint64_t off = 0; off < s->segment_size && !atomic_load(&s->stop); off += POPULATE_STEP) {
        uint64_t len =
            s->segment_size - off < POPULATE_STEP ? s->segment_size - off : POPULATE_STEP;
        if (populate_range(s->segment + off, len) < 0) {
            crb_log(CRB_LOG_WARN, "store: background populate stopped at offset %llu: %s",
                    (unsigned long long)off, cr_last_error_message());
            break;
        }
    }
    return NULL;
}

int crc_populate_start(cr_store *s)
{
    if (pthread_create(&s->populate_thread, NULL, populate_main, s) != 0)
        return crb_error(CR_ERR_SYSTEM, "starting the segment populate thread");
    s->populate_running = true;
    return 0;
}

void crc_populate_stop(cr_store *s)
{
    if (!s->populate_running)
        return;
    atomic_store(&s->stop, true);
    pthread_join(s->populate_thread, NULL);
    s->populate_running = false;
}
