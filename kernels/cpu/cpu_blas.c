/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The CPU's instruction sets, OpenBLAS's choice of kernels, and the switch
 * to the right ones; see dtrain_blas.h. */
#include "dtrain_blas.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define HAVE_X86_CPUID 1
#endif

/* OpenBLAS declares these in its cblas.h; other CBLAS headers do not. */
char *openblas_get_corename(void);
char *openblas_get_config(void);

/* The environment between the first execution and the second: "FROM>TO"
 * while the switched kernels are checked, "FROM>TO!" once they failed the
 * check and the program went back to FROM. */
#define SWITCH_VAR "DTRAIN_BLAS_SWITCHED"

enum { LEVEL_SSE, LEVEL_AVX, LEVEL_AVX2, LEVEL_AVX512, LEVEL_AVX512_BF16 };
static const char *const level_names[] = {"SSE3", "AVX", "AVX2", "AVX-512", "AVX-512 BF16"};

/* OpenBLAS 0.3.x's x86-64 DYNAMIC_ARCH cores and the instructions their
 * GEMM kernels use (OpenBLAS's kernel/x86_64/KERNEL.* files). */
static const struct {
    const char *name;
    int level;
} cores[] = {
    {"Prescott", LEVEL_SSE},      {"Core2", LEVEL_SSE},         {"Penryn", LEVEL_SSE},
    {"Dunnington", LEVEL_SSE},    {"Nehalem", LEVEL_SSE},       {"Atom", LEVEL_SSE},
    {"Nano", LEVEL_SSE},          {"Opteron", LEVEL_SSE},       {"Barcelona", LEVEL_SSE},
    {"Katmai", LEVEL_SSE},        {"Coppermine", LEVEL_SSE},    {"Northwood", LEVEL_SSE},
    {"Banias", LEVEL_SSE},        {"Athlon", LEVEL_SSE},        {"Bobcat", LEVEL_SSE},
    {"Sandybridge", LEVEL_AVX},   {"Bulldozer", LEVEL_AVX},     {"Piledriver", LEVEL_AVX},
    {"Steamroller", LEVEL_AVX},   {"Haswell", LEVEL_AVX2},      {"Excavator", LEVEL_AVX2},
    {"Zen", LEVEL_AVX2},          {"SkylakeX", LEVEL_AVX512},   {"Cooperlake", LEVEL_AVX512_BF16},
    {"SapphireRapids", LEVEL_AVX512_BF16},
};

int dtrain_blas_core_level(const char *core)
{
    if (core == NULL)
        return -1;
    for (size_t i = 0; i < sizeof cores / sizeof cores[0]; i++)
        if (strcasecmp(core, cores[i].name) == 0)
            return cores[i].level;
    return -1;
}

#ifdef HAVE_X86_CPUID
static unsigned long long xgetbv0(void)
{
    unsigned eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((unsigned long long)edx << 32) | eax;
}
#endif

void dtrain_cpu_features_read(struct dtrain_cpu_features *f)
{
    memset(f, 0, sizeof *f);
#ifdef HAVE_X86_CPUID
    unsigned a = 0, b = 0, c = 0, d = 0, max = 0;
    if (!__get_cpuid(0, &max, &b, &c, &d))
        return;
    memcpy(f->vendor, &b, 4);
    memcpy(f->vendor + 4, &d, 4);
    memcpy(f->vendor + 8, &c, 4);
    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    f->family = (int)((a >> 8) & 0xf);
    f->model = (int)((a >> 4) & 0xf);
    if (f->family == 0xf)
        f->family += (int)((a >> 20) & 0xff);
    if (f->family >= 6)
        f->model |= (int)((a >> 12) & 0xf0);
    /* an instruction set counts only when the OS saves its registers */
    unsigned long long xcr0 = (c & (1u << 27)) ? xgetbv0() : 0;
    int os_avx = (xcr0 & 0x6) == 0x6, os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;
    int os_amx = (xcr0 & 0x60000) == 0x60000;
    f->avx = os_avx && (c & (1u << 28));
    f->fma = f->avx && (c & (1u << 12));
    if (max >= 7) {
        unsigned b7, c7, d7, a7;
        __cpuid_count(7, 0, a7, b7, c7, d7);
        f->avx2 = f->avx && (b7 & (1u << 5));
        const unsigned avx512_set = (1u << 16) | (1u << 17) | (1u << 28) | (1u << 30) | (1u << 31);
        f->avx512 = os_avx512 && (b7 & avx512_set) == avx512_set;
        f->amx_bf16 = os_amx && (d7 & (1u << 24)) && (d7 & (1u << 22));
        if (a7 >= 1) {
            unsigned a71, b71, c71, d71;
            __cpuid_count(7, 1, a71, b71, c71, d71);
            f->avx512_bf16 = f->avx512 && (a71 & (1u << 5));
        }
    }
#endif
}

int dtrain_cpu_level(const struct dtrain_cpu_features *f)
{
    if (f->avx512_bf16)
        return LEVEL_AVX512_BF16;
    if (f->avx512)
        return LEVEL_AVX512;
    if (f->avx2 && f->fma)
        return LEVEL_AVX2;
    return f->avx ? LEVEL_AVX : LEVEL_SSE;
}

const char *dtrain_cpu_features_level(const struct dtrain_cpu_features *f)
{
    return level_names[dtrain_cpu_level(f)];
}

const char *dtrain_blas_best_core(const struct dtrain_cpu_features *f)
{
    int amd = strcmp(f->vendor, "AuthenticAMD") == 0;
    /* AMD family 25 (Zen 3, Zen 4): Zen 4 has AVX-512 but runs a 512-bit
     * FMA as two 256-bit halves, and OpenBLAS's AVX-512 kernels are no
     * faster there than its AVX2 ones (a Zen 4 VM, family 25 model 17,
     * dtrain-bench-train's 2048-cube sgemm on 2 threads over three runs:
     * Haswell 205-212 GFLOP/s, Zen 200-211, SkylakeX 188-203, Cooperlake
     * 183-201; the training step alternated four times, median tokens/s:
     * Zen 5687, Haswell 6050, Cooperlake 5944).  The AVX2 kernels are
     * these CPUs' own, not a fallback; OpenBLAS's AVX-512 choice is kept
     * as well (dtrain_blas_decide switches only from a lower level). */
    if (amd && f->family == 25 && dtrain_cpu_level(f) >= LEVEL_AVX2)
        return "Zen";
    switch (dtrain_cpu_level(f)) {
    /* OpenBLAS's Cooperlake and SapphireRapids cores run the SkylakeX
     * SGEMM kernels (their KERNEL files include KERNEL.SKYLAKEX and add
     * only bf16 sbgemm, which dtrain does not call): on an AVX-512 BF16
     * CPU, SkylakeX is as fast for fp32 (measured alike on a Sapphire
     * Rapids VM, doc/runtime.md) and needs no second execution. */
    case LEVEL_AVX512_BF16:
    case LEVEL_AVX512: return "SkylakeX";
    case LEVEL_AVX2: return amd ? "Zen" : "Haswell";
    case LEVEL_AVX: return "Sandybridge";
    default: return "Prescott";
    }
}

const char *dtrain_blas_core(void)
{
    const char *c = openblas_get_corename();
    return c != NULL ? c : "";
}

const char *dtrain_blas_config(void)
{
    const char *c = openblas_get_config();
    return c != NULL ? c : "";
}

/* "OpenBLAS 0.3.21" out of the build string. */
static void library_name(char *buf, size_t len)
{
    const char *cfg = dtrain_blas_config();
    const char *sp = strchr(cfg, ' ');
    if (sp != NULL)
        sp = strchr(sp + 1, ' ');
    int n = sp != NULL ? (int)(sp - cfg) : (int)strlen(cfg);
    snprintf(buf, len, "%.*s", n > 0 ? n : 8, n > 0 ? cfg : "OpenBLAS");
}

/* One process per node speaks: the others run the same kernels. */
static int speaks(void)
{
    const char *local = getenv("SLURM_LOCALID");
    return local == NULL || strcmp(local, "0") == 0;
}

static void cpu_words(const struct dtrain_cpu_features *f, char *buf, size_t len)
{
    snprintf(buf, len, "%s family %d model %d, %s", f->vendor[0] ? f->vendor : "unknown CPU",
             f->family, f->model, dtrain_cpu_features_level(f));
}

double dtrain_blas_check(void)
{
    /* odd sizes reach the kernels' edge cases as well as their main loop */
    const int M = 37, N = 53, K = 71;
    float *a = malloc(sizeof(float) * M * K), *b = malloc(sizeof(float) * K * N);
    float *c = malloc(sizeof(float) * M * N);
    double worst = -1.0;
    if (a == NULL || b == NULL || c == NULL)
        goto out;
    unsigned s = 12345;
    for (int i = 0; i < M * K; i++)
        a[i] = (float)((s = s * 1103515245u + 12345u) >> 9) / (float)(1u << 23) - 0.5f;
    for (int i = 0; i < K * N; i++)
        b[i] = (float)((s = s * 1103515245u + 12345u) >> 9) / (float)(1u << 23) - 0.5f;
    worst = 0.0;
    /* a is M x K (NN, NT) or K x M (TN); b is K x N (NN, TN) or N x K (NT) */
    for (int form = 0; form < 3; form++) {
        int ta = form == 2, tb = form == 1;
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N, K,
                    1.0f, a, ta ? M : K, b, tb ? K : N, 0.0f, c, N);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double ref = 0.0, scale = 0.0;
                for (int p = 0; p < K; p++) {
                    double x = ta ? a[p * M + i] : a[i * K + p], y = tb ? b[j * K + p] : b[p * N + j];
                    ref += x * y;
                    scale += fabs(x * y);
                }
                double e = fabs(c[i * N + j] - ref) / (scale + 1e-30);
                if (!(e <= worst)) /* NaN counts as worst */
                    worst = isnan(e) ? INFINITY : e;
            }
    }
out:
    free(a); free(b); free(c);
    return worst;
}

#define CHECK_TOLERANCE 1e-5

/* Execute the program again with OpenBLAS's kernels `to`; returns only if
 * that failed. */
static void execute_again(const char *prog, char **argv, const char *from, const char *to, int reverting)
{
    char mark[96];
    snprintf(mark, sizeof mark, "%.40s>%.40s%s", reverting ? to : from, reverting ? from : to,
             reverting ? "!" : "");
    setenv("OPENBLAS_CORETYPE", to, 1);
    setenv(SWITCH_VAR, mark, 1);
    fflush(NULL);
    execv("/proc/self/exe", argv);
    fprintf(stderr, "%s: blas: cannot execute itself again to switch OpenBLAS's kernels (%m): running its %s "
            "kernels\n", prog, from);
    unsetenv(SWITCH_VAR);
    if (!reverting)
        unsetenv("OPENBLAS_CORETYPE");
}

/* The second execution: are the kernels asked for the ones running, and
 * right? */
static int after_switch(const char *prog, char **argv, const char *mark)
{
    char from[48], to[48];
    const char *gt = strchr(mark, '>');
    size_t flen = gt != NULL ? (size_t)(gt - mark) : 0;
    if (gt == NULL || flen == 0 || flen >= sizeof from || strlen(gt + 1) >= sizeof to) {
        unsetenv(SWITCH_VAR); /* not ours: forget it */
        return 1;
    }
    memcpy(from, mark, flen);
    from[flen] = '\0';
    snprintf(to, sizeof to, "%s", gt + 1);
    size_t tlen = strlen(to);
    if (tlen > 0 && to[tlen - 1] == '!')
        return 0; /* went back to `from`: said so before */
    const char *running = dtrain_blas_core();
    double err = strcasecmp(running, to) == 0 ? dtrain_blas_check() : -2.0;
    if (err >= 0.0 && err < CHECK_TOLERANCE)
        return 0;
    if (speaks()) {
        if (err == -2.0)
            fprintf(stderr, "%s: blas: OPENBLAS_CORETYPE=%s left OpenBLAS on its %s kernels: going back to %s\n",
                    prog, to, running, from);
        else
            fprintf(stderr, "%s: blas: OpenBLAS's %s kernels compute wrong results here (relative error %.2g "
                    "against a reference GEMM): going back to its %s kernels\n", prog, to, err, from);
    }
    execute_again(prog, argv, to, from, 1);
    return 0;
}

enum dtrain_blas_action dtrain_blas_decide(const struct dtrain_cpu_features *f, const char *running,
                                           const char *want, const char *set, const char *prog,
                                           struct dtrain_blas_choice *c)
{
    char cpu[128];
    cpu_words(f, cpu, sizeof cpu);
    const char *best = dtrain_blas_best_core(f);
    int cpu_level = dtrain_cpu_level(f), level = dtrain_blas_core_level(running);
    if (want != NULL && (want[0] == '\0' || strcmp(want, "auto") == 0))
        want = NULL;
    int keep = want != NULL && strcmp(want, "keep") == 0;
    c->target = NULL;
    c->line[0] = '\0';

    if (want != NULL && !keep) { /* a core asked for by name */
        int wl = dtrain_blas_core_level(want);
        if (wl < 0) {
            snprintf(c->line, sizeof c->line, "%s: DTRAIN_BLAS_CORE=%.40s: not an OpenBLAS core (give auto, keep, "
                     "or a core such as %s for this CPU)", prog, want, best);
            return DTRAIN_BLAS_REFUSE;
        }
        if (wl > cpu_level) {
            snprintf(c->line, sizeof c->line, "%s: DTRAIN_BLAS_CORE=%s: its kernels need %s and this CPU (%s) "
                     "lacks it: give %s or auto", prog, want, level_names[wl], cpu, best);
            return DTRAIN_BLAS_REFUSE;
        }
        if (set != NULL) {
            snprintf(c->line, sizeof c->line, "%s: DTRAIN_BLAS_CORE=%s and OPENBLAS_CORETYPE=%.40s are both set: "
                     "unset one", prog, want, set);
            return DTRAIN_BLAS_REFUSE;
        }
        if (strcasecmp(running, want) == 0)
            return DTRAIN_BLAS_GO_ON;
        c->target = want;
        return DTRAIN_BLAS_SWITCH;
    }
    if (level > cpu_level) { /* only a setting makes OpenBLAS pick kernels the CPU cannot run */
        snprintf(c->line, sizeof c->line, "%s: OPENBLAS_CORETYPE=%.40s: OpenBLAS's %s kernels need %s and this CPU "
                 "(%s) lacks it: its first GEMM would die of SIGILL; unset OPENBLAS_CORETYPE or set it to %s",
                 prog, set != NULL ? set : running, running, level_names[level], cpu, best);
        return DTRAIN_BLAS_REFUSE;
    }
    if (level < 0 || level >= dtrain_blas_core_level(best))
        return DTRAIN_BLAS_GO_ON; /* the right kernels, or a core the table does not know (a newer OpenBLAS) */
    if (set != NULL || keep) {
        snprintf(c->line, sizeof c->line, "%s: blas: %s: GEMMs run on OpenBLAS's %s kernels (%s) although this "
                 "CPU (%s) can run its %s kernels; kept as set (%s)", prog,
                 set != NULL ? "OPENBLAS_CORETYPE is set in the environment" : "DTRAIN_BLAS_CORE=keep",
                 running, level_names[level], cpu, best,
                 set != NULL ? "unset it to let dtrain choose" : "unset DTRAIN_BLAS_CORE to let dtrain switch");
        return DTRAIN_BLAS_WARN;
    }
    snprintf(c->line, sizeof c->line, "%s: blas: OpenBLAS does not know this CPU (%s) and chose its generic %s "
             "kernels (%s): switching to its %s kernels (DTRAIN_BLAS_CORE=keep keeps OpenBLAS's choice)", prog,
             cpu, running, level_names[level], best);
    c->target = best;
    return DTRAIN_BLAS_SWITCH;
}

enum dtrain_status dtrain_blas_select(const char *prog, char **argv)
{
    const char *mark = getenv(SWITCH_VAR);
    if (mark != NULL && after_switch(prog, argv, mark) == 0)
        return DTRAIN_OK;
    struct dtrain_cpu_features f;
    struct dtrain_blas_choice c;
    dtrain_cpu_features_read(&f);
    const char *running = dtrain_blas_core();
    enum dtrain_blas_action a = dtrain_blas_decide(&f, running, getenv("DTRAIN_BLAS_CORE"),
                                                   getenv("OPENBLAS_CORETYPE"), prog, &c);
    if (a == DTRAIN_BLAS_REFUSE) {
        fprintf(stderr, "%s\n", c.line);
        return DTRAIN_ERR_INPUT;
    }
    /* a switch is not said on stderr, where a run's one line of bad input
     * must stand alone: the header (dtrain_blas_describe) names the
     * kernels and "chosen by dtrain over OpenBLAS's X" */
    if (c.line[0] != '\0' && a != DTRAIN_BLAS_SWITCH && speaks())
        fprintf(stderr, "%s\n", c.line);
    if (a == DTRAIN_BLAS_SWITCH) {
        char target[48];
        snprintf(target, sizeof target, "%s", c.target); /* execute_again changes the environment it points into */
        execute_again(prog, argv, running, target, 0);
    }
    return DTRAIN_OK;
}

void dtrain_blas_describe(char *buf, size_t len)
{
    struct dtrain_cpu_features f;
    char lib[64], why[128];
    dtrain_cpu_features_read(&f);
    library_name(lib, sizeof lib);
    const char *mark = getenv(SWITCH_VAR), *set = getenv("OPENBLAS_CORETYPE");
    const char *running = dtrain_blas_core();
    if (mark != NULL && strchr(mark, '>') != NULL && mark[strlen(mark) - 1] != '!')
        snprintf(why, sizeof why, "chosen by dtrain over OpenBLAS's %.*s", (int)(strchr(mark, '>') - mark), mark);
    else if (mark != NULL && strchr(mark, '>') != NULL)
        snprintf(why, sizeof why, "OpenBLAS's choice: its %.*s kernels did not pass dtrain's check",
                 (int)(strlen(strchr(mark, '>') + 1) - 1), strchr(mark, '>') + 1);
    else if (set != NULL)
        snprintf(why, sizeof why, "OPENBLAS_CORETYPE=%.40s", set);
    else
        snprintf(why, sizeof why, "chosen by OpenBLAS");
    int level = dtrain_blas_core_level(running), best = dtrain_blas_core_level(dtrain_blas_best_core(&f));
    snprintf(buf, len, "%s, %s kernels (%s%s; CPU: %s %s)", lib, running, why,
             level >= 0 && level < best ? ", a FALLBACK: slower than this CPU allows" : "",
             f.vendor[0] ? f.vendor : "unknown", dtrain_cpu_features_level(&f));
}
