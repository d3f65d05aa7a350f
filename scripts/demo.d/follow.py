#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""Follow a dtrain batch job live: its Slurm state, its output and its metrics.

    follow.py --job ID --dir DIR --steps N [--every K] [--out FILE]

Prints, as they happen:
  - every change of the job's Slurm state (scontrol show job): JobState,
    Reason, Restarts, so a requeue shows as RUNNING -> PENDING with
    Restarts=1 and then RUNNING again;
  - the lines of the job's output that tell the story (the batch script's
    own "demo:" lines, checkpoints, resume, fault injection and detection,
    srun errors);
  - a progress line every K steps (and the first step of every run), read
    from the metrics JSON lines the running job writes (DIR/metrics.RUN.jsonl,
    one file per run of the job): step, loss, tokens/s, ETA.

When the job has ended, writes DIR/timeline.json (the state changes with
their wall-clock times, for report.py) and exits 0 if the job COMPLETED,
1 otherwise.  It reads only what Slurm and the job wrote; it changes nothing.
"""
import argparse
import glob
import json
import os
import re
import subprocess
import sys
import time

ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
         "BOOT_FAIL", "DEADLINE", "PREEMPTED"}
# Output lines worth showing (the progress lines come from the metrics instead).
STORY = re.compile(r"^demo:|checkpoint|resum|inject|fault|watchdog|srun: error|error|refus|Killed|requeue",
                   re.IGNORECASE)


def job_state(job):
    """JobState, Reason, Restarts, NodeList of the job; None once Slurm forgot it."""
    try:
        out = subprocess.run(["scontrol", "-o", "show", "job", str(job)], capture_output=True,
                             text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    fields = dict(tok.split("=", 1) for tok in out.split() if "=" in tok)
    if "JobState" not in fields:
        return None
    return {k: fields.get(k, "?") for k in ("JobState", "Reason", "Restarts", "NodeList", "ExitCode")}


def clock(seconds):
    seconds = max(0, int(round(seconds)))
    return "%d:%02d" % (seconds // 60, seconds % 60)


def kilo(x):
    return "%.1fk" % (x / 1000.0) if x >= 1000 else "%.0f" % x


class Tail:
    """The complete lines appended to a file since the last read."""

    def __init__(self, path):
        self.path, self.pos, self.rest = path, 0, ""

    def lines(self):
        try:
            with open(self.path, "r", errors="replace") as f:
                f.seek(self.pos)
                data = f.read()
                self.pos = f.tell()
        except FileNotFoundError:
            return []
        data = self.rest + data
        lines = data.split("\n")
        self.rest = lines.pop()  # an unfinished last line waits for its end
        return lines


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--job", required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--every", type=int, default=20)
    ap.add_argument("--out", help="the job's output file (default DIR/job.out)")
    ap.add_argument("--poll", type=float, default=0.25)
    a = ap.parse_args()

    t0 = time.time()
    out = Tail(a.out or os.path.join(a.dir, "job.out"))
    metrics = {}        # run -> Tail
    recent = []         # ms of the latest steps, for the ETA
    timeline = []       # {"time", "state", "reason", "restarts"}
    last = None
    gone = 0

    def say(text):
        print("[%6.1fs] %s" % (time.time() - t0, text), flush=True)

    while True:
        st = job_state(a.job)
        now = time.time()
        if st is None:
            gone += 1
            if gone > 20:  # forgotten for 5 s: it ended long ago
                say("job %s: Slurm no longer knows it" % a.job)
                break
        else:
            gone = 0
            key = (st["JobState"], st["Reason"], st["Restarts"])
            if key != last:
                say("job %s: %s%s, Restarts=%s%s" % (
                    a.job, st["JobState"], "" if st["Reason"] == "None" else " (Reason=%s)" % st["Reason"],
                    st["Restarts"], " on " + st["NodeList"] if st["JobState"] == "RUNNING" else ""))
                timeline.append({"time": now, "state": st["JobState"], "reason": st["Reason"],
                                 "restarts": int(st["Restarts"]) if st["Restarts"].isdigit() else None})
                last = key

        for line in out.lines():
            if STORY.search(line):
                say("  job| " + line)

        for path in sorted(glob.glob(os.path.join(a.dir, "metrics.*.jsonl"))):
            m = re.search(r"metrics\.(\d+)\.jsonl$", path)
            if m and int(m.group(1)) not in metrics:
                metrics[int(m.group(1))] = Tail(path)
        for run in sorted(metrics):
            first = metrics[run].pos == 0
            for line in metrics[run].lines():
                try:
                    r = json.loads(line)
                except ValueError:
                    continue
                recent = (recent + [r["ms"]])[-20:]
                step = r["step"]
                if first or step % a.every == 0 or step + 1 == a.steps:
                    eta = (a.steps - step - 1) * (sum(recent) / len(recent)) / 1000.0
                    say("  run %d | step %4d/%d | loss %.4f | %s tok/s | ETA %s" % (
                        run, step, a.steps, r["loss"], kilo(r["tokens_per_s"]), clock(eta)))
                first = False

        if st is not None and st["JobState"] in ENDED:
            break
        time.sleep(a.poll)

    with open(os.path.join(a.dir, "timeline.json"), "w") as f:
        json.dump({"job": a.job, "started": t0, "ended": time.time(), "states": timeline,
                   "final": last[0] if last else None}, f, indent=1)
    return 0 if last and last[0] == "COMPLETED" else 1


if __name__ == "__main__":
    sys.exit(main())
