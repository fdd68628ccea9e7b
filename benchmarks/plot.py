#!/usr/bin/python3
"""Turns mpitrain outputs into PNG pictures (needs python3-matplotlib from Debian).

  benchmarks/plot.py metrics runs/default/metrics.jsonl -o docs/img/training.png
      training and test loss, and test accuracy, against the optimizer step
      (metrics.jsonl as DESIGN.md section 7 defines it)
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


def read_metrics(path):
    """Returns (train rows, eval rows) of a metrics.jsonl, each checked against the contract."""
    train, evals = [], []
    try:
        with open(path) as f:
            for number, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    fail(f"{path}:{number}: not JSON: {e}")
                if not isinstance(row, dict):
                    fail(f"{path}:{number}: not a JSON object")
                is_eval = row.get("eval") is True
                missing = [k for k in (EVAL_KEYS if is_eval else TRAIN_KEYS) if k not in row]
                if missing:
                    kind = "eval" if is_eval else "train"
                    fail(f"{path}:{number}: {kind} line lacks {', '.join(missing)}")
                (evals if is_eval else train).append(row)
    except OSError as e:
        fail(f"cannot read {path}: {e.strerror}")
    if not train and not evals:
        fail(f"{path}: no metrics lines")
    return train, evals


def plot_metrics(path, out):
    train, evals = read_metrics(path)
    plt = load_matplotlib()
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    drawn = []
    if train:
        ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], label="train")
        drawn.append(f"train loss: {len(train)} points, steps {train[0]['step']}..{train[-1]['step']}")
    if evals:
        steps = [r["step"] for r in evals]
        ax_loss.plot(steps, [r["loss"] for r in evals], "o-", label="test")
        accuracy = [100.0 * r["accuracy"] for r in evals]
        ax_acc.plot(steps, accuracy, "o-", color="C2")
        ax_acc.annotate(f"{accuracy[-1]:.2f}%", (steps[-1], accuracy[-1]),
                        textcoords="offset points", xytext=(-30, -15))
        drawn.append(f"test loss: {len(evals)} points")
        drawn.append(f"test accuracy: {len(evals)} points, last {accuracy[-1]:.2f}% "
                     f"of {evals[-1]['samples']} examples")
    else:
        ax_acc.text(0.5, 0.5, "no eval lines", ha="center", va="center",
                    transform=ax_acc.transAxes)
    ax_loss.set_xlabel("optimizer step")
    ax_loss.set_ylabel("cross-entropy loss")
    ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    ax_acc.set_xlabel("optimizer step")
    ax_acc.set_ylabel("test accuracy (%)")
    ax_acc.grid(alpha=0.3)
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
