#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-or-later
"""The demo's summary and loss curve, from what the job actually wrote.

    report.py --dir DIR --png FILE [--title TEXT]
    report.py --metrics FILE [FILE...] --png FILE [--title TEXT]

The second form plots any metrics files (dtrain-train/dtrain-launch
--metrics): the training loss and, where the lines have one, the
validation loss (--val-data/--val-fraction) of each, and prints their
summary.  Without matplotlib (python3-matplotlib) it says so on one line:
--dir still prints the summary (exit 0), --metrics exits 2.

Reads DIR/metrics.RUN.jsonl (one file per run of the job: RUN is the
SLURM_RESTART_COUNT the run had; one JSON object per step with "step",
"loss", "ms", "tokens_per_s" and "time", the Unix time the line was
written) and DIR/timeline.json (the Slurm states follow.py saw).

Prints the summary: final loss, restarts, for every restart the step the
run stopped at and the step it resumed from, whether the redone steps
reproduced the losses of the first attempt, and the time lost; writes the
loss curve as a PNG with every restart marked.

Time lost to a fault = from the last step written before it to the moment
the next run finished that same step again: detection, Slurm's requeue and
restart delay, start-up and checkpoint load, and the steps done twice.
"""
import argparse
import glob
import json
import os
import re
import sys


def load_runs(d):
    runs = {}
    for path in glob.glob(os.path.join(d, "metrics.*.jsonl")):
        m = re.search(r"metrics\.(\d+)\.jsonl$", path)
        if not m:
            continue
        rows = []
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass  # a line cut by a crash
        if rows:
            runs[int(m.group(1))] = rows
    return runs


def load_files(paths):
    """--metrics: each file one run, numbered in the order given."""
    runs = {}
    for i, path in enumerate(paths):
        rows = []
        with open(path) as f:
            for line in f:
                try:
                    rows.append(json.loads(line))
                except ValueError:
                    pass
        if rows:
            runs[i] = rows
    return runs


def val_points(rows):
    return [(r["step"], r["val_loss"]) for r in rows if "val_loss" in r]


def clock(seconds):
    seconds = max(0, int(round(seconds)))
    return "%d:%02d" % (seconds // 60, seconds % 60)


def queued(timeline, restart):
    """Seconds the job waited in Slurm's queue before its run `restart`:
    from the first state follow.py saw with that restart count (PENDING,
    after the requeue) to RUNNING; None when the timeline does not tell."""
    seen = [s for s in timeline.get("states", []) if s.get("restarts") == restart]
    running = next((s for s in seen if s["state"] == "RUNNING"), None)
    if not seen or running is None or seen[0]["state"] == "RUNNING":
        return None
    return running["time"] - seen[0]["time"]


def restarts_of(runs, timeline):
    """One entry per restart: the run before, the run after, and what they did."""
    out = []
    order = sorted(runs)
    for before, after in zip(order, order[1:]):
        a, b = runs[before], runs[after]
        stopped = a[-1]["step"]          # the last step the earlier run finished
        resumed = b[0]["step"]           # the first step of the next run
        again = [r for r in b if r["step"] <= stopped]   # steps done twice
        first = {r["step"]: r["loss"] for r in a}
        same = [r for r in again if r["step"] in first]
        worst = max((abs(r["loss"] - first[r["step"]]) for r in same), default=None)
        caught_up = next((r for r in b if r["step"] >= stopped), None)
        lost = caught_up["time"] - a[-1]["time"] if caught_up else None
        gap = b[0]["time"] - b[0]["ms"] / 1000.0 - a[-1]["time"]
        out.append({"before": before, "after": after, "stopped": stopped, "resumed": resumed,
                    "queued": queued(timeline, after),
                    "redone": len(again), "compared": len(same), "worst": worst,
                    "lost": lost, "gap": gap, "redo": lost - gap if lost is not None else None})
    return out


def plot(runs, restarts, png, title, names=None):
    """The curves into png; False (said on stderr) without matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("report: matplotlib is not installed (apt-get install python3-matplotlib, or pip install "
              "matplotlib): no plot written", file=sys.stderr)
        return False

    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    colours = ["tab:blue", "tab:orange", "tab:green", "tab:purple", "tab:brown"]
    for i, run in enumerate(sorted(runs)):
        rows = runs[run]
        label = "run %d (SLURM_RESTART_COUNT=%d): steps %d-%d" % (run, run, rows[0]["step"], rows[-1]["step"])
        if names is not None:
            label = "%s: steps %d-%d" % (names[run], rows[0]["step"], rows[-1]["step"])
        ax.plot([r["step"] for r in rows], [r["loss"] for r in rows], lw=1.0,
                color=colours[i % len(colours)], label=label)
        val = val_points(rows)
        if val:
            ax.plot([v[0] for v in val], [v[1] for v in val], lw=1.6, ls="--", marker="o", ms=3,
                    color=colours[i % len(colours)], label="validation loss" + (
                        " (%s)" % names[run] if names is not None else " (run %d)" % run))
    for k, r in enumerate(restarts):
        first = k == 0  # one legend entry for each kind of mark
        ax.axvline(r["stopped"] + 1, color="tab:red", ls="--", lw=1.2,
                   label="fault: the run stopped in this step" if first else None)
        ax.axvline(r["resumed"], color="tab:green", ls=":", lw=1.4,
                   label="resumed from the checkpoint of this step" if first else None)
        ax.axvspan(r["resumed"], r["stopped"] + 1, color="tab:red", alpha=0.08,
                   label="steps done twice (the later run drawn on top)" if first else None)
        text = "restart %d: fault in step %d,\nrequeued, resumed from the\ncheckpoint of step %d" % (
            k + 1, r["stopped"] + 1, r["resumed"])
        if r["lost"] is not None:
            text += "\n(%.0f s lost)" % r["lost"]
        ax.annotate(text, xy=(r["stopped"] + 1, 0.62 - 0.2 * k), xycoords=("data", "axes fraction"),
                    xytext=(6, 0), textcoords="offset points", fontsize=8, color="tab:red", va="top")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (training: the step's batch; validation: held-out batches)")
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    fig.tight_layout()
    fig.savefig(png)
    return True


def report_files(a):
    runs = load_files(a.metrics)
    if not runs:
        print("report: no metrics lines in %s" % " ".join(a.metrics), file=sys.stderr)
        return 2
    names = {i: os.path.basename(p) for i, p in enumerate(a.metrics)}
    for run in sorted(runs):
        rows = runs[run]
        tail = rows[-20:]
        line = "%s: steps %d-%d, loss %.4f at the first step, final %.4f (mean of the last %d: %.4f)" % (
            a.metrics[run], rows[0]["step"], rows[-1]["step"], rows[0]["loss"], rows[-1]["loss"], len(tail),
            sum(r["loss"] for r in tail) / len(tail))
        val = val_points(rows)
        if val:
            best = min(val, key=lambda v: v[1])
            line += "; validation loss final %.4f after step %d, best %.4f after step %d" % (
                val[-1][1], val[-1][0], best[1], best[0])
        print(line)
    if not plot(runs, [], a.png, a.title, names):
        return 2
    print("plot: %s" % os.path.abspath(a.png))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--dir")
    src.add_argument("--metrics", nargs="+")
    ap.add_argument("--png", required=True)
    ap.add_argument("--title", default="dtrain: training loss")
    a = ap.parse_args()
    if a.metrics:
        return report_files(a)

    runs = load_runs(a.dir)
    if not runs:
        print("report: no metrics in %s/metrics.*.jsonl: the job wrote none" % a.dir, file=sys.stderr)
        return 1
    try:
        with open(os.path.join(a.dir, "timeline.json")) as f:
            timeline = json.load(f)
    except (OSError, ValueError):
        timeline = {}
    restarts = restarts_of(runs, timeline)
    last = runs[max(runs)]
    tail = last[-20:]
    every = [r for rows in runs.values() for r in rows]
    wall = every and max(r["time"] for r in every) - min(r["time"] - r["ms"] / 1000.0 for r in every)

    states = []
    for s in timeline.get("states", []):
        if not states or states[-1] != s["state"]:
            states.append(s["state"])
    counted = [s["restarts"] for s in timeline.get("states", []) if s.get("restarts") is not None]
    slurm = counted[-1] if counted else len(restarts)
    print("job %s: %s; Slurm restarted it %d time%s (Restarts=%d; states seen: %s)" % (
        timeline.get("job", "?"), timeline.get("final", "?"), slurm, "" if slurm == 1 else "s", slurm,
        " -> ".join(states) if states else "none"))
    for run in sorted(runs):
        rows = runs[run]
        print("  run %d: steps %d-%d, %d lines of metrics" % (run, rows[0]["step"], rows[-1]["step"], len(rows)))
    print("loss: %.4f at step 0, final %.4f at step %d (mean of the last %d steps: %.4f)" % (
        runs[min(runs)][0]["loss"], last[-1]["loss"], last[-1]["step"], len(tail),
        sum(r["loss"] for r in tail) / len(tail)))
    total_lost = 0.0
    for k, r in enumerate(restarts):
        print("restart %d: run %d stopped after step %d; run %d resumed from the checkpoint of step %d" % (
            k + 1, r["before"], r["stopped"], r["after"], r["resumed"]))
        if r["compared"]:
            print("  the %d steps done again reproduce the first attempt's losses: largest difference %.3g%s" % (
                r["compared"], r["worst"], " (bit for bit)" if r["worst"] == 0 else ""))
        if r["lost"] is not None:
            total_lost += r["lost"]
            print("  time lost: %.1f s = %.1f s from the last step before the fault to the first step after the"
                  " restart (detection, requeue, Slurm's restart delay, start-up, checkpoint load) + %.1f s"
                  " redoing steps %d-%d" % (r["lost"], r["gap"], r["redo"], r["resumed"], r["stopped"]))
            if r["queued"] is not None:
                print("  of the %.1f s, the requeued job waited %.1f s in Slurm's queue (PENDING until it"
                      " could start again)" % (r["gap"], r["queued"]))
    kept = {}
    for run in sorted(runs):
        for r in runs[run]:
            kept[r["step"]] = r  # a later run's step replaces the earlier one
    tokens = sum(r["tokens_per_s"] * r["ms"] / 1000.0 for r in kept.values())
    busy = sum(r["ms"] for r in kept.values()) / 1000.0
    print("time: %s from the first step to the last (%s of it lost to faults); %.1fk tokens/s while training" % (
        clock(wall), clock(total_lost), tokens / busy / 1000.0 if busy else 0.0))
    val = val_points(last)
    if val:
        best = min((v for rows in runs.values() for v in val_points(rows)), key=lambda v: v[1])
        print("validation loss: final %.4f after step %d, best %.4f after step %d (training loss then %.4f)" % (
            val[-1][1], val[-1][0], best[1], best[0], last[-1]["loss"]))
    if plot(runs, restarts, a.png, a.title):
        print("loss curve: %s" % os.path.abspath(a.png))
    return 0


if __name__ == "__main__":
    sys.exit(main())
