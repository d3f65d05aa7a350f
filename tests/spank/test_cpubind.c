/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of CPU lists and binding (cpubind.c).  Binding runs in the test
 * process itself, against the CPUs this machine really has. */
#include <sched.h>
#include <stdio.h>
#include <string.h>

#include "cpubind.h"
#include "tap.h"

static void test_lists(void)
{
    cpu_set_t *set = CPU_ALLOC(DTRAIN_CPU_MAX);
    char err[256], out[256];
    struct { const char *in, *out; } good[] = {
        {"0", "0"}, {"0-3", "0-3"}, {"0-1,8-9,16-17", "0-1,8-9,16-17"}, {"3,1,2", "1-3"},
        {"5-5", "5"}, {"0-3,2-6", "0-6"}, {"8191", "8191"},
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ok(dtrain_cpulist_parse(good[i].in, set, err, sizeof err) == 0 &&
           dtrain_cpulist_format(set, out, sizeof out) == 0 && strcmp(out, good[i].out) == 0,
           "'%s' reads as %s", good[i].in, out);
    const char *bad[] = {"", "a", "1-", "-1", "3-1", "1,,2", "1,", "8192", "0-99999", " 1", "1 ", "1;2"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ok(dtrain_cpulist_parse(bad[i], set, err, sizeof err) == -1 && strstr(err, "CPU list"),
           "'%s' is refused (%s)", bad[i], err);
    dtrain_cpulist_parse("0,2,4,6,8,10", set, err, sizeof err);
    ok(dtrain_cpulist_format(set, out, 8) == -1, "a list that does not fit the buffer is refused, not cut");
    CPU_FREE(set);
}

static void test_binding(void)
{
    char err[256], have[256], bound[256], want[300];
    int listed = 0, usable = 0;

    ok(dtrain_cpus_allowed(have, sizeof have) == 0 && have[0] != '\0', "this process may use CPUs %s", have);
    ok(dtrain_cpulist_usable("8000-8009", &listed, &usable, err, sizeof err) == 0 && listed == 10 && usable == 0,
       "CPUs this machine lacks are listed but not usable");
    ok(dtrain_bind_to_cpulist("8000-8009", bound, sizeof bound, err, sizeof err) == DTRAIN_BIND_NONE &&
       bound[0] == '\0', "binding to CPUs that do not exist leaves the task unbound");
    ok(dtrain_bind_to_cpulist("x", bound, sizeof bound, err, sizeof err) == DTRAIN_BIND_ERROR && err[0],
       "a malformed list is an error, not a binding (%s)", err);

    snprintf(want, sizeof want, "%s,8000-8009", have);
    ok(dtrain_cpulist_usable(want, &listed, &usable, err, sizeof err) == 0 && usable > 0 && usable == listed - 10,
       "%s: %d of %d usable", want, usable, listed);
    ok(dtrain_bind_to_cpulist(want, bound, sizeof bound, err, sizeof err) == DTRAIN_BIND_PART &&
       strcmp(bound, have) == 0, "binding to %s binds to the part that exists (%s)", want, bound);

    /* Bind to the first allowed CPU alone, then check the kernel agrees. */
    char first[16];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(have, ",-"), have);
    char now[256];
    ok(dtrain_bind_to_cpulist(first, bound, sizeof bound, err, sizeof err) == DTRAIN_BIND_ALL &&
       strcmp(bound, first) == 0 && dtrain_cpus_allowed(now, sizeof now) == 0 && strcmp(now, first) == 0,
       "binding to CPU %s: the process now runs on %s", first, now);
}

int main(void)
{
    test_lists();
    test_binding();
    return tap_done();
}
