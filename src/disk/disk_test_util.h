/*
 * disk_test_util.h - helpers for the disk store's tests (unit tests beside
 * the code and tests/disk): scratch directories, self-describing values,
 * bucket file access. Test-only; header-only.
 *
 * A value for (key id, version, length) is a deterministic byte stream; its
 * first 16 bytes (when it has them) carry the id and version, so a reader
 * can tell which version it got and check every byte of it.
 */
#ifndef CRESCENT_DISK_TEST_UTIL_H
#define CRESCENT_DISK_TEST_UTIL_H

#include <dirent.h>
#include <ftw.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static inline uint64_t tu_mix(uint64_t x)
{
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline void tu_fill(uint8_t *dst, uint64_t len, uint64_t id, uint64_t version)
{
    for (uint64_t i = 0; i < len; i += 8) {
        uint64_t v = tu_mix(id * 0x100000001B3ull ^ (version << 48) ^ (i / 8));
        uint64_t n = len - i < 8 ? len - i : 8;
        memcpy(dst + i, &v, n);
    }
    if (len >= 16) {
        memcpy(dst, &id, 8);
        memcpy(dst + 8, &version, 8);
    }
}

/* Does buf hold exactly tu_fill(len, id, version)? */
static inline int tu_check(const uint8_t *buf, uint64_t len, uint64_t id, uint64_t version)
{
    uint8_t *want = malloc(len > 0 ? len : 1);
    if (want == NULL)
        return 0;
    tu_fill(want, len, id, version);
    int ok = memcmp(buf, want, len) == 0;
    free(want);
    return ok;
}

/* The version a value claims to be (needs len >= 16). */
static inline uint64_t tu_version_of(const uint8_t *buf)
{
    uint64_t v;
    memcpy(&v, buf + 8, 8);
    return v;
}

static inline void tu_key(char *out, size_t cap, uint64_t id)
{
    snprintf(out, cap, "key-%06llu", (unsigned long long)id);
}

/* A fresh scratch directory under $TMPDIR (default /tmp). */
static inline char *tu_mkdtemp(const char *tag)
{
    const char *base = getenv("TMPDIR");
    char *path = malloc(4096);
    snprintf(path, 4096, "%s/crf-%s-XXXXXX", base != NULL && base[0] != '\0' ? base : "/tmp", tag);
    if (mkdtemp(path) == NULL) {
        free(path);
        return NULL;
    }
    return path;
}

static inline int tu_rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(p);
}

static inline void tu_rmtree(char *path)
{
    if (path == NULL)
        return;
    nftw(path, tu_rm_one, 16, FTW_DEPTH | FTW_PHYS);
    free(path);
}

/* Number of bucket files in dir; names of the first `cap` into names (sorted). */
static inline int tu_buckets(const char *dir, char names[][64], int cap)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (d == NULL)
        return -1;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t l = strlen(de->d_name);
        if (l < 4 || strcmp(de->d_name + l - 4, ".bkt") != 0)
            continue;
        if (n < cap)
            snprintf(names[n], 64, "%.63s", de->d_name);
        n++;
    }
    closedir(d);
    int m = n < cap ? n : cap;
    for (int i = 1; i < m; i++)
        for (int j = i; j > 0 && strcmp(names[j - 1], names[j]) > 0; j--) {
            char t[64];
            memcpy(t, names[j], 64);
            memcpy(names[j], names[j - 1], 64);
            memcpy(names[j - 1], t, 64);
        }
    return n;
}

#endif
