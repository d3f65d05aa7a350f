/* SPDX-License-Identifier: GPL-2.0-or-later */
/* dtrain-bench-boot: the bytes the cpu backend's bootstrap sends, at
 * n = 16, 256 and 4096 members (or the sizes given), against O(n), and its
 * wall time.  Usage: dtrain-bench-boot [--stagger-us N] [SIZE...]
 *
 * Runs the real bootstrap (dtrain_comm_init on a group whose id comes from
 * the launcher's own dtrain_bootstrap_id_make_cpu) of n members on this
 * machine: PROCS processes of n/PROCS threads each (threads, so that 4096
 * members fit in memory; processes, so that each one's descriptors fit in
 * its limit), started STAGGER_US apart in each process (--stagger-us N:
 * N us; 0: all at once, thousands of joiners together), 8 members per
 * fake host id, over TCP (shared memory would
 * send the same bytes plus a segment per link).  Each member reads its
 * stats.setup_bytes_sent once its init returned: every byte the bootstrap
 * wrote (hellos, the address messages, J/R/D bytes, ring-link replies and
 * acks).  Printed per n: the total, the most one member sent (the leader),
 * how many hellos were sent again (stats.rejoined: a loaded machine),
 * and total / n without those: constant when the bootstrap's bytes are O(n) in total
 * (the baseline is the smallest n of the same run: ratio 1.0 means the
 * same bytes per member), and the wall time from the first member's start
 * to the last one's init returning (with the members' staggered starts:
 * n/PROCS * STAGGER_US of it is the stagger), against the first n's. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "comm/bootstrap/bootstrap_id.h"
#include "dtrain_comm.h"
#include "dtrain_parse.h"
#include "comm/cpu/wire.h"
#include "dtrain_clock.h"

#define PROCS 8
#define PER_HOST 8
#define TIMEOUT_MS 300000
#define STAGGER_US 10000 /* default pause between two members' starts in one process */

struct member {
    int rank, n, listen_fd;
    const char *id;
    uint64_t bytes;    /* setup_bytes_sent after init */
    uint64_t rejoined; /* its hellos sent again (each WIRE_HELLO_LEN bytes more) */
    enum dtrain_comm_cause rc; /* the init's */
    char err[256];
};

static void *member_main(void *arg)
{
    struct member *m = arg;
    struct dtrain_comm_group g;
    struct dtrain_comm_options o;
    char host[DTRAIN_COMM_HOST_ID_MAX];
    memset(&g, 0, sizeof g);
    g.present = 1;
    g.size = m->n;
    g.stride = 1;
    g.my_rank = m->rank;
    dtrain_snprintf(g.key, sizeof g.key, "bench.boot");
    dtrain_snprintf(g.id, sizeof g.id, "%s", m->id);
    g.listen_fd = m->listen_fd;
    dtrain_comm_options_defaults(&o);
    o.timeout_ms = TIMEOUT_MS;
    o.transport = DTRAIN_COMM_TRANSPORT_TCP;
    dtrain_snprintf(host, sizeof host, "bench-host-%d", m->rank / PER_HOST);
    o.host_id = host;
    dtrain_comm *c = NULL;
    dtrain_comm_init(&g, DTRAIN_COMM_CPU, &o, &c, &m->rc, m->err, sizeof m->err);
    struct dtrain_comm_stats s;
    dtrain_comm_get_stats(c, &s);
    m->bytes = s.setup_bytes_sent;
    m->rejoined = s.rejoined;
    dtrain_comm_destroy(c);
    return NULL;
}

/* What one process reports to the parent. */
struct report {
    uint64_t total, max, rejoined;
    int failed;
    char err[256];
};

/* Members [lo, hi) as threads of this process. */
static void run_members(int lo, int hi, int n, const char *id, int listen_fd, long stagger_us, int out_fd)
{
    struct report r = {0};
    struct member *m = calloc((size_t)(hi - lo), sizeof *m);
    pthread_t *t = calloc((size_t)(hi - lo), sizeof *t);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * 1024);
    int started = 0;
    for (int i = 0; m != NULL && t != NULL && i < hi - lo; i++, started++) {
        m[i] = (struct member){.rank = lo + i, .n = n, .id = id, .listen_fd = lo + i == 0 ? listen_fd : -1};
        if (pthread_create(&t[i], &attr, member_main, &m[i]) != 0)
            break;
        /* By default members join over a few seconds, as a job's tasks
         * start; with --stagger-us 0 all at once: their connections wait
         * in the kernel's queue at the leader (cpu_comm.h, the pending list). */
        struct timespec pause = {.tv_sec = stagger_us / 1000000, .tv_nsec = (stagger_us % 1000000) * 1000L};
        if (stagger_us > 0)
            nanosleep(&pause, NULL);
    }
    if (started < hi - lo) {
        r.failed = hi - lo - started;
        dtrain_snprintf(r.err, sizeof r.err, "could not start thread %d of %d", started, hi - lo);
    }
    for (int i = 0; i < started; i++) {
        pthread_join(t[i], NULL);
        r.total += m[i].bytes;
        r.rejoined += m[i].rejoined;
        if (m[i].bytes > r.max)
            r.max = m[i].bytes;
        if (m[i].rc != DTRAIN_COMM_OK && r.failed++ == 0)
            dtrain_snprintf(r.err, sizeof r.err, "rank %d: %s: %s", m[i].rank, dtrain_comm_cause_name(m[i].rc),
                            m[i].err);
    }
    pthread_attr_destroy(&attr);
    if (write(out_fd, &r, sizeof r) != (ssize_t)sizeof r)
        r.failed = 1;
    free(m);
    free(t);
}

static int measure(int n, long stagger_us, struct report *all, int64_t *ms)
{
    char id[DTRAIN_BOOTSTRAP_ID_MAX], err[256];
    int listen_fd = -1, pipes[PROCS][2], procs = n < PROCS ? n : PROCS, rc = 0;
    pid_t pids[PROCS];
    memset(all, 0, sizeof *all);
    if (dtrain_bootstrap_id_make_cpu("127.0.0.1", n, id, sizeof id, &listen_fd, err, sizeof err) != 0) {
        fprintf(stderr, "dtrain-bench-boot: making an id: %s\n", err);
        return -1;
    }
    fflush(NULL);
    int64_t start = dtrain_clock_ms();
    for (int p = 0; p < procs; p++) {
        int lo = (int)((long)n * p / procs), hi = (int)((long)n * (p + 1) / procs);
        if (pipe(pipes[p]) != 0 || (pids[p] = fork()) < 0) {
            fprintf(stderr, "dtrain-bench-boot: pipe/fork: %s\n", strerror(errno));
            exit(1);
        }
        if (pids[p] == 0) {
            close(pipes[p][0]);
            if (lo != 0)
                close(listen_fd);
            run_members(lo, hi, n, id, listen_fd, stagger_us, pipes[p][1]);
            _exit(0);
        }
        close(pipes[p][1]);
    }
    close(listen_fd);
    for (int p = 0; p < procs; p++) {
        struct report r;
        if (read(pipes[p][0], &r, sizeof r) != (ssize_t)sizeof r) {
            r = (struct report){.failed = 1};
            dtrain_snprintf(r.err, sizeof r.err, "process %d reported nothing (crashed?)", p);
        }
        close(pipes[p][0]);
        waitpid(pids[p], NULL, 0);
        all->total += r.total;
        all->rejoined += r.rejoined;
        if (r.max > all->max)
            all->max = r.max;
        if (r.failed > 0 && all->failed == 0)
            memcpy(all->err, r.err, sizeof all->err);
        all->failed += r.failed;
    }
    *ms = dtrain_clock_ms() - start;
    if (all->failed > 0) {
        fprintf(stderr, "dtrain-bench-boot: n=%d: %d members failed; first: %s\n", n, all->failed, all->err);
        rc = -1;
    }
    return rc;
}

int main(int argc, char **argv)
{
    int sizes[16] = {16, 256, 4096}, nsizes = 3, first = 1;
    long stagger_us = STAGGER_US;
    char err[200];
    if (argc > 2 && strcmp(argv[1], "--stagger-us") == 0) {
        if (dtrain_parse_int(argv[2], 0, 1000000, "--stagger-us", &stagger_us, err, sizeof err) != 0) {
            fprintf(stderr, "dtrain-bench-boot: %s\n", err);
            return 2;
        }
        first = 3;
    }
    if (argc > first) {
        nsizes = 0;
        for (int i = first; i < argc && nsizes < 16; i++) {
            long v;
            if (dtrain_parse_int(argv[i], 2, 1 << 16, "group size", &v, err, sizeof err) != 0) {
                fprintf(stderr, "dtrain-bench-boot: %s\n", err);
                return 2;
            }
            sizes[nsizes++] = (int)v;
        }
    }
    /* Threads of one process hold n/PROCS members' descriptors (the leader's
     * process n more): take the hard limit. */
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    printf("cpu bootstrap bytes (real dtrain_comm_init, %d processes x threads, %d members per host id, TCP)\n",
           PROCS, PER_HOST);
    printf("%8s %14s %12s %9s %14s %10s %9s %10s\n", "n", "total bytes", "leader", "rejoins", "bytes/member",
           "vs first n", "ms", "vs first n");
    double base = 0, base_ms = 0;
    for (int i = 0; i < nsizes; i++) {
        struct report r;
        int64_t ms;
        if (measure(sizes[i], stagger_us, &r, &ms) != 0)
            return 1;
        /* A hello sent again because the machine was too loaded to send
         * it before the leader's pending list filled is not what the
         * protocol costs: bytes/member leaves those out. */
        double per = (double)(r.total - r.rejoined * WIRE_HELLO_LEN) / sizes[i];
        if (i == 0) {
            base = per;
            base_ms = ms > 0 ? (double)ms : 1.0;
        }
        printf("%8d %14llu %12llu %9llu %14.1f %9.2fx %9lld %9.1fx\n", sizes[i], (unsigned long long)r.total,
               (unsigned long long)r.max, (unsigned long long)r.rejoined, per, per / base, (long long)ms,
               (double)ms / base_ms);
        fflush(stdout);
    }
    printf("bytes/member constant (ratio ~1) = O(n) in total; growing with n = O(n^2); ms includes the members'\n"
           "staggered starts (%ld us apart in each of %d processes: n/%d x %ld us; --stagger-us 0: all at once)\n",
           stagger_us, PROCS, PROCS, stagger_us);
    return 0;
}
