/* SPDX-License-Identifier: GPL-2.0-or-later */
/* ZeRO-Offload of the AdamW state (--offload-optimizer, dtrain_optim.h) on
 * the CPU backend, as T*P*D local processes (local_boot.h):
 *  - nvme:DIR at ZeRO 0, 1, 2 and 3 (D = 2), at (T,P,D) = (2,2,2) ZeRO-1
 *    and (1,2,2) ZeRO-3, gives the resident run's losses, norms and final parameters bit for
 *    bit (the same CPU AdamW on the same floats, chunk by chunk);
 *  - rank 0's memory: no optimizer bytes on the device, the NVMe and
 *    pinned-host bytes match doc/runtime.md's formulas (within the ZeRO
 *    shares' padding, 1%), the folder the run made inside DIR is gone;
 *  - a hostile DIR (a link, a folder of another user, one writable by
 *    others) is refused with DTRAIN_ERR_INPUT and nothing in it touched;
 *    cpu offload on the cpu backend is refused the same way. */
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain_data.h"
#include "dtrain_optim.h"
#include "dtrain_parallel.h"
#include "local_boot.h"
#include "tap.h"

#define STEPS 5

struct run_result {
    int ok;
    char err[512];
    float loss[STEPS];
    double norm[STEPS];
    struct dtrain_ptrainer_memory mem;
};

struct rank_area {
    struct run_result r;
    float params[]; /* rank 0: the gathered model */
};

struct job {
    struct dtrain_train_config cfg;
    size_t nparams;
};

static int rank_main(struct dtrain_bootstrap *bs, void *result, void *ctx)
{
    const struct job *j = ctx;
    struct rank_area *a = result;
    struct dtrain_comms comms;
    struct dtrain_ptrainer *t = NULL;
    int rc = local_boot_comms(bs, 30000, 0, &comms, NULL, a->r.err, sizeof a->r.err);
    if (rc != DTRAIN_OK)
        return 3;
    rc = dtrain_ptrainer_create(&j->cfg, bs, &comms, &t, a->r.err, sizeof a->r.err);
    if (rc == DTRAIN_OK)
        dtrain_ptrainer_memory(t, &a->r.mem);
    for (int s = 0; rc == DTRAIN_OK && s < STEPS; s++) {
        struct dtrain_pstep_result r;
        rc = dtrain_ptrainer_step(t, &r, a->r.err, sizeof a->r.err);
        a->r.loss[s] = r.base.loss;
        a->r.norm[s] = r.base.grad_norm;
    }
    if (rc == DTRAIN_OK)
        rc = dtrain_ptrainer_gather_params(t, a->params, a->r.err, sizeof a->r.err);
    a->r.ok = rc == DTRAIN_OK;
    dtrain_ptrainer_destroy(t);
    dtrain_comm_destroy_all(&comms);
    return rc == DTRAIN_OK ? 0 : 1;
}

/* One run; rank 0's area (malloc'd) or NULL with the reason in err. */
static struct rank_area *run(const struct job *j, int tp, int pp, int dp, char *err, size_t errlen)
{
    size_t bytes = sizeof(struct rank_area) + j->nparams * sizeof(float);
    int world = tp * pp * dp, codes[LOCAL_BOOT_MAX_WORLD];
    unsigned char *areas = calloc((size_t)world, bytes);
    if (areas == NULL)
        return NULL;
    if (local_boot_run(tp, pp, dp, rank_main, (void *)j, bytes, areas, codes, 120, err, errlen) != 0) {
        for (int r = 0; r < world; r++) {
            const struct rank_area *a = (const struct rank_area *)(areas + (size_t)r * bytes);
            if (a->r.err[0])
                snprintf(err, errlen, "rank %d: %s", r, a->r.err);
        }
        free(areas);
        return NULL;
    }
    return (struct rank_area *)areas; /* rank 0's is first */
}

static int entries(const char *dir)
{
    DIR *d = opendir(dir);
    int n = 0;
    if (d == NULL)
        return -1;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static double rel(size_t got, size_t want)
{
    return want == 0 ? (got == 0 ? 0.0 : 1.0) : fabs((double)got - (double)want) / (double)want;
}

static void hostile_dirs(const char *base)
{
    struct dtrain_kernels *k = NULL;
    struct dtrain_kernels_options kopt = {.threads = 1};
    char err[512], target[512], link[512], open_dir[512], stranger[512];
    if (dtrain_kernels_create("cpu", &kopt, &k, err, sizeof err) != DTRAIN_OK) {
        ok(0, "the cpu kernels start (%s)", err);
        return;
    }
    struct dtrain_adamw *o = NULL;
    struct dtrain_offload cpu = {.kind = DTRAIN_OFFLOAD_CPU};
    int rc = dtrain_adamw_create_offload(k, 100, &cpu, &o, err, sizeof err);
    ok(rc == DTRAIN_ERR_INPUT && o == NULL && strstr(err, "host memory already") != NULL,
       "--offload-optimizer cpu on the cpu backend is refused with one line (%s)", err);

    snprintf(target, sizeof target, "%s/target", base);
    snprintf(link, sizeof link, "%s/link", base);
    snprintf(open_dir, sizeof open_dir, "%s/open", base);
    snprintf(stranger, sizeof stranger, "%s/stranger", base);
    int made = mkdir(target, 0700) == 0 && symlink(target, link) == 0 && mkdir(open_dir, 0700) == 0 &&
               chmod(open_dir, 0777) == 0 && mkdir(stranger, 0700) == 0;
    struct dtrain_offload nvme = {.kind = DTRAIN_OFFLOAD_NVME, .dir = link};
    rc = made ? dtrain_adamw_create_offload(k, 100, &nvme, &o, err, sizeof err) : -99;
    ok(rc == DTRAIN_ERR_INPUT && o == NULL && entries(target) == 0 && strstr(err, "not a folder") != NULL,
       "nvme:DIR with DIR a symbolic link is refused, nothing made behind it (%s)", err);
    nvme.dir = open_dir;
    rc = made ? dtrain_adamw_create_offload(k, 100, &nvme, &o, err, sizeof err) : -99;
    ok(rc == DTRAIN_ERR_INPUT && o == NULL && entries(open_dir) == 0 && strstr(err, "writable by group or others"),
       "nvme:DIR with DIR writable by others is refused, nothing made in it (%s)", err);
    if (geteuid() != 0) {
        skip("another user's folder: needs root to make one");
    } else {
        /* a folder of nobody's, as a stranger would leave it */
        int own = made && chown(stranger, 65534, 65534) == 0;
        nvme.dir = stranger;
        rc = own ? dtrain_adamw_create_offload(k, 100, &nvme, &o, err, sizeof err) : -99;
        struct stat st;
        ok(rc == DTRAIN_ERR_INPUT && o == NULL && entries(stranger) == 0 && stat(stranger, &st) == 0 &&
           st.st_uid == 65534 && strstr(err, "owned by uid 65534") != NULL,
           "nvme:DIR with DIR another user's folder is refused, nothing made in it (%s)", err);
    }
    /* chunks smaller than a range, ranges not on chunk bounds: the same
     * bits as the resident AdamW, and the state read back equal */
    enum { N = 1000 };
    static float p0[N], p1[N], g[N], m0[N], v0[N], m1[N], v1[N];
    struct dtrain_adamw *res = NULL;
    struct dtrain_optim_config oc = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .weight_decay = 0.1};
    nvme = (struct dtrain_offload){.kind = DTRAIN_OFFLOAD_NVME, .dir = target, .chunk_floats = 7};
    rc = dtrain_adamw_create_offload(k, N, &nvme, &o, err, sizeof err);
    int same = rc == DTRAIN_OK && dtrain_adamw_create(k, N, &res, err, sizeof err) == DTRAIN_OK;
    for (int i = 0; i < N; i++)
        p0[i] = p1[i] = sinf((float)i);
    for (long step = 0; same && step < 3; step++) {
        for (int i = 0; i < N; i++)
            g[i] = cosf((float)(i * (step + 1)));
        dtrain_adamw_update_range(res, 0, 333, p0, g, &oc, step, oc.lr, 0.5f);
        dtrain_adamw_update_range(res, 333, N - 333, p0 + 333, g + 333, &oc, step, oc.lr, 0.5f);
        dtrain_adamw_update_range(o, 0, 333, p1, g, &oc, step, oc.lr, 0.5f);
        dtrain_adamw_update_range(o, 333, N - 333, p1 + 333, g + 333, &oc, step, oc.lr, 0.5f);
        same = dtrain_adamw_error(o, err, sizeof err) == DTRAIN_OK;
    }
    same = same && dtrain_adamw_state_read(res, 0, N, m0, v0, err, sizeof err) == DTRAIN_OK &&
           dtrain_adamw_state_read(o, 0, N, m1, v1, err, sizeof err) == DTRAIN_OK &&
           memcmp(p0, p1, sizeof p0) == 0 && memcmp(m0, m1, sizeof m0) == 0 && memcmp(v0, v1, sizeof v0) == 0;
    struct dtrain_adamw_bytes ab;
    if (o != NULL)
        dtrain_adamw_bytes(o, &ab);
    ok(same && ab.nvme == 2 * N * sizeof(float) && ab.pinned_host == 2 * 7 * sizeof(float) && ab.device == 0,
       "nvme, 7-float chunks over two ranges: 3 updates give the resident AdamW's parameters and moments bit for "
       "bit; %d NVMe bytes, %d pinned (%s)", 2 * N * (int)sizeof(float), 2 * 7 * (int)sizeof(float),
       same ? "ok" : err);
    dtrain_adamw_destroy(res);
    dtrain_adamw_destroy(o);
    o = NULL;
    nvme.dir = target;
    nvme.chunk_floats = 0;
    rc = dtrain_adamw_create_offload(k, 100, &nvme, &o, err, sizeof err);
    ok(rc == DTRAIN_OK && o != NULL && entries(target) == 0 && dtrain_adamw_m(o) == NULL,
       "nvme:DIR of this user: the moments' files are open and already unlinked, the run's folder gone (%s)",
       rc == DTRAIN_OK ? "ok" : err);
    dtrain_adamw_destroy(o);
    dtrain_kernels_destroy(k);
    rmdir(stranger);
    rmdir(open_dir);
    unlink(link);
    rmdir(target);
}

int main(void)
{
    char dir[] = "/tmp/dtrain-test-offload-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        printf("1..0 # SKIP cannot make a temporary folder\n");
        return 0;
    }
    char path[256], err[512], nvme_dir[256];
    snprintf(path, sizeof path, "%s/tokens.bin", dir);
    snprintf(nvme_dir, sizeof nvme_dir, "%s/nvme", dir);
    size_t ntok = 8000;
    uint16_t *tok = malloc(ntok * sizeof *tok);
    const char *words[] = {"the ", "quick ", "brown ", "fox ", "jumps ", "over ", "a ", "lazy ", "dog. "};
    for (size_t i = 0, w = 0; i < ntok; w++)
        for (const char *c = words[(w * 7 + w / 9) % 9]; *c && i < ntok; c++)
            tok[i++] = (uint16_t)(unsigned char)*c;
    int wrote = dtrain_tokens_write(path, tok, ntok, err, sizeof err);
    free(tok);
    mkdir(nvme_dir, 0700);

    struct job j;
    dtrain_train_config_defaults(&j.cfg);
    snprintf(j.cfg.data, sizeof j.cfg.data, "%s", path);
    j.cfg.model = (struct dtrain_model_config){.max_seq_len = 16, .vocab_size = 256, .padded_vocab_size = 256,
                                              .num_layers = 2, .num_heads = 2, .channels = 32};
    j.cfg.batch = 8;
    j.cfg.seq = 16;
    j.cfg.steps = STEPS;
    j.cfg.seed = 7;
    j.cfg.threads = 1;
    j.cfg.optim.lr = 1e-2;
    j.cfg.optim.weight_decay = 0.01;
    j.cfg.optim.grad_clip = 1.0;
    j.cfg.log_every = 0;
    j.cfg.bucket_mb = 0.02;
    int fin = wrote == DTRAIN_OK ? dtrain_train_config_finish(&j.cfg, err, sizeof err) : wrote;
    if (!ok(fin == DTRAIN_OK, "the config is good (%s)", fin == DTRAIN_OK ? "ok" : err))
        return tap_done();
    j.nparams = dtrain_model_param_count(&j.cfg.model);

    static const struct {
        int tp, pp, dp, zero;
    } layouts[] = {
        {1, 1, 1, 0}, {1, 1, 2, 0}, {1, 1, 2, 1}, {1, 1, 2, 2}, {1, 1, 2, 3}, {2, 2, 2, 1}, {1, 2, 2, 3},
    };
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++) {
        struct job base = j, off = j;
        base.cfg.zero_stage = off.cfg.zero_stage = layouts[i].zero;
        snprintf(off.cfg.offload_optimizer, sizeof off.cfg.offload_optimizer, "nvme:%s", nvme_dir);
        char name[96];
        snprintf(name, sizeof name, "(T,P,D)=(%d,%d,%d) ZeRO stage %d", layouts[i].tp, layouts[i].pp, layouts[i].dp,
                 layouts[i].zero);
        struct rank_area *a = run(&base, layouts[i].tp, layouts[i].pp, layouts[i].dp, err, sizeof err);
        struct rank_area *b = a != NULL ? run(&off, layouts[i].tp, layouts[i].pp, layouts[i].dp, err, sizeof err) : NULL;
        if (!ok(a != NULL && b != NULL, "%s: the resident and the nvme-offloaded runs train (%s)", name,
                a != NULL && b != NULL ? "ok" : err)) {
            free(a);
            free(b);
            continue;
        }
        ok(memcmp(a->r.loss, b->r.loss, sizeof a->r.loss) == 0 && memcmp(a->r.norm, b->r.norm, sizeof a->r.norm) == 0 &&
           memcmp(a->params, b->params, j.nparams * sizeof(float)) == 0,
           "%s: nvme offload gives the resident run's %d losses, norms and final parameters bit for bit "
           "(last loss %.6f, %.6f)", name, STEPS, a->r.loss[STEPS - 1], b->r.loss[STEPS - 1]);
        const struct dtrain_ptrainer_memory *m = &b->r.mem;
        ok(m->optimizer == 0 && a->r.mem.optimizer > 0 && m->nvme == a->r.mem.optimizer &&
           rel(m->nvme, m->nvme_formula) <= 0.01 && rel(m->pinned_host, m->pinned_host_formula) <= 0.01 &&
           rel(m->model_state, m->model_state_formula) <= 0.05 && entries(nvme_dir) == 0,
           "%s: rank 0's memory: device optimizer 0 (resident %zu), NVMe %zu (formula %zu), pinned host %zu "
           "(formula %zu), device model state %zu (formula %zu); DIR left empty", name, a->r.mem.optimizer, m->nvme,
           m->nvme_formula, m->pinned_host, m->pinned_host_formula, m->model_state, m->model_state_formula);
        free(a);
        free(b);
    }
    hostile_dirs(dir);
    rmdir(nvme_dir);
    unlink(path);
    rmdir(dir);
    return tap_done();
}
