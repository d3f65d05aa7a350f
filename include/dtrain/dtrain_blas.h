/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Which GEMM kernel the CPU backend's BLAS runs, and making it the right one.
 *
 * OpenBLAS built with DYNAMIC_ARCH (Debian's) picks its kernels from the CPU
 * model when it loads; a model it does not know (a CPU newer than the
 * library) gets the generic SSE3 "Prescott" kernels, 3-4x slower on an
 * AVX-512 machine, silently.  The library reads OPENBLAS_CORETYPE only when
 * it loads, so the only way to change the choice of a running program is to
 * execute it again with the variable set: dtrain_blas_select() does that,
 * first thing in main(), then checks the new kernels against a reference.
 *
 * DTRAIN_BLAS_CORE (the environment) says what select() may do:
 *   unset, "auto"  switch when OpenBLAS fell back to kernels below what the
 *                  CPU can run (the default)
 *   "keep"         never switch; still say when the kernels are a fallback
 *   a core name    run that OpenBLAS core (e.g. Haswell), refused when the
 *                  CPU cannot execute its instructions
 * An OPENBLAS_CORETYPE that the environment already sets is respected (some
 * sites set it because an older OpenBLAS computes wrong results on their
 * CPU): select() says what it costs and never overrides it, but refuses a
 * core whose instructions this CPU lacks (its first GEMM would die of
 * SIGILL). */
#ifndef DTRAIN_BLAS_H
#define DTRAIN_BLAS_H

#include <stddef.h>

#include "dtrain_status.h"

/* What the CPU can execute (cpuid, and XGETBV for what the OS saves). */
struct dtrain_cpu_features {
    char vendor[16];          /* "GenuineIntel", "AuthenticAMD", "" off x86 */
    int family, model;
    unsigned avx : 1, fma : 1, avx2 : 1;
    unsigned avx512 : 1;      /* F, CD, BW, DQ and VL: what OpenBLAS's SkylakeX kernels use */
    unsigned avx512_bf16 : 1; /* VDPBF16PS */
    unsigned amx_bf16 : 1;    /* AMX tiles with BF16, and the OS saves tile state */
};

void dtrain_cpu_features_read(struct dtrain_cpu_features *f);

/* "AVX-512 BF16", "AVX2", ...: the highest level f reaches, for messages. */
const char *dtrain_cpu_features_level(const struct dtrain_cpu_features *f);

/* The instruction level an OpenBLAS core needs, from the one table of cores
 * (cpu_blas.c): 0 SSE, 1 AVX, 2 AVX2+FMA, 3 AVX-512, 4 AVX-512 BF16; -1 for
 * a name the table does not know (compared case-insensitively). */
int dtrain_blas_core_level(const char *core);

/* The CPU's level on the same scale. */
int dtrain_cpu_level(const struct dtrain_cpu_features *f);

/* The OpenBLAS core to run on f: the fastest whose instructions f has
 * (measured side by side in doc/runtime.md: the widest vectors win). */
const char *dtrain_blas_best_core(const struct dtrain_cpu_features *f);

/* The core the loaded OpenBLAS runs and its build string ("OpenBLAS 0.3.21
 * NO_LAPACKE DYNAMIC_ARCH ..."). */
const char *dtrain_blas_core(void);
const char *dtrain_blas_config(void);

/* Call first in main(), before threads and before PMI: may execute the
 * program again (argv, /proc/self/exe) with OPENBLAS_CORETYPE set, and so
 * returns only when the program goes on as it is.  Returns DTRAIN_OK to go
 * on, or DTRAIN_ERR_INPUT after printing one line when DTRAIN_BLAS_CORE or
 * OPENBLAS_CORETYPE asks for kernels this CPU cannot run.  Messages start
 * with prog and are printed by one process per node (SLURM_LOCALID 0 or
 * unset). */
enum dtrain_status dtrain_blas_select(const char *prog, char **argv);

/* What select() does, decided from the CPU, the kernels running and the two
 * variables (want = DTRAIN_BLAS_CORE, set = OPENBLAS_CORETYPE; NULL when
 * unset): a pure function, so that every case is tested on any CPU. */
enum dtrain_blas_action {
    DTRAIN_BLAS_GO_ON,  /* the right kernels, or nothing to judge */
    DTRAIN_BLAS_WARN,   /* a fallback kept as the environment asks: line says so */
    DTRAIN_BLAS_SWITCH, /* execute again with OPENBLAS_CORETYPE=target (line: why, or empty) */
    DTRAIN_BLAS_REFUSE, /* a setting this CPU cannot run: line, exit 2 */
};
struct dtrain_blas_choice {
    const char *target; /* the core to switch to (points into the table or want) */
    char line[512];     /* the message, prefixed with prog; "" for none */
};
enum dtrain_blas_action dtrain_blas_decide(const struct dtrain_cpu_features *f, const char *running,
                                           const char *want, const char *set, const char *prog,
                                           struct dtrain_blas_choice *c);

/* One line for the trainer's header: the library, the kernels, why they are
 * the ones running, the CPU's level.  E.g. "OpenBLAS 0.3.21, Zen kernels
 * (chosen by OpenBLAS; CPU: AuthenticAMD AVX2)". */
void dtrain_blas_describe(char *buf, size_t len);

struct dtrain_kernels;
/* What runs a cpu instance's bf16 matmuls, in words: oneDNN (its version,
 * implementation and ISA) or the fp32 GEMMs on rounded operands and why;
 * "" for other precisions and backends.  DTRAIN_CPU_ONEDNN (auto, off,
 * force) chooses; see kernels/cpu/cpu_onednn.c. */
void dtrain_cpu_bf16_describe(const struct dtrain_kernels *k, char *buf, size_t len);

/* Largest |c - reference| / scale over GEMMs in the three forms the CPU
 * kernels call (NN, NT, TN) at odd sizes, against a double-precision
 * reference; < 1e-5 for correct fp32 kernels.  -1 when out of memory. */
double dtrain_blas_check(void);

#endif
