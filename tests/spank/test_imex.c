/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of the IMEX channel lookup (imex.c) on fake channel folders
 * made here: the folder /dev/nvidia-caps-imex-channels is at the hardware
 * boundary, and the plugin reads a fake one only where the root-owned site
 * configuration says so (imex_channels=), never from the job's environment.
 * Character devices need mknod (root): those points SKIP without it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "imex.h"
#include "tap.h"

static char root[256];

static void path(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", root, name);
}

static void test_names(void)
{
    const char *good[] = {"channel0", "channel7", "channel2047", "channel4294967295"};
    const char *bad[] = {"channel", "channelx", "channel-1", "xchannel0", "channel0x", "channel12345678901",
                         "Channel0", "", "channel 1"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++)
        ok(dtrain_imex_channel_name(good[i]), "'%s' is a channel's name", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ok(!dtrain_imex_channel_name(bad[i]), "'%s' is not", bad[i]);
    ok(!dtrain_imex_channel_name(NULL), "NULL is not");
}

static void test_folders(void)
{
    char dir[320], file[400], found[32] = "x", why[512];
    path(dir, sizeof dir, "none");
    ok(dtrain_imex_find_channel(dir, found, sizeof found, why, sizeof why) == 0 && found[0] == '\0' &&
       strstr(why, "none does not exist") != NULL, "no folder: none (%s)", why);

    path(dir, sizeof dir, "empty");
    mkdir(dir, 0755);
    ok(dtrain_imex_find_channel(dir, found, sizeof found, why, sizeof why) == 0 &&
       strstr(why, "empty holds no channel device") != NULL, "an empty folder: none (%s)", why);

    snprintf(file, sizeof file, "%s/channel0", dir);
    FILE *f = fopen(file, "w");
    if (f)
        fclose(f);
    snprintf(file, sizeof file, "%s/readme", dir);
    f = fopen(file, "w");
    if (f)
        fclose(f);
    ok(dtrain_imex_find_channel(dir, found, sizeof found, why, sizeof why) == 0 &&
       strstr(why, "(channel0 is a regular file, not a character device)") != NULL,
       "a regular file named channel0 is no channel (%s)", why);

    char link[400];
    snprintf(link, sizeof link, "%s/channel2", dir);
    ok(symlink("/dev/null", link) == 0 && dtrain_imex_find_channel(dir, found, sizeof found, why, sizeof why) == 0,
       "a link named channel2, even to a character device, is no channel (%s)", why);

    path(link, sizeof link, "link-to-folder");
    ok(symlink(dir, link) == 0 && dtrain_imex_find_channel(link, found, sizeof found, why, sizeof why) == 0 &&
       strstr(why, "link-to-folder is not a folder") != NULL, "the folder is not followed through a link (%s)", why);
    ok(dtrain_imex_find_channel(file, found, sizeof found, why, sizeof why) == 0 &&
       strstr(why, "readme is not a folder") != NULL, "a file for the folder (%s)", why);
}

static void test_devices(void)
{
    char dir[320], dev[400], found[32] = "", why[512] = "";
    path(dir, sizeof dir, "devices");
    mkdir(dir, 0755);
    snprintf(dev, sizeof dev, "%s/channel3", dir);
    if (mknod(dev, S_IFCHR | 0666, makedev(511, 3)) != 0) {
        char reason[160];
        snprintf(reason, sizeof reason, "cannot make a character device here (mknod: %s): needs root and CAP_MKNOD",
                 strerror(errno));
        skip(reason);
        skip(reason);
        return;
    }
    ok(dtrain_imex_find_channel(dir, found, sizeof found, why, sizeof why) == 1 && strcmp(found, "channel3") == 0,
       "a character device channel3: found (%s)", found);
    snprintf(dev, sizeof dev, "%s/channel12", dir);
    mknod(dev, S_IFCHR | 0666, makedev(511, 12));
    snprintf(dev, sizeof dev, "%s/channel1", dir);
    mknod(dev, S_IFCHR | 0666, makedev(511, 1));
    ok(dtrain_imex_find_channel(dir, found, sizeof found, why, sizeof why) == 1 && strcmp(found, "channel1") == 0,
       "channels 1, 3, 12: the lowest, channel1 (%s)", found);
}

int main(void)
{
    snprintf(root, sizeof root, "/tmp/dtrain-imex-XXXXXX");
    if (mkdtemp(root) == NULL) {
        printf("Bail out! mkdtemp: %s\n", strerror(errno));
        return 1;
    }
    test_names();
    test_folders();
    test_devices();
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    if (system(cmd) != 0)
        diag("could not remove %s", root);
    return tap_done();
}
