#!/usr/bin/python3
"""End-to-end tests of the trainer's model.kind torchscript (DESIGN.md section 6), real
mpiexec jobs:

  trainer_torchscript_test.py --trainer EXE --mpiexec MPIEXEC --work DIR --source SRC SCENARIO

Scenarios (the trainer built with libtorch):
  errors       exit 2, printed once, naming the key and the config file's line: model.path
               missing, not a TorchScript module (a text file), no model.path at all;
               model.input_shape not holding the data's features; the forward failing on the
               dummy batch (flat input into a CNN); an output that does not fit the classes
  resume       the CNN (models/fashion_mnist_cnn.pt) on synthetic 784-feature data at 2 ranks:
               a run resumed from its mid-epoch checkpoint ends bitwise equal to the
               uninterrupted run (every weight and BatchNorm buffer of model.h5, the losses
               logged after the resume point, the last test loss and accuracy)
  fashion_cnn  configs/fashion_mnist_cnn.yaml at 2 ranks reaches >= 91% test accuracy
               (prints the time)
Scenario for a trainer built without libtorch:
  unavailable  model.kind torchscript: exit 2 naming model.kind, saying the trainer was built
               without libtorch
Each failure prints the command and its output.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import h5py
import numpy as np

# Synthetic images for the CNN: 784 features (1 x 28 x 28), 10 classes.
SYNTHETIC = ["data.kind=synthetic", "data.synthetic.train_size=600", "data.synthetic.test_size=200",
             "data.synthetic.features=784", "data.synthetic.classes=10", "data.batch_size=16"]


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
        self.source = args.source
        self.cnn = os.path.join(args.source, "models", "fashion_mnist_cnn.pt")

    def run(self, ranks, *trainer_args, sets=(), timeout=600, expect=None):
        """Runs to completion; returns (exit code, stdout + stderr, seconds)."""
        cmd = [self.mpiexec, "-n", str(ranks), "--oversubscribe", self.trainer, *trainer_args]
        for s in sets:
            cmd += ["--set", s]
        start = time.monotonic()
        p = subprocess.run(cmd, cwd=self.work, capture_output=True, text=True, timeout=timeout)
        out = p.stdout + p.stderr
        if expect is not None and p.returncode != expect:
            raise Failure(f"{' '.join(cmd)}\nexited {p.returncode}, expected {expect}\n{out}")
        return p.returncode, out, time.monotonic() - start

    def config(self, name, text):
        path = os.path.join(self.work, name)
        with open(path, "w") as f:
            f.write(text)
        return path


def read_metrics(project):
    with open(os.path.join(project, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def expect_config_error(r, config, sets, wanted):
    """Runs at 2 ranks, expects exit 2 and `wanted` in the output, printed once."""
    _, out, _ = r.run(2, "--config", config, sets=sets, expect=2)
    check(out.count(wanted) == 1, f"expected once: {wanted!r}\n{out}")


def scenario_errors(r):
    not_a_module = r.config("not_a_module.pt", "this is text, not a zip archive\n")
    config = r.config("run.yaml", "model:\n  kind: torchscript\n  path: missing.pt\n  input_shape: [1, 28, 28]\n")
    base = SYNTHETIC + [f"project.dir={r.work}/errors"]
    expect_config_error(r, config, base, "run.yaml:3:9: model.path: no such file 'missing.pt'")
    expect_config_error(r, config, base + [f"model.path={not_a_module}"],
                        f"model.path: '{not_a_module}' is not a TorchScript module (torch.jit.load: ")
    no_path = r.config("no_path.yaml", "seed: 1\nmodel: {kind: torchscript}\n")
    expect_config_error(r, no_path, base, "no_path.yaml:2:15: model.path: model.kind torchscript needs model.path")
    cnn = base + [f"model.path={r.cnn}"]
    expect_config_error(r, config, cnn + ["model.input_shape=[1, 28, 27]"],
                        "--set model.input_shape=[1, 28, 27]: model.input_shape: [1, 28, 27] holds 756 values "
                        "per example, but the data's examples have 784 features")
    expect_config_error(r, config, cnn + ["model.input_shape=[784]"],
                        "--set model.input_shape=[784]: model.input_shape: the model's forward fails on a dummy "
                        "batch of shape (2, 784)")
    expect_config_error(r, config, cnn + ["data.synthetic.classes=12"],
                        f"--set model.path={r.cnn}: model.path: the model's output for a dummy batch of shape "
                        "(2, 1, 28, 28) is of shape (2, 10), but model.task classification with the data's 12 "
                        "classes needs (batch, classes) logits, (2, 12)")


def cnn_run(r, project, extra=()):
    return SYNTHETIC + [f"model.kind=torchscript", f"model.path={r.cnn}", "model.input_shape=[1, 28, 28]",
                        f"project.dir={project}", "training.max_steps=30", "training.epochs=2",
                        "training.log_every=1", "project.save_every_steps=8", "scheduler.kind=cosine",
                        "scheduler.warmup_steps=5", *extra]


def scenario_resume(r):
    # 600 examples, 16 per rank at 2 ranks: 19 steps an epoch; step 8 is mid-epoch 0 and
    # the run crosses into epoch 1 (an evaluation) before step 30.
    whole = os.path.join(r.work, "whole")
    r.run(2, sets=cnn_run(r, whole), expect=0)
    resumed = os.path.join(r.work, "resumed")
    checkpoint = os.path.join(whole, "checkpoints", "checkpoint_0")
    _, out, _ = r.run(2, sets=cnn_run(r, resumed, [f"project.resume={checkpoint}"]), expect=0)
    check("resumed at step 8 (epoch 0, batch 8 of the epoch)" in out, out)
    a = {row["step"]: row for row in read_metrics(whole) if "loss" in row and "eval" not in row}
    b = {row["step"]: row for row in read_metrics(resumed) if "loss" in row and "eval" not in row}
    check(sorted(b) == list(range(9, 31)), f"resumed run's steps: {sorted(b)}")
    for step in b:
        check(a[step]["loss"] == b[step]["loss"] and a[step]["lr"] == b[step]["lr"],
              f"step {step}: {a[step]} != {b[step]}")
    eval_a = [row for row in read_metrics(whole) if "eval" in row][-1]
    eval_b = [row for row in read_metrics(resumed) if "eval" in row][-1]
    check(eval_a["loss"] == eval_b["loss"] and eval_a["accuracy"] == eval_b["accuracy"], f"{eval_a} != {eval_b}")
    with h5py.File(os.path.join(whole, "model.h5"), "r") as fa, h5py.File(os.path.join(resumed, "model.h5"), "r") as fb:
        check(sorted(fa) == sorted(fb), f"{sorted(fa)} != {sorted(fb)}")
        check("block1.1.running_mean" in fa and "fc2.weight" in fa, f"model.h5: {sorted(fa)}")
        for name in fa:
            check(np.array_equal(fa[name][()], fb[name][()]), f"model.h5 {name} differs after the resume")
        tensors = len(fa)
    print(f"resumed at step 8: steps 9-30 and {tensors} tensors of model.h5 bitwise equal")


def scenario_fashion_cnn(r):
    project = os.path.join(r.work, "fashion_cnn")
    config = os.path.join(r.source, "configs", "fashion_mnist_cnn.yaml")
    _, out, seconds = r.run(2, "--config", config, sets=[f"project.dir={project}", f"model.path={r.cnn}"],
                            timeout=900, expect=0)
    evals = [row for row in read_metrics(project) if "eval" in row]
    check(evals and evals[-1]["samples"] == 10000, f"{evals}")
    accuracy = evals[-1]["accuracy"]
    print(f"Fashion-MNIST CNN (TorchScript), {len(evals)} epochs at 2 ranks: test accuracy "
          f"{100 * accuracy:.2f}% in {seconds:.1f} s")
    check(accuracy >= 0.91, f"test accuracy {accuracy:.4f} < 0.91\n{out}")


def scenario_unavailable(r):
    config = r.config("run.yaml", "model:\n  kind: torchscript\n  path: model.pt\n")
    _, out, _ = r.run(2, "--config", config, sets=SYNTHETIC + [f"project.dir={r.work}/none"], expect=2)
    wanted = "run.yaml:2:9: model.kind: torchscript needs libtorch, and this trainer was built without libtorch"
    check(out.count(wanted) == 1, f"expected once: {wanted!r}\n{out}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trainer", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("scenario")
    args = p.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    try:
        globals()["scenario_" + args.scenario](Runner(args))
    except Failure as e:
        print(f"FAILED {args.scenario}: {e}")
        return 1
    print(f"passed {args.scenario}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
