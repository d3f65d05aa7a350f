/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the one placement encoder/decoder (dtrain_placement_env.h)
 * and of the rendezvous port (dtrain_master_port.h), and of the one grid
 * position (dtrain_grid_pos.h) the placement structs embed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dtrain_env.h"
#include "dtrain_grid_pos.h"
#include "dtrain_master_port.h"
#include "dtrain_placement_env.h"
#include "tap.h"

static struct dtrain_env_list env;
static struct dtrain_coords a, b;

static const char *get(const char *name)
{
    const char *v = dtrain_env_list_get(&env, name);
    return v ? v : "(unset)";
}

static void fill(struct dtrain_coords *c)
{
    memset(c, 0, sizeof *c);
    c->tp = 4, c->pp = 2, c->dp = 2, c->rank = 11, c->world_size = 16;
    c->tp_rank = 3, c->dp_rank = 0, c->pp_rank = 1;
    c->local_rank = 3, c->local_size = 8, c->node = 1, c->nnodes = 2, c->restart_count = 2, c->cuda_device = 3;
    snprintf(c->placed_by, sizeof c->placed_by, "spank");
    snprintf(c->gpu_busid, sizeof c->gpu_busid, "0000:5d:00.0");
    snprintf(c->gpu_visibility, sizeof c->gpu_visibility, "all");
    snprintf(c->cpus, sizeof c->cpus, "0-7,16-23");
    snprintf(c->cuda_visible, sizeof c->cuda_visible, "0,3,1,2,4,7,5,6");
    snprintf(c->master_addr, sizeof c->master_addr, "10.0.0.1");
    c->master_port = 29517;
    c->master_ports = 3;
}

static void test_round_trip(void)
{
    char err[256];
    fill(&a);
    env.count = 0;
    ok(dtrain_placement_env_encode(&a, &env) == 0, "encode a whole placement");
    ok(strcmp(get("RANK"), "11") == 0 && strcmp(get("LOCAL_RANK"), "3") == 0 && strcmp(get("WORLD_SIZE"), "16") == 0 &&
       strcmp(get("LOCAL_WORLD_SIZE"), "8") == 0 && strcmp(get("NODE_RANK"), "1") == 0 &&
       strcmp(get("GROUP_RANK"), "1") == 0 && strcmp(get("GROUP_WORLD_SIZE"), "2") == 0 &&
       strcmp(get("ROLE_RANK"), "11") == 0 && strcmp(get("ROLE_WORLD_SIZE"), "16") == 0 &&
       strcmp(get("TORCHELASTIC_RESTART_COUNT"), "2") == 0 && strcmp(get("MASTER_ADDR"), "10.0.0.1") == 0 &&
       strcmp(get("MASTER_PORT"), "29517") == 0 && strcmp(get("DTRAIN_PORTS"), "29517-29519") == 0 &&
       strcmp(get("CUDA_VISIBLE_DEVICES"), "0,3,1,2,4,7,5,6") == 0 &&
       strcmp(get("CUDA_DEVICE_ORDER"), "PCI_BUS_ID") == 0 && strcmp(get("DTRAIN_CUDA_DEVICE"), "3") == 0,
       "the framework names (torch.distributed, torchrun, Megatron-LM, DeepSpeed) are written");
    ok(dtrain_placement_env_decode(dtrain_env_getter_list, &env, &b, err, sizeof err) == 0 &&
       memcmp(&a, &b, sizeof a) == 0, "decode(encode(c)) == c, field for field");

    /* Unknown parts are left out, and read back as unknown. */
    fill(&a);
    memset(a.master_addr, 0, sizeof a.master_addr);
    memset(a.cuda_visible, 0, sizeof a.cuda_visible);
    memset(a.cpus, 0, sizeof a.cpus);
    memset(a.gpu_visibility, 0, sizeof a.gpu_visibility);
    a.master_port = 0, a.master_ports = 0, a.cuda_device = -1, a.nnodes = 0, a.local_size = 0;
    env.count = 0;
    ok(dtrain_placement_env_encode(&a, &env) == 0 && dtrain_env_list_get(&env, "MASTER_ADDR") == NULL &&
       dtrain_env_list_get(&env, "MASTER_PORT") == NULL && dtrain_env_list_get(&env, "DTRAIN_PORTS") == NULL && dtrain_env_list_get(&env, "CUDA_VISIBLE_DEVICES") == NULL &&
       dtrain_env_list_get(&env, "CUDA_DEVICE_ORDER") == NULL && dtrain_env_list_get(&env, "DTRAIN_CPUS") == NULL &&
       dtrain_env_list_get(&env, "GROUP_WORLD_SIZE") == NULL &&
       dtrain_env_list_get(&env, "LOCAL_WORLD_SIZE") == NULL,
       "no rendezvous, no GPU list, no CPUs, no node count: those variables are left out");
    ok(dtrain_placement_env_decode(dtrain_env_getter_list, &env, &b, err, sizeof err) == 0 &&
       memcmp(&a, &b, sizeof a) == 0, "... and decode back as unknown");

    /* Encoding twice replaces, never repeats. */
    fill(&a);
    ok(dtrain_placement_env_encode(&a, &env) == 0, "encode over an earlier placement");
    int unique = 1;
    for (int i = 0; i < env.count; i++)
        for (int j = i + 1; j < env.count; j++)
            unique &= strcmp(env.var[i].name, env.var[j].name) != 0;
    ok(unique && strcmp(get("MASTER_PORT"), "29517") == 0, "each variable once (%d variables)", env.count);
}

static void test_decode_errors(void)
{
    char err[256];
    fill(&a);
    env.count = 0;
    dtrain_placement_env_encode(&a, &env);
    dtrain_env_list_set(&env, DTRAIN_ENV_PP_RANK, "one");
    ok(dtrain_placement_env_decode(dtrain_env_getter_list, &env, &b, err, sizeof err) == -1 &&
       strstr(err, "DTRAIN_PP_RANK") != NULL, "a malformed coordinate is named (%s)", err);
    dtrain_env_list_set(&env, DTRAIN_ENV_PP_RANK, "1");
    dtrain_env_list_set(&env, DTRAIN_ENV_FW_MASTER_PORT, "70000");
    ok(dtrain_placement_env_decode(dtrain_env_getter_list, &env, &b, err, sizeof err) == -1 &&
       strstr(err, "MASTER_PORT=70000 is not a TCP port") != NULL, "a port above 65535 (%s)", err);
    dtrain_env_list_set(&env, DTRAIN_ENV_FW_MASTER_PORT, "29517");
    dtrain_env_list_set(&env, DTRAIN_ENV_PORTS, "29518-29520");
    ok(dtrain_placement_env_decode(dtrain_env_getter_list, &env, &b, err, sizeof err) == -1 &&
       strstr(err, "DTRAIN_PORTS=29518-29520 is not a block of at most 16 ports starting at MASTER_PORT=29517") != NULL,
       "a block that does not start at MASTER_PORT (%s)", err);
    dtrain_env_list_set(&env, DTRAIN_ENV_PORTS, "29517-29600");
    ok(dtrain_placement_env_decode(dtrain_env_getter_list, &env, &b, err, sizeof err) == -1 &&
       strstr(err, "DTRAIN_PORTS=29517-29600 is not a block") != NULL, "a block of more than 16 ports (%s)", err);
    dtrain_env_list_set(&env, DTRAIN_ENV_PORTS, "29517");
    ok(dtrain_placement_env_decode(dtrain_env_getter_list, &env, &b, err, sizeof err) == -1 &&
       strstr(err, "DTRAIN_PORTS") != NULL, "a block that is no range (%s)", err);
    dtrain_env_list_set(&env, DTRAIN_ENV_PORTS, "29517-29519");
    struct dtrain_env_list empty = {0};
    ok(dtrain_placement_env_decode(dtrain_env_getter_list, &empty, &b, err, sizeof err) == -1 &&
       strcmp(err, "DTRAIN_TP is not set") == 0, "nothing set: '%s'", err);
}

static void test_master_port(void)
{
    char err[256];
    int lo = 0, hi = 0;
    ok(dtrain_master_ports_parse("29500-29999", "master_ports", &lo, &hi, err, sizeof err) == 0 && lo == 29500 &&
       hi == 29999, "master_ports=29500-29999");
    ok(dtrain_master_ports_parse("29500-", "master_ports", &lo, &hi, err, sizeof err) == -1 &&
       dtrain_master_ports_parse("abc", "master_ports", &lo, &hi, err, sizeof err) == -1,
       "malformed ranges are refused (%s)", err);
    int in_range = 1, distinct = 1, seen[500] = {0};
    for (uint32_t job = 1; job <= 62; job++)
        for (uint32_t step = 0; step < 8; step++) {
            int p = dtrain_master_port(29500, 29999, 1, job, step);
            in_range &= p >= 29500 && p <= 29999;
            distinct &= seen[p - 29500]++ == 0;
        }
    ok(in_range && distinct, "ports_per_step=1: 62 consecutive jobs x 8 steps get 496 distinct ports of the 500");
    /* blocks of 3 (the default): 166 whole blocks in 29500-29999, the last
     * 29995-29997; 29998 and 29999 are not used */
    int aligned = 1, disjoint = 1, used[500] = {0};
    in_range = 1;
    for (uint32_t job = 1; job <= 20; job++)
        for (uint32_t step = 0; step < 8; step++) {
            int p = dtrain_master_port(29500, 29999, 3, job, step);
            in_range &= p >= 29500 && p + 2 <= 29997;
            aligned &= (p - 29500) % 3 == 0;
            for (int k = 0; k < 3 && in_range; k++)
                disjoint &= used[p + k - 29500]++ == 0;
        }
    ok(dtrain_master_port_blocks(29500, 29999, 3) == 166 && in_range && aligned && disjoint,
       "ports_per_step=3: 20 consecutive jobs x 8 steps get 160 disjoint blocks, each aligned on LO");
    int same_as_one = 1;
    for (uint32_t job = 0; job < 1000; job++)
        same_as_one &= dtrain_master_port(40000, 40099, 1, job, job % 11) ==
                       40000 + (int)(((uint64_t)job * 8u + (job % 11) % 8u) % 100u);
    ok(same_as_one, "ports_per_step=1 is the one-port formula LO + (job*8 + step mod 8) mod (HI-LO+1)");
    ok(dtrain_master_port(29500, 29999, 3, 7, 0) == dtrain_master_port(29500, 29999, 3, 7, 0) &&
       dtrain_master_port(29500, 29999, 3, 4294967295u, 4294967294u) >= 29500 &&
       dtrain_master_port(29500, 29999, 16, 4294967295u, 4294967294u) + 15 <= 29999 &&
       dtrain_master_port(40000, 40000, 1, 123, 4) == 40000 && dtrain_master_port(40000, 40002, 3, 123, 4) == 40000,
       "a pure function of (job, step), in range for the largest ids and a one-block range");
    ok(dtrain_master_ports_check(40000, 40002, 3, err, sizeof err) == 0 &&
       dtrain_master_ports_check(40000, 40000, 1, err, sizeof err) == 0, "a range of one block is enough");
    ok(dtrain_master_ports_check(40000, 40001, 3, err, sizeof err) == -1 &&
       strcmp(err, "master_ports=40000-40001 holds 2 ports, fewer than ports_per_step=3 (the ports each step is "
                   "given): widen master_ports or lower ports_per_step") == 0,
       "a range smaller than a block: one line naming both keys (%s)", err);
}

/* Every rank of a 4 x 3 x 2 grid: rank -> position -> rank is the rank, the
 * coordinates are in range and follow doc/design.md's order (TP fastest,
 * then DP, then PP); an embedded position is the struct's own fields. */
static void test_grid_pos(void)
{
    const int T = 4, P = 3, D = 2;
    int bad = 0, seen[24] = {0};
    for (int r = 0; r < T * P * D; r++) {
        struct dtrain_grid_pos g = dtrain_grid_pos_of(T, P, D, r);
        struct dtrain_grid_pos h = dtrain_grid_pos_at(T, P, D, g.tp_rank, g.pp_rank, g.dp_rank);
        if (g.rank != r || g.world_size != 24 || g.tp != T || g.pp != P || g.dp != D || g.tp_rank != r % T ||
            g.dp_rank != (r / T) % D || g.pp_rank != r / (T * D) || memcmp(&g, &h, sizeof g) != 0)
            bad++;
        else
            seen[h.rank]++;
    }
    int once = 1;
    for (int r = 0; r < 24; r++)
        once &= seen[r] == 1;
    ok(bad == 0 && once, "grid position: rank <-> coordinates round trip over 4 x 3 x 2 (%d wrong)", bad);
    ok(dtrain_grid_pos_at(2, 2, 2, 1, 1, 0).rank == 5 && dtrain_grid_pos_at(2, 2, 2, 0, 0, 1).rank == 2,
       "grid position: TP fastest, then DP, then PP");

    struct dtrain_coords *c = &a, *d = &b;
    memset(c, 0, sizeof *c);
    memset(d, 0xff, sizeof *d);
    c->pos = dtrain_grid_pos_of(T, P, D, 17);
    ok(c->tp == 4 && c->pp == 3 && c->dp == 2 && c->world_size == 24 && c->rank == 17 && c->tp_rank == 1 &&
           c->dp_rank == 0 && c->pp_rank == 2,
       "grid position: an embedded position's fields are the struct's own");
    d->pos = c->pos;
    ok(d->rank == 17 && d->tp_rank == 1 && d->pp_rank == 2 && d->dp_rank == 0 && d->world_size == 24 &&
           d->local_rank == -1,
       "grid position: one assignment copies the position and nothing else");
}

int main(void)
{
    test_grid_pos();
    test_round_trip();
    test_decode_errors();
    test_master_port();
    return tap_done();
}
