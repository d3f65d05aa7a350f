/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of runtime/comm/bootstrap/bootstrap_id.c: cpu ids (a real listening socket,
 * a real connection to it, secrets from getrandom), nccl ids (the real
 * ncclGetUniqueId, which needs no GPU; skipped in a build without CUDA) and
 * the strict parsers. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "comm/bootstrap/bootstrap_id.h"
#include "tap.h"

/* Connect to the id's address and port; the listener must accept it. */
static int connects(const struct dtrain_cpu_id *id, int listen_fd)
{
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((unsigned short)id->port)};
    int fd = socket(AF_INET, SOCK_STREAM, 0), peer = -1, rc = 0;
    if (fd < 0 || inet_pton(AF_INET, id->addr, &sin.sin_addr) != 1)
        goto out;
    if (connect(fd, (struct sockaddr *)&sin, sizeof sin) != 0)
        goto out;
    peer = accept(listen_fd, NULL, NULL);
    rc = peer >= 0;
out:
    if (peer >= 0)
        close(peer);
    if (fd >= 0)
        close(fd);
    return rc;
}

int main(void)
{
    char err[256] = "", addr[INET_ADDRSTRLEN] = "";
    char id1[DTRAIN_BOOTSTRAP_ID_MAX] = "", id2[DTRAIN_BOOTSTRAP_ID_MAX] = "";
    int fd1 = -1, fd2 = -1;
    struct dtrain_cpu_id p1, p2;
    enum dtrain_comm_backend backend;

    ok(dtrain_backend_parse("cpu", &backend) == 0 && backend == DTRAIN_COMM_CPU, "backend 'cpu' parses");
    ok(dtrain_backend_parse("nccl", &backend) == 0 && backend == DTRAIN_COMM_NCCL, "backend 'nccl' parses");
    ok(dtrain_backend_parse("gloo", &backend) == -1 && dtrain_backend_parse("", &backend) == -1 &&
       dtrain_backend_parse(NULL, &backend) == -1, "other backends are refused");
    ok(dtrain_backend_built(DTRAIN_COMM_CPU), "the cpu backend is always built");

    ok(dtrain_comm_addr_pick("lo", addr, sizeof addr, err, sizeof err) == 0 && strcmp(addr, "127.0.0.1") == 0,
       "interface lo gives 127.0.0.1");
    ok(dtrain_comm_addr_pick("no-such-if0", addr, sizeof addr, err, sizeof err) == -1 &&
       strstr(err, "no-such-if0") != NULL, "a missing interface is an error naming it (%s)", err);
    ok(dtrain_comm_addr_pick(NULL, addr, sizeof addr, err, sizeof err) == 0, "the default address is %s", addr);

    int made = dtrain_bootstrap_id_make_cpu(addr, 3, id1, sizeof id1, &fd1, err, sizeof err) == 0 &&
               dtrain_bootstrap_id_make_cpu(addr, 3, id2, sizeof id2, &fd2, err, sizeof err) == 0;
    ok(made, "two cpu ids made: %s %s", id1, made ? "" : err);
    ok(made && strlen(id1) < 64 && dtrain_bootstrap_id_backend(id1) == DTRAIN_COMM_CPU,
       "a cpu id is short (%zu bytes) and says cpu", strlen(id1));
    memset(&p1, 0, sizeof p1);
    memset(&p2, 0, sizeof p2);
    int parsed = made && dtrain_cpu_id_parse(id1, &p1) == 0 && dtrain_cpu_id_parse(id2, &p2) == 0;
    ok(parsed && strcmp(p1.addr, addr) == 0 && p1.port > 0, "cpu ids parse back: %s port %u", p1.addr, p1.port);
    ok(parsed && (p1.port != p2.port) && memcmp(p1.secret, p2.secret, sizeof p1.secret) != 0,
       "two groups get different ports and secrets");
    ok(parsed && connects(&p1, fd1) && connects(&p2, fd2), "the leaders' sockets listen and accept");
    if (fd1 >= 0)
        close(fd1);
    if (fd2 >= 0)
        close(fd2);

    ok(dtrain_bootstrap_id_make_cpu("not-an-address", 1, id1, sizeof id1, &fd1, err, sizeof err) == -1,
       "a cpu id on a bad address is refused (%s)", err);
    ok(dtrain_bootstrap_id_make_cpu("127.0.0.1", 1, id1, 10, &fd1, err, sizeof err) == -1,
       "a cpu id that does not fit its buffer is refused");

    static const char *const bad_cpu[] = {
        "", "cpu:", "cpu:127.0.0.1", "cpu:127.0.0.1:80", "cpu:127.0.0.1:80:abc",
        "cpu:127.0.0.1:0:00112233445566778899aabbccddeeff", "cpu:127.0.0.1:65536:00112233445566778899aabbccddeeff",
        "cpu:localhost:80:00112233445566778899aabbccddeeff", "cpu:127.0.0.1:80:00112233445566778899aabbccddeefg",
        "cpu:127.0.0.1:80:00112233445566778899aabbccddeeff00", "nccl:00", "cpu:127.0.0.1:-80:00112233445566778899aabbccddeeff",
        "cpu:127.0.0.1: 80:00112233445566778899aabbccddeeff",
    };
    int refused = 0;
    for (size_t i = 0; i < sizeof bad_cpu / sizeof bad_cpu[0]; i++)
        refused += dtrain_cpu_id_parse(bad_cpu[i], &p1) == -1;
    ok(refused == (int)(sizeof bad_cpu / sizeof bad_cpu[0]), "%d of %zu malformed cpu ids refused", refused,
       sizeof bad_cpu / sizeof bad_cpu[0]);
    ok(dtrain_cpu_id_parse("cpu:10.1.2.3:29500:00112233445566778899aabbccddeeff", &p1) == 0 && p1.port == 29500 &&
       p1.secret[15] == 0xff, "a well-formed cpu id parses");
    ok(dtrain_bootstrap_id_backend("gloo:1") == -1, "an id of no known backend is recognised as such");

    unsigned char raw[DTRAIN_NCCL_ID_LEN];
    if (dtrain_backend_built(DTRAIN_COMM_NCCL)) {
        int nccl = dtrain_bootstrap_id_make_nccl(id1, sizeof id1, err, sizeof err) == 0 &&
                   dtrain_bootstrap_id_make_nccl(id2, sizeof id2, err, sizeof err) == 0;
        ok(nccl, "two nccl ids made with ncclGetUniqueId %s", nccl ? "" : err);
        ok(nccl && strlen(id1) == 5 + 2 * DTRAIN_NCCL_ID_LEN && dtrain_bootstrap_id_backend(id1) == DTRAIN_COMM_NCCL,
           "an nccl id is 'nccl:' + 256 hex (%zu bytes < 1024)", strlen(id1));
        ok(nccl && dtrain_nccl_id_parse(id1, raw) == 0 && strcmp(id1, id2) != 0, "nccl ids parse back and differ");
    } else {
        ok(dtrain_bootstrap_id_make_nccl(id1, sizeof id1, err, sizeof err) == -1 && strstr(err, "--comm-backend cpu"),
           "without CUDA an nccl id is refused with advice (%s)", err);
        skip("built without CUDA/NCCL: ncclGetUniqueId not tested");
        skip("built without CUDA/NCCL: nccl id parsing of a real id not tested");
    }
    ok(dtrain_nccl_id_parse("nccl:00", raw) == -1 && dtrain_nccl_id_parse("cpu:1.2.3.4:5:00", raw) == -1,
       "malformed nccl ids are refused");
    return tap_done();
}
