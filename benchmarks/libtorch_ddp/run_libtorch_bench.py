#!/usr/bin/python3
"""The libtorch benchmark's driver: the CNN of cnn.hpp at 2 ranks, samples/s of mpitrain's
Engine (defaults; overlap off; torch's own AdamW step instead of the fused one) against (a) PyTorch's Python DDP with gloo (ddp_gloo.py) and (b)
the hand-written allreduce after backward of pytorch/examples' dist-mnist.cpp
(allreduce_after_backward.cpp), all measured in this one run, in rounds whose order rotates,
and printed as a table (median of the rounds) with ratios, as nccl-tests print theirs.

  benchmarks/libtorch_ddp/run_libtorch_bench.py --build build [--rounds 3] [--batch 64]
      [--warmup 20] [--steps 200] [--np 2] [--model cnn|wide] [--json FILE]
  benchmarks/libtorch_ddp/run_libtorch_bench.py --build build --torchscript [--rounds 3]
      [--batch 64] [--gpt-batch 8] [--block-size 128] [--warmup 20] [--steps 200] [--json FILE]

--torchscript measures the TorchScript models of models/ instead (fashion_mnist_cnn.pt on
Fashion-MNIST, fortunes_gpt.pt on the fortunes corpus in windows of block_size + 1 bytes),
each at 1 and 2 ranks in the same run, mpitrain's Engine (torchscript_bench.cpp: the module
through TorchModel, as the trainer trains it; its defaults, and overlap off) against PyTorch's Python DDP with gloo on the
same module (ddp_gloo.py --torchscript: torch.jit.load, wrapped in DDP): a row per model,
ranks and implementation, with the scaling (samples/s at 2 ranks / at 1 rank) and mpitrain /
DDP at the same ranks.

Every implementation runs with one torch thread per rank (torch.set_num_threads(1) in each
program, and OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 in their environment): 2 ranks on the
2 cores. Same model, same initial-weight recipe, same batches (Fashion-MNIST, seed 42),
AdamW. Check `uptime` first: figures are meaningful only on an idle machine (load below ~1).
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
IMPLS = ["pytorch_ddp_gloo", "cpp_allreduce_after_backward", "mpitrain", "mpitrain_overlap_off",
         "mpitrain_torch_step"]
MPITRAIN_FLAGS = {"mpitrain": [], "mpitrain_overlap_off": ["--overlap", "off"],
                  "mpitrain_torch_step": ["--fused-adamw", "off"]}
GLOO, ALLREDUCE = IMPLS[0], IMPLS[1]


def command(impl, args):
    """Returns the command line that runs `impl` once."""
    common = ["--batch", str(args.batch), "--warmup", str(args.warmup), "--steps", str(args.steps),
              "--model", args.model]
    mpi = [args.mpiexec, "-n", str(args.np), "--oversubscribe"]
    binaries = Path(args.build) / "benchmarks"
    if impl == GLOO:
        return [sys.executable, str(HERE / "ddp_gloo.py"), "--nproc", str(args.np)] + common
    if impl == ALLREDUCE:
        return mpi + [str(binaries / "libtorch_allreduce_bench")] + common
    return mpi + [str(binaries / "libtorch_mpitrain_bench")] + MPITRAIN_FLAGS[impl] + common


# --torchscript: (name, file under models/, task, the option giving its batch per rank).
TORCHSCRIPT_MODELS = [("fashion_mnist_cnn", "fashion_mnist_cnn.pt", "classification", "batch"),
                      ("fortunes_gpt", "fortunes_gpt.pt", "language_model", "gpt_batch")]
TORCHSCRIPT_IMPLS = [GLOO, "mpitrain", "mpitrain_overlap_off"]


def torchscript_command(impl, model, ranks, args):
    """Returns the command line that runs `impl` on the TorchScript `model` at `ranks` ranks."""
    name, file, task, batch_option = model
    common = ["--batch", str(getattr(args, batch_option)), "--warmup", str(args.warmup), "--steps", str(args.steps),
              "--torchscript", str(HERE.parent.parent / "models" / file), "--task", task,
              "--block-size", str(args.block_size)]
    if impl == GLOO:
        return [sys.executable, str(HERE / "ddp_gloo.py"), "--nproc", str(ranks)] + common
    return ([args.mpiexec, "-n", str(ranks), "--oversubscribe",
             str(Path(args.build) / "benchmarks" / "libtorch_torchscript_bench")] + common +
            ["--overlap", "off" if impl == "mpitrain_overlap_off" else "on"])


def run_once(impl, args, cmd=None):
    """Returns the JSON record rank 0 of `impl` printed (`cmd`: its command line, when not
    command(impl, args))."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    if os.geteuid() == 0:
        # Open MPI refuses to run as root unless told (the Makefile tells it the same way).
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    result = subprocess.run(cmd or command(impl, args), capture_output=True, text=True, env=env)
    records = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not records:
        sys.exit(f"{impl} failed (exit {result.returncode}):\n{result.stdout}\n{result.stderr}")
    return json.loads(records[-1])


def load_average():
    """Returns the 1-minute load average."""
    return os.getloadavg()[0]


def main_torchscript(args):
    """--torchscript: every (model, ranks, impl) once per round, the order rotated, then the
    table of medians."""
    runs = [(model, ranks, impl) for model in TORCHSCRIPT_MODELS for ranks in (1, 2) for impl in TORCHSCRIPT_IMPLS]
    load_before = load_average()
    results = {run: [] for run in runs}
    for round_index in range(args.rounds):
        shift = round_index % len(runs)
        for model, ranks, impl in runs[shift:] + runs[:shift]:
            results[(model, ranks, impl)].append(
                run_once(impl, args, torchscript_command(impl, model, ranks, args)))
    load_after = load_average()
    median = {run: statistics.median(r["samples_per_s"] for r in results[run]) for run in runs}
    print(f"# TorchScript models (models/*.pt) at 1 and 2 ranks, AdamW (lr 1e-3); batch per rank: "
          f"fashion_mnist_cnn {args.batch} images, fortunes_gpt {args.gpt_batch} windows of "
          f"{args.block_size} + 1 bytes")
    print(f"# {args.steps} timed steps after {args.warmup} warm-up steps per run, median of {args.rounds} "
          f"rounds (order rotated); 1 torch thread per rank (set_num_threads(1), OMP_NUM_THREADS=1, "
          f"OPENBLAS_NUM_THREADS=1)")
    print(f"# load average (1 min): {load_before:.2f} before, {load_after:.2f} after")
    print("#")
    print(f"# {'model':>17} {'ranks':>5} {'impl':>20} {'samples/s':>10} {'step_ms':>8} {'scaling':>8} "
          f"{'vs_ddp':>7}   rounds (samples/s)")
    for model, ranks, impl in runs:
        run = (model, ranks, impl)
        step_ms = statistics.median(r["step_ms"] for r in results[run])
        scaling = median[(model, 2, impl)] / median[(model, 1, impl)]
        rounds = " ".join(f"{r['samples_per_s']:.0f}" for r in results[run])
        print(f"  {model[0]:>17} {ranks:>5} {impl:>20} {median[run]:>10.1f} {step_ms:>8.2f} "
              f"{scaling if ranks == 2 else 1.0:>8.3f} {median[run] / median[(model, ranks, GLOO)]:>7.3f}   {rounds}")
    print("#")
    print("# scaling: samples/s at 2 ranks / at 1 rank of the same implementation; vs_ddp: / PyTorch DDP gloo's "
          "at the same ranks")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "load_before": load_before,
                                               "load_after": load_after,
                                               "runs": [{"model": m[0], "ranks": n, "impl": i, "records": results[(m, n, i)]}
                                                        for m, n, i in runs]}, indent=1))
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", required=True, help="the CMake build folder")
    parser.add_argument("--mpiexec", default="mpirun")
    parser.add_argument("--np", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch", type=int, default=64, help="examples per rank and step")
    parser.add_argument("--warmup", type=int, default=20)
    parser.add_argument("--steps", type=int, default=200, help="timed steps per run")
    parser.add_argument("--model", choices=["cnn", "wide"], default="cnn",
                        help="cnn.hpp's size: cnn (52,138 parameters) or wide (813,258)")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--torchscript", action="store_true",
                        help="measure models/fashion_mnist_cnn.pt and models/fortunes_gpt.pt at 1 and 2 ranks")
    parser.add_argument("--gpt-batch", type=int, default=8, help="--torchscript: the GPT's windows per rank and step")
    parser.add_argument("--block-size", type=int, default=128, help="--torchscript: the GPT's tokens per window")
    args = parser.parse_args()
    if args.torchscript:
        return main_torchscript(args)

    load_before = load_average()
    results = {impl: [] for impl in IMPLS}
    for round_index in range(args.rounds):
        shift = round_index % len(IMPLS)
        for impl in IMPLS[shift:] + IMPLS[:shift]:
            results[impl].append(run_once(impl, args))
    load_after = load_average()

    median = {impl: statistics.median(r["samples_per_s"] for r in results[impl]) for impl in IMPLS}
    parameters = {"cnn": "52,138", "wide": "813,258"}[args.model]
    print(f"# libtorch CNN '{args.model}' (benchmarks/libtorch_ddp/cnn.hpp, {parameters} parameters) on Fashion-MNIST, "
          f"{args.np} ranks x {args.batch} examples, AdamW")
    print(f"# {args.steps} timed steps after {args.warmup} warm-up steps per run, median of "
          f"{args.rounds} rounds (order rotated); 1 torch thread per rank "
          f"(set_num_threads(1), OMP_NUM_THREADS=1, OPENBLAS_NUM_THREADS=1)")
    print(f"# load average (1 min): {load_before:.2f} before, {load_after:.2f} after")
    print("#")
    print(f"# {'impl':>28} {'samples/s':>10} {'step_ms':>8} {'vs_gloo':>8} {'vs_allreduce':>12}   rounds (samples/s)")
    for impl in IMPLS:
        step_ms = statistics.median(r["step_ms"] for r in results[impl])
        rounds = " ".join(f"{r['samples_per_s']:.0f}" for r in results[impl])
        print(f"  {impl:>28} {median[impl]:>10.1f} {step_ms:>8.2f} {median[impl] / median[GLOO]:>8.3f} "
              f"{median[impl] / median[ALLREDUCE]:>12.3f}   {rounds}")
    best = max(MPITRAIN_FLAGS, key=median.get)
    print("#")
    print(f"# mpitrain (defaults) vs PyTorch DDP gloo: {median['mpitrain'] / median[GLOO]:.3f}x "
          f"(goal >= 1.2); vs allreduce after backward: {median['mpitrain'] / median[ALLREDUCE]:.3f}x "
          f"(goal >= 1.1); best mpitrain setting here: {best}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "load_before": load_before,
                                               "load_after": load_after, "runs": results,
                                               "median_samples_per_s": median}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
