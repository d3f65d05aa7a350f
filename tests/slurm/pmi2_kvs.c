/* SPDX-License-Identifier: GPL-2.0-or-later */
/* pmi2_kvs: one real PMI2 key-value exchange across every task of a step.
 *
 * Run under `srun --mpi=pmi2 -n N pmi2_kvs`.  Each task puts one key naming
 * its rank and node, fences once, then reads every other task's key and
 * checks its value.  It prints one line
 *   rank=R size=S procid=P nodeid=I node=NAME kvs=ok
 * (kvs=bad when a value was wrong) that tests/slurm/cluster.sh parses, and
 * exits 0 only when PMI2 worked and every value matched. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <slurm/pmi2.h>

#define PROG "pmi2_kvs"

/* The value each rank publishes: "<rank>@<node>". */
static int value_for(int rank, const char *node, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%d@%s", rank, node);
    return (n < 0 || (size_t)n >= len) ? -1 : 0;
}

int main(void)
{
    int spawned = 0, size = 0, rank = -1, appnum = 0, rc;
    int bad = 0, initialized = 0;
    char jobid[256], key[PMI2_MAX_KEYLEN], value[PMI2_MAX_VALLEN], got[PMI2_MAX_VALLEN];
    const char *node = getenv("SLURMD_NODENAME");
    const char *procid = getenv("SLURM_PROCID");
    const char *nodeid = getenv("SLURM_NODEID");
    int status = 1;

    if (!node || !*node)
        node = "unknown";
    rc = PMI2_Init(&spawned, &size, &rank, &appnum);
    if (rc != PMI2_SUCCESS) {
        fprintf(stderr, PROG ": PMI2_Init failed (%d): run under srun --mpi=pmi2\n", rc);
        goto out;
    }
    initialized = 1;
    if (size < 1 || rank < 0 || rank >= size) {
        fprintf(stderr, PROG ": PMI2_Init returned rank %d of size %d\n", rank, size);
        goto out;
    }
    rc = PMI2_Job_GetId(jobid, sizeof(jobid));
    if (rc != PMI2_SUCCESS) {
        fprintf(stderr, PROG ": rank %d: PMI2_Job_GetId failed (%d)\n", rank, rc);
        goto out;
    }
    snprintf(key, sizeof(key), "dtrain-test-%d", rank);
    if (value_for(rank, node, value, sizeof(value)) != 0) {
        fprintf(stderr, PROG ": rank %d: node name too long\n", rank);
        goto out;
    }
    rc = PMI2_KVS_Put(key, value);
    if (rc != PMI2_SUCCESS) {
        fprintf(stderr, PROG ": rank %d: PMI2_KVS_Put failed (%d)\n", rank, rc);
        goto out;
    }
    rc = PMI2_KVS_Fence();
    if (rc != PMI2_SUCCESS) {
        fprintf(stderr, PROG ": rank %d: PMI2_KVS_Fence failed (%d)\n", rank, rc);
        goto out;
    }
    for (int peer = 0; peer < size; peer++) {
        int len = 0;
        char prefix[32];

        snprintf(key, sizeof(key), "dtrain-test-%d", peer);
        rc = PMI2_KVS_Get(jobid, PMI2_ID_NULL, key, got, sizeof(got), &len);
        snprintf(prefix, sizeof(prefix), "%d@", peer);
        if (rc != PMI2_SUCCESS || len <= 0 || strncmp(got, prefix, strlen(prefix)) != 0) {
            fprintf(stderr, PROG ": rank %d: key %s: rc %d, value '%s'\n", rank, key, rc,
                    rc == PMI2_SUCCESS ? got : "");
            bad++;
        }
    }
    printf("rank=%d size=%d procid=%s nodeid=%s node=%s kvs=%s\n", rank, size,
           procid ? procid : "unset", nodeid ? nodeid : "unset", node, bad ? "bad" : "ok");
    fflush(stdout);
    status = bad ? 1 : 0;
out:
    if (initialized && PMI2_Finalize() != PMI2_SUCCESS) {
        fprintf(stderr, PROG ": rank %d: PMI2_Finalize failed\n", rank);
        status = 1;
    }
    return status;
}
