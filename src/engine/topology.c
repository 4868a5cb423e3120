/*
 * topology.c - see topology.h. Plain directory walks and small files; a
 * device whose files are missing keeps numa_node -1 and an empty root.
 */
#include "engine/topology.h"

#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* First line of a small file, without the newline; false if unreadable. */
static bool read_line(const char *path, char *out, size_t cap)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return false;
    bool ok = fgets(out, (int)cap, f) != NULL;
    fclose(f);
    if (ok)
        out[strcspn(out, "\r\n")] = '\0';
    return ok;
}

static int read_int(const char *path, int fallback)
{
    char line[32];
    if (!read_line(path, line, sizeof(line)))
        return fallback;
    char *end;
    long v = strtol(line, &end, 0);
    return end == line ? fallback : (int)v;
}

/* The "pciDDDD:BB" component of a resolved device path. */
static void pci_root_of(const char *dev_dir, char *out, size_t cap)
{
    out[0] = '\0';
    char resolved[PATH_MAX];
    if (realpath(dev_dir, resolved) == NULL)
        return;
    const char *p = strstr(resolved, "/pci");
    if (p == NULL)
        return;
    p++;
    size_t n = strcspn(p, "/");
    if (n >= cap)
        n = cap - 1;
    memcpy(out, p, n);
    out[n] = '\0';
}

static void fill_dev(cre_topo_dev *d, const char *name, const char *dev_dir)
{
    snprintf(d->name, sizeof(d->name), "%s", name);
    char path[PATH_MAX + 320];
    snprintf(path, sizeof(path), "%s/numa_node", dev_dir);
    d->numa_node = read_int(path, -1);
    pci_root_of(dev_dir, d->pci_root, sizeof(d->pci_root));
}

static int by_name(const void *a, const void *b)
{
    return strcmp(((const cre_topo_dev *)a)->name, ((const cre_topo_dev *)b)->name);
}

static void load_nics(const char *root, cre_topology *t)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/class/infiniband", root);
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && t->n_nics < CRE_TOPO_MAX_NICS) {
        if (de->d_name[0] == '.')
            continue;
        char dev[PATH_MAX + 300];
        snprintf(dev, sizeof(dev), "%s/%s/device", dir, de->d_name);
        fill_dev(&t->nics[t->n_nics++], de->d_name, dev);
    }
    closedir(d);
    qsort(t->nics, t->n_nics, sizeof(t->nics[0]), by_name);
}

/* NVIDIA (0x10de) display or 3D controllers (class 0x03xxxx). */
static void load_gpus(const char *root, cre_topology *t)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s/bus/pci/devices", root);
    DIR *d = opendir(dir);
    if (d == NULL)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && t->n_gpus < CRE_TOPO_MAX_GPUS) {
        if (de->d_name[0] == '.')
            continue;
        char dev[PATH_MAX + 300], path[PATH_MAX + 320];
        snprintf(dev, sizeof(dev), "%s/%s", dir, de->d_name);
        snprintf(path, sizeof(path), "%s/vendor", dev);
        int vendor = read_int(path, 0);
        snprintf(path, sizeof(path), "%s/class", dev);
        int cls = read_int(path, 0);
        if (vendor != 0x10de || (cls >> 16) != 0x03)
            continue;
        fill_dev(&t->gpus[t->n_gpus++], de->d_name, dev);
    }
    closedir(d);
    qsort(t->gpus, t->n_gpus, sizeof(t->gpus[0]), by_name);
}

void cre_topo_load(const char *root, cre_topology *out)
{
    memset(out, 0, sizeof(*out));
    load_nics(root ? root : "/sys", out);
    load_gpus(root ? root : "/sys", out);
}

int cre_topo_nic_index(const cre_topology *t, const char *name)
{
    size_t n = strcspn(name, ":");
    for (size_t i = 0; i < t->n_nics; i++)
        if (strlen(t->nics[i].name) == n && strncmp(t->nics[i].name, name, n) == 0)
            return (int)i;
    return -1;
}

uint32_t cre_topo_nearest_nics(const cre_topology *t, int numa_node, const char *gpu_pci,
                               uint32_t allowed)
{
    uint32_t all = 0;
    for (size_t i = 0; i < t->n_nics; i++)
        all |= 1u << i;
    all &= allowed;
    if (gpu_pci != NULL) {
        for (size_t g = 0; g < t->n_gpus; g++) {
            if (strcmp(t->gpus[g].name, gpu_pci) != 0)
                continue;
            uint32_t same_root = 0;
            for (size_t i = 0; i < t->n_nics; i++)
                if (t->gpus[g].pci_root[0] != '\0' &&
                    strcmp(t->nics[i].pci_root, t->gpus[g].pci_root) == 0)
                    same_root |= 1u << i;
            if ((same_root & all) != 0)
                return same_root & all;
            numa_node = t->gpus[g].numa_node;
            break;
        }
    }
    if (numa_node >= 0) {
        uint32_t same_node = 0;
        for (size_t i = 0; i < t->n_nics; i++)
            if (t->nics[i].numa_node == numa_node)
                same_node |= 1u << i;
        if ((same_node & all) != 0)
            return same_node & all;
    }
    return all;
}

int cre_topo_numa_of(const void *addr)
{
    int node = -1;
    /* get_mempolicy(MPOL_F_NODE | MPOL_F_ADDR): the node of the page. */
    long rc = syscall(SYS_get_mempolicy, &node, NULL, 0UL, addr, 3UL);
    return rc == 0 ? node : -1;
}
