#!/usr/bin/python3
"""Torch counterpart of nn_bench: the same MLPs, batches and step, one thread.

    /usr/bin/python3 benchmarks/nn_bench_torch.py [--steps N] [--warmup N] [--sgd]
                                                  [--stat min|median]

A step is zero_grad + forward + cross-entropy + backward + optimizer step (AdamW with torch's
defaults, like nn_bench when nn/adamw.hpp is built; --sgd for plain SGD). The batch does not
require grad, so torch skips the first layer's input gradient, as nn_bench does. Times are
the minimum (default) or median over the steps (fwd_bwd = zero_grad..backward, opt =
optimizer, step = their sum per step), as in nn_bench.
"""

import argparse
import os
import statistics
import time

# One BLAS thread, as nn_bench: torch.set_num_threads only sizes torch's OpenMP pool, while
# the OpenBLAS that Debian's torch calls keeps its own pool unless told before loading.
os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import torch  # noqa: E402  (after the environment is set)
import torch.nn.functional as F  # noqa: E402

CASES = [((784, 256, 256, 10), 64), ((784, 1024, 1024, 10), 128)]
BATCHES = 8


def bench(widths, batch, steps, warmup, use_sgd, stat):
    torch.manual_seed(1)
    layers = []
    for i in range(len(widths) - 1):
        layers.append(torch.nn.Linear(widths[i], widths[i + 1]))
        if i < len(widths) - 2:
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    xs = torch.rand(BATCHES, batch, widths[0])
    ys = torch.randint(0, widths[-1], (BATCHES, batch))
    if use_sgd:
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
    else:
        opt = torch.optim.AdamW(model.parameters())

    fwd_bwd, opt_s = [], []

    def step(i):
        b = i % BATCHES
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(xs[b]), ys[b])
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        fwd_bwd.append(t1 - t0)
        opt_s.append(time.perf_counter() - t1)

    for i in range(warmup):
        step(i)
    fwd_bwd.clear()
    opt_s.clear()
    for i in range(steps):
        step(i)
    whole = [a + b for a, b in zip(fwd_bwd, opt_s)]
    return stat(fwd_bwd), stat(opt_s), stat(whole)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=0, help="steps per case (0: default)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--sgd", action="store_true", help="plain SGD instead of AdamW")
    parser.add_argument("--stat", choices=["min", "median"], default="min")
    args = parser.parse_args()
    stat = min if args.stat == "min" else statistics.median
    torch.set_num_threads(1)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
          f"optimizer {'SGD' if args.sgd else 'AdamW'}, {args.stat} over steps")
    print(f"{'model':<16} {'batch':>6} {'samples/s':>10} {'step_ms':>9} {'fwd_bwd_ms':>11} "
          f"{'opt_ms':>8}")
    for widths, batch in CASES:
        steps = args.steps or (40 if widths[1] > 512 else 300)
        fwd_bwd, opt, t = bench(widths, batch, steps, args.warmup, args.sgd, stat)
        name = "-".join(str(w) for w in widths)
        print(f"{name:<16} {batch:>6} {batch / t:>10.0f} {t * 1e3:>9.3f} {fwd_bwd * 1e3:>11.3f} "
              f"{opt * 1e3:>8.3f}")


if __name__ == "__main__":
    main()
