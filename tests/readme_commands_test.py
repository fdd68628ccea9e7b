#!/usr/bin/python3
"""Runs the commands of README.md's ```sh blocks as written (CTest `readme_commands`).

Every command line of every ```sh block is either run, in the README's order, or named in
LONG below with the reason it is not (a build, a benchmark of minutes, the test suite itself);
a command that is neither fails the test, so a new README command must be classified. Commands
run in a scratch folder that links every top-level entry of the source tree and links `build`
to the CTest build folder, so `build/apps/trainer` and `configs/...` resolve as in a checkout
and what the commands write (run.yaml, runs/, model.safetensors) stays out of the tree.
`make train` runs as the command its README comment says it is (make would configure the
scratch folder as a new source tree). A command fails the test when it exits non-zero or
prints nothing (or writes an empty file, for one that redirects its output); its output is
shown.

Usage: readme_commands_test.py --source DIR --build DIR [--torch 0|1] [--list]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

# Command prefixes not run, with why. Each names where the same thing is tested instead.
LONG = {
    "make test": "the test suite itself (CI runs it)",
    "make sanitize": "full builds with ASan+UBSan and TSan (CI runs make sanitize-asan)",
    "make fuzz": "a clang build and minutes of fuzzing (CI runs it)",
    "make bench-cluster": "network namespaces (root) and minutes of benchmarking; CTest multinode.cluster_bench runs scripts/cluster_bench.sh",
    "make bench": "minutes of collective_bench; benchmarks.* smoke tests cover it",
    "cmake ": "a full build and an install (CI builds; packaging.* tests install into a scratch prefix)",
    "mpirun -np 2 build/benchmarks/": "minutes of benchmarking; benchmarks.* smoke tests cover it",
    "mpirun -np 1 build/benchmarks/": "minutes of benchmarking; benchmarks.* smoke tests cover it",
    "mpirun -np 4 --oversubscribe build/benchmarks/": "minutes of benchmarking; benchmarks.* smoke tests cover it",
    "build/benchmarks/": "minutes of benchmarking; benchmarks.* smoke tests cover it",
    "benchmarks/": "minutes of benchmarking (and python3-torch); benchmarks.* smoke tests cover it",
    "MPITRAIN_ALGORITHM_TABLE=": "a pattern for any program ('...'), not a command",
    "sudo scripts/sim_cluster.sh":
        "network namespaces (root) beside other users' clusters; CTest multinode.* (label multinode) runs the tool",
    "sudo scripts/cluster_bench.sh":
        "network namespaces (root) and minutes of benchmarking; CTest multinode.cluster_bench runs the script",
    "mpirun -np 2 build/apps/trainer --config configs/fashion_mnist_cnn.yaml":
        "minutes of training a CNN; CTest trainer_torchscript.fashion_cnn runs it",
    "mpirun -np 2 build/apps/trainer --config configs/fortunes_gpt.yaml":
        "16 minutes of training a GPT; CTest trainer_torchscript.gpt runs a short version",
    "mpirun -np 1 build/apps/trainer generate --config configs/fortunes_gpt.yaml":
        "needs the GPT run above; CTest trainer_torchscript.gpt runs generate",
}

# Commands that need the optional libtorch component (MPITRAIN_TORCH): run when it is built
# (before LONG is consulted: the short GPT run on token shards shares the long run's prefix),
# otherwise listed as not run, with why.
NEEDS_TORCH = ("mpirun -np 2 build/mpi_examples/libtorch_ddp",
               "mpirun -np 2 build/apps/trainer --config configs/fortunes_gpt.yaml --set data.kind=tokens")

# `make` targets whose README comment gives the command they run.
MAKE_EQUIVALENT = re.compile(r"^make (\w+)\s+#\s*=\s*(.+)$")


def sh_commands(readme):
    """Returns (line number, command, comment) for each command line of the ```sh blocks."""
    commands = []
    in_block = False
    for number, line in enumerate(readme.splitlines(), start=1):
        if line.startswith("```"):
            in_block = (not in_block) and line.strip() == "```sh"
            continue
        if not in_block or not line.strip() or line.lstrip().startswith("#"):
            continue
        command, _, comment = line.partition("  #")
        commands.append((number, command.strip(), comment.strip()))
    return commands


def make_equivalents(commands):
    """Returns {make command: the command its README comment says it runs}."""
    found = {}
    for _, command, comment in commands:
        match = MAKE_EQUIVALENT.match(f"{command}  # {comment}")
        if match:
            found[f"make {match.group(1)}"] = match.group(2).strip()
    return found


def classify(command, equivalents, torch_built):
    """Returns (what to run or None, why not)."""
    if command.startswith(NEEDS_TORCH):
        if not torch_built:
            return None, "the libtorch component is not built in this build (MPITRAIN_TORCH)"
        return command, ""
    for prefix, why in LONG.items():
        if command.startswith(prefix):
            return None, why
    if command in equivalents:
        return equivalents[command], ""
    if command.startswith("make "):
        return None, ""
    return command, ""


def scratch_tree(source, build):
    """Returns a scratch folder linking the source tree's top-level entries and build/."""
    scratch = tempfile.mkdtemp(prefix="readme_commands.")
    for entry in os.listdir(source):
        if entry.startswith(".") or entry.startswith("build") or entry == "runs":
            continue
        os.symlink(os.path.join(source, entry), os.path.join(scratch, entry))
    os.symlink(os.path.abspath(build), os.path.join(scratch, "build"))
    return scratch


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument("--torch", choices=["0", "1"], default="0",
                        help="1 when the build has the libtorch component (mpitrain_torch)")
    parser.add_argument("--list", action="store_true", help="list the commands and their class, run none")
    args = parser.parse_args()
    with open(os.path.join(args.source, "README.md")) as f:
        commands = sh_commands(f.read())
    equivalents = make_equivalents(commands)
    failures = []
    plan = []
    seen = set()
    for number, command, _ in commands:
        run, why = classify(command, equivalents, args.torch == "1")
        if run is None and not why:
            failures.append(f"README.md:{number}: `{command}` is neither run nor listed in LONG")
        if run is not None and run in seen:
            run, why = None, "run above already"
        seen.add(run)
        plan.append((number, command, run, why))
    if args.list:
        for number, command, run, why in plan:
            print(f"README.md:{number}: {'run' if run else 'not run'}: {run or command}{' (' + why + ')' if why else ''}")
        return 1 if failures else 0
    scratch = scratch_tree(args.source, args.build)
    try:
        for number, command, run, why in plan:
            if run is None:
                print(f"README.md:{number}: not run: `{command}`: {why}")
                continue
            start = time.monotonic()
            done = subprocess.run(run, shell=True, cwd=scratch, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True, timeout=600)
            seconds = time.monotonic() - start
            print(f"README.md:{number}: ran `{run}`: exit {done.returncode} in {seconds:.1f} s")
            # What a command prints, or the file it redirects its output to, must not be empty.
            redirect = re.search(r">\s*(\S+)\s*$", run)
            produced = (os.path.getsize(os.path.join(scratch, redirect.group(1))) > 0
                        if redirect and os.path.exists(os.path.join(scratch, redirect.group(1)))
                        else bool(done.stdout.strip()))
            if done.returncode != 0 or not produced:
                failures.append(f"README.md:{number}: `{run}` exited {done.returncode}"
                                f"{'' if produced else ' with no output'}:\n{done.stdout}")
    finally:
        shutil.rmtree(scratch)
    for failure in failures:
        print(f"FAILED {failure}")
    print(f"readme_commands: {len([p for p in plan if p[2]])} run, "
          f"{len([p for p in plan if not p[2]])} not run, {len(failures)} failed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
