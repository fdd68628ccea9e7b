#!/usr/bin/python3
"""Turns mpitrain outputs into PNG pictures (needs python3-matplotlib from Debian).

  benchmarks/plot.py metrics runs/default/metrics.jsonl -o docs/img/training.png
      training and test loss, test accuracy and the learning rate against the optimizer
      step, one line per run (metrics.jsonl as DESIGN.md section 7 defines it: a header line
      starts each run; a resumed run's marker supersedes the lines earlier runs logged after
      its step, and they are dropped)
  benchmarks/plot.py bench collective_bench.json [more.json ...] -o docs/img/busbw.png
      bus bandwidth (GB/s) against message size, one line per file, algorithm and type
      (collective_bench --json output, DESIGN.md section 8)

Prints what it drew, one line per curve. Exit code 1 with a message naming the file (and
line) on input that does not follow the contract, or when matplotlib is missing.
"""
import argparse
import json
import math
import os
import sys

TRAIN_KEYS = ("step", "epoch", "loss", "lr", "grad_norm", "loss_scale", "skipped_steps",
              "samples_per_s", "time_s")
EVAL_KEYS = ("step", "epoch", "loss", "accuracy", "samples")
HEADER_KEYS = ("run_id", "start_time", "mpitrain_version", "world_size", "config_hash")
RESUME_KEYS = ("step", "epoch", "checkpoint")
BENCH_KEYS = ("op", "world_size", "rows")
ROW_KEYS = ("size", "count", "type", "redop", "algo", "time_us", "algbw", "busbw", "wrong",
            "vs_mpi")


def fail(message):
    sys.exit(f"plot.py: {message}")


def load_matplotlib():
    try:
        import matplotlib
    except ImportError:
        fail(f"needs matplotlib for {sys.executable}: apt-get install python3-matplotlib "
             "(or scripts/install-deps.sh --dev)")
    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt
    return plt


class Run:
    """The lines of one run of a metrics.jsonl."""

    def __init__(self, number, run_id):
        self.name = f"run {number}"  # in the legends
        self.label = self.name + (f" ({run_id})" if run_id else "")  # in the summary
        self.train, self.evals = [], []

    def drop_after(self, step):
        """Drops the lines after `step` (superseded by a resumed run); returns how many."""
        before = len(self.train) + len(self.evals)
        self.train = [r for r in self.train if r["step"] <= step]
        self.evals = [r for r in self.evals if r["step"] <= step]
        return before - len(self.train) - len(self.evals)


def parse_line(path, number, line):
    """Returns (kind, row) of a metrics.jsonl line: kind header, resumed, eval or train."""
    try:
        row = json.loads(line)
    except json.JSONDecodeError as e:
        fail(f"{path}:{number}: not JSON: {e}")
    if not isinstance(row, dict):
        fail(f"{path}:{number}: not a JSON object")
    for kind, keys in (("header", HEADER_KEYS), ("resumed", RESUME_KEYS), ("eval", EVAL_KEYS),
                       ("train", TRAIN_KEYS)):
        if kind == "train" or row.get(kind) is True:
            missing = [k for k in keys if k not in row]
            if missing:
                fail(f"{path}:{number}: {kind} line lacks {', '.join(missing)}")
            return kind, row


def read_metrics(path):
    """Returns (runs, superseded lines dropped) of a metrics.jsonl, each line checked against
    the contract. Lines before any header (files of older versions) form one run."""
    runs, dropped = [], 0
    try:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                kind, row = parse_line(path, number, line)
                if kind == "header" or not runs:
                    runs.append(Run(len(runs) + 1, row["run_id"] if kind == "header" else None))
                if kind == "resumed":
                    dropped += sum(run.drop_after(row["step"]) for run in runs[:-1])
                elif kind != "header":
                    (runs[-1].evals if kind == "eval" else runs[-1].train).append(row)
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    runs = [run for run in runs if run.train or run.evals]
    if not runs:
        fail(f"{path}: no metrics lines")
    return runs, dropped


def plot_metrics(path, out):
    runs, dropped = read_metrics(path)
    plt = load_matplotlib()
    fig, (ax_loss, ax_acc, ax_lr) = plt.subplots(1, 3, figsize=(11, 4))
    drawn = [f"runs: {len(runs)}, {dropped} superseded lines dropped"]
    for index, run in enumerate(runs):
        colour = f"C{index % 10}"
        name = run.name if len(runs) > 1 else ""
        if run.train:
            steps = [r["step"] for r in run.train]
            ax_loss.plot(steps, [r["loss"] for r in run.train], color=colour, label=f"{name} train".strip())
            ax_lr.plot(steps, [r["lr"] for r in run.train], color=colour, label=name or None)
            drawn.append(f"{run.label}: train loss: {len(run.train)} points, steps {steps[0]}..{steps[-1]}")
            drawn.append(f"{run.label}: learning rate: {len(run.train)} points, "
                         f"{min(r['lr'] for r in run.train):g}..{max(r['lr'] for r in run.train):g}")
        if run.evals:
            steps = [r["step"] for r in run.evals]
            ax_loss.plot(steps, [r["loss"] for r in run.evals], "o--", color=colour, label=f"{name} test".strip())
            accuracy = [100.0 * r["accuracy"] for r in run.evals]
            ax_acc.plot(steps, accuracy, "o-", color=colour, label=name or None)
            ax_acc.annotate(f"{accuracy[-1]:.2f}%", (steps[-1], accuracy[-1]),
                            textcoords="offset points", xytext=(-30, -15))
            drawn.append(f"{run.label}: test loss: {len(run.evals)} points")
            drawn.append(f"{run.label}: test accuracy: {len(run.evals)} points, last {accuracy[-1]:.2f}% "
                         f"of {run.evals[-1]['samples']} examples")
    if not any(run.evals for run in runs):
        ax_acc.text(0.5, 0.5, "no eval lines", ha="center", va="center", transform=ax_acc.transAxes)
    for ax, label in ((ax_loss, "cross-entropy loss"), (ax_acc, "test accuracy (%)"), (ax_lr, "learning rate")):
        ax.set_xlabel("optimizer step")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    ax_loss.legend(fontsize=8)
    if len(runs) > 1:
        ax_acc.legend(fontsize=8)
    ax_lr.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    fig.suptitle(os.path.normpath(path))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return drawn


def read_bench(path):
    """Returns a collective_bench --json document, checked against the contract."""
    try:
        with open(path) as f:
            data = json.load(f)
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    except json.JSONDecodeError as e:
        fail(f"{path}: not JSON: {e}")
    missing = [k for k in BENCH_KEYS if not isinstance(data, dict) or k not in data]
    if missing:
        fail(f"{path}: lacks {', '.join(missing)}")
    if not data["rows"]:
        fail(f"{path}: no rows")
    for number, row in enumerate(data["rows"]):
        missing = [k for k in ROW_KEYS if k not in row]
        if missing:
            fail(f"{path}: rows[{number}] lacks {', '.join(missing)}")
    return data


def bytes_label(size, _position=None):
    """Returns 1K, 64K, 1M, ... for a power-of-two byte count (tick labels)."""
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift:
            value = size / (1 << shift)
            return f"{value:g}{unit}"
    return f"{size:g}"


def plot_bench(paths, out):
    documents = [(path, read_bench(path)) for path in paths]
    plt = load_matplotlib()
    from matplotlib.ticker import FuncFormatter
    fig, ax = plt.subplots(figsize=(8, 4.5))
    drawn = []
    sizes = set()
    for path, data in documents:
        series = {}
        for row in data["rows"]:
            series.setdefault((row["algo"], row["type"]), []).append(row)
        for (algo, dtype), rows in sorted(series.items()):
            rows.sort(key=lambda r: r["size"])
            sizes.update(r["size"] for r in rows)
            label = f"{data['op']} {dtype} {algo} (np={data['world_size']})"
            ax.plot([r["size"] for r in rows], [r["busbw"] for r in rows], "o-", markersize=3,
                    label=label)
            peak = max(rows, key=lambda r: r["busbw"])
            drawn.append(f"{label}: {len(rows)} sizes {bytes_label(rows[0]['size'])}.."
                         f"{bytes_label(rows[-1]['size'])}, peak busbw {peak['busbw']:.2f} GB/s "
                         f"at {bytes_label(peak['size'])}")
    ax.set_xscale("log", base=2)
    # One labelled tick per factor of 4 (or 2 when the range is narrow), at whole bytes.
    low, high = int(math.log2(min(sizes))), int(math.ceil(math.log2(max(sizes))))
    step = 2 if high - low > 10 else 1
    ax.set_xticks([2 ** e for e in range(low, high + 1, step)])
    ax.xaxis.set_major_formatter(FuncFormatter(bytes_label))
    ax.xaxis.set_minor_formatter(FuncFormatter(lambda *_: ""))
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    return drawn


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["metrics", "bench"])
    parser.add_argument("inputs", nargs="+")
    parser.add_argument("-o", "--output", required=True, help="PNG file to write")
    args = parser.parse_args()
    if args.kind == "metrics":
        if len(args.inputs) != 1:
            fail("metrics takes one metrics.jsonl")
        drawn = plot_metrics(args.inputs[0], args.output)
    else:
        drawn = plot_bench(args.inputs, args.output)
    print(f"wrote {args.output}")
    for line in drawn:
        print(f"  {line}")


if __name__ == "__main__":
    main()
