#!/usr/bin/python3
"""Writes sampler_golden.h5: what torch 1.13's DistributedSampler and randperm return.

Run with the Debian torch (python3-torch 1.13):
    /usr/bin/python3 tests/data/golden/make_sampler_golden.py
tests/data/distributed_sampler_test.cpp and torch_randperm_test.cpp compare mpitrain's
DistributedSampler and torch_randperm with these values, index for index.

Layout:
  /sampler/params   int64 (cases, 8): n, world, rank, epoch, drop_last, shuffle, offset, length
  /sampler/seed     uint64 (cases)
  /sampler/indices  int32 (total): case c's indices are indices[offset : offset + length]
  /randperm/params  int64 (cases, 2): n, edge (how many values head and tail hold)
  /randperm/seed    uint64 (cases)
  /randperm/head    int64 (cases, edge): perm[:edge]
  /randperm/tail    int64 (cases, edge): perm[-edge:]
  /randperm/checksum uint64 (cases): sum over i of (i + 1) * perm[i], mod 2^64
"""
import os

import h5py
import numpy as np
import torch
from torch.utils.data import DistributedSampler

HERE = os.path.dirname(os.path.abspath(__file__))
EDGE = 32


def sampler_indices(n, world, rank, seed, epoch, drop_last, shuffle):
    sampler = DistributedSampler(range(n), num_replicas=world, rank=rank, shuffle=shuffle,
                                 seed=seed, drop_last=drop_last)
    sampler.set_epoch(epoch)
    out = list(sampler)
    assert len(out) == len(sampler)
    return out


def sampler_cases():
    cases = []
    # Small sizes, every rank: sizes below, equal to and above the world size, divisible
    # and not; shuffled with two seeds and two epochs, and unshuffled once.
    for n in [0, 1, 2, 3, 5, 7, 10, 16, 17, 100, 101]:
        for world in [1, 2, 3, 4, 5, 8]:
            for drop_last in [False, True]:
                settings = [(True, seed, epoch) for seed in [0, 42] for epoch in [0, 3]]
                settings.append((False, 0, 0))
                for shuffle, seed, epoch in settings:
                    for rank in range(world):
                        cases.append((n, world, rank, seed, epoch, drop_last, shuffle))
    # Seeds above 2^32: torch's mt19937 keeps only the low 32 bits of seed + epoch.
    for seed in [2**32 + 5, 2**63 + 1, 2**64 - 3]:
        for rank in range(3):
            cases.append((50, 3, rank, seed, 1, False, True))
    # Sizes above 2^16, one rank each (the files stay small).
    cases.append((65537, 3, 1, 7, 1, False, True))
    cases.append((70001, 4, 3, 12345, 2, True, True))
    cases.append((100003, 8, 5, 2**32 + 9, 0, False, True))
    cases.append((100003, 8, 7, 0, 4, True, True))
    return cases


def main():
    assert torch.__version__.startswith("1.13"), torch.__version__
    params, seeds, flat = [], [], []
    for n, world, rank, seed, epoch, drop_last, shuffle in sampler_cases():
        got = sampler_indices(n, world, rank, seed, epoch, drop_last, shuffle)
        params.append([n, world, rank, epoch, int(drop_last), int(shuffle), len(flat), len(got)])
        seeds.append(seed)
        flat.extend(got)

    perm_params, perm_seeds, heads, tails, sums = [], [], [], [], []
    for n in [65536, 65537, 1_000_003, 3_000_000]:
        for seed in [0, 1, 2**40 + 3]:
            g = torch.Generator()
            g.manual_seed(seed)
            p = torch.randperm(n, generator=g).numpy().astype(np.uint64)
            weights = np.arange(1, n + 1, dtype=np.uint64)
            perm_params.append([n, EDGE])
            perm_seeds.append(seed)
            heads.append(p[:EDGE].astype(np.int64))
            tails.append(p[-EDGE:].astype(np.int64))
            sums.append(int(np.sum(weights * p, dtype=np.uint64)))  # wraps mod 2^64

    path = os.path.join(HERE, "sampler_golden.h5")
    with h5py.File(path, "w") as f:
        f.attrs["torch_version"] = str(torch.__version__)
        f.attrs["generator"] = "tests/data/golden/make_sampler_golden.py"
        s = f.create_group("sampler")
        s.create_dataset("params", data=np.array(params, dtype=np.int64), compression="gzip")
        s.create_dataset("seed", data=np.array(seeds, dtype=np.uint64), compression="gzip")
        s.create_dataset("indices", data=np.array(flat, dtype=np.int32), compression="gzip")
        r = f.create_group("randperm")
        r.create_dataset("params", data=np.array(perm_params, dtype=np.int64))
        r.create_dataset("seed", data=np.array(perm_seeds, dtype=np.uint64))
        r.create_dataset("head", data=np.array(heads, dtype=np.int64))
        r.create_dataset("tail", data=np.array(tails, dtype=np.int64))
        r.create_dataset("checksum", data=np.array(sums, dtype=np.uint64))
    print(f"{path}: {len(params)} sampler cases, {len(flat)} indices, "
          f"{len(perm_params)} randperm checksums, {os.path.getsize(path)} bytes")


if __name__ == "__main__":
    main()
