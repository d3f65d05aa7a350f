/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The choice of GEMM kernels (dtrain_blas.h): the decision for CPUs of
 * every level, described by hand (the CPUs this machine is not), the
 * features read here against /proc/cpuinfo, and the reference check of the
 * kernels linked. */
#include "dtrain_blas.h"
#include "tap.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An Intel CPU of family 6 model 207 (Emerald Rapids): AVX-512 BF16 and AMX. */
static struct dtrain_cpu_features emerald_rapids(void)
{
    struct dtrain_cpu_features f = {.vendor = "GenuineIntel", .family = 6, .model = 207, .avx = 1, .fma = 1,
                                    .avx2 = 1, .avx512 = 1, .avx512_bf16 = 1, .amx_bf16 = 1};
    return f;
}

static struct dtrain_cpu_features zen3(void)
{
    struct dtrain_cpu_features f = {.vendor = "AuthenticAMD", .family = 25, .model = 1, .avx = 1, .fma = 1,
                                    .avx2 = 1};
    return f;
}

/* AMD family 25 model 17 (Zen 4, this project's VM of 2026-12): AVX-512 BF16, no AMX */
static struct dtrain_cpu_features zen4(void)
{
    struct dtrain_cpu_features f = {.vendor = "AuthenticAMD", .family = 25, .model = 17, .avx = 1, .fma = 1,
                                    .avx2 = 1, .avx512 = 1, .avx512_bf16 = 1};
    return f;
}

static struct dtrain_cpu_features skylake_x(void)
{
    struct dtrain_cpu_features f = {.vendor = "GenuineIntel", .family = 6, .model = 85, .avx = 1, .fma = 1,
                                    .avx2 = 1, .avx512 = 1};
    return f;
}

/* "flags : a b c" of /proc/cpuinfo has ` name `? */
static int cpuinfo_has(const char *flags, const char *name)
{
    char key[64];
    snprintf(key, sizeof key, " %s ", name);
    return strstr(flags, key) != NULL;
}

int main(void)
{
    struct dtrain_blas_choice c;
    enum dtrain_blas_action a;

    ok(dtrain_blas_core_level("Prescott") == 0 && dtrain_blas_core_level("haswell") == 2 &&
       dtrain_blas_core_level("SKYLAKEX") == 3 && dtrain_blas_core_level("Cooperlake") == 4,
       "core levels from the one table, names compared case-insensitively");
    ok(dtrain_blas_core_level("NoSuchCore") == -1 && dtrain_blas_core_level(NULL) == -1, "unknown core: -1");

    struct dtrain_cpu_features er = emerald_rapids(), z = zen3(), sx = skylake_x();
    ok(strcmp(dtrain_blas_best_core(&er), "SkylakeX") == 0,
       "Emerald Rapids: SkylakeX kernels (Cooperlake's SGEMM kernels are SkylakeX's)");
    ok(strcmp(dtrain_blas_best_core(&sx), "SkylakeX") == 0, "Skylake-X: SkylakeX kernels");
    ok(strcmp(dtrain_blas_best_core(&z), "Zen") == 0, "Zen 3: Zen kernels");
    struct dtrain_cpu_features z4 = zen4(), z5 = zen4();
    z5.family = 26; /* Zen 5: full-width AVX-512 */
    ok(strcmp(dtrain_blas_best_core(&z4), "Zen") == 0 && strcmp(dtrain_blas_best_core(&z5), "SkylakeX") == 0,
       "Zen 4 (AVX-512 in two halves): Zen kernels; family 26 (Zen 5): SkylakeX");
    a = dtrain_blas_decide(&z4, "Cooperlake", NULL, NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_GO_ON && c.line[0] == '\0', "Zen 4, OpenBLAS's own Cooperlake choice: kept, nothing said");
    a = dtrain_blas_decide(&z4, "Haswell", "keep", NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_GO_ON && c.line[0] == '\0', "Zen 4 on Haswell kernels: its own level, no warning");
    a = dtrain_blas_decide(&z4, "Prescott", NULL, NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_SWITCH && strcmp(c.target, "Zen") == 0, "Zen 4 on Prescott: switch to Zen");
    ok(strcmp(dtrain_cpu_features_level(&er), "AVX-512 BF16") == 0 && strcmp(dtrain_cpu_features_level(&z), "AVX2") == 0,
       "levels in words");

    /* the machine: OpenBLAS 0.3.21 falls back to Prescott */
    a = dtrain_blas_decide(&er, "Prescott", NULL, NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_SWITCH && c.target != NULL && strcmp(c.target, "SkylakeX") == 0,
       "Prescott on Emerald Rapids, nothing set: switch to SkylakeX");
    ok(strncmp(c.line, "prog: blas: ", 12) == 0 && strstr(c.line, "Prescott") && strstr(c.line, "model 207") &&
       strstr(c.line, "DTRAIN_BLAS_CORE=keep"), "  and one line saying so: %s", c.line);
    a = dtrain_blas_decide(&er, "Prescott", "auto", NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_SWITCH && strcmp(c.target, "SkylakeX") == 0, "DTRAIN_BLAS_CORE=auto: the same");
    a = dtrain_blas_decide(&er, "Prescott", NULL, "Prescott", "prog", &c);
    ok(a == DTRAIN_BLAS_WARN && strstr(c.line, "OPENBLAS_CORETYPE is set") && strstr(c.line, "kept as set"),
       "OPENBLAS_CORETYPE=Prescott set by the site: respected, with a warning: %s", c.line);
    a = dtrain_blas_decide(&er, "Prescott", "keep", NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_WARN && strstr(c.line, "DTRAIN_BLAS_CORE=keep"), "DTRAIN_BLAS_CORE=keep: warning, no switch");
    a = dtrain_blas_decide(&er, "SkylakeX", NULL, NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_GO_ON && c.line[0] == '\0', "the right kernels: nothing to say");
    a = dtrain_blas_decide(&er, "Cooperlake", NULL, NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_GO_ON && c.line[0] == '\0', "OpenBLAS's own Cooperlake choice (the same SGEMM): kept");
    a = dtrain_blas_decide(&er, "SapphireRapids", NULL, NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_GO_ON, "a newer OpenBLAS's own SapphireRapids choice is kept");
    a = dtrain_blas_decide(&er, "FutureCore", NULL, NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_GO_ON, "a core the table does not know: not judged");
    a = dtrain_blas_decide(&er, "Cooperlake", "SkylakeX", NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_SWITCH && strcmp(c.target, "SkylakeX") == 0, "DTRAIN_BLAS_CORE=SkylakeX: switch to it");
    a = dtrain_blas_decide(&er, "SkylakeX", "skylakex", NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_GO_ON, "DTRAIN_BLAS_CORE already running: go on");

    /* refusals: a setting this CPU cannot run */
    a = dtrain_blas_decide(&z, "SkylakeX", NULL, "SkylakeX", "prog", &c);
    ok(a == DTRAIN_BLAS_REFUSE && strstr(c.line, "SIGILL") && strstr(c.line, "AVX-512") && strstr(c.line, "Zen"),
       "OPENBLAS_CORETYPE=SkylakeX on Zen 3: refused: %s", c.line);
    a = dtrain_blas_decide(&z, "Zen", "Cooperlake", NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_REFUSE && strstr(c.line, "DTRAIN_BLAS_CORE=Cooperlake") && strstr(c.line, "AVX-512 BF16"),
       "DTRAIN_BLAS_CORE=Cooperlake on Zen 3: refused: %s", c.line);
    a = dtrain_blas_decide(&z, "Zen", "Pentium9", NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_REFUSE && strstr(c.line, "not an OpenBLAS core"), "DTRAIN_BLAS_CORE=Pentium9: refused");
    a = dtrain_blas_decide(&z, "Haswell", "Zen", "Haswell", "prog", &c);
    ok(a == DTRAIN_BLAS_REFUSE && strstr(c.line, "both set"), "both variables set: refused");
    a = dtrain_blas_decide(&z, "Sandybridge", NULL, NULL, "prog", &c);
    ok(a == DTRAIN_BLAS_SWITCH && strcmp(c.target, "Zen") == 0, "Sandybridge (AVX) on Zen 3: switch to Zen");

    /* this machine: the features read against the kernel's flags */
    struct dtrain_cpu_features f;
    dtrain_cpu_features_read(&f);
    FILE *ci = fopen("/proc/cpuinfo", "r");
    char line[8192], flags[8192] = "";
    while (ci != NULL && fgets(line, sizeof line, ci) != NULL)
        if (strncmp(line, "flags", 5) == 0) {
            const char *colon = strchr(line, ':');
            snprintf(flags, sizeof flags, "%s ", colon != NULL ? colon + 1 : "");
            for (char *p = flags; *p; p++)
                if (*p == '\n' || *p == '\t')
                    *p = ' ';
            break;
        }
    if (ci != NULL)
        fclose(ci);
    if (flags[0] == '\0') {
        skip("no flags line in /proc/cpuinfo (not x86 Linux)");
    } else {
        diag("this CPU: %s family %d model %d, %s", f.vendor, f.family, f.model, dtrain_cpu_features_level(&f));
        ok(f.avx == cpuinfo_has(flags, "avx") && f.avx2 == cpuinfo_has(flags, "avx2") &&
           f.fma == cpuinfo_has(flags, "fma"), "AVX, AVX2, FMA as /proc/cpuinfo says");
        int k512 = cpuinfo_has(flags, "avx512f") && cpuinfo_has(flags, "avx512bw") && cpuinfo_has(flags, "avx512vl") &&
                   cpuinfo_has(flags, "avx512dq") && cpuinfo_has(flags, "avx512cd");
        ok(f.avx512 == k512 && f.avx512_bf16 == (k512 && cpuinfo_has(flags, "avx512_bf16")),
           "AVX-512 (F CD BW DQ VL) and AVX-512 BF16 as /proc/cpuinfo says");
        ok(f.amx_bf16 == (cpuinfo_has(flags, "amx_tile") && cpuinfo_has(flags, "amx_bf16")),
           "AMX BF16 as /proc/cpuinfo says");
    }

    const char *core = dtrain_blas_core();
    diag("OpenBLAS runs: %s (%s)", core, dtrain_blas_config());
    ok(core[0] != '\0', "the loaded OpenBLAS names its kernels");
    double e = dtrain_blas_check();
    ok(e >= 0.0 && e < 1e-5, "the linked kernels pass the reference GEMM check (relative error %.2g)", e);
    char d[256];
    dtrain_blas_describe(d, sizeof d);
    ok(strstr(d, core) != NULL && strstr(d, "kernels (") != NULL, "describe: %s", d);
    return tap_done();
}
