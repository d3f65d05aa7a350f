/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The heartbeat's verdicts (runtime/ft/dtrain_heartbeat.h) on real UDP
 * sockets on loopback: three "ranks" in one process, rank 1 watching
 * ranks 0 and 2 and being watched by them.  Each case drives the peers'
 * states and waits (bounded) for the verdict it must reach; a case that
 * must reach none runs for many times the limit with the states that
 * must not be judged (a waiting peer, a peer making progress, one that
 * left), the sender and the watcher in one loop, so that a slow machine
 * delays both alike.  Strays (another job's token, a wrong rank) are
 * dropped. */
#include "tap.h"

#include "ft/dtrain_heartbeat.h"
#include "dtrain_clock.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LIMIT 0.3 /* seconds: --hang-detect of the cases */

struct trio {
    struct dtrain_hb *h[3];
};

static int open_trio(struct trio *t, uint64_t token)
{
    char err[256];
    static const char *const gpus[3] = {"0000:07:00.0", "0000:0f:00.0", "0000:47:00.0"};
    for (int r = 0; r < 3; r++)
        if (dtrain_hb_open("127.0.0.1", r, r == 2 ? "node2" : "node1", gpus[r], token, &t->h[r], err, sizeof err) != 0) {
            diag("%s", err);
            return -1;
        }
    uint32_t ip[3];
    uint16_t port[3];
    for (int r = 0; r < 3; r++)
        dtrain_hb_address(t->h[r], &ip[r], &port[r]);
    /* a ring of three: each watches the other two */
    for (int r = 0; r < 3; r++) {
        int prev = (r + 2) % 3, next = (r + 1) % 3;
        if (dtrain_hb_set_peer(t->h[r], 0, prev, ip[prev], port[prev]) != 0 ||
            dtrain_hb_set_peer(t->h[r], 1, next, ip[next], port[next]) != 0)
            return -1;
    }
    return 0;
}

static void close_trio(struct trio *t)
{
    for (int r = 0; r < 3; r++)
        dtrain_hb_close(t->h[r]);
}

/* Run for at most `for_s`: ranks 0 and 2 send s0 and s2 (NULL: silent),
 * rank 1 waits in a call without progress since the start and judges.
 * Returns 1 with the reason when it found a hang. */
static int run(struct trio *t, const struct dtrain_hb_state *s0, const struct dtrain_hb_state *s2, int leaving2,
               double for_s, int bump, char *reason, size_t len)
{
    struct dtrain_hb_state me = {.waiting = 1, .armed = 1, .step = 5};
    snprintf(me.what, sizeof me.what, "data-parallel gradient reduction");
    struct dtrain_hb_state a = s0 != NULL ? *s0 : me, b = s2 != NULL ? *s2 : me;
    double t0 = dtrain_clock_s();
    while (dtrain_clock_s() - t0 < for_s) {
        if (s0 != NULL)
            dtrain_hb_send(t->h[0], &a, 0);
        if (s2 != NULL)
            dtrain_hb_send(t->h[2], &b, leaving2);
        if (bump) {
            a.progress++;
            b.progress++;
        }
        dtrain_hb_send(t->h[1], &me, 0);
        dtrain_hb_receive(t->h[1]);
        if (dtrain_hb_check(t->h[1], dtrain_clock_s() - t0, "DP", LIMIT, reason, len))
            return 1;
        usleep(20000);
    }
    return 0;
}

int main(void)
{
    struct trio t;
    char reason[600];
    uint64_t token = dtrain_hb_token("cpu:127.0.0.1:4242:00112233445566778899aabbccddeeff");
    struct dtrain_hb_state computing = {.armed = 1, .step = 5, .progress = 100};
    snprintf(computing.what, sizeof computing.what, "forward of micro-batch 1");
    struct dtrain_hb_state waiting = computing;
    waiting.waiting = 1;
    snprintf(waiting.what, sizeof waiting.what, "data-parallel gradient reduction");

    ok(dtrain_hb_token("a") != dtrain_hb_token("b") && dtrain_hb_token("a") == dtrain_hb_token("a"),
       "the token is a function of the world id");
    ok(open_trio(&t, token) == 0, "three heartbeats on loopback, in a ring");

    /* a peer stuck in computation (progress still, not in a call) while rank 1 waits */
    int hung = run(&t, &waiting, &computing, 0, 30.0, 0, reason, sizeof reason);
    ok(hung && strstr(reason, "rank 2 (node node2, GPU 0000:47:00.0) hangs in forward of micro-batch 1 at step 5") &&
       strstr(reason, "while rank 1 waits on it in a DP call"),
       "a peer alive but stuck outside communication is named with its node, GPU and action");
    diag("%s", reason);
    close_trio(&t);

    /* both peers waiting in calls themselves: nobody is stuck on purpose */
    open_trio(&t, token);
    ok(!run(&t, &waiting, &waiting, 0, 10 * LIMIT, 0, reason, sizeof reason),
       "peers that wait in calls (a long collective) are not hung");
    close_trio(&t);

    /* computing peers that make progress (a long computation that moves) */
    open_trio(&t, token);
    ok(!run(&t, &computing, &computing, 0, 10 * LIMIT, 1, reason, sizeof reason),
       "peers whose progress counter moves are not hung");
    close_trio(&t);

    /* a peer outside a training step (checkpoint, validation): not judged for stillness */
    open_trio(&t, token);
    struct dtrain_hb_state ckpt = computing;
    ckpt.armed = 0;
    snprintf(ckpt.what, sizeof ckpt.what, "checkpoint");
    ok(!run(&t, &waiting, &ckpt, 0, 10 * LIMIT, 0, reason, sizeof reason),
       "a still peer outside a training step (a checkpoint) is not hung");
    close_trio(&t);

    /* a peer that said it leaves, then goes silent */
    open_trio(&t, token);
    run(&t, &waiting, &waiting, 1, 3 * 0.02, 0, reason, sizeof reason);
    ok(!run(&t, &waiting, NULL, 0, 10 * LIMIT, 0, reason, sizeof reason), "a peer that left is not watched any more");
    close_trio(&t);

    /* a peer that goes silent without leaving */
    open_trio(&t, token);
    run(&t, &waiting, &waiting, 0, 3 * 0.02, 0, reason, sizeof reason);
    hung = run(&t, &waiting, NULL, 0, 30.0, 0, reason, sizeof reason);
    ok(hung && strstr(reason, "rank 2 (node node2, GPU 0000:47:00.0) sent no heartbeat for"),
       "a peer whose heartbeat stops is named");
    diag("%s", reason);
    close_trio(&t);

    /* a stray: another job's datagrams (other token) from rank 2's socket are dropped */
    struct trio other;
    open_trio(&t, token);
    open_trio(&other, dtrain_hb_token("cpu:127.0.0.1:4243:ffeeddccbbaa99887766554433221100"));
    uint32_t ip;
    uint16_t port;
    dtrain_hb_address(t.h[1], &ip, &port);
    dtrain_hb_set_peer(other.h[2], 0, 1, ip, port); /* aims at our rank 1 */
    run(&t, &waiting, &waiting, 0, 3 * 0.02, 0, reason, sizeof reason);
    double t0 = dtrain_clock_s();
    hung = 0;
    while (!hung && dtrain_clock_s() - t0 < 30.0) { /* ours silent, the stranger's alive: still a silent peer */
        dtrain_hb_send(t.h[0], &waiting, 0);
        dtrain_hb_send(other.h[2], &waiting, 0);
        dtrain_hb_receive(t.h[1]);
        hung = dtrain_hb_check(t.h[1], dtrain_clock_s() - t0, "DP", LIMIT, reason, sizeof reason);
        usleep(20000);
    }
    ok(hung && strstr(reason, "rank 2 ") && strstr(reason, "sent no heartbeat"),
       "another job's datagrams do not stand in for a silent peer");
    close_trio(&other);
    close_trio(&t);

    char err[256];
    struct dtrain_hb *h = NULL;
    ok(dtrain_hb_open("not-an-address", 0, "n", "g", token, &h, err, sizeof err) != 0 && h == NULL &&
       strstr(err, "'not-an-address' is not an IPv4 address"), "a bad address is refused with one line");
    return tap_done();
}
