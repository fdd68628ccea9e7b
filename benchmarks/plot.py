#!/usr/bin/python3
"""Turns mpitrain outputs into PNG pictures (needs python3-matplotlib from Debian).

  benchmarks/plot.py metrics runs/default/metrics.jsonl -o docs/training.png
      loss (train and eval) and test accuracy against the optimizer step
  benchmarks/plot.py bench build/collective_bench.json [more.json ...] -o docs/busbw.png
      bus bandwidth (GB/s) against message size, one line per algorithm and type
"""
import argparse
import json
import sys


def load_matplotlib():
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot.py needs matplotlib: apt-get install python3-matplotlib "
                 "(or scripts/install-deps.sh --dev)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def plot_metrics(path, out):
    train, evals = [], []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"{path}:{number}: not JSON: {e}")
            (evals if row.get("eval") else train).append(row)
    if not train and not evals:
        sys.exit(f"{path}: no metrics lines")
    plt = load_matplotlib()
    fig, (ax_loss, ax_acc) = plt.subplots(1, 2, figsize=(11, 4))
    if train:
        ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], label="train")
    if evals:
        steps = [r["step"] for r in evals]
        ax_loss.plot(steps, [r["loss"] for r in evals], "o-", label="test")
        ax_acc.plot(steps, [100.0 * r["accuracy"] for r in evals], "o-", color="C2")
        for r in evals[-1:]:
            ax_acc.annotate(f"{100.0 * r['accuracy']:.2f}%", (r["step"], 100.0 * r["accuracy"]),
                            textcoords="offset points", xytext=(-30, -15))
    ax_loss.set_xlabel("optimizer step")
    ax_loss.set_ylabel("cross-entropy loss")
    ax_loss.legend()
    ax_loss.grid(alpha=0.3)
    ax_acc.set_xlabel("optimizer step")
    ax_acc.set_ylabel("test accuracy (%)")
    ax_acc.grid(alpha=0.3)
    fig.suptitle(path)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def plot_bench(paths, out):
    plt = load_matplotlib()
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for path in paths:
        with open(path) as f:
            data = json.load(f)
        series = {}
        for row in data["rows"]:
            series.setdefault((row["algo"], row["type"]), []).append(row)
        for (algo, dtype), rows in sorted(series.items()):
            rows.sort(key=lambda r: r["size"])
            ax.plot([r["size"] for r in rows], [r["busbw"] for r in rows], "o-", markersize=3,
                    label=f"{data['op']} {dtype} {algo} (np={data['world_size']})")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("message size (bytes)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("kind", choices=["metrics", "bench"])
    parser.add_argument("inputs", nargs="+")
    parser.add_argument("-o", "--output", required=True, help="PNG file to write")
    args = parser.parse_args()
    if args.kind == "metrics":
        if len(args.inputs) != 1:
            sys.exit("metrics takes one metrics.jsonl")
        plot_metrics(args.inputs[0], args.output)
    else:
        plot_bench(args.inputs, args.output)
    print(f"wrote {args.output}")


if __name__ == "__main__":
    main()
