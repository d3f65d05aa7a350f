/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Unit tests of common/dtrain_file: opens that never block on a special
 * file, and the trusted open a root process uses (no link anywhere, the file
 * and every folder above it root-owned and not writable by others). */
#include "dtrain_file.h"
#include "tap.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char dir[] = "/tmp/dtrain-test-file.XXXXXX";

static const char *at(const char *name)
{
    static char path[4][600];
    static int k;
    k = (k + 1) % 4;
    snprintf(path[k], sizeof path[k], "%s/%s", dir, name);
    return path[k];
}

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

int main(void)
{
    char err[1200];
    off_t size = -1;
    if (!mkdtemp(dir)) {
        printf("Bail out! cannot create a temporary folder\n");
        return 1;
    }
    chmod(dir, 0755);
    put(at("plain"), "hello\n");
    mkfifo(at("fifo"), 0600);
    mkdir(at("sub"), 0755);
    symlink(at("plain"), at("link"));

    int fd = dtrain_open_regular(at("plain"), O_RDONLY, "file", &size, err, sizeof err);
    ok(fd >= 0 && size == 6 && (fcntl(fd, F_GETFL) & O_NONBLOCK) == 0,
       "a regular file opens, its size is given and the descriptor blocks again");
    if (fd >= 0)
        close(fd);
    ok(dtrain_open_regular(at("fifo"), O_RDONLY, "file", NULL, err, sizeof err) < 0 && strstr(err, "a FIFO"),
       "a FIFO for reading: refused at once (%s)", err);
    ok(dtrain_open_regular(at("fifo"), O_WRONLY | O_APPEND | O_CREAT, "log", NULL, err, sizeof err) < 0 &&
           strstr(err, "a FIFO"), "a FIFO for writing, no reader: refused at once (%s)", err);
    ok(dtrain_open_regular(at("sub"), O_RDONLY, "file", NULL, err, sizeof err) < 0 && strstr(err, "is a directory"),
       "a folder: 'is a directory' (%s)", err);
    ok(dtrain_open_regular("/dev/null", O_RDONLY, "file", NULL, err, sizeof err) < 0 &&
           strstr(err, "a character device"), "a device: refused (%s)", err);
    ok(dtrain_open_regular(at("none"), O_RDONLY, "file", NULL, err, sizeof err) < 0 &&
           strstr(err, "No such file"), "a missing file: why (%s)", err);
    char *buf = NULL;
    size_t len = 0;
    ok(dtrain_read_regular(at("plain"), "file", 100, &buf, &len, err, sizeof err) == 0 && len == 6 &&
           strcmp(buf, "hello\n") == 0, "read whole");
    free(buf);
    ok(dtrain_read_regular(at("plain"), "file", 3, &buf, &len, err, sizeof err) < 0 && strstr(err, "larger than"),
       "a size bound (%s)", err);

    fd = dtrain_open_trusted(at("plain"), "config", 0, err, sizeof err);
    ok(fd >= 0, "trusted: a file in a root folder (%s)", fd >= 0 ? "opened" : err);
    if (fd >= 0)
        close(fd);
    ok(dtrain_open_trusted(at("link"), "config", 0, err, sizeof err) < 0 && strstr(err, "symbolic link"),
       "trusted: a link to the file is refused (%s)", err);
    ok(dtrain_open_trusted(at("fifo"), "config", 0, err, sizeof err) < 0 && strstr(err, "a FIFO"),
       "trusted: a FIFO is refused without waiting (%s)", err);
    ok(dtrain_open_trusted(at("plain"), "config", 3, err, sizeof err) < 0 && strstr(err, "larger than"),
       "trusted: a size bound (%s)", err);
    char rel[600];
    if (chdir(dir) == 0) {
        snprintf(rel, sizeof rel, "plain");
        fd = dtrain_open_trusted(rel, "config", 0, err, sizeof err);
        ok(fd >= 0, "trusted: a relative path is taken from the working folder (%s)", fd >= 0 ? "opened" : err);
        if (fd >= 0)
            close(fd);
        if (chdir("/") != 0)
            diag("cannot go back to /");
    }
    if (geteuid() == 0) {
        chmod(at("plain"), 0664);
        ok(dtrain_open_trusted(at("plain"), "config", 0, err, sizeof err) < 0 && strstr(err, "must be owned by root"),
           "as root: a group-writable file is refused (%s)", err);
        chmod(at("plain"), 0644);
        chmod(dir, 0777);
        ok(dtrain_open_trusted(at("plain"), "config", 0, err, sizeof err) < 0 && strstr(err, "the folder") &&
               strstr(err, dir), "as root: a folder above it that others may write is refused (%s)", err);
        chmod(dir, 01777);
        fd = dtrain_open_trusted(at("plain"), "config", 0, err, sizeof err);
        ok(fd >= 0, "as root: a sticky world-writable folder (like /tmp) is fine (%s)", fd >= 0 ? "opened" : err);
        if (fd >= 0)
            close(fd);
        chmod(dir, 0755);
        if (chown(at("plain"), 1, 1) == 0) {
            ok(dtrain_open_trusted(at("plain"), "config", 0, err, sizeof err) < 0 &&
                   strstr(err, "must be owned by root"), "as root: a file another user owns is refused (%s)", err);
            if (chown(at("plain"), 0, 0) != 0)
                diag("cannot give the file back to root");
        }
    } else {
        skip("ownership checks need root");
    }

    unlink(at("plain"));
    unlink(at("fifo"));
    unlink(at("link"));
    rmdir(at("sub"));
    rmdir(dir);
    return tap_done();
}
