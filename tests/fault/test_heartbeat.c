/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The heartbeat's verdicts (runtime/ft/dtrain_heartbeat.h) on real UDP
 * sockets on loopback: three "ranks" in one process, rank 1 watching
 * ranks 0 and 2 and being watched by them.  Each case drives the peers'
 * states and waits (bounded) for the verdict it must reach; a case that
 * must reach none runs for many times the limit with the states that
 * must not be judged (a waiting peer, a peer making progress, one that
 * left), the sender and the watcher in one loop, so that a slow machine
 * delays both alike.  Strays (another job's key, a wrong rank) are
 * dropped; forged, replayed and misplaced datagrams and a flood of junk
 * (issue 32) are driven one datagram at a time and judged by the
 * watcher's counts after one receive. */
#include "tap.h"

#include "ft/dtrain_heartbeat.h"
#include "dtrain_clock.h"

#include <arpa/inet.h>
#include <sched.h>
#include <sys/time.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define LIMIT 0.3 /* seconds: --hang-detect of the cases */
#define WORLD_ID "cpu:127.0.0.1:4242:00112233445566778899aabbccddeeff"

struct trio {
    struct dtrain_hb *h[3];
};

static int open_trio(struct trio *t, const unsigned char *key)
{
    char err[256];
    static const char *const gpus[3] = {"0000:07:00.0", "0000:0f:00.0", "0000:47:00.0"};
    for (int r = 0; r < 3; r++)
        if (dtrain_hb_open("127.0.0.1", r, r == 2 ? "node2" : "node1", gpus[r], key, &t->h[r], err, sizeof err) != 0) {
            diag("%s", err);
            return -1;
        }
    uint32_t ip[3];
    uint16_t port[3][2]; /* each rank's socket for its prev (slot 0) and its next (slot 1) */
    for (int r = 0; r < 3; r++)
        for (int slot = 0; slot < 2; slot++)
            dtrain_hb_address(t->h[r], slot, &ip[r], &port[r][slot]);
    /* a ring of three: each watches the other two */
    for (int r = 0; r < 3; r++) {
        int prev = (r + 2) % 3, next = (r + 1) % 3;
        if (dtrain_hb_set_peer(t->h[r], 0, prev, ip[prev], port[prev][1]) != 0 ||
            dtrain_hb_set_peer(t->h[r], 1, next, ip[next], port[next][0]) != 0)
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

/* ---- attacks (issue 32): each driven datagram by datagram, observed in
 * the watcher's counts right after one receive: no timing. */

/* A plain UDP socket on loopback (the test's stand-in for a rank, a spy
 * or a stranger); blocking reads bounded by 10 s. */
static int plain_socket(struct sockaddr_in *self)
{
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    socklen_t len = sizeof *self;
    struct timeval bound = {.tv_sec = 10};
    *self = (struct sockaddr_in){.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    if (fd < 0 || bind(fd, (struct sockaddr *)self, sizeof *self) != 0 ||
        getsockname(fd, (struct sockaddr *)self, &len) != 0 ||
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &bound, sizeof bound) != 0)
        return -1;
    return fd;
}

static void send_to(int fd, const void *buf, size_t len, uint32_t ip, uint16_t port)
{
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(ip), .sin_port = htons(port)};
    (void)sendto(fd, buf, len, 0, (struct sockaddr *)&to, sizeof to);
}

/* The datagram sender (a real heartbeat) puts out next, as a spy got it. */
static ssize_t capture(struct dtrain_hb *sender, const struct dtrain_hb_state *s, int leaving, int spy,
                       unsigned char *buf, size_t len)
{
    dtrain_hb_send(sender, s, leaving);
    return recv(spy, buf, len, 0);
}

/* Datagrams sent on loopback are queued by the sending CPU's backlog in
 * order: a marker the test reads back from its own socket, sent last from
 * the same CPU, says that everything before it is in its socket. */
static int all_delivered(int marker_fd, const struct sockaddr_in *marker)
{
    char byte = 'm', got;
    (void)sendto(marker_fd, &byte, 1, 0, (const struct sockaddr *)marker, sizeof *marker);
    return recv(marker_fd, &got, 1, 0) == 1;
}

static uint64_t accepted_after_receive(struct dtrain_hb *h)
{
    struct dtrain_hb_counts c;
    dtrain_hb_receive(h);
    dtrain_hb_counts(h, &c);
    return c.accepted;
}

static void attacks(const unsigned char *key)
{
    char err[256];
    struct dtrain_hb *watcher = NULL, *sender = NULL;
    struct sockaddr_in rank0_addr, spy_addr, stranger_addr;
    int rank0 = plain_socket(&rank0_addr), spy = plain_socket(&spy_addr), stranger = plain_socket(&stranger_addr);
    /* the watcher (rank 1) knows rank 0 at rank0's address; the datagrams
     * rank 0 would send are made by a real heartbeat of the job (sender)
     * and captured by the spy, so the test can relay, replay and misplace
     * genuine ones */
    if (rank0 < 0 || spy < 0 || stranger < 0 ||
        dtrain_hb_open("127.0.0.1", 1, "node1", "0000:0f:00.0", key, &watcher, err, sizeof err) != 0 ||
        dtrain_hb_open("127.0.0.1", 0, "node1", "0000:07:00.0", key, &sender, err, sizeof err) != 0 ||
        dtrain_hb_set_peer(watcher, 0, 0, ntohl(rank0_addr.sin_addr.s_addr), ntohs(rank0_addr.sin_port)) != 0 ||
        dtrain_hb_set_peer(sender, 1, 1, ntohl(spy_addr.sin_addr.s_addr), ntohs(spy_addr.sin_port)) != 0) {
        ok(0, "the attack set-up: %s", err);
        return;
    }
    uint32_t ip;
    uint16_t port;
    dtrain_hb_address(watcher, 0, &ip, &port);
    struct dtrain_hb_state alive = {.waiting = 1, .armed = 1, .step = 7, .progress = 1};
    snprintf(alive.what, sizeof alive.what, "data-parallel gradient reduction");
    unsigned char beat[4][DTRAIN_HB_WIRE_LEN + 8], leaving[DTRAIN_HB_WIRE_LEN + 8];
    ssize_t len[4], leaving_len;
    for (int i = 0; i < 4; i++) {
        len[i] = capture(sender, &alive, 0, spy, beat[i], sizeof beat[i]);
        alive.progress++;
    }
    leaving_len = capture(sender, &alive, 1, spy, leaving, sizeof leaving);
    ok(len[0] == DTRAIN_HB_WIRE_LEN && len[3] == DTRAIN_HB_WIRE_LEN && leaving_len == DTRAIN_HB_WIRE_LEN,
       "the spy captured five genuine datagrams of rank 0 (%zd bytes)", len[0]);

    send_to(rank0, beat[1], (size_t)len[1], ip, port);
    ok(accepted_after_receive(watcher) == 1, "a genuine datagram relayed from rank 0's address is taken");

    /* the old format: a 64-bit token (FNV-1a of the world id, xor the
     * rank) in clear, no MAC: anyone who saw one datagram can make these */
    struct {
        uint32_t magic, version;
        uint64_t token;
        int32_t rank, flags;
        uint64_t progress;
        int64_t step;
        char what[48], node[32], gpu[32];
    } old;
    memset(&old, 0, sizeof old);
    old.magic = 0x42485444u;
    old.version = 1;
    old.token = 1469598103934665603ULL;
    for (const char *c = WORLD_ID; *c != '\0'; c++)
        old.token = (old.token ^ (unsigned char)*c) * 1099511628211ULL;
    old.flags = 4; /* "leaving": the watcher would stop watching a hung rank */
    old.progress = 99;
    send_to(rank0, &old, sizeof old, ip, port);
    struct dtrain_hb_counts c;
    uint64_t taken = accepted_after_receive(watcher);
    dtrain_hb_counts(watcher, &c);
    ok(taken == 1 && c.dropped == 1, "a forged datagram in the old token format is dropped and counted");

    send_to(rank0, beat[1], (size_t)len[1], ip, port);
    send_to(rank0, beat[0], (size_t)len[0], ip, port);
    taken = accepted_after_receive(watcher);
    dtrain_hb_counts(watcher, &c);
    ok(taken == 1 && c.dropped == 3, "a genuine datagram replayed, and an older one, are dropped (sequence numbers)");

    send_to(stranger, beat[2], (size_t)len[2], ip, port);
    ok(accepted_after_receive(watcher) == 1,
       "a genuine, newer datagram sent from another address than rank 0's is not taken");
    send_to(rank0, beat[2], (size_t)len[2], ip, port);
    ok(accepted_after_receive(watcher) == 2, "the same datagram from rank 0's address is");

    /* a flood: more junk than any fixed number of reads per poll, from a
     * stranger and from rank 0's own address, then one genuine beat: it is
     * seen in the very next receive */
    cpu_set_t one, was;
    CPU_ZERO(&one);
    CPU_SET(sched_getcpu(), &one);
    int pinned = sched_getaffinity(0, sizeof was, &was) == 0 && sched_setaffinity(0, sizeof one, &one) == 0;
    unsigned char junk[DTRAIN_HB_WIRE_LEN];
    memset(junk, 0xa5, sizeof junk);
    for (int i = 0; i < 2000; i++)
        send_to(stranger, junk, sizeof junk, ip, port);
    for (int i = 0; i < 100; i++)
        send_to(rank0, junk, i % 2 ? sizeof junk : (size_t)i, ip, port);
    send_to(rank0, beat[3], (size_t)len[3], ip, port);
    int delivered = all_delivered(stranger, &stranger_addr);
    if (pinned)
        sched_setaffinity(0, sizeof was, &was);
    taken = accepted_after_receive(watcher);
    dtrain_hb_counts(watcher, &c);
    ok(delivered && taken == 3 && c.dropped == 103,
       "after a flood of junk (2000 from a stranger, 100 from rank 0's address) one genuine beat is seen in the next "
       "receive (%llu taken, %llu dropped)", (unsigned long long)taken, (unsigned long long)c.dropped);

    /* the captured "leaving", replayed later, cannot end the watching of a
     * rank that then stops: its sequence number is old */
    dtrain_hb_close(sender);
    sender = NULL;
    send_to(rank0, leaving, (size_t)leaving_len, ip, port);
    ok(accepted_after_receive(watcher) == 4, "the genuine \"leaving\" in its turn is taken");
    send_to(rank0, leaving, (size_t)leaving_len, ip, port);
    taken = accepted_after_receive(watcher);
    ok(taken == 4, "and replayed, dropped");

    dtrain_hb_close(watcher);
    close(rank0);
    close(spy);
    close(stranger);
}

int main(void)
{
    struct trio t;
    char reason[600];
    unsigned char token[DTRAIN_HB_KEY_LEN], a[DTRAIN_HB_KEY_LEN], b[DTRAIN_HB_KEY_LEN], a2[DTRAIN_HB_KEY_LEN];
    dtrain_hb_key(WORLD_ID, token);
    dtrain_hb_key("a", a);
    dtrain_hb_key("b", b);
    dtrain_hb_key("a", a2);
    struct dtrain_hb_state computing = {.armed = 1, .step = 5, .progress = 100};
    snprintf(computing.what, sizeof computing.what, "forward of micro-batch 1");
    struct dtrain_hb_state waiting = computing;
    waiting.waiting = 1;
    snprintf(waiting.what, sizeof waiting.what, "data-parallel gradient reduction");

    ok(memcmp(a, b, sizeof a) != 0 && memcmp(a, a2, sizeof a) == 0,
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
    unsigned char other_key[DTRAIN_HB_KEY_LEN];
    dtrain_hb_key("cpu:127.0.0.1:4243:ffeeddccbbaa99887766554433221100", other_key);
    open_trio(&other, other_key);
    uint32_t ip;
    uint16_t port;
    dtrain_hb_address(t.h[1], 1, &ip, &port); /* rank 1's socket for rank 2 */
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

    attacks(token);

    char err[256];
    struct dtrain_hb *h = NULL;
    ok(dtrain_hb_open("not-an-address", 0, "n", "g", token, &h, err, sizeof err) != 0 && h == NULL &&
       strstr(err, "'not-an-address' is not an IPv4 address"), "a bad address is refused with one line");
    return tap_done();
}
