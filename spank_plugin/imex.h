/* SPDX-License-Identifier: GPL-2.0-or-later */
/* Whether a task's step has an IMEX channel (multi-node NVLink).
 *
 * CUDA shares GPU memory between the nodes of a multi-node NVLink domain
 * (GB200 NVL72: NCCL's NVLink transport across nodes, its NVLS/MNNVL
 * collectives) only through an IMEX channel: a character device
 * /dev/nvidia-caps-imex-channels/channelN, N its minor number.  NVIDIA's
 * IMEX guide ("IMEX Channels"): the driver registers the device class
 * nvidia-caps-imex-channels but creates no channel; without one the CUDA
 * calls fail with an insufficient-permission error, and the nvidia-imex
 * daemon must run on the domain's nodes.
 *
 * Who makes the channel, as read in Slurm's source (24.11 and 26.05,
 * src/plugins/switch/nvidia_imex/): with SwitchType=switch/nvidia_imex,
 * slurmctld gives each job one channel id (1..imex_channel_count, 0 kept
 * back; with --network=unique-channel-per-segment and topology/block one per
 * segment), and slurmstepd, before the tasks start, unshares its mount
 * namespace, mounts a tmpfs on /dev/nvidia-caps-imex-channels and mknods
 * channelN there (mode 0666, the major of "nvidia-caps-imex-channels" in
 * /proc/devices) for the job's channel.  The plugin sets NO environment
 * variable (switch_p_job_attach leaves the environment alone), so the
 * device folder as the task sees it is the only sign; the plugin makes none
 * when the driver's major is missing, and none under namespace/tmpfs
 * (26.05) or job_container/tmpfs (24.11), logging an error only.  Without
 * the switch plugin a site may make a channel for every job itself (mknod
 * .../channel0, NVIDIA's guide).
 *
 * So the check looks, from the task (as the job's user, after Slurm set up
 * the namespace), for a character device named channel<digits> in the
 * folder.  The folder is the site's (imex_channels=, default
 * DTRAIN_IMEX_CHANNELS_DIR; tests point it at a fake tree): never a path
 * from the job.  Plain POSIX code; no Slurm. */
#ifndef DTRAIN_SPANK_IMEX_H
#define DTRAIN_SPANK_IMEX_H

#include <stddef.h>

#define DTRAIN_IMEX_CHANNELS_DIR "/dev/nvidia-caps-imex-channels"

/* At most this many folder entries are looked at (a channel folder holds
 * one or a few). */
#define DTRAIN_IMEX_MAX_ENTRIES 4096

/* 1 when `name` is "channel" followed by 1 to 10 digits. */
int dtrain_imex_channel_name(const char *name);

/* Look in dir (opened without following a link) for a channel device.
 * Returns 1 with its name ("channel7") in found, the lowest-numbered one;
 * 0 with one line in why when there is none ("/dev/nvidia-caps-imex-channels
 * does not exist", "... holds no channel device (channel0 is a regular
 * file, not a character device)"). */
int dtrain_imex_find_channel(const char *dir, char *found, size_t foundlen, char *why, size_t whylen);

#endif
