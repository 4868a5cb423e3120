/*
 * main.c - crescent-bench: measure crescent against plain baselines.
 *
 *   crescent-bench <subcommand> [flags]      (crescent-bench --help)
 *
 * Design: this file only picks the subcommand; each one parses its own flags
 * (argv[0] is then the subcommand name) and returns the process exit code:
 * 0 success, 1 a transfer/verification/environment failure, 2 a bad command
 * line. New subcommands (store, ...) are one row in the table below.
 */
#include <signal.h>
#include <string.h>

#include "bench.h"

typedef struct subcommand {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *summary;
} subcommand;

static const subcommand subcommands[] = {
    {"engine", cb_engine_main, "transfer-engine READ/WRITE throughput and latency"},
    {"master", cb_master_main, "store master metadata operations per second"},
    {"store", cb_store_main, "store put/get between client processes vs the shm transport"},
    {"thin", cb_thin_main, "thin client through crescent-client vs an embedded client"},
    {"metadata", cb_metadata_main,
     "descriptor fetch latency per metadata backend (p2p/http/etcd/redis)"},
    {"disk", cb_disk_main, "disk tier offload/disk-hit throughput vs plain O_DIRECT I/O"},
    {"offload", cb_offload_main, "SSD tier through the store: offload and disk hits vs O_DIRECT"},
    {"soak", cb_soak_main, "store soak: kill -9 of clients and master, bytes and RSS/fds checked"},
    {"ha", cb_ha_main,
     "HA master: failover time (kill -9 of the leader) and HA vs plain throughput"},
};

#define N_SUBCOMMANDS (sizeof(subcommands) / sizeof(subcommands[0]))

static void usage(FILE *to)
{
    fprintf(to, "usage: " CB_PROG " <subcommand> [flags]\n\nsubcommands:\n");
    for (size_t i = 0; i < N_SUBCOMMANDS; i++)
        fprintf(to, "  %-10s %s\n", subcommands[i].name, subcommands[i].summary);
    fprintf(to, "\n'" CB_PROG " <subcommand> --help' describes a subcommand's flags.\n"
                "Exit status: 0 ok, 1 a transfer or verification failed, 2 bad usage.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return CB_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        usage(stdout);
        return CB_EXIT_OK;
    }
    /* Peers and sinks may vanish mid-run; report that as an error, not a signal. */
    signal(SIGPIPE, SIG_IGN);
    for (size_t i = 0; i < N_SUBCOMMANDS; i++)
        if (strcmp(cmd, subcommands[i].name) == 0)
            return subcommands[i].main(argc - 1, argv + 1);
    fprintf(stderr, CB_PROG ": unknown %s '%s'\n", cmd[0] == '-' ? "flag" : "subcommand", cmd);
    usage(stderr);
    return CB_EXIT_USAGE;
}
