/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The watchdog thread; see dtrain_watchdog.h. */
#include "dtrain_watchdog.h"
#include "dtrain_heartbeat.h"
#include "dtrain_clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct dtrain_watchdog {
    struct dtrain_watchdog_options o;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    int stop;                   /* under lock */
    atomic_int paused;
    atomic_int fired;
    atomic_llong beat_ns;       /* CLOCK_MONOTONIC of the last beat */
    _Atomic(const char *) phase;
    atomic_long step;
    _Atomic(const char *) action; /* the trainer's, NULL: none since the beat */
    atomic_int micro;
    atomic_int armed;           /* in a training step after the process's first */
    atomic_long beats;
    long first_step;            /* of the first "training" beat, -1 none */
    _Atomic(struct dtrain_hb *) hb;
    /* the heartbeat thread's own view of this rank */
    uint64_t my_progress;
    double quiet_since;         /* waiting in a call without progress since then */
    double still_since;         /* no progress at all since then */
    int was_waiting, was_armed; /* at the last look */
};

/* Sleep up to s seconds or until stopped; returns 1 when stopped. */
static int nap(struct dtrain_watchdog *w, double s)
{
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    long long ns = until.tv_nsec + (long long)(s * 1e9);
    until.tv_sec += (time_t)(ns / 1000000000LL);
    until.tv_nsec = (long)(ns % 1000000000LL);
    pthread_mutex_lock(&w->lock);
    while (!w->stop && pthread_cond_timedwait(&w->wake, &w->lock, &until) != ETIMEDOUT)
        ;
    int stopped = w->stop;
    pthread_mutex_unlock(&w->lock);
    return stopped;
}

static const char *const group_names[DTRAIN_GROUP_KINDS] = {"world", "TP", "PP", "DP", "next-stage", "previous-stage"};

/* A reason to give up, or 0. */
static int look(struct dtrain_watchdog *w, char *reason, size_t len)
{
    const struct dtrain_comms *c = w->o.comms;
    for (int k = 0; c != NULL && k < DTRAIN_GROUP_KINDS; k++) {
        struct dtrain_comm_error e;
        if (c->group[k] == NULL || dtrain_comm_get_async_error(c->group[k], &e) == DTRAIN_OK)
            continue;
        if (e.cause == DTRAIN_COMM_EABORTED)
            continue; /* our own abort: the loop knows why */
        snprintf(reason, len, "watchdog: the %s communicator failed: %s: %s",
                 group_names[k], dtrain_comm_cause_name(e.cause), e.message);
        return 1;
    }
    double idle = 1e-9 * (double)(dtrain_clock_ns() - atomic_load(&w->beat_ns));
    if (w->o.stall_s > 0 && idle > w->o.stall_s) {
        snprintf(reason, len, "watchdog: no progress for %.0f s in %s (more than the %.0f s allowed): the "
                 "process hangs", idle, atomic_load(&w->phase), w->o.stall_s);
        return 1;
    }
    return 0;
}

/* The heartbeat's turn: this rank's state out, the neighbours' in, and
 * the verdict on them (1 with the reason). */
static int heartbeat(struct dtrain_watchdog *w, int leaving, char *reason, size_t len)
{
    struct dtrain_hb *hb = atomic_load(&w->hb);
    if (hb == NULL)
        return 0;
    struct dtrain_hb_state s = {.step = atomic_load(&w->step), .armed = atomic_load(&w->armed)};
    const char *in = "";
    s.progress = (uint64_t)atomic_load(&w->beats);
    for (int k = 0; w->o.comms != NULL && k < DTRAIN_GROUP_KINDS; k++) {
        struct dtrain_comm_stats st;
        if (w->o.comms->group[k] == NULL)
            continue;
        dtrain_comm_get_stats(w->o.comms->group[k], &st);
        s.progress += st.started + st.calls + st.bytes_sent + st.bytes_received;
        if (st.started > st.calls && !s.waiting) {
            s.waiting = 1;
            in = group_names[k];
        }
    }
    const char *action = atomic_load(&w->action), *phase = atomic_load(&w->phase);
    int micro = atomic_load(&w->micro);
    if (action != NULL && micro >= 0)
        snprintf(s.what, sizeof s.what, "%s of micro-batch %d", action, micro);
    else
        snprintf(s.what, sizeof s.what, "%s", action != NULL ? action : phase);
    dtrain_hb_send(hb, &s, leaving);
    if (leaving)
        return 0;
    dtrain_hb_receive(hb);
    double now = 1e-9 * (double)dtrain_clock_ns();
    if (!s.waiting || s.progress != w->my_progress || w->quiet_since == 0.0)
        w->quiet_since = now; /* not waiting, or moving: not waiting on anyone */
    if (s.progress != w->my_progress || w->still_since == 0.0)
        w->still_since = now;
    w->my_progress = s.progress;
    w->was_waiting = s.waiting;
    w->was_armed = s.armed;
    return !atomic_load(&w->paused) && dtrain_hb_check(hb, now - w->quiet_since, in, w->o.hang_s, reason, len);
}

static void *watchdog_main(void *arg)
{
    struct dtrain_watchdog *w = arg;
    char reason[600];
    while (!nap(w, w->o.poll_s)) {
        int hung = heartbeat(w, 0, reason, sizeof reason);
        if (atomic_load(&w->paused) || (!hung && !look(w, reason, sizeof reason)))
            continue;
        atomic_store(&w->fired, 1);
        int code = dtrain_fault_report(w->o.fault, atomic_load(&w->step), reason);
        if (w->o.abort_flag != NULL)
            atomic_store(w->o.abort_flag, 1);
        /* This rank itself stuck in a step outside communication (what its
         * neighbours call hung): the abort flag cannot reach the loop, so
         * waiting out the grace would only hold up the restart. */
        double still = 1e-9 * (double)dtrain_clock_ns() - w->still_since;
        if (atomic_load(&w->hb) != NULL && w->was_armed && !w->was_waiting && still > w->o.hang_s) {
            fprintf(stderr, "%s: rank %d: the training loop has made no progress for %.1f s outside communication: "
                    "exiting %d now\n", w->o.fault->prog, w->o.fault->rank, still, code);
            fflush(NULL);
            _exit(code);
        }
        if (nap(w, w->o.grace_s))
            break; /* the loop unwound and stopped us */
        fprintf(stderr, "%s: rank %d: the training loop did not stop within %.0f s of the abort: exiting %d\n",
                w->o.fault->prog, w->o.fault->rank, w->o.grace_s, code);
        fflush(NULL);
        _exit(code);
    }
    heartbeat(w, 1, reason, sizeof reason); /* leaving: the neighbours stop watching */
    return NULL;
}

int dtrain_watchdog_start(const struct dtrain_watchdog_options *o, struct dtrain_watchdog **out, char *err,
                          size_t errlen)
{
    *out = NULL;
    struct dtrain_watchdog *w = calloc(1, sizeof *w);
    if (w == NULL) {
        snprintf(err, errlen, "out of memory for the watchdog");
        return -1;
    }
    w->o = *o;
    if (w->o.poll_s <= 0)
        w->o.poll_s = 0.2;
    if (w->o.hang_s > 0 && w->o.poll_s > w->o.hang_s / 5)
        w->o.poll_s = w->o.hang_s / 5;
    atomic_init(&w->paused, 0);
    atomic_init(&w->fired, 0);
    atomic_init(&w->beat_ns, dtrain_clock_ns());
    atomic_init(&w->phase, "start-up");
    atomic_init(&w->step, 0);
    atomic_init(&w->action, NULL);
    atomic_init(&w->micro, -1);
    atomic_init(&w->armed, 0);
    atomic_init(&w->beats, 0);
    atomic_init(&w->hb, NULL);
    w->first_step = -1;
    pthread_condattr_t ca;
    int e = pthread_condattr_init(&ca);
    if (e == 0 && (e = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC)) == 0 &&
        (e = pthread_mutex_init(&w->lock, NULL)) == 0) {
        if ((e = pthread_cond_init(&w->wake, &ca)) != 0)
            pthread_mutex_destroy(&w->lock);
    }
    pthread_condattr_destroy(&ca);
    if (e == 0 && (e = pthread_create(&w->thread, NULL, watchdog_main, w)) != 0) {
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
    }
    if (e != 0) {
        snprintf(err, errlen, "cannot start the watchdog thread: %s", strerror(e));
        free(w);
        return -1;
    }
    *out = w;
    return 0;
}

void dtrain_watchdog_beat(struct dtrain_watchdog *w, const char *phase, long step)
{
    if (w == NULL)
        return;
    int training = strcmp(phase, "training") == 0;
    if (training && w->first_step < 0)
        w->first_step = step;
    atomic_store(&w->action, NULL);
    atomic_store(&w->phase, phase);
    atomic_store(&w->step, step);
    /* the process's first step (warm-up, first touches) is not judged */
    atomic_store(&w->armed, training && step > w->first_step);
    atomic_fetch_add(&w->beats, 1);
    atomic_store(&w->beat_ns, dtrain_clock_ns());
}

void dtrain_watchdog_action(struct dtrain_watchdog *w, const char *action, int micro)
{
    if (w == NULL)
        return;
    atomic_store(&w->micro, micro);
    atomic_store(&w->action, action);
    atomic_fetch_add(&w->beats, 1);
}

void dtrain_watchdog_set_heartbeat(struct dtrain_watchdog *w, struct dtrain_hb *hb)
{
    if (w == NULL)
        dtrain_hb_close(hb);
    else
        atomic_store(&w->hb, hb);
}

void dtrain_watchdog_pause(struct dtrain_watchdog *w)
{
    if (w != NULL)
        atomic_store(&w->paused, 1);
}

void dtrain_watchdog_resume(struct dtrain_watchdog *w)
{
    if (w == NULL)
        return;
    atomic_store(&w->beat_ns, dtrain_clock_ns());
    atomic_store(&w->paused, 0);
}

int dtrain_watchdog_fired(const struct dtrain_watchdog *w)
{
    return w != NULL && atomic_load(&w->fired);
}

void dtrain_watchdog_stop(struct dtrain_watchdog *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    w->stop = 1;
    pthread_cond_broadcast(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    dtrain_hb_close(atomic_load(&w->hb));
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
    free(w);
}
