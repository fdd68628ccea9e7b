#!/usr/bin/env python3
"""Baseline (a) of the libtorch benchmark: PyTorch's Python DistributedDataParallel with the
gloo backend, training the benchmark's CNN (cnn.hpp, the same layers) on the same batches.

  python3 ddp_gloo.py --nproc 2 --batch 64 --warmup 20 --steps 200 [--model cnn|wide]
  python3 ddp_gloo.py --nproc 2 ... --torchscript models/fortunes_gpt.pt --task language_model
      [--block-size 128]

--torchscript trains a module saved by torch.jit.save (torch.jit.load, wrapped in DDP) in
place of the CNN, as torchscript_bench.cpp does: --task classification on Fashion-MNIST
images (1, 28, 28), language_model on the fortunes corpus (/usr/share/games/fortunes, read as
the trainer's data.kind text: a folder's regular files in name order, links and *.dat left
out) in windows of block_size + 1 bytes, window i starting at byte i * block_size, cross-entropy
over every position; the windows are ordered as the images are (below).

Without RANK in the environment the script is the launcher: it starts --nproc copies of itself
with RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT (torch.distributed's
env:// rendezvous), as torchrun would; Debian's torchrun (torch 1.13 on Python 3.11) fails in
its elastic agent before starting any worker, so it is not used.

Batches: Fashion-MNIST (Debian package dataset-fashion-mnist) in the order mpitrain's loader
gives (accelerate mode, seed 42): torch.randperm(60000) seeded 42; global batch g holds
positions [g*B*W, (g+1)*B*W), rank r the B of them from g*B*W + r*B. AdamW (lr 1e-3).
One torch thread per rank (torch.set_num_threads(1); the driver also sets OMP_NUM_THREADS=1
and OPENBLAS_NUM_THREADS=1). Rank 0 prints one JSON line: {"impl", "samples_per_s",
"step_ms", "steps", "batch", "world", "model", "loss"} where samples_per_s counts every rank's
examples over the timed steps (from a barrier before the first to one after the last).
"""

import argparse
import gzip
import json
import struct
import time
from pathlib import Path

import os
import socket
import subprocess
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn import functional as F

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


# cnn.hpp's cnn_shape: (c1, c2, hidden) of each size.
SHAPES = {"cnn": (8, 16, 64), "wide": (16, 32, 512)}


class Cnn(nn.Module):
    """cnn.hpp's Cnn: conv 1->c1, ReLU, pool; conv c1->c2, ReLU, pool; linear c2*49->hidden,
    ReLU; linear hidden->10."""

    def __init__(self, c1, c2, hidden):
        super().__init__()
        self.conv1 = nn.Conv2d(1, c1, 3, padding=1)
        self.conv2 = nn.Conv2d(c1, c2, 3, padding=1)
        self.fc1 = nn.Linear(c2 * 7 * 7, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x.view(-1, 1, 28, 28))), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def read_idx(path: Path) -> np.ndarray:
    """Returns the array of a gzipped IDX file."""
    data = gzip.open(path, "rb").read()
    dims = data[3]
    shape = struct.unpack(f">{dims}I", data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def read_fortunes() -> np.ndarray:
    """Returns the bytes of the fortunes corpus, as the trainer's data.kind text reads it."""
    folder = Path("/usr/share/games/fortunes")
    files = sorted(p for p in folder.iterdir() if p.is_file() and not p.is_symlink() and p.suffix != ".dat")
    return np.frombuffer(b"".join(p.read_bytes() for p in files), dtype=np.uint8)


def training_data(args):
    """Returns (inputs, targets, name): tensors whose rows are the training examples (images and
    labels; or windows [0, block_size) and [1, block_size] of the corpus), and the model's name."""
    if args.torchscript and args.task == "language_model":
        tokens = torch.from_numpy(read_fortunes().astype(np.int64))
        windows = (len(tokens) - 1) // args.block_size
        starts = torch.arange(windows) * args.block_size
        rows = tokens[starts[:, None] + torch.arange(args.block_size + 1)]
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous(), Path(args.torchscript).stem
    images = read_idx(FASHION_MNIST / "train-images-idx3-ubyte.gz")
    labels = torch.from_numpy(read_idx(FASHION_MNIST / "train-labels-idx1-ubyte.gz").astype(np.int64))
    features = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    if args.torchscript:
        return features.view(-1, 1, 28, 28), labels, Path(args.torchscript).stem
    return features, labels, args.model


def launch(nproc: int) -> int:
    """Starts nproc workers of this script (env:// rendezvous on 127.0.0.1) and returns the
    first non-zero exit code, or 0."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    workers = []
    for rank in range(nproc):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(nproc), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        workers.append(subprocess.Popen([sys.executable, __file__] + sys.argv[1:], env=env))
    codes = [w.wait() for w in workers]
    return next((c for c in codes if c != 0), 0)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--nproc", type=int, default=2, help="processes the launcher starts")
    parser.add_argument("--batch", type=int, default=64, help="examples per rank and step")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200, help="timed steps")
    parser.add_argument("--model", choices=sorted(SHAPES), default="cnn", help="the CNN's size")
    parser.add_argument("--torchscript", help="train this torch.jit.save file instead of the CNN")
    parser.add_argument("--task", choices=["classification", "language_model"], default="classification",
                        help="--torchscript's task")
    parser.add_argument("--block-size", type=int, default=128, help="language_model: tokens per window")
    args = parser.parse_args()
    if "RANK" not in os.environ:
        sys.exit(launch(args.nproc))
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    features, labels, name = training_data(args)
    order = torch.randperm(len(features), generator=torch.Generator().manual_seed(42))
    if (args.warmup + args.steps) * args.batch * world > len(order):
        raise SystemExit("warmup + steps exceed one epoch")

    torch.manual_seed(0)
    module = torch.jit.load(args.torchscript) if args.torchscript else Cnn(*SHAPES[args.model])
    module.train()  # a saved module keeps the mode it was saved in
    model = nn.parallel.DistributedDataParallel(module)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train_step(step):
        start = step * args.batch * world + rank * args.batch
        rows = order[start:start + args.batch]
        logits = model(features[rows])
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels[rows].reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss

    for step in range(args.warmup):
        train_step(step)
    dist.barrier()
    begin = time.perf_counter()
    for step in range(args.warmup, args.warmup + args.steps):
        loss = train_step(step)
    dist.barrier()
    seconds = time.perf_counter() - begin
    if rank == 0:
        print(json.dumps({"impl": "pytorch_ddp_gloo", "samples_per_s": args.steps * args.batch * world / seconds,
                          "step_ms": 1e3 * seconds / args.steps, "steps": args.steps, "batch": args.batch,
                          "world": world, "model": name, "loss": loss.item()}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
