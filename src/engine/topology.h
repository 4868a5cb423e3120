/*
 * topology.h - which RDMA NICs are near which memory, read from sysfs.
 *
 * A host has NICs (RDMA devices under <root>/class/infiniband), GPUs (PCI
 * display/3D controllers) and NUMA nodes. Each device has a NUMA node and a
 * PCI root complex (the "pci<domain>:<bus>" component of its resolved sysfs
 * path). The nearest NICs of a buffer are, in order of preference:
 *   device memory: the NICs under the GPU's PCI root, else on its NUMA node;
 *   host memory:   the NICs on the NUMA node holding the buffer's pages;
 * and every NIC when none qualifies (or the topology is unknown).
 *
 * The root is "/sys" on a real host; tests point it at a fake tree
 * (tests/data/sysfs-*). Loading never fails on a missing or partial tree:
 * what cannot be read is simply absent.
 *
 * Threading: a loaded topology is immutable; read it from any thread.
 */
#ifndef CRESCENT_ENGINE_TOPOLOGY_H
#define CRESCENT_ENGINE_TOPOLOGY_H

#include <stddef.h>
#include <stdint.h>

#define CRE_TOPO_MAX_NICS 32
#define CRE_TOPO_MAX_GPUS 32
#define CRE_TOPO_NAME     64

typedef struct cre_topo_dev {
    char name[CRE_TOPO_NAME];     /* "mlx5_0", or the GPU's PCI address "0000:3b:00.0" */
    char pci_root[CRE_TOPO_NAME]; /* "pci0000:3a", "" if unknown */
    int numa_node;                /* -1 if unknown */
} cre_topo_dev;

typedef struct cre_topology {
    size_t n_nics, n_gpus;
    cre_topo_dev nics[CRE_TOPO_MAX_NICS]; /* sorted by name */
    cre_topo_dev gpus[CRE_TOPO_MAX_GPUS]; /* sorted by PCI address */
} cre_topology;

/** Read the topology under `root` ("/sys"). Never fails; fills *out. */
void cre_topo_load(const char *root, cre_topology *out);

/** Index of the NIC named `name` ("mlx5_0", or "mlx5_0:1" with a port), or -1. */
int cre_topo_nic_index(const cre_topology *t, const char *name);

/**
 * The NICs nearest a buffer, as a bit mask over t->nics (bit i = nics[i]),
 * restricted to `allowed` (a mask; all bits = any). Memory is described by
 * its NUMA node (host memory; -1 unknown) or its GPU's PCI address (device
 * memory; NULL for host memory). Returns `allowed & all NICs` when no NIC
 * is nearer than another.
 */
uint32_t cre_topo_nearest_nics(const cre_topology *t, int numa_node, const char *gpu_pci,
                               uint32_t allowed);

/** The NUMA node of the page at addr (-1 when the kernel cannot say). */
int cre_topo_numa_of(const void *addr);

#endif
