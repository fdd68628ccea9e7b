#!/usr/bin/python3
"""End-to-end tests of the trainer's weights commands (DESIGN.md section 6), real mpiexec jobs:

  trainer_weights_test.py --trainer EXE --mpiexec MPIEXEC --work DIR SCENARIO

Scenarios:
  eval_export  a short synthetic run at 2 ranks with project.save_format: safetensors writes
               model.safetensors (with __metadata__ {"format": "pt"}), not model.h5; then
               `trainer eval --checkpoint latest` at 1 and 2 ranks, and on the weights file,
               prints the accuracy and loss of the run's last evaluation (metrics.jsonl);
               `trainer export --checkpoint latest` writes .h5 and .safetensors files holding
               the run's weights under PyTorch names and shapes (read with h5py and numpy)
  errors       eval of a checkpoint into a model of another shape: exit 1, the message names
               the tensor, the checkpoint and both shapes, printed once; latest with no
               checkpoint, a path that does not exist, an unknown --format: exit 2, once
Each failure prints the command and its output.
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys

import h5py
import numpy as np

SYNTHETIC = ["data.kind=synthetic", "data.synthetic.train_size=1000",
             "data.synthetic.test_size=517", "data.synthetic.features=20",
             "data.synthetic.classes=5", "model.hidden=[32, 16]", "data.batch_size=16"]
SHAPES = {"0.weight": (32, 20), "0.bias": (32,), "2.weight": (16, 32), "2.bias": (16,),
          "4.weight": (5, 16), "4.bias": (5,)}


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


class Runner:
    def __init__(self, args):
        self.trainer = args.trainer
        self.mpiexec = args.mpiexec
        self.work = args.work

    def run(self, ranks, *trainer_args, sets=(), expect=None):
        """Runs to completion; returns (exit code, stdout + stderr)."""
        cmd = [self.mpiexec, "-n", str(ranks), "--oversubscribe", self.trainer, *trainer_args]
        for s in sets:
            cmd += ["--set", s]
        p = subprocess.run(cmd, cwd=self.work, capture_output=True, text=True, timeout=300)
        out = p.stdout + p.stderr
        if expect is not None and p.returncode != expect:
            raise Failure(f"{' '.join(cmd)}\nexited {p.returncode}, expected {expect}\n{out}")
        return p.returncode, out


def read_safetensors(path):
    """Returns (metadata, {name: array}) read as the format's specification says."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    check(next(iter(header)) == "__metadata__", f"{path}: the header does not start with __metadata__")
    metadata = header.pop("__metadata__")
    data = blob[8 + n:]
    tensors = {}
    for name, entry in header.items():
        check(entry["dtype"] == "F32", f"{path}: {name} is {entry['dtype']}")
        begin, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(data[begin:end], dtype="<f4").reshape(entry["shape"])
    return metadata, tensors


def read_h5(path):
    with h5py.File(path, "r") as f:
        return {k: f[k][()] for k in f}


def newest_checkpoint(project):
    folder = os.path.join(project, "checkpoints")
    numbers = [int(n.split("_")[1]) for n in os.listdir(folder) if re.fullmatch(r"checkpoint_\d+", n)]
    check(numbers, f"no checkpoint in {folder}")
    return os.path.join(folder, f"checkpoint_{max(numbers)}")


def train(r, project):
    r.run(2, sets=SYNTHETIC + [f"project.dir={project}", "training.epochs=2",
                               "project.save_format=safetensors"], expect=0)
    with open(os.path.join(project, "metrics.jsonl")) as f:
        evals = [row for row in map(json.loads, f) if row.get("eval")]
    check(evals, "the run evaluated nothing")
    return evals[-1]


def scenario_eval_export(r):
    project = os.path.join(r.work, "run")
    last = train(r, project)
    weights_file = os.path.join(project, "model.safetensors")
    check(os.path.exists(weights_file) and not os.path.exists(os.path.join(project, "model.h5")),
          f"project.save_format: safetensors must write model.safetensors only: {os.listdir(project)}")
    metadata, weights = read_safetensors(weights_file)
    check(metadata == {"format": "pt"}, f"__metadata__ {metadata}")
    check({k: v.shape for k, v in weights.items()} == SHAPES, f"shapes {weights.keys()}")

    expected = f"test accuracy {100 * last['accuracy']:.2f}%, loss {last['loss']:.4f} (517 examples"
    latest = newest_checkpoint(project)
    for ranks in (1, 2):
        for source, shown in (("latest", latest), (weights_file, weights_file)):
            code, out = r.run(ranks, "eval", "--checkpoint", source, sets=SYNTHETIC + [f"project.dir={project}"],
                              expect=0)
            line = f"eval {shown}: {expected}, {ranks} rank{'s' if ranks > 1 else ''})"
            check(out.count(line) == 1, f"expected once: {line}\ngot:\n{out}")
    print(f"eval at 1 and 2 ranks: {expected}")

    for fmt, name in (("h5", "exported.h5"), ("safetensors", "exported.safetensors")):
        target = os.path.join(r.work, name)
        code, out = r.run(2, "export", "--checkpoint", "latest", "--format", fmt, "--output", target,
                          sets=[f"project.dir={project}"], expect=0)
        check(out.count(f"exported 6 tensors of {latest} to {target}") == 1, out)
        exported = read_h5(target) if fmt == "h5" else read_safetensors(target)[1]
        check(sorted(exported) == sorted(SHAPES), f"{name}: {sorted(exported)}")
        for k, v in weights.items():
            check(np.array_equal(exported[k], v), f"{name}: {k} differs from model.safetensors")


def scenario_errors(r):
    project = os.path.join(r.work, "run")
    train(r, project)
    latest = newest_checkpoint(project)
    code, out = r.run(2, "eval", "--checkpoint", "latest",
                      sets=SYNTHETIC + [f"project.dir={project}", "model.hidden=[64, 16]"], expect=1)
    # Checked in name order: 0.bias is the first tensor of another shape.
    message = f"load_model: tensor '0.bias' has shape [32] in '{latest}', but [64] in the model"
    check(out.count(message) == 1, f"expected once: {message}\ngot:\n{out}")

    empty = os.path.join(r.work, "empty")
    code, out = r.run(2, "eval", "--checkpoint", "latest", sets=SYNTHETIC + [f"project.dir={empty}"], expect=2)
    message = (f"--checkpoint latest: no committed checkpoint in {empty}/checkpoints "
               f"(project.dir: {empty})")
    check(out.count(message) == 1, f"expected once: {message}\ngot:\n{out}")
    code, out = r.run(2, "export", "--checkpoint", "nowhere", "--format", "h5", "--output", "x.h5", expect=2)
    message = "--checkpoint nowhere: no such checkpoint folder or weights file"
    check(out.count(message) == 1, f"expected once: {message}\ngot:\n{out}")
    code, out = r.run(2, "export", "--checkpoint", latest, "--format", "pickle", "--output", "x.pt", expect=2)
    message = "--format: unknown model format 'pickle' (valid: h5, hdf5, safetensors)"
    check(out.count(message) == 1, f"expected once: {message}\ngot:\n{out}")
    # A file whose extension names another format than it holds: refused before anything is
    # written (eval and load_model tell the format by the extension).
    for fmt, name, wanted in (("safetensors", "m.h5", "*.safetensors"), ("h5", "m.safetensors", "*.h5 or *.hdf5"),
                              ("h5", "m.pt", "*.h5 or *.hdf5")):
        target = os.path.join(r.work, name)
        code, out = r.run(2, "export", "--checkpoint", latest, "--format", fmt, "--output", target, expect=2)
        message = f"--output {target}: --format {fmt} writes a file named {wanted}"
        check(out.count(message) == 1 and not os.path.exists(target), f"expected once: {message}\ngot:\n{out}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trainer", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("scenario")
    args = p.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    runner = Runner(args)
    try:
        globals()["scenario_" + args.scenario](runner)
    except Failure as e:
        print(f"FAILED {args.scenario}: {e}")
        return 1
    print(f"passed {args.scenario}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
