#!/usr/bin/env python3
"""The Python torch reference of the libtorch tests (issue 19): trains one of the models of
torch_models.py on one process for a few AdamW steps, from initial weights it writes first,
on exactly the batches mpitrain's DataLoader gives (Fashion-MNIST, Debian package
dataset-fashion-mnist), and writes the final parameters.

  reference_training.py train --model cnn --out-dir DIR [--steps 20] [--batch 64] [--seed 42]
      writes DIR/<model>_init.safetensors (every floating tensor of the state_dict: the
      parameters and the float buffers, torch names) and DIR/<model>_reference.safetensors
      (the same after training).
  reference_training.py compare --reference REF --candidate CAND [--tolerance 1e-5]
      prints the relative difference max|a - b| / max|b| over all parameters of REF (each
      tensor of REF must be in CAND with the same shape) and exits 1 above the tolerance.

The batches: mpitrain's loader (accelerate mode, shuffle, seed S) orders epoch 0 as
torch.randperm(n, generator seeded S); global batch g is positions [g*G, (g+1)*G) of that
order, G = batch per rank * ranks. So one process with batch 64 here sees, step for step,
the examples that 2 ranks x 32 and 1 rank x 64 see in mpitrain. Loss: mean cross-entropy.
AdamW: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight decay 0.01 (torch's defaults, which are
libtorch's too). One thread (torch.set_num_threads(1)), as the mpitrain ranks use, and one
OpenBLAS thread (OPENBLAS_NUM_THREADS=1, set before numpy and torch load it): Debian's torch
calls the system BLAS, whose own thread pool torch.set_num_threads does not reach, and the
ranks run OpenBLAS on one thread (EngineConfig::blas_threads). With OpenBLAS's default of a
thread per core the CNN's result differed from the ranks' by 1.8e-4 (max|a-b| / max|b|) on a
2-core AMD EPYC; with one thread it is bitwise the 1 x 64 run's.
"""

import argparse
import gzip
import json
import os
import struct
import sys
from pathlib import Path

os.environ["OPENBLAS_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch.nn import functional as F  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from torch_models import make_model  # noqa: E402

FASHION_MNIST = Path("/usr/share/datasets/fashion-mnist")


def read_idx(path: Path) -> np.ndarray:
    """Returns the array of a gzipped IDX file (uint8 images or labels)."""
    data = gzip.open(path, "rb").read()
    dims = data[3]
    shape = struct.unpack(f">{dims}I", data[4:4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def fashion_mnist_train():
    """Returns (features (60000, 784) float32 pixel / 255, labels (60000,) int64), as
    mpitrain's IdxDataset reads them."""
    images = read_idx(FASHION_MNIST / "train-images-idx3-ubyte.gz")
    labels = read_idx(FASHION_MNIST / "train-labels-idx1-ubyte.gz")
    features = torch.from_numpy(images.reshape(len(images), -1).astype(np.float32) / 255.0)
    return features, torch.from_numpy(labels.astype(np.int64))


def write_safetensors(path: Path, tensors: dict):
    """Writes float32 `tensors` ({name: tensor}) in the safetensors format, names sorted."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        blob = tensors[name].detach().to(torch.float32).contiguous().numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensors[name].shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_safetensors(path: Path) -> dict:
    """Returns {name: float32 numpy array} of a safetensors file of F32 tensors."""
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length])
    header.pop("__metadata__", None)
    out = {}
    for name, entry in header.items():
        if entry["dtype"] != "F32":
            raise ValueError(f"{path}: tensor '{name}' is {entry['dtype']}, expected F32")
        begin, end = entry["data_offsets"]
        out[name] = np.frombuffer(data[8 + length + begin:8 + length + end], dtype="<f4").reshape(
            entry["shape"])
    return out


def floating_state(model) -> dict:
    """Returns the floating tensors of the model's state_dict (parameters and float buffers;
    BatchNorm's integer num_batches_tracked is left out)."""
    return {k: v for k, v in model.state_dict().items() if v.is_floating_point()}


def train(args):
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    model = make_model(args.model)
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_safetensors(out_dir / f"{args.model}_init.safetensors", floating_state(model))

    features, labels = fashion_mnist_train()
    order = torch.randperm(len(features), generator=torch.Generator().manual_seed(args.seed))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    model.train()
    for step in range(args.steps):
        rows = order[step * args.batch:(step + 1) * args.batch]
        loss = F.cross_entropy(model(features[rows]), labels[rows])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step + 1} loss {loss.item():.6f}")
    write_safetensors(out_dir / f"{args.model}_reference.safetensors", floating_state(model))


def compare(args):
    reference = read_safetensors(Path(args.reference))
    candidate = read_safetensors(Path(args.candidate))
    worst_diff, worst_name, largest = 0.0, "", 0.0
    for name, b in reference.items():
        if name not in candidate:
            sys.exit(f"{args.candidate}: no tensor '{name}' (it has {sorted(candidate)})")
        a = candidate[name]
        if a.shape != b.shape:
            sys.exit(f"{args.candidate}: '{name}' has shape {list(a.shape)}, the reference "
                     f"{list(b.shape)}")
        diff = float(np.max(np.abs(a.astype(np.float64) - b.astype(np.float64))))
        if diff >= worst_diff:
            worst_diff, worst_name = diff, name
        largest = max(largest, float(np.max(np.abs(b))))
    relative = worst_diff / largest
    verdict = "ok" if relative <= args.tolerance else "FAIL"
    print(f"{args.candidate} vs {args.reference}: max|a-b| / max|b| = {relative:.3e} "
          f"(max|a-b| {worst_diff:.3e} in '{worst_name}', max|b| {largest:.4f}, "
          f"{len(reference)} tensors, tolerance {args.tolerance:g}) {verdict}")
    return 0 if relative <= args.tolerance else 1


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train")
    t.add_argument("--model", required=True, choices=["cnn", "cnn_bn", "tied"])
    t.add_argument("--out-dir", required=True)
    t.add_argument("--steps", type=int, default=20)
    t.add_argument("--batch", type=int, default=64, help="examples per step")
    t.add_argument("--seed", type=int, default=42, help="weights and shuffle seed")
    c = sub.add_parser("compare")
    c.add_argument("--reference", required=True)
    c.add_argument("--candidate", required=True)
    c.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    if args.command == "train":
        train(args)
        return 0
    return compare(args)


if __name__ == "__main__":
    sys.exit(main())
