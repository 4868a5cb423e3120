/*
 * topology_test.c - the sysfs reader and the nearest-NIC choice against a
 * fake tree checked in under tests/data/sysfs-2numa: two NUMA nodes, four
 * RDMA NICs under four PCI roots, two GPUs sharing roots with mlx5_0 and
 * mlx5_1, and an NVMe drive that is neither.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>

#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "engine/topology.h"

#define BIT(i) (1u << (i))

static cre_topology topo;

static int load(void **state)
{
    const char *root = getenv("CRESCENT_TEST_SYSFS");
    cre_topo_load(root ? root : "tests/data/sysfs-2numa", &topo);
    return topo.n_nics == 4 ? 0 : -1;
}

static void test_devices_are_read(void **state)
{
    assert_int_equal(topo.n_nics, 4);
    assert_int_equal(topo.n_gpus, 2);
    assert_string_equal(topo.nics[0].name, "mlx5_0");
    assert_string_equal(topo.nics[0].pci_root, "pci0000:00");
    assert_int_equal(topo.nics[0].numa_node, 0);
    assert_string_equal(topo.nics[3].name, "mlx5_3");
    assert_string_equal(topo.nics[3].pci_root, "pci0000:c0");
    assert_int_equal(topo.nics[3].numa_node, 1);
    assert_string_equal(topo.gpus[1].name, "0000:3b:00.0");
    assert_string_equal(topo.gpus[1].pci_root, "pci0000:3a");
    assert_int_equal(cre_topo_nic_index(&topo, "mlx5_2"), 2);
    assert_int_equal(cre_topo_nic_index(&topo, "mlx5_2:1"), 2);
    assert_int_equal(cre_topo_nic_index(&topo, "mlx5_9"), -1);
}

static void test_gpu_memory_prefers_its_pci_root(void **state)
{
    assert_int_equal(cre_topo_nearest_nics(&topo, -1, "0000:3b:00.0", ~0u), BIT(1));
    assert_int_equal(cre_topo_nearest_nics(&topo, -1, "0000:03:00.0", ~0u), BIT(0));
    /* The same-root NIC is not allowed: fall back to the GPU's NUMA node. */
    assert_int_equal(cre_topo_nearest_nics(&topo, -1, "0000:3b:00.0", BIT(0) | BIT(2)), BIT(0));
}

static void test_host_memory_prefers_its_numa_node(void **state)
{
    assert_int_equal(cre_topo_nearest_nics(&topo, 1, NULL, ~0u), BIT(2) | BIT(3));
    assert_int_equal(cre_topo_nearest_nics(&topo, 0, NULL, ~0u), BIT(0) | BIT(1));
    assert_int_equal(cre_topo_nearest_nics(&topo, 0, NULL, BIT(2)), BIT(2)); /* only one allowed */
}

static void test_unknown_memory_gets_every_nic(void **state)
{
    uint32_t all = BIT(0) | BIT(1) | BIT(2) | BIT(3);
    assert_int_equal(cre_topo_nearest_nics(&topo, -1, NULL, ~0u), all);
    assert_int_equal(cre_topo_nearest_nics(&topo, 7, NULL, ~0u), all);
    assert_int_equal(cre_topo_nearest_nics(&topo, -1, "0000:99:00.0", ~0u), all);
}

static void test_missing_tree_is_empty(void **state)
{
    cre_topology t;
    cre_topo_load("/nonexistent-sysfs-root", &t);
    assert_int_equal(t.n_nics, 0);
    assert_int_equal(t.n_gpus, 0);
    assert_int_equal(cre_topo_nearest_nics(&t, 0, NULL, ~0u), 0);
    int x = 0;
    int node = cre_topo_numa_of(&x); /* this machine: 0, or -1 without NUMA support */
    assert_true(node >= -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_devices_are_read),
        cmocka_unit_test(test_gpu_memory_prefers_its_pci_root),
        cmocka_unit_test(test_host_memory_prefers_its_numa_node),
        cmocka_unit_test(test_unknown_memory_gets_every_nic),
        cmocka_unit_test(test_missing_tree_is_empty),
    };
    return cmocka_run_group_tests(tests, load, NULL);
}
