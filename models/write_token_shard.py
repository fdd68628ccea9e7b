#!/usr/bin/python3
"""Writes a text file as llm.c token shards (the trainer's data.kind tokens): byte-level
tokens (each UTF-8 byte is its token id, 0..255, so models/fortunes_gpt.pt, whose vocabulary
is 256, trains on them with data.tokens.vocab_size: 256).

The shard format (data/token_shard.hpp): a header of 256 int32 little-endian words (word 0
the magic 20240520, word 1 the version 1, word 2 the token count, the rest 0), then the
tokens as uint16 little-endian, nothing after them.

Usage: /usr/bin/python3 models/write_token_shard.py INPUT OUTPUT.bin
           [--val VAL.bin --val-fraction 0.1]
With --val, the tail val-fraction of the bytes (the split at floor(bytes * (1 - fraction)))
goes to VAL.bin instead of OUTPUT.bin. Prints "OUTPUT.bin: N tokens" per shard written.
"""
import argparse

import numpy as np

MAGIC = 20240520
VERSION = 1


def write_shard(path, tokens):
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > 0xFFFF):
        raise SystemExit(f"{path}: token ids must lie in [0, 65535]")
    header = np.zeros(256, dtype="<i4")
    header[0], header[1], header[2] = MAGIC, VERSION, tokens.size
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(tokens.astype("<u2").tobytes())
    print(f"{path}: {tokens.size} tokens")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("input", help="a text file; its bytes are the tokens")
    p.add_argument("output", help="the shard to write")
    p.add_argument("--val", help="a second shard for the tail of the text (validation)")
    p.add_argument("--val-fraction", type=float, default=0.1, help="the tail's share of the bytes (with --val)")
    args = p.parse_args()
    with open(args.input, "rb") as f:
        tokens = np.frombuffer(f.read(), dtype=np.uint8).astype(np.uint16)
    if args.val is None:
        write_shard(args.output, tokens)
        return
    if not 0.0 < args.val_fraction < 1.0:
        raise SystemExit("--val-fraction must lie in (0, 1)")
    split = int(len(tokens) * (1.0 - args.val_fraction))
    write_shard(args.output, tokens[:split])
    write_shard(args.val, tokens[split:])


if __name__ == "__main__":
    main()
