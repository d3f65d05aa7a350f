/* SPDX-License-Identifier: GPL-2.0-or-later */
/* The step's IMEX channel; see imex.h. */
#include "imex.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtrain_file.h"
#include "dtrain_parse.h"

int dtrain_imex_channel_name(const char *name)
{
    static const char prefix[] = "channel";
    if (name == NULL || strncmp(name, prefix, sizeof prefix - 1) != 0)
        return 0;
    const char *d = name + sizeof prefix - 1;
    size_t n = 0;
    while (d[n] >= '0' && d[n] <= '9')
        n++;
    return n >= 1 && n <= 10 && d[n] == '\0';
}

int dtrain_imex_find_channel(const char *dir, char *found, size_t foundlen, char *why, size_t whylen)
{
    if (found && foundlen)
        found[0] = '\0';
    /* No link followed: the folder is Slurm's tmpfs or the driver's /dev
     * node, never a link (a site's fake tree neither). */
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0) {
        if (errno == ENOENT)
            dtrain_snprintf(why, whylen, "%.256s does not exist", dir);
        else if (errno == ELOOP || errno == ENOTDIR)
            dtrain_snprintf(why, whylen, "%.256s is not a folder", dir);
        else
            dtrain_snprintf(why, whylen, "cannot open %.256s: %s", dir, strerror(errno));
        return 0;
    }
    DIR *d = fdopendir(dfd);
    if (d == NULL) {
        dtrain_snprintf(why, whylen, "cannot read %.256s: %s", dir, strerror(errno));
        close(dfd);
        return 0;
    }
    char other[64] = "";
    const char *other_type = NULL;
    unsigned long best = 0;
    int have = 0;
    struct dirent *e;
    for (int seen = 0; seen < DTRAIN_IMEX_MAX_ENTRIES && (e = readdir(d)) != NULL; seen++) {
        if (!dtrain_imex_channel_name(e->d_name))
            continue;
        struct stat st;
        if (fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0)
            continue;
        if (!S_ISCHR(st.st_mode)) {
            if (other_type == NULL) {
                dtrain_snprintf(other, sizeof other, "%s", e->d_name);
                other_type = dtrain_file_type_name(st.st_mode);
            }
            continue;
        }
        unsigned long n = strtoul(e->d_name + 7, NULL, 10);
        if (!have || n < best) {
            best = n;
            have = 1;
            if (found && foundlen)
                dtrain_snprintf(found, foundlen, "%s", e->d_name);
        }
    }
    closedir(d); /* closes dfd */
    if (have)
        return 1;
    if (other_type != NULL)
        dtrain_snprintf(why, whylen, "%.256s holds no channel device (%s is %s, not a character device)", dir,
                        other, other_type);
    else
        dtrain_snprintf(why, whylen, "%.256s holds no channel device", dir);
    return 0;
}
