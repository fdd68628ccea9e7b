#!/usr/bin/python3
"""Bits per byte of a bigram model on the trainer's text data: the baseline that
configs/fortunes_gpt.yaml's GPT is measured against (issue: <= 0.75x of it).

It reads the corpus as the trainer's data.kind text does (a file, or a folder's regular files
in name order, symbolic links and *.dat files left out; concatenated), splits it at
floor(bytes * (1 - validation_fraction)), fits P(next byte | byte) on the training part by
counting (add-k smoothing, k = 0.01 by default, so no probability is 0), and scores exactly
the predictions the trainer's evaluation scores: in each validation window of block_size + 1
bytes (windows step by block_size), bytes 1..block_size given the byte before.

Usage: /usr/bin/python3 models/bigram_baseline.py [--path /usr/share/games/fortunes]
       [--block-size 128] [--validation-fraction 0.1] [--k 0.01]
Prints "bigram: X bits per byte on N predictions (train B bytes)".
"""
import argparse
import math
import os

import numpy as np


def read_corpus(path):
    if os.path.isdir(path):
        names = sorted(n for n in os.listdir(path)
                       if not os.path.islink(os.path.join(path, n)) and os.path.isfile(os.path.join(path, n))
                       and not n.endswith(".dat"))
        files = [os.path.join(path, n) for n in names]
    else:
        files = [path]
    return b"".join(open(f, "rb").read() for f in files)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--path", default="/usr/share/games/fortunes")
    p.add_argument("--block-size", type=int, default=128)
    p.add_argument("--validation-fraction", type=float, default=0.1)
    p.add_argument("--k", type=float, default=0.01)
    args = p.parse_args()
    data = np.frombuffer(read_corpus(args.path), dtype=np.uint8).astype(np.int64)
    split = int(len(data) * (1.0 - args.validation_fraction))
    train, valid = data[:split], data[split:]
    counts = np.full((256, 256), args.k)
    np.add.at(counts, (train[:-1], train[1:]), 1.0)
    log_p = np.log(counts / counts.sum(axis=1, keepdims=True))
    block = args.block_size
    windows = (len(valid) - 1) // block
    covered = valid[:windows * block + 1]
    nats = -log_p[covered[:-1], covered[1:]].mean()
    print(f"bigram: {nats / math.log(2):.4f} bits per byte on {windows * block} predictions "
          f"(train {split} bytes)")


if __name__ == "__main__":
    main()
