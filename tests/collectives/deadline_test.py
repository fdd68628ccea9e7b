#!/usr/bin/python3
"""Deadlines and desynchronisation checks of the library alone (collective_timeout.hpp):
runs deadline_program.cpp under mpiexec and checks how the job ends and the exact messages.

  deadline_test.py --mpiexec MPIEXEC --program EXE --ranks N SCENARIO

Scenarios (see deadline_program.cpp for what each rank does):
  stop         rank 1 stops (SIGSTOP) before #5: every other rank reports
               "rank R: allreduce(f32, 1024 elements) #5 timed out after 3 s: rank 1 did not
               arrive (last seen at #4); arrived: ..." and the job ends within 3 + 10 s
  skip         rank 1 skips #5: the others time out in #10, rank 1 last seen at #9
  fingerprint  rank 1 reduces #5 with max: the check after it raises CollectiveMismatch on
               every rank, naming every rank's count and fingerprint
  debug        MPITRAIN_DEBUG_COLLECTIVES=1: every rank raises CollectiveMismatch naming the
               first mismatched collective (#57) and both call sites
  throw        stop with TimeoutAction::throw_error: the waiting ranks catch CollectiveTimeout
               with the report's text
  latency      #5 is Communicator::core_latency_ns(); rank 1 issues only its barrier, then
               stops: rank 0 reports "rank 0: core_latency_ns (after barrier #5) timed out
               after 3 s: rank 1 stopped responding inside #5; ...", every other rank the
               timeout of the call's closing allreduce (#6), and the job ends within 3 + 10 s
"""
import argparse
import os
import re
import subprocess
import sys
import time

TIMEOUT_S = 3
# The job must end within the deadline plus this (the bound).
SLACK_S = 10


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def ranks_text(ranks):
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(str(r) for r in ranks)


def run(args, mode, env_extra=None):
    """Runs the program; returns (exit code, output, seconds). Kills mpiexec (by its pid)
    only when it outlives the bound, which is a failure."""
    env = dict(os.environ, **(env_extra or {}))
    cmd = [args.mpiexec, "-n", str(args.ranks), "--oversubscribe"]
    for key in env_extra or {}:
        cmd += ["-x", key]
    cmd += [args.program, mode, str(TIMEOUT_S)]
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env)
    try:
        out, _ = proc.communicate(timeout=TIMEOUT_S + SLACK_S + 30)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, _ = proc.communicate()
        raise Failure(f"{' '.join(cmd)} did not end\n{out}")
    seconds = time.monotonic() - start
    return proc.returncode, out, seconds, " ".join(cmd)


def run_to_timeout(args, mode):
    """Runs `mode`, which must end the job with an error within the timeout + SLACK_S;
    returns (output, context for failure messages)."""
    code, out, seconds, cmd = run(args, mode)
    context = f"{cmd}\nexit {code} after {seconds:.1f} s\n{out}"
    check(code != 0, "the job exited 0\n" + context)
    check(seconds < TIMEOUT_S + SLACK_S, "the job did not end within timeout + 10 s\n" + context)
    return out, context


def expect_timeout_reports(args, mode, seq, last_seen):
    out, context = run_to_timeout(args, mode)
    waiting = [r for r in range(args.ranks) if r != 1]
    for r in waiting:
        line = (f"mpitrain: rank {r}: allreduce(f32, 1024 elements) #{seq} timed out after "
                f"{TIMEOUT_S} s: rank 1 did not arrive (last seen at #{last_seen}); arrived: "
                f"{ranks_text(waiting)}; ending the job (MPI_Abort)")
        check(line in out, f"missing line:\n{line}\n" + context)
    for r in waiting:
        check(f"rank {r}: done" not in out, f"rank {r} finished\n" + context)


def scenario_stop(args):
    expect_timeout_reports(args, "stop", 5, 4)


def scenario_skip(args):
    expect_timeout_reports(args, "skip", 10, 9)


def scenario_latency(args):
    out, context = run_to_timeout(args, "latency")
    waiting = [r for r in range(args.ranks) if r != 1]
    lines = [f"mpitrain: rank 0: core_latency_ns (after barrier #5) timed out after {TIMEOUT_S} s: "
             f"rank 1 stopped responding inside #5; arrived: {ranks_text(waiting)}; ending the "
             "job (MPI_Abort)"]
    # The ranks outside the measurement wait in the allreduce that ends the call.
    others = [r for r in range(args.ranks) if r > 1]
    lines += [f"mpitrain: rank {r}: allreduce(f64, 1 element) #6 timed out after {TIMEOUT_S} s: "
              "rank 0 did not arrive (last seen at #5); rank 1 did not arrive (last seen at #5); "
              f"arrived: {ranks_text(others)}; ending the job (MPI_Abort)" for r in others]
    for line in lines:
        check(line in out, f"missing line:\n{line}\n" + context)
    for r in waiting:
        check(f"rank {r}: done" not in out, f"rank {r} finished\n" + context)


def scenario_fingerprint(args):
    code, out, seconds, cmd = run(args, "fingerprint")
    context = f"{cmd}\nexit {code} after {seconds:.1f} s\n{out}"
    check(code != 0, "the job exited 0\n" + context)
    lines = [l for l in out.splitlines() if " caught: " in l]
    check(len(lines) == args.ranks, "not every rank caught the mismatch\n" + context)
    pattern = ("rank RANK caught: collective mismatch: the ranks issued different collectives "
               "since the last check: " +
               ", ".join(f"rank {q} issued 1 up to #5 \\(fingerprint ([0-9a-f]{{16}})\\)"
                         for q in range(args.ranks)) +
               "; set MPITRAIN_DEBUG_COLLECTIVES=1 to name the first collective that differs")
    for r in range(args.ranks):
        match = [re.fullmatch(pattern.replace("RANK", str(r)), l) for l in lines]
        match = [m for m in match if m]
        check(len(match) == 1, f"rank {r}'s message does not read as expected\n" + context)
        prints = match[0].groups()
        # Rank 1's fingerprint differs from everyone else's, which agree.
        check(all(prints[q] == prints[0] for q in range(args.ranks) if q != 1) and
              prints[1] != prints[0], "fingerprints do not single out rank 1\n" + context)


def scenario_debug(args):
    code, out, seconds, cmd = run(args, "debug", {"MPITRAIN_DEBUG_COLLECTIVES": "1"})
    context = f"{cmd}\nexit {code} after {seconds:.1f} s\n{out}"
    check(code != 0, "the job exited 0\n" + context)
    for r in range(args.ranks):
        line = (f"rank {r} caught: collective mismatch: rank 1 called allreduce(f32, 1024) #57 "
                "from Engine::backward, rank 0 called barrier #57 from wait_for_everyone")
        check(line in out.splitlines(), f"missing line:\n{line}\n" + context)


def scenario_throw(args):
    out, context = run_to_timeout(args, "throw")
    waiting = [r for r in range(args.ranks) if r != 1]
    # Rank 0's Communicator::abort may end the job before the other ranks print.
    line = (f"rank 0 caught: rank 0: allreduce(f32, 1024 elements) #5 timed out after "
            f"{TIMEOUT_S} s: rank 1 did not arrive (last seen at #4); arrived: "
            f"{ranks_text(waiting)}")
    check(line in out.splitlines(), f"missing line:\n{line}\n" + context)
    check("ending the job (MPI_Abort)" not in out, "the library aborted\n" + context)


def scenario_truncate(args):
    code, out, seconds, cmd = run(args, "truncate")
    context = f"{cmd}\nexit {code} after {seconds:.1f} s\n{out}"
    check(code != 0, "the job exited 0\n" + context)
    check(seconds < TIMEOUT_S + SLACK_S, "the job did not end within timeout + 10 s\n" + context)
    # The error is the request's own: MPI_ERR_TRUNCATE, or, when libnbc's next round fails
    # first (about one run in eight under ASan's timing), the code -1 that libnbc returns.
    check(re.search(r"^rank 0 caught: MPI_.* failed on rank 0 \(count 512\): "
                    r"(MPI_ERR_TRUNCATE|MPI error code -1)", out, re.M) is not None,
          "rank 0 did not catch an MpiError\n" + context)
    check("An error occurred in MPI_" not in out, "MPI's fatal handler ended the job\n" + context)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--program", required=True)
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("scenario")
    args = p.parse_args()
    try:
        globals()["scenario_" + args.scenario](args)
    except Failure as e:
        print(f"FAILED {args.scenario} at {args.ranks} ranks: {e}")
        return 1
    print(f"passed {args.scenario} at {args.ranks} ranks")
    return 0


if __name__ == "__main__":
    sys.exit(main())
