#!/usr/bin/env python3
"""`make train` builds only what training needs; `make test` builds everything.

Runs `make -n train` and `make -n test` (dry runs: nothing is installed, configured or built)
in the source tree and reads the `cmake --build` commands they would run:
- train: every build command names targets (--target), and those are only `trainer` (the
  trainer and the static and shared libraries it links: no test, benchmark or example);
- test: a build command without --target (the whole tree, tests included) comes before ctest.
Fails naming the command lines it found.
"""
import argparse
import shlex
import subprocess
import sys


def build_commands(source, goal):
    """Returns the `cmake --build` command lines of `make -n <goal>`, as argument lists."""
    out = subprocess.run(["make", "-n", "-C", source, goal, "BUILD=/nonexistent-build"],
                         check=True, capture_output=True, text=True).stdout
    lines = [shlex.split(line) for line in out.splitlines() if "cmake --build" in line]
    return out, lines


def targets_of(command):
    """Returns the targets a `cmake --build` command names (empty: the default, everything)."""
    names = []
    for i, arg in enumerate(command):
        if arg in ("--target", "-t"):
            names += [n for n in command[i + 1:] if not n.startswith("-")][:1]
        elif arg.startswith("--target="):
            names.append(arg.split("=", 1)[1])
    return names


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    args = parser.parse_args()
    failures = []

    out, train = build_commands(args.source, "train")
    if not train:
        failures.append("make -n train runs no `cmake --build`:\n" + out)
    for command in train:
        names = targets_of(command)
        if names != ["trainer"]:
            failures.append("make train runs `%s`, which builds %s, not only the trainer"
                            % (" ".join(command), names or "every target, tests included"))
    if "mpirun" not in out or "apps/trainer" not in out:
        failures.append("make -n train does not run the trainer:\n" + out)

    out, test = build_commands(args.source, "test")
    if not any(not targets_of(c) for c in test):
        failures.append("make -n test builds no whole tree before ctest:\n" + out)

    for f in failures:
        print("FAILED: " + f)
    if failures:
        return 1
    print("make train builds only `trainer`; make test builds every target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
