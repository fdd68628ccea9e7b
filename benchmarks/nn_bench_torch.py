#!/usr/bin/python3
"""Torch counterpart of nn_bench: the same MLPs, batches and step, one thread.

    /usr/bin/python3 benchmarks/nn_bench_torch.py [--steps N] [--warmup N] [--sgd]

A step is zero_grad + forward + cross-entropy + backward + optimizer step (AdamW with torch's
defaults, like nn_bench when nn/adamw.hpp is built; --sgd for plain SGD). The batch does not
require grad, so torch skips the first layer's input gradient, as nn_bench does.
"""

import argparse
import time

import torch
import torch.nn.functional as F

CASES = [((784, 256, 256, 10), 64), ((784, 1024, 1024, 10), 128)]
BATCHES = 8


def bench(widths, batch, steps, warmup, use_sgd):
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

    def step(i):
        b = i % BATCHES
        opt.zero_grad(set_to_none=False)
        loss = F.cross_entropy(model(xs[b]), ys[b])
        loss.backward()
        opt.step()

    for i in range(warmup):
        step(i)
    t0 = time.perf_counter()
    for i in range(steps):
        step(i)
    return (time.perf_counter() - t0) / steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=0, help="steps per case (0: default)")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--sgd", action="store_true", help="plain SGD instead of AdamW")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} thread(s), "
          f"optimizer {'SGD' if args.sgd else 'AdamW'}")
    print(f"{'model':<16} {'batch':>6} {'samples/s':>12} {'step_ms':>10}")
    for widths, batch in CASES:
        steps = args.steps or (40 if widths[1] > 512 else 300)
        t = bench(widths, batch, steps, args.warmup, args.sgd)
        name = "-".join(str(w) for w in widths)
        print(f"{name:<16} {batch:>6} {batch / t:>12.0f} {t * 1e3:>10.3f}")


if __name__ == "__main__":
    main()
