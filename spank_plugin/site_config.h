/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Site configuration of the SPANK plugin: the admin's key=value arguments
 * on the plugstack.conf line, and optionally a site JSON file they name.
 *
 *   required /usr/lib/x86_64-linux-gnu/slurm-wlm/dtrain.so bind=yes max_tp=8
 *
 * Keys (doc/dtrain.8 documents them for admins):
 *   config=PATH        site JSON file; its "spank" object may hold the keys
 *                      below.  Keys on the plugstack line win over the file.
 *   topology_xml=PATH  read the node's GPU topology from this saved hwloc XML
 *                      instead of discovering it (simulation, tests); "%n" is
 *                      replaced by the Slurm node name.
 *   bind=yes|no        bind each task to its CPUs (cpu_bind=; default no).
 *   cpu_bind=cores|numa  each task's CPUs: whole cores of its GPU's NUMA node,
 *                      none shared (cores, the default), or that whole NUMA
 *                      node (numa); the default of --dtrain-cpu-bind.
 *   allow_pcie=yes|no|user  yes: every job may put TP groups across PCIe;
 *                      no: refused even with --dtrain-allow-pcie;
 *                      user (default): the job decides with --dtrain-allow-pcie.
 *   max_tp=N           the largest NVLink island on this cluster's GPU nodes;
 *                      sbatch/srun refuse --dtrain-tp above it (0: unknown).
 *   nvlink_domain_gpus=N  GPUs in one multi-node NVLink domain (GB200
 *                      NVL72: 72; 0, the default: NVLink stops at the node).
 *                      TP groups may then hold several whole nodes of one
 *                      domain (NVML's GPU fabric clique); sbatch/srun refuse
 *                      --dtrain-tp above N or not dividing it.
 *   nvlink_domain_source=nvml|block|ring  where a node's domain comes from:
 *                      nvml (default), NVML's GPU fabric clique; block, the
 *                      Slurm topology/block block the node is in (Slurm
 *                      23.11+: SLURM_TOPOLOGY_ADDR "BLOCK.NODE", pattern
 *                      "block.node"), for sites whose blocks are the domains;
 *                      ring, the topology/ring ring (Slurm 26.05:
 *                      "RING:POSITION.NODE", "ring:position.node").  With
 *                      block or ring, sbatch/srun check --segment too.
 *   gpu_visibility=all|one  the default of --dtrain-gpu-visibility (all).
 *   net_gbps=N pcie_gbps=N  the network's and PCIe's GB/s per GPU (default
 *                      25 each), for the predicted time of each group's
 *                      traffic that --dtrain-verbose shows (the node's
 *                      NVLink/XGMI rates come from its topology).
 *   master_ports=LO-HI the ports MASTER_PORT is taken from (default
 *                      29500-29999; keep them out of the kernel's ephemeral
 *                      ports with net.ipv4.ip_local_reserved_ports).
 *   ports_per_step=K   each step is given a block of K consecutive ports of
 *                      master_ports (1..16, default 3), MASTER_PORT the
 *                      first: Megatron-LM's in-process restart opens
 *                      TCPStores on MASTER_PORT+1 and +2.  A range holding
 *                      fewer than K ports is refused.
 *   imex_check=yes|no  a step whose TP groups span nodes of a multi-node
 *                      NVLink domain (or --dtrain-pp-in-domain over several
 *                      nodes) needs an IMEX channel: its tasks fail at
 *                      start without one (default yes; imex.h).
 *   imex_channels=PATH where the channel devices are (default
 *                      /dev/nvidia-caps-imex-channels; tests: a fake tree).
 *   expedited_requeue=yes|no  yes (default): a job submitted with
 *                      sbatch --requeue=expedite (Slurm 25.11+, where
 *                      slurm.conf has SlurmctldParameters=
 *                      enable_expedited_requeue) keeps Slurm's expedited
 *                      requeue after a fault that a node of it is out of
 *                      service for; no: dtrain-launch asks for a plain
 *                      requeue after every fault (the batch script gets
 *                      DTRAIN_EXPEDITED_REQUEUE=0; launcher/expedite.h).
 * An unknown key or a bad value is an error naming it.
 *
 * Every path here comes from the admin (plugstack.conf, the site file),
 * never from a job's environment.  Pure code plus jansson, no Slurm calls. */
#ifndef DTRAIN_SPANK_SITE_CONFIG_H
#define DTRAIN_SPANK_SITE_CONFIG_H

#include <stddef.h>

#define DTRAIN_CONFIG_PATH_MAX 1024
#define DTRAIN_CONFIG_NODE_MAX 64   /* node names longer than this are refused */

enum dtrain_pcie_policy {
    DTRAIN_PCIE_USER = 0, /* the job decides with --dtrain-allow-pcie */
    DTRAIN_PCIE_ALWAYS,   /* every job may span PCIe */
    DTRAIN_PCIE_NEVER,    /* refused, even with --dtrain-allow-pcie */
};

/* nvlink_domain_source=: NVML's clique, or Slurm's block or ring (the
 * values are the key's names in order). */
enum dtrain_domain_source {
    DTRAIN_DOMAIN_NVML = 0,
    DTRAIN_DOMAIN_BLOCK = 1,
    DTRAIN_DOMAIN_RING = 2,
};

struct dtrain_site_config {
    char config[DTRAIN_CONFIG_PATH_MAX];       /* site JSON it was read from, "" none */
    char topology_xml[DTRAIN_CONFIG_PATH_MAX]; /* "" = discover the live node */
    int bind;
    enum dtrain_pcie_policy allow_pcie;
    int max_tp; /* 0 = unknown */
    int nvlink_domain_gpus; /* GPUs in one multi-node NVLink domain, 0 = none */
    int nvlink_domain_source; /* enum dtrain_domain_source: where a node's domain comes from */
    int gpu_visibility_one;         /* 1: gpu_visibility=one */
    int cpu_bind_numa;              /* 1: cpu_bind=numa */
    int master_port_lo, master_port_hi; /* master_ports= */
    int ports_per_step;             /* ports_per_step=: each step's block of ports */
    int imex_check;                 /* imex_check=: steps across NVLink nodes need an IMEX channel */
    char imex_channels[DTRAIN_CONFIG_PATH_MAX]; /* imex_channels=: the channel folder */
    int net_gbps, pcie_gbps;        /* net_gbps=, pcie_gbps= */
    int expedited_requeue;          /* expedited_requeue= (1: yes, the default) */
};

void dtrain_config_init(struct dtrain_site_config *cfg);

/* Parse the plugstack.conf arguments (loading config= first, then applying
 * the other keys over it).  Returns 0, or -1 with one line in err naming
 * the key and what is accepted.  When the process runs as root, files the
 * configuration names must be owned by root and not writable by others. */
int dtrain_config_parse(struct dtrain_site_config *cfg, int ac, char **av, char *err, size_t errlen);

/* The topology file for node `node` ("%n" expanded; "%%" is a '%').  The
 * node name may hold letters, digits, '-', '_' and '.', not "..".  Returns 0,
 * or -1 with err. */
int dtrain_config_topology_path(const struct dtrain_site_config *cfg, const char *node,
                                char *out, size_t outlen, char *err, size_t errlen);

/* Whether a job that did (1) or did not (0) pass --dtrain-allow-pcie may put
 * a TP group across PCIe: 1 yes, 0 no, -1 the site refuses the option. */
int dtrain_config_pcie_allowed(const struct dtrain_site_config *cfg, int user_asked);

#endif
