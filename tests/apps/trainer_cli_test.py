#!/usr/bin/python3
"""End-to-end tests of the trainer command line (DESIGN.md sections 6 and 7), each a real
`mpiexec` job:

  trainer_cli_test.py --trainer EXE --mpiexec MPIEXEC --work DIR SCENARIO

Scenarios:
  config_errors    bad keys, values, files and flags: exit 2 on every rank, one message that
                   names the key (with file:line and a "did you mean" where it applies)
  train            a short synthetic run at 2 ranks: metrics.jsonl keys and values, eval over
                   exactly the test set, checkpoints (save_every_steps, total_limit), model.h5
                   readable with h5py under PyTorch's names and shapes
  preempt_resume   SIGUSR1 to mpirun and SIGTERM to one rank: checkpoint, exit 0; the next run
                   with resume: latest continues at the saved step
  sigterm_mpirun   SIGTERM to mpirun itself: Open MPI 4.1 ends the job (SIGCONT to the ranks,
                   SIGTERM after odls_base_sigkill_timeout, 1 s by default and 5 s here,
                   SIGKILL as long again later; mpirun exits 1); the trainer saves on that
                   SIGTERM, and the next run resumes there
  rank_failure     an exception on rank 1 ends the whole job promptly, naming the rank
  hang_watchdog    a rank that stops making progress: the job ends after timeout_s, naming it
  sigstop_rank     rank 1 stopped with SIGSTOP mid-training: rank 0's collective times out
                   naming rank 1 (not itself), and the job ends within timeout_s + 10 s
  skipped_collective  rank 1 issues a barrier rank 0 skips (--inject-fault barrier@1:3): rank
                   0 times out naming rank 1 and what it called instead, within timeout_s + 10 s
  debug_collectives   the same with distributed.debug_collectives: every rank names the first
                   mismatched collective and both call sites
  checkpoints_cli  `trainer checkpoints list|verify` on a project, then on a damaged file; a
                   path that does not exist (exit 2) or cannot be examined (exit 1) at 2 ranks:
                   every rank exits with rank 0's code, the message printed once, no hang
  resume_older     project.resume: PATH of a checkpoint with newer ones after it: exit 2 at
                   start, naming them; once they are removed, the run resumes and saves
  step_naming      automatic_checkpoint_naming: false: step_<S> folders, listed and verified by
                   `trainer checkpoints`; total_limit with it is a config error (file:line);
                   a run whose saves would find step_<S> taken fails at start (exit 2)
  cleanup_at_start abandoned checkpoint folders are removed when the run starts, before the
                   first step (a run that fails before any save leaves none behind)
  hdf5             1 epoch at 2 ranks on an HDF5 file written with h5py (features and labels
                   in groups, test set of an odd size): metrics.jsonl rows, finite loss
  print_config     `trainer print-config` is a complete, valid config that trains; with
                   --config and --set it prints the effective config, each key's source
  version_usage    `trainer --version` (exit 0), `trainer` alone: usage, exit 2 (printed once)
  log_level        MPITRAIN_LOG_LEVEL: rank prefix, error hides info lines, debug shows the
                   run id, a bad value is exit 2
  runs             metrics.jsonl's run header and wall_time; a fresh run into a used
                   project.dir is exit 2 saying how to resume, choose another dir or
                   overwrite; project.overwrite: true starts over; a resumed run's marker
                   (after a crash, at the checkpoint's step, before the steps it supersedes)
  env_check        `trainer env` and `trainer check` at 2 ranks
  fashion_mnist    the default run (configs/fashion_mnist_mlp.yaml, make train) reaches 88%
  readme           README.md's config reference equals `trainer print-config`, and its
                   load-into-PyTorch snippet runs on a model the trainer saved
  zero_stage       distributed.zero_stage: 1 at 2 ranks: the memory line (optimizer state
                   halved), the same weights as stage 0, a sharded checkpoint (manifest
                   zero_stage 1) that resumes at 1 rank with stage 0
  resume_world_size  saved at 2 ranks, resumed at 1 and at 3 (another global batch): the
                   run's length and the linear schedule are counted again from the resumed
                   position; every epoch is finished and evaluated
  multinode_env_check  on a simulated cluster (CTest multinode.trainer.env_check): `trainer
                   env` and `trainer check` at 2 nodes x 2 ranks (check names shm as not run)
  multinode_resume on a simulated cluster (scripts/sim_cluster.sh, 4 nodes; CTest runs it as
                   multinode.trainer.resume_layouts): 2 nodes x 2 ranks stopped by SIGUSR1
                   to mpirun, resumed at 4 nodes x 1 rank (bitwise as an uninterrupted
                   2 x 2 run) and 1 node x 4 ranks (to rounding: another summation order)
Each failure prints the command and its output.
"""
import argparse
import json
import math
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import h5py
import numpy

TRAIN_KEYS = ["step", "epoch", "loss", "lr", "grad_norm", "loss_scale", "skipped_steps",
              "samples_per_s", "time_s", "wall_time"]
EVAL_KEYS = ["eval", "step", "epoch", "loss", "accuracy", "samples", "wall_time"]
HEADER_KEYS = ["header", "run_id", "start_time", "mpitrain_version", "world_size", "config_hash",
               "wall_time"]
RESUME_KEYS = ["resumed", "step", "epoch", "checkpoint", "wall_time"]
SYNTHETIC = ["data.kind=synthetic", "data.synthetic.train_size=3000",
             "data.synthetic.test_size=517", "data.synthetic.features=20",
             "data.synthetic.classes=5", "model.hidden=[32, 16]", "data.batch_size=16"]


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

    def command(self, ranks, *trainer_args, sets=(), hosts=None):
        """hosts: mpiexec's --host list (the simulated cluster's nodes), else this machine."""
        cmd = [self.mpiexec, "-n", str(ranks), "--oversubscribe"]
        cmd += ["--host", hosts] if hosts else []
        cmd += [self.trainer, *trainer_args]
        for s in sets:
            cmd += ["--set", s]
        return cmd

    def run(self, ranks, *trainer_args, sets=(), timeout=300, expect=None, hosts=None):
        """Runs to completion; returns (exit code, stdout + stderr, seconds)."""
        cmd = self.command(ranks, *trainer_args, sets=sets, hosts=hosts)
        start = time.monotonic()
        p = subprocess.run(cmd, cwd=self.work, capture_output=True, text=True, timeout=timeout)
        seconds = time.monotonic() - start
        out = p.stdout + p.stderr
        if expect is not None and p.returncode != expect:
            raise Failure(f"{' '.join(cmd)}\nexited {p.returncode}, expected {expect}\n{out}")
        return p.returncode, out, seconds

    def project(self, name):
        return os.path.join(self.work, name)


def flip_middle_byte(path):
    """Damages a checkpoint file as a bad disk would: XORs its middle byte with 1."""
    with open(path, "r+b") as f:
        f.seek(os.path.getsize(path) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 1]))


def read_metrics(project, everything=False):
    """Returns the train and eval lines of metrics.jsonl (everything: run headers and resume
    markers too)."""
    with open(os.path.join(project, "metrics.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    if everything:
        return rows
    return [row for row in rows if "header" not in row and "resumed" not in row]


def scenario_config_errors(r):
    bad = os.path.join(r.work, "bad.yaml")
    with open(bad, "w") as f:
        f.write("seed: 1\ntraining:\n  epochs: 2\n  eval: true\n  log_evry: 3\n")
    code, out, _ = r.run(2, "--config", bad, expect=2)
    check("bad.yaml:5:3" in out and "training.log_evry" in out, out)
    check("did you mean 'training.log_every'?" in out, out)
    check(out.count("unknown key") == 1, "the message must be printed once:\n" + out)

    code, out, _ = r.run(2, sets=["training.epochs=abc"], expect=2)
    check("--set training.epochs=abc" in out and "expected an integer" in out, out)
    code, out, _ = r.run(2, sets=["optimizer.kind=adam"], expect=2)
    check("optimizer.kind" in out and "adamw" in out, out)
    code, out, _ = r.run(2, sets=["data.batch_size=0"], expect=2)
    check("data.batch_size" in out, out)
    code, out, _ = r.run(2, "--config", os.path.join(r.work, "missing.yaml"), expect=2)
    check("missing.yaml" in out and "cannot open" in out, out)
    code, out, _ = r.run(2, "--no-such-flag", expect=2)
    check("no-such-flag" in out, out)
    # A setting that is only wrong with the data in hand: a split that the ranks cannot share.
    code, out, _ = r.run(2, sets=SYNTHETIC + ["data.split_batches=true", "data.batch_size=15"],
                         expect=2)
    check("data.batch_size" in out, out)
    # An algorithm table that cannot be read: every rank fails to load it, one message.
    cut = os.path.join(r.work, "cut_table.json")
    with open(cut, "w") as f:
        f.write('{"format": "mpitrain-algo')
    code, out, _ = r.run(2, sets=SYNTHETIC + [f"distributed.algorithm_table={cut}"], expect=2)
    check(f"--set distributed.algorithm_table={cut}: distributed.algorithm_table: "
          f"algorithm table {cut}" in out, out)
    check(out.count("algorithm table " + cut) == 1, "the message must be printed once:\n" + out)


def scenario_train(r):
    project = r.project("train")
    code, out, _ = r.run(2, sets=SYNTHETIC + [
        f"project.dir={project}", "training.epochs=2", "training.log_every=20",
        "project.save_every_steps=25", "project.total_limit=2", "training.max_grad_norm=1.0",
        "training.gradient_accumulation_steps=2"], expect=0)
    # 3000 examples, 16 per rank on 2 ranks: 94 batches per rank and epoch, 47 steps per epoch.
    rows = read_metrics(project)
    train = [row for row in rows if "eval" not in row]
    evals = [row for row in rows if "eval" in row]
    check(train and all(list(row) == TRAIN_KEYS for row in train), f"train keys: {train[:2]}")
    check([row["step"] for row in train] == [20, 40, 60, 80, 94], f"steps {[x['step'] for x in train]}")
    check(all(row["loss"] > 0 and row["samples_per_s"] > 0 and row["grad_norm"] > 0 for row in train),
          f"values: {train}")
    check(train[-1]["loss"] < train[0]["loss"], f"the loss did not decrease: {train}")
    check(all(list(row) == EVAL_KEYS for row in evals) and len(evals) == 2, f"evals: {evals}")
    check(all(row["samples"] == 517 for row in evals), f"eval samples must be the test size: {evals}")
    check([row["epoch"] for row in evals] == [0, 1] and evals[-1]["accuracy"] > 0.5, f"{evals}")
    # Saved at steps 25, 50, 75 and at the end (94); total_limit keeps the newest two.
    names = sorted(os.listdir(os.path.join(project, "checkpoints")))
    check(names == ["checkpoint_2", "checkpoint_3"], f"checkpoints: {names}")
    with open(os.path.join(project, "checkpoints", "checkpoint_3", "MANIFEST.json")) as f:
        manifest = json.load(f)
    check(manifest["step"] == 94 and manifest["world_size"] == 2, f"manifest: {manifest}")
    with h5py.File(os.path.join(project, "model.h5"), "r") as f:
        shapes = {k: f[k].shape for k in f}
    check(shapes == {"0.weight": (32, 20), "0.bias": (32,), "2.weight": (16, 32), "2.bias": (16,),
                     "4.weight": (5, 16), "4.bias": (5,)}, f"model.h5: {shapes}")


def scenario_preempt_resume(r):
    project = r.project("preempt")
    long_run = SYNTHETIC + [f"project.dir={project}", "training.epochs=1000",
                            "training.log_every=10"]

    def interrupted(send):
        return stopped_by_signal(r, r.command(2, sets=long_run + ["project.resume=latest"]), send)

    interrupted(lambda p: p.send_signal(signal.SIGUSR1))  # Open MPI forwards it to every rank
    first = [row["step"] for row in read_metrics(project) if "eval" not in row]
    saved = json.load(open(latest_manifest(project)))["step"]
    check(saved >= first[-1], f"checkpoint at {saved}, metrics up to {first[-1]}")

    # SIGTERM to a single rank (as a scheduler may): the ranks agree to stop together.
    def term_one_rank(p):
        pid = rank_pids(p.pid)[-1]
        os.kill(pid, signal.SIGTERM)
    out = interrupted(term_one_rank)
    check(f"resumed at step {saved}" in out, out)
    second = json.load(open(latest_manifest(project)))["step"]
    check(second > saved, f"the second run saved step {second}, the first {saved}")
    steps = [row["step"] for row in read_metrics(project) if "eval" not in row]
    check(steps == sorted(steps) and len(set(steps)) == len(steps),
          f"metrics steps must keep increasing across runs: {steps}")


def stopped_by_signal(r, cmd, send):
    """Runs cmd (a trainer job), calls send(process) once training runs (the first progress
    line, "epoch 0 step 10/..."), and checks that the trainer then stops with exit 0;
    returns the output."""
    proc = subprocess.Popen(cmd, cwd=r.work, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    out = ""
    for line in proc.stdout:
        out += line
        if line.startswith("epoch ") and " step " in line:
            break
    send(proc)
    out += proc.stdout.read()
    code = proc.wait(timeout=120)
    check(code == 0, f"after the signal the trainer must exit 0, got {code}\n{out}")
    check("stop requested" in out, out)
    return out


def scenario_sigterm_mpirun(r):
    project = r.project("sigterm")
    # Few output lines: once signalled, mpirun stops relaying the ranks' output, and a rank
    # blocked writing a full pipe could not save before the SIGKILL.
    run = SYNTHETIC + [f"project.dir={project}", "training.epochs=100000", "training.log_every=2000",
                       "training.eval=false"]
    # Open MPI's default window between SIGTERM and SIGKILL is 1 s, too tight for a loaded CI
    # machine; 5 s keeps the test about what the trainer does with the SIGTERM, not the load.
    cmd = r.command(2, sets=run)
    cmd[1:1] = ["--mca", "odls_base_sigkill_timeout", "5"]
    proc = subprocess.Popen(cmd, cwd=r.work, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out = ""
    for line in proc.stdout:
        out += line
        if line.startswith("epoch ") and " step " in line:
            break
    start = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    out += proc.stdout.read()
    code = proc.wait(timeout=120)
    seconds = time.monotonic() - start
    check(code != 0, f"mpirun ends a job it was told to terminate with a non-zero code, got {code}\n{out}")
    check(seconds < 30, f"the job took {seconds:.0f} s to end after the signal\n{out}")
    check(out.count("stop requested (") == 1, out)  # signal 15, or "received by another rank"
    saved = json.load(open(latest_manifest(project)))["step"]
    check(f"step {saved}: saved" in out, f"the checkpoint of the stop step (step {saved})\n{out}")
    code, out, _ = r.run(1, "checkpoints", "verify", project, expect=0)
    code, out, _ = r.run(2, sets=run + ["project.resume=latest", f"training.max_steps={saved + 10}"],
                         expect=0)
    check(f"resumed at step {saved}" in out, out)


def latest_manifest(project):
    folder = os.path.join(project, "checkpoints")
    numbers = sorted(int(n.split("_")[1]) for n in os.listdir(folder) if n.split("_")[1].isdigit())
    return os.path.join(folder, f"checkpoint_{numbers[-1]}", "MANIFEST.json")


def rank_pids(mpiexec_pid):
    """Returns the pids of the trainer processes started by mpiexec."""
    out = subprocess.run(["ps", "-o", "pid=,ppid=,comm=", "-A"], capture_output=True, text=True).stdout
    pids = []
    for line in out.splitlines():
        pid, ppid, comm = line.split(None, 2)
        if int(ppid) == mpiexec_pid and comm.strip() == "trainer":
            pids.append(int(pid))
    check(pids, "no trainer process found under mpiexec")
    return sorted(pids)


def scenario_rank_failure(r):
    code, out, seconds = r.run(2, "--inject-fault", "throw@1:5", sets=SYNTHETIC +
                               [f"project.dir={r.project('failure')}"], timeout=120)
    check(code != 0, f"exit code {code}\n{out}")
    check("error on rank 1 of 2: injected fault after step 5" in out, out)
    check(seconds < 60, f"the job took {seconds:.0f} s to end")


def scenario_hang_watchdog(r):
    code, out, seconds = r.run(2, "--inject-fault", "hang@0:3", sets=SYNTHETIC + [
        f"project.dir={r.project('hang')}", "distributed.timeout_s=2"], timeout=120)
    check(code != 0, f"exit code {code}\n{out}")
    check("no progress for" in out and "distributed.timeout_s = 2" in out, out)
    check(seconds < 60, f"the job took {seconds:.0f} s to end")


def rank_of(pid):
    """Returns the MPI rank of a process started by mpiexec (OMPI_COMM_WORLD_RANK)."""
    with open(f"/proc/{pid}/environ", "rb") as f:
        for item in f.read().split(b"\0"):
            if item.startswith(b"OMPI_COMM_WORLD_RANK="):
                return int(item.split(b"=", 1)[1])
    raise Failure(f"process {pid} has no OMPI_COMM_WORLD_RANK")


def scenario_sigstop_rank(r):
    timeout_s = 3
    run = SYNTHETIC + [f"project.dir={r.project('sigstop')}", "training.epochs=100000",
                       "training.log_every=10", "training.eval=false",
                       f"distributed.timeout_s={timeout_s}"]
    proc = subprocess.Popen(r.command(2, sets=run), cwd=r.work, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    out = ""
    for line in proc.stdout:  # training runs once the first progress line is out
        out += line
        if line.startswith("epoch ") and " step " in line:
            break
    stopped = [pid for pid in rank_pids(proc.pid) if rank_of(pid) == 1]
    check(len(stopped) == 1, f"rank 1 not found\n{out}")
    os.kill(stopped[0], signal.SIGSTOP)
    start = time.monotonic()
    out += proc.stdout.read()
    code = proc.wait(timeout=120)
    seconds = time.monotonic() - start
    check(code != 0, f"exit code {code}\n{out}")
    check(seconds < timeout_s + 10, f"the job took {seconds:.0f} s to end after the SIGSTOP\n{out}")
    # Rank 1 stops between collectives (rank 0 waits in the next one, or in the step's
    # fingerprint check) or inside one (the communication thread may be in an allreduce).
    report = re.search(rf"mpitrain: rank 0: (\S.*) #(\d+) timed out after {timeout_s} s: rank 1 "
                       r"(did not arrive \((last seen at|last seen in the fingerprint check after) "
                       r"#(\d+)\)|stopped responding inside #(\d+)); arrived: rank 0; ending the "
                       r"job \(MPI_Abort\)", out)
    check(report is not None, f"no report naming rank 1\n{out}")
    if report.group(6):
        check(report.group(6) == report.group(2), out)
    else:
        check(int(report.group(5)) < int(report.group(2)) or "check" in report.group(1), out)
    check("rank 0: no progress" not in out, f"rank 0's watchdog blamed rank 0\n{out}")


def scenario_skipped_collective(r):
    timeout_s = 3
    code, out, seconds = r.run(2, "--inject-fault", "barrier@1:3", sets=SYNTHETIC + [
        f"project.dir={r.project('skipped')}", f"distributed.timeout_s={timeout_s}"], timeout=120)
    check(code != 0, f"exit code {code}\n{out}")
    check(seconds < timeout_s + 10 + 10, f"the job took {seconds:.0f} s to end\n{out}")  # + start-up
    # Rank 0's next collective after step 3 is the per-step stop agreement (Engine::reduce).
    check(re.search(rf"mpitrain: rank 0: allreduce\(f64, 1 element\) #(\d+) timed out after "
                    rf"{timeout_s} s: rank 1 did not arrive \(called barrier as #\1\); arrived: "
                    r"rank 0; ending the job \(MPI_Abort\)", out), out)


def scenario_debug_collectives(r):
    code, out, seconds = r.run(2, "--inject-fault", "barrier@1:3", sets=SYNTHETIC + [
        f"project.dir={r.project('debug')}", "distributed.timeout_s=3",
        "distributed.debug_collectives=true"], timeout=120)
    check(code != 0, f"exit code {code}\n{out}")
    # Rank 0's next collective after step 3 is the per-step stop agreement (Engine::reduce).
    for rank in range(2):
        line = re.search(rf"trainer: error on rank {rank} of 2: collective mismatch: rank 1 called "
                         r"barrier #(\d+) from injected fault, rank 0 called allreduce\(f64, 1\) "
                         r"#(\d+) from Engine::reduce\n", out)
        check(line and line.group(1) == line.group(2), out)


def scenario_checkpoints_cli(r):
    project = r.project("cli")
    r.run(2, sets=SYNTHETIC + [f"project.dir={project}", "project.save_every_steps=40",
                               "training.max_steps=100"], expect=0)
    code, out, _ = r.run(1, "checkpoints", "list", project, expect=0)
    check("3 committed checkpoints" in out and "checkpoint_2" in out, out)
    code, out, _ = r.run(1, "checkpoints", "verify", project, expect=0)
    check(out.count("OK ") == 3, out)
    # An interrupted save's folder, and one only named like it (not removed at start).
    os.makedirs(os.path.join(project, "checkpoints", "checkpoint_7.tmp-0123456789abcdef"))
    os.makedirs(os.path.join(project, "checkpoints", "checkpoint_8.tmp-1234"))
    code, out, _ = r.run(1, "checkpoints", "list", project, expect=0)
    lines = out.splitlines()
    check(any("checkpoint_7.tmp-0123456789abcdef" in l and "removed when a run starts" in l
              for l in lines), out)
    check(any("checkpoint_8.tmp-1234" in l and "not removed automatically" in l for l in lines), out)
    state = os.path.join(project, "checkpoints", "checkpoint_1", "state.h5")
    flip_middle_byte(state)
    code, out, _ = r.run(1, "checkpoints", "verify", project, expect=1)
    check("FAILED" in out and "checkpoint_1" in out and "state.h5" in out, out)
    code, out, _ = r.run(1, "checkpoints", "verify", os.path.join(project, "checkpoints", "checkpoint_2"),
                         expect=0)
    # At 2 ranks rank 0 alone reads the folder and gives every rank its exit code: a missing
    # path is bad usage (2), a path that cannot be examined a runtime error (1); either way
    # the message comes once and no rank is left waiting.
    for command in ("verify", "list"):
        code, out, seconds = r.run(2, "checkpoints", command, os.path.join(r.work, "nowhere"),
                                   timeout=60, expect=2)
        check(out.count("does not exist") == 1 and "nowhere" in out, out)
        check("MPI_ABORT" not in out and seconds < 30, f"{seconds:.0f} s\n{out}")
    too_long = os.path.join(r.work, "x" * 300)  # ENAMETOOLONG: std::filesystem throws on rank 0
    code, out, seconds = r.run(2, "checkpoints", "list", too_long, timeout=60, expect=1)
    check(out.count("trainer checkpoints list: ") == 1 and "too long" in out, out)
    check("MPI_ABORT" not in out and seconds < 30, f"{seconds:.0f} s\n{out}")


def checkpoint_names(project):
    return sorted(os.listdir(os.path.join(project, "checkpoints")))


def scenario_resume_older(r):
    project = r.project("older")
    base = SYNTHETIC + [f"project.dir={project}", "training.max_steps=100"]
    r.run(2, sets=base + ["project.save_every_steps=40"], expect=0)
    # Saved at steps 40, 80 and at the end of the epoch (94).
    check(checkpoint_names(project) == ["checkpoint_0", "checkpoint_1", "checkpoint_2"],
          f"{checkpoint_names(project)}")
    metrics_before = len(read_metrics(project))
    older = os.path.join(project, "checkpoints", "checkpoint_0")
    config = os.path.join(r.work, "older.yaml")
    with open(config, "w") as f:
        f.write(f"project:\n  resume: {older}\n")
    # Without the check, the run would train to the end and then find checkpoint_1 taken.
    code, out, _ = r.run(2, "--config", config, sets=base, expect=2)
    check(out.count("is not the newest checkpoint") == 1, "the message must be printed once:\n" + out)
    check("older.yaml:2:11: project.resume" in out and "checkpoint_1, checkpoint_2 come after it" in out
          and "resume from latest" in out, out)
    check(len(read_metrics(project)) == metrics_before, "the refused run must not train")
    # Removing the newer checkpoints, as the message says, lets the run continue from step 40.
    for name in ("checkpoint_1", "checkpoint_2"):
        shutil.rmtree(os.path.join(project, "checkpoints", name))
    code, out, _ = r.run(2, "--config", config, sets=base, expect=0)
    check("resumed at step 40" in out, out)
    check(checkpoint_names(project) == ["checkpoint_0", "checkpoint_1"], f"{checkpoint_names(project)}")
    with open(os.path.join(project, "checkpoints", "checkpoint_1", "MANIFEST.json")) as f:
        check(json.load(f)["step"] == 94, "checkpoint_1 must hold step 94")


def scenario_step_naming(r):
    config = os.path.join(r.work, "limit.yaml")
    with open(config, "w") as f:
        f.write("project:\n  automatic_checkpoint_naming: false\n  total_limit: 2\n")
    code, out, _ = r.run(2, "--config", config, sets=SYNTHETIC, expect=2)
    check(out.count("project.total_limit: needs project.automatic_checkpoint_naming: true") == 1, out)
    check("limit.yaml:3:16" in out, out)

    project = r.project("steps")
    base = SYNTHETIC + [f"project.dir={project}", "project.automatic_checkpoint_naming=false",
                        "training.max_steps=100"]
    r.run(2, sets=base + ["project.save_every_steps=40"], expect=0)
    check(checkpoint_names(project) == ["step_40", "step_80", "step_94"], f"{checkpoint_names(project)}")
    code, out, _ = r.run(2, "checkpoints", "list", project, expect=0)
    check("3 committed checkpoints" in out and all(f"step_{s}" in out for s in (40, 80, 94)), out)
    code, out, _ = r.run(2, "checkpoints", "verify", project, expect=0)
    check(out.count("OK ") == 3 and "step_94 (step 94" in out, out)

    # A fresh run into the same project would save step_40 again: refused at start, as a
    # fresh run into a folder that holds another run (issue 18).
    metrics_before = len(read_metrics(project))
    code, out, _ = r.run(2, sets=base + ["project.save_every_steps=40"], expect=2)
    check(out.count("holds another run") == 1 and
          "checkpoints/step_40, checkpoints/step_80, checkpoints/step_94" in out, out)
    check(len(read_metrics(project)) == metrics_before, "the refused run must not train")
    # So is resuming from step_40 while step_80 and step_94 exist; the newest resumes.
    code, out, _ = r.run(2, sets=base + [f"project.resume={project}/checkpoints/step_40"], expect=2)
    check(out.count("exist already") == 1 and "step_80, step_94 exist already" in out, out)
    check("--set project.automatic_checkpoint_naming=false" in out and "step_94)" in out, out)
    code, out, _ = r.run(2, sets=base + [f"project.resume={project}/checkpoints/step_80",
                                         "training.max_steps=90"], expect=2)
    check("step_94 exists already" in out, out)
    code, out, _ = r.run(2, sets=base + [f"project.resume={project}/checkpoints/step_94",
                                         "training.epochs=2", "training.max_steps=150"], expect=0)
    check("resumed at step 94" in out, out)
    check(checkpoint_names(project) == ["step_150", "step_40", "step_80", "step_94"],
          f"{checkpoint_names(project)}")
    # resume: latest takes the newest step_<S> folder; eval and export of `latest` find the
    # step_<S> folders even with a config that does not say how they were named.
    code, out, _ = r.run(2, sets=base + ["project.resume=latest", "training.epochs=2", "training.max_steps=160"],
                         expect=0)
    check("resumed at step 150" in out and "done after 160 steps (10 in this run)" in out, out)
    target = os.path.join(r.work, "steps.h5")
    code, out, _ = r.run(1, "export", "--checkpoint", "latest", "--format", "h5", "--output", target,
                         sets=[f"project.dir={project}"], expect=0)
    check(f"of {project}/checkpoints/step_160 to {target}" in out, out)
    # A damaged newest step_<S> cannot be passed over (a later save needs its name): exit 2
    # at start naming it, every rank, once.
    state = os.path.join(project, "checkpoints", "step_160", "state.h5")
    flip_middle_byte(state)
    code, out, _ = r.run(2, sets=base + ["project.resume=latest", "training.epochs=2", "training.max_steps=170"],
                         expect=2)
    check(out.count(f"project.resume: latest: {project}/checkpoints/step_160 fails verification (") == 1 and
          "cannot be passed over" in out, out)
    # With the naming switched back to automatic, resume: latest continues from the newest
    # sound step_<S> folder (saying so; the damaged step_160 is passed over, named in a warning,
    # since this run saves no step_<S>) and saves checkpoint_<N> beside them.
    automatic = SYNTHETIC + ["project.resume=latest", "training.epochs=2", "training.max_steps=165"]
    code, out, _ = r.run(2, sets=automatic + [f"project.dir={project}"], expect=0)
    check(out.count("passed over (kept as they are) newer checkpoints that fail verification: step_160 (") == 1,
          out)
    check(out.count("resuming from the newest of the other naming, "
                    f"{project}/checkpoints/step_150 (this run saves checkpoint_<N>)") == 1, out)
    check("resumed at step 150" in out and "done after 165 steps (15 in this run)" in out, out)
    check("scheduler:" not in out, "a constant schedule's new length is not worth a line:\n" + out)
    check(checkpoint_names(project) == ["checkpoint_0", "step_150", "step_160", "step_40", "step_80", "step_94"],
          f"{checkpoint_names(project)}")
    # When every one of them fails: exit 2 at start naming them, once.
    only_damaged = r.project("steps_damaged")
    shutil.copytree(os.path.join(project, "checkpoints", "step_160"),
                    os.path.join(only_damaged, "checkpoints", "step_160"))
    code, out, _ = r.run(2, sets=automatic + [f"project.dir={only_damaged}"], expect=2)
    check(out.count(f"project.resume: latest: every checkpoint in {only_damaged}/checkpoints fails verification: "
                    "step_160 (") == 1, out)


def scenario_cleanup_at_start(r):
    project = r.project("cleanup")
    folder = os.path.join(project, "checkpoints")
    abandoned = ["checkpoint_7.tmp-0123456789abcdef", "checkpoint_9"]  # interrupted, no manifest
    for name in abandoned:
        os.makedirs(os.path.join(folder, name))
    # This run fails at step 3, before any save: the clean-up must not wait for one.
    code, out, _ = r.run(2, "--inject-fault", "throw@0:3",
                         sets=SYNTHETIC + [f"project.dir={project}", "training.log_every=1"],
                         timeout=120)
    check(code != 0 and "injected fault after step 3" in out, out)
    check(os.listdir(folder) == [], f"left behind: {os.listdir(folder)}")
    for name in abandoned:
        check(f"removed an abandoned checkpoint folder: {os.path.join(folder, name)}" in out, out)
    check(out.index("removed an abandoned") < out.index(" step 1/"),
          "the clean-up must come before the first step:\n" + out)


def scenario_hdf5(r):
    import numpy as np
    rng = np.random.default_rng(0)
    classes, features = 3, 12
    centres = rng.normal(0.0, 3.0, size=(classes, features))

    def examples(n):
        y = rng.integers(0, classes, size=n)
        x = centres[y] + rng.normal(0.0, 1.0, size=(n, features))
        return x.astype(np.float32), y.astype(np.int64)

    path = os.path.join(r.work, "blobs.h5")
    with h5py.File(path, "w") as f:  # contiguous datasets, as data/hdf5_dataset.hpp advises
        for split, n in (("train", 1000), ("test", 301)):
            x, y = examples(n)
            f.create_dataset(f"{split}/x", data=x)
            f.create_dataset(f"{split}/y", data=y)
    project = r.project("hdf5")
    code, out, _ = r.run(2, sets=[
        "data.kind=hdf5", f"data.train.file={path}", "data.train.features=train/x",
        "data.train.labels=train/y", f"data.test.file={path}", "data.test.features=test/x",
        "data.test.labels=test/y", "data.batch_size=16", "model.hidden=[32]", "optimizer.lr=0.01",
        "training.epochs=1", "training.log_every=10", f"project.dir={project}"], expect=0)
    # 1000 examples, 16 per rank on 2 ranks: 32 batches per rank (the last one short), 32 steps.
    rows = read_metrics(project)
    train = [row for row in rows if "eval" not in row]
    evals = [row for row in rows if "eval" in row]
    check(all(list(row) == TRAIN_KEYS for row in train), f"train keys: {train[:2]}")
    check([row["step"] for row in train] == [10, 20, 30, 32], f"steps {[x['step'] for x in train]}")
    check(all(math.isfinite(row["loss"]) and row["loss"] > 0 for row in train), f"losses: {train}")
    check(train[-1]["loss"] < train[0]["loss"], f"the loss did not decrease: {train}")
    check(len(evals) == 1 and list(evals[0]) == EVAL_KEYS, f"evals: {evals}")
    check(evals[0]["samples"] == 301 and evals[0]["epoch"] == 0, f"evals: {evals}")
    check(math.isfinite(evals[0]["loss"]) and evals[0]["accuracy"] > 0.9, f"evals: {evals}")
    with h5py.File(os.path.join(project, "model.h5"), "r") as f:
        shapes = {k: f[k].shape for k in f}
    check(shapes == {"0.weight": (32, features), "0.bias": (32,), "2.weight": (classes, 32),
                     "2.bias": (classes,)}, f"model.h5: {shapes}")


def scenario_print_config(r):
    code, text, _ = r.run(1, "print-config", expect=0)
    check(text.startswith("seed: 0  # [default] "), text)
    for key in ["seed:", "model:", "data:", "optimizer:", "scheduler:", "training:",
                "distributed:", "project:", "bucket_cap_mb: 25", "mixed_precision: \"no\"",
                "timeout_s: 600", "resume: none"]:
        check(key in text, f"print-config lacks {key}:\n{text}")
    path = os.path.join(r.work, "printed.yaml")
    with open(path, "w") as f:
        f.write(text)
    r.run(2, "--config", path, sets=SYNTHETIC + [f"project.dir={r.project('printed')}",
                                                 "training.max_steps=5"], expect=0)
    # The effective config: the file's values with file:line:column, --set after it.
    config = os.path.join(r.work, "mine.yaml")
    with open(config, "w") as f:
        f.write("training:\n  epochs: 3\n  log_every: 7\noptimizer:\n  lr: 0.01\n")
    code, text, _ = r.run(2, "--config", config, "--set", "training.epochs=9", "print-config", expect=0)
    lines = text.splitlines()
    for expected in [
            "seed: 0  # [default] seeds model init (same on every rank), shuffling and dropout",
            "  lr: 0.01  # [mine.yaml:5:7] base learning rate".replace("mine.yaml", config),
            "  epochs: 9  # [--set training.epochs=9] passes over the training set",
            "  log_every: 7  # [mine.yaml:3:14] steps between metrics lines".replace("mine.yaml", config),
            "  overwrite: false  # [default] a fresh run removes an earlier run's metrics, checkpoints "
            "and model first"]:
        check(expected in lines, f"print-config lacks the line {expected!r}:\n{text}")
    check(text.count("seed: 0") == 1, "printed once at 2 ranks:\n" + text)
    code, out, _ = r.run(1, "--set", "training.epochs=0", "print-config", expect=2)
    check("--set training.epochs=0: training.epochs" in out, out)


def project_version(source):
    with open(os.path.join(source, "CMakeLists.txt")) as f:
        for line in f:
            if line.startswith("project(mpitrain VERSION "):
                return line.split()[2]
    raise Failure("no project(mpitrain VERSION ...) in CMakeLists.txt")


def scenario_version_usage(r):
    version = project_version(r.source)
    for ranks in (1, 2):
        code, out, _ = r.run(ranks, "--version", expect=0)
        check(out == f"mpitrain {version}\n", f"--version printed {out!r}")
        code, out, seconds = r.run(ranks, expect=2)
        check(out.startswith("mpitrain trainer: data-parallel training") and
              out.count("Usage: trainer [OPTIONS] [SUBCOMMAND]") == 1 and "print-config" in out, out)
        check(not os.path.exists(os.path.join(r.work, "runs")), "trainer without arguments trained")


def scenario_log_level(r):
    base = SYNTHETIC + ["training.max_steps=3"]
    code, out, _ = r.run(2, sets=base + [f"project.dir={r.project('info')}"], expect=0)
    check("[rank 0] mpitrain: 2 ranks on 1 node" in out and "[rank 0] done after 3 steps" in out, out)
    check("[rank 0] run " not in out, "debug lines are hidden at info:\n" + out)
    env = dict(os.environ, MPITRAIN_LOG_LEVEL="error")
    p = subprocess.run(r.command(2, sets=base + [f"project.dir={r.project('error')}"]), cwd=r.work,
                       capture_output=True, text=True, env=env)
    check(p.returncode == 0 and "[rank" not in p.stdout + p.stderr, p.stdout + p.stderr)
    check("epoch 0 step 3/3" in p.stdout, "the progress is not a log line:\n" + p.stdout)
    env["MPITRAIN_LOG_LEVEL"] = "debug"
    p = subprocess.run(r.command(2, sets=base + [f"project.dir={r.project('debug')}"]), cwd=r.work,
                       capture_output=True, text=True, env=env)
    header = read_metrics(r.project("debug"), everything=True)[0]
    check(p.returncode == 0 and f"[rank 0] run {header['run_id']} started {header['start_time']}, "
          f"config {header['config_hash']}" in p.stdout, p.stdout + p.stderr)
    env["MPITRAIN_LOG_LEVEL"] = "loud"
    p = subprocess.run(r.command(2, "--version"), cwd=r.work, capture_output=True, text=True, env=env)
    out = p.stdout + p.stderr
    check(p.returncode == 2 and out.count("[rank 0] trainer: config error: MPITRAIN_LOG_LEVEL: expected one "
                                          "of error, warn, info, debug, got 'loud'") == 1, out)


def scenario_runs(r):
    project = r.project("runs")
    base = SYNTHETIC + [f"project.dir={project}", "training.max_steps=30", "training.log_every=10"]
    r.run(2, sets=base, expect=0)
    rows = read_metrics(project, everything=True)
    check(list(rows[0]) == HEADER_KEYS and rows[0]["world_size"] == 2 and
          rows[0]["mpitrain_version"] == project_version(r.source) and len(rows[0]["config_hash"]) == 32, f"{rows[0]}")
    check(sum("header" in row for row in rows) == 1 and not any("resumed" in row for row in rows), f"{rows}")
    walls = [row["wall_time"] for row in rows]
    check(walls == sorted(walls) and abs(walls[-1] - time.time()) < 600, f"wall times {walls}")
    # The same run again: refused before anything is written, once, with the three ways out.
    before = open(os.path.join(project, "metrics.jsonl")).read()
    code, out, _ = r.run(2, sets=base, expect=2)
    expected = (f"[rank 0] trainer: config error: --set project.dir={project}: project.dir: {project} holds another "
                "run (metrics.jsonl, checkpoints/checkpoint_0); a fresh run would mix with it. To continue that "
                "run, set project.resume: latest; to start a new one, choose another project.dir, or set "
                "project.overwrite: true to remove that run's metrics.jsonl, checkpoints and model files first")
    check(out.count(expected) == 1, out)
    check(open(os.path.join(project, "metrics.jsonl")).read() == before, "the refused run wrote metrics")
    # project.overwrite with a config error found at start (a batch no rank can fill): the
    # run is refused before anything is removed.
    code, out, _ = r.run(2, sets=base + ["project.overwrite=true", "data.drop_last=true",
                                         "data.batch_size=100000"], expect=2)
    check("gives some rank no batch per epoch" in out and "removed the earlier run" not in out, out)
    check(open(os.path.join(project, "metrics.jsonl")).read() == before, "the refused run removed metrics")
    check(checkpoint_names(project) == ["checkpoint_0"], f"{checkpoint_names(project)}")
    # With even_batches false and more ranks than examples, one rank gets no batch: every
    # rank refuses the run (it used to wait in prepare until the timeout, the cause unsaid).
    code, out, seconds = r.run(2, sets=SYNTHETIC + [
        f"project.dir={r.project('no_batch')}", "data.synthetic.train_size=1", "data.even_batches=false"],
        expect=2)
    check(out.count("gives some rank no batch per epoch") == 1 and seconds < 60, out)
    # project.overwrite: the earlier run is removed, this one starts over.
    code, out, _ = r.run(2, sets=base + ["project.overwrite=true"], expect=0)
    check("project.overwrite: removed the earlier run's metrics.jsonl, checkpoints, model.h5 from" in out, out)
    rows = read_metrics(project, everything=True)
    check(sum("header" in row for row in rows) == 1 and rows[0]["run_id"] != json.loads(before.split("\n")[0])["run_id"],
          f"{rows}")
    check(checkpoint_names(project) == ["checkpoint_0"], f"{checkpoint_names(project)}")
    # A run that crashes after logging step 50 of a checkpoint saved at step 40; the resumed
    # run marks step 40, so readers drop the crashed run's step 50.
    code, out, _ = r.run(2, "--inject-fault", "throw@0:55", sets=base + [
        "training.max_steps=80", "project.save_every_steps=40", "project.resume=latest"], timeout=120)
    check(code != 0, out)
    code, out, _ = r.run(2, sets=base + ["training.max_steps=80", "project.resume=latest"], expect=0)
    check("resumed at step 40" in out, out)
    rows = read_metrics(project, everything=True)
    markers = [i for i, row in enumerate(rows) if "resumed" in row]
    check(len(markers) == 2, f"one marker per resumed run: {rows}")
    marker = rows[markers[1]]
    check(list(marker) == RESUME_KEYS and marker["step"] == 40 and
          marker["checkpoint"] == os.path.join(project, "checkpoints", "checkpoint_1"), f"{marker}")
    check("header" in rows[markers[1] - 1], "the marker follows its run's header")
    crashed = [row["step"] for row in rows[markers[0]:markers[1]] if "step" in row and "resumed" not in row]
    check(crashed[-1] == 50, f"the crashed run logged up to step 50: {crashed}")
    after = [row["step"] for row in rows[markers[1] + 1:] if "eval" not in row]
    check(after == [50, 60, 70, 80], f"the resumed run logs from step 50 again: {after}")


def scenario_env_check(r):
    code, out, _ = r.run(2, "env", expect=0)
    for word in ["mpitrain", "MPI", "HDF5", "BLAS", "compiler", "ranks        2"]:
        check(word in out, out)
    code, out, _ = r.run(2, "check", expect=0)
    check("OK: 0 wrong results" in out and "vs_mpi" in out, out)


def scenario_fashion_mnist(r):
    project = r.project("fashion")
    config = os.path.join(r.source, "configs", "fashion_mnist_mlp.yaml")
    code, out, seconds = r.run(2, "--config", config, sets=[f"project.dir={project}"],
                               timeout=900, expect=0)
    evals = [row for row in read_metrics(project) if "eval" in row]
    check(len(evals) == 5 and evals[-1]["samples"] == 10000, f"{evals}")
    accuracy = evals[-1]["accuracy"]
    print(f"Fashion-MNIST, 5 epochs at 2 ranks: test accuracy {100 * accuracy:.2f}% in {seconds:.1f} s")
    check(accuracy >= 0.88, f"test accuracy {accuracy:.4f} < 0.88\n{out}")


def readme_block(source, name):
    """Returns the fenced code block between <!-- NAME: begin --> and <!-- NAME: end -->."""
    with open(os.path.join(source, "README.md")) as f:
        text = f.read()
    begin = text.index(f"<!-- {name}: begin -->")
    end = text.index(f"<!-- {name}: end -->")
    block = text[begin:end].split("\n")
    fences = [i for i, line in enumerate(block) if line.startswith("```")]
    check(len(fences) == 2, f"README block {name} needs one fenced block")
    return "\n".join(block[fences[0] + 1:fences[1]]) + "\n"


def scenario_readme(r):
    code, printed, _ = r.run(1, "print-config", expect=0)
    documented = readme_block(r.source, "print-config")
    check(documented == printed, "README.md's configuration reference differs from "
          "`trainer print-config`; paste the new output between the print-config markers")
    # The snippet reads runs/fashion_mnist_mlp/model.h5 relative to the current folder: a
    # short run of the same model shape on synthetic data puts one there.
    r.run(2, sets=["data.kind=synthetic", "data.synthetic.train_size=512", "data.synthetic.test_size=0",
                   "training.max_steps=3", "project.dir=runs/fashion_mnist_mlp"], expect=0)
    snippet = readme_block(r.source, "load-into-torch")
    loading, torch_part = snippet.split("import torch", 1)
    loading += "print(sorted((k, v.shape, str(v.dtype)) for k, v in weights.items()))\n"
    p = subprocess.run(["/usr/bin/python3", "-c", loading], cwd=r.work, capture_output=True, text=True)
    check(p.returncode == 0, f"the snippet failed:\n{p.stdout}{p.stderr}")
    expected = str(sorted([("0.bias", (256,), "float32"), ("0.weight", (256, 784), "float32"),
                           ("2.bias", (256,), "float32"), ("2.weight", (256, 256), "float32"),
                           ("4.bias", (10,), "float32"), ("4.weight", (10, 256), "float32")]))
    check(p.stdout.strip() == expected, f"weights read: {p.stdout}\nexpected {expected}")
    have_torch = subprocess.run(["/usr/bin/python3", "-c", "import torch"], capture_output=True).returncode == 0
    if have_torch:
        p = subprocess.run(["/usr/bin/python3", "-c", snippet + "print('loaded', sum(v.numel() for v in model.state_dict().values()))"],
                           cwd=r.work, capture_output=True, text=True)
        check(p.returncode == 0 and "loaded 269322" in p.stdout, f"torch part:\n{p.stdout}{p.stderr}")
        print("ran the whole snippet, PyTorch included")
    else:
        print("python3-torch is not installed (scripts/install-deps.sh installs it): ran the h5py part")


def memory_line(out, stage):
    m = re.search(r"memory per rank \(distributed\.zero_stage %d\): parameters ([0-9.]+) MiB, "
                  r"gradients ([0-9.]+) MiB, optimizer state ([0-9.]+) MiB, communication buffers "
                  r"([0-9.]+) MiB" % stage, out)
    check(m is not None and out.count("memory per rank") == 1, f"no memory line:\n{out}")
    return [float(v) for v in m.groups()]


def scenario_zero_stage(r):
    steps = ["training.max_steps=20", "project.save_every_steps=10"]
    plain, zero = r.project("stage0"), r.project("stage1")
    _, out0, _ = r.run(2, sets=SYNTHETIC + steps + [f"project.dir={plain}"], expect=0)
    _, out1, _ = r.run(2, sets=SYNTHETIC + steps + [f"project.dir={zero}", "distributed.zero_stage=1"],
                       expect=0)
    m0, m1 = memory_line(out0, 0), memory_line(out1, 1)
    check(m0[0] == m1[0] and m0[2] > 0 and abs(m1[2] - m0[2] / 2) <= 0.01, f"{m0} vs {m1}")
    import h5py
    with h5py.File(os.path.join(plain, "model.h5")) as a, h5py.File(os.path.join(zero, "model.h5")) as b:
        for name in ("0.weight", "0.bias", "4.weight"):
            check((a[name][()] == b[name][()]).all(), f"{name} differs between stage 0 and stage 1")
    with open(os.path.join(zero, "checkpoints", "checkpoint_1", "MANIFEST.json")) as f:
        check(json.load(f).get("zero_stage") == 1, "the stage 1 manifest lacks zero_stage 1")
    with open(os.path.join(plain, "checkpoints", "checkpoint_1", "MANIFEST.json")) as f:
        check("zero_stage" not in json.load(f), "a stage 0 manifest names zero_stage")
    _, out, _ = r.run(1, sets=SYNTHETIC + [f"project.dir={zero}", "project.resume=latest",
                                           "training.max_steps=30"], expect=0)
    check("done after 30 steps" in out, out)


# Layouts of 4 ranks on the simulated cluster (scripts/sim_cluster.sh: host names node1..node4),
# as mpiexec --host lists: nodes x ranks per node.
LAYOUTS = {"2x2": "node1:2,node2:2", "1x4": "node1:4", "4x1": "node1:1,node2:1,node3:1,node4:1"}


def model_weights(project):
    """Returns {name: bytes} of the project's model.h5 (bitwise comparisons)."""
    with h5py.File(os.path.join(project, "model.h5"), "r") as f:
        return {name: f[name][()].tobytes() for name in f}


def scenario_multinode_env_check(r):
    """Run on node1 of a simulated cluster (CTest multinode.trainer.env_check): `trainer env`
    and `trainer check` at 2 nodes x 2 ranks."""
    code, out, _ = r.run(4, "env", hosts=LAYOUTS["2x2"], expect=0)
    check("ranks        4 on 2 nodes (node1, node2); this node: 2 ranks" in out, out)
    code, out, _ = r.run(4, "check", hosts=LAYOUTS["2x2"], expect=0)
    check("# trainer check: 4 ranks on 2 nodes" in out and "OK: 0 wrong results" in out, out)
    check("allreduce sum ring f32" in out and "allreduce max reduce_bcast f16" in out, out)
    check("not run: the ranks span 2 nodes and shm runs within one node" in out, out)


def scenario_resume_world_size(r):
    """Saved at 2 ranks with a per-rank batch_size, resumed at 1 and at 3 ranks: the global
    batch changes, so the rest of the run is counted again at the new number of batches per
    epoch. The run ends with its last epoch, evaluates after each one, and the linear schedule
    is resized to the new length (it used to keep the saved one: at 1 rank the lr reached 0
    halfway, at 3 ranks the run stopped a batch short and skipped the last evaluation)."""
    first = r.project("saved_at_2")
    run = SYNTHETIC + ["training.epochs=2", "training.log_every=1", "scheduler.kind=linear",
                       "optimizer.lr=0.01"]
    code, out, _ = r.run(2, "--inject-fault", "throw@0:55",
                         sets=run + [f"project.dir={first}", "project.save_every_steps=50"], timeout=120)
    check(code != 0 and checkpoint_names(first) == ["checkpoint_0"], out)
    # Step 50 at 2 ranks is 50 global batches of 32 = 1600 examples into epoch 0, and the
    # saved schedule spans 2 epochs of 94 steps. At 1 rank an epoch is 188 batches of 16 and
    # the run resumes at batch 100; at 3 ranks 63 batches of 48, resuming at batch 33.
    for ranks, batches, position in ((1, 188, 100), (3, 63, 33)):
        project = r.project(f"resumed_at_{ranks}")
        shutil.copytree(first, project)
        _, out, _ = r.run(ranks, sets=run + [f"project.dir={project}", "project.resume=latest"], expect=0)
        end = 50 + (batches - position) + batches
        check(f"resumed at step 50 (epoch 0, batch {position} of the epoch)" in out, out)
        check(f"the run ends at step {end}, counted from the resumed position at {batches} batches per rank "
              f"and epoch (not {2 * batches}" in out, out)
        check(f"scheduler: the checkpoint's schedule spans 188 steps and this run {end}: resized to {end}" in out,
              out)
        check(f"done after {end} steps ({end - 50} in this run)" in out, out)
        rows = read_metrics(project, everything=True)
        resumed = [i for i, row in enumerate(rows) if "resumed" in row][-1]
        train = [row for row in rows[resumed + 1:] if "eval" not in row]
        evals = [row["epoch"] for row in rows[resumed + 1:] if "eval" in row]
        check([row["step"] for row in train] == list(range(51, end + 1)), f"{[row['step'] for row in train]}")
        check(evals == [0, 1], f"evaluations after epochs {evals}")
        # The lr a step used: 0.01 * (end - (step - 1)) / end, down to 0.01 / end at the last.
        for row in train:
            want = 0.01 * (end - (row["step"] - 1)) / end
            check(math.isclose(row["lr"], want, rel_tol=1e-6), f"step {row['step']}: lr {row['lr']}, want {want}")
        print(f"resumed at {ranks} rank(s): steps 51..{end}, evaluations after epochs 0 and 1, "
              f"lr {train[0]['lr']:.6g} .. {train[-1]['lr']:.6g}")


def scenario_multinode_resume(r):
    """Run on node1 of a simulated cluster of 4 nodes (CTest multinode.trainer.resume_layouts
    does, through sim_cluster.sh run): trains at 2 nodes x 2 ranks, is stopped with SIGUSR1 to
    mpirun, and resumes from that checkpoint at 4 nodes x 1 rank and at 1 node x 4 ranks.
    Across nodes the resumed weights equal, bit for bit, those of one uninterrupted 2 x 2 run.
    On one node they agree to rounding only: there shm sums each gradient in rank order, across
    nodes Open MPI's allreduce sums in another order, so a few elements differ in the last bit
    (reported by the test; a bitwise check would fail)."""
    first = r.project("first")
    run = SYNTHETIC + ["training.epochs=1000", "training.log_every=10", "training.eval=false"]
    out = stopped_by_signal(r, r.command(4, sets=run + [f"project.dir={first}"], hosts=LAYOUTS["2x2"]),
                            lambda p: p.send_signal(signal.SIGUSR1))  # forwarded to every node
    check("4 ranks on 2 nodes" in out, f"the trainer must see 2 nodes:\n{out}")
    saved = json.load(open(latest_manifest(first)))["step"]
    end = saved + 12
    weights = {}
    for layout in ("4x1", "1x4"):
        project = r.project(f"resumed_{layout}")
        shutil.copytree(first, project)  # the same checkpoint, resumed once per layout
        _, out, _ = r.run(4, sets=run + [f"project.dir={project}", "project.resume=latest",
                                         f"training.max_steps={end}"],
                          hosts=LAYOUTS[layout], expect=0)
        check(f"resumed at step {saved}" in out and f"done after {end} steps" in out, out)
        nodes = "1 node" if layout == "1x4" else "4 nodes"
        check(f"4 ranks on {nodes}" in out, f"the trainer must see {nodes}:\n{out}")
        weights[layout] = model_weights(r.project(f"resumed_{layout}"))
    straight = r.project("straight")
    r.run(4, sets=run + [f"project.dir={straight}", f"training.max_steps={end}"],
          hosts=LAYOUTS["2x2"], expect=0)
    check(model_weights(straight) == weights["4x1"],
          f"stopped at step {saved} at 2 x 2 and resumed at 4 x 1 to step {end}: the weights "
          f"differ from those of one uninterrupted run at 2 x 2")
    differing, worst = 0, 0.0
    for name, data in weights["1x4"].items():
        a = numpy.frombuffer(data, dtype=numpy.float32)
        b = numpy.frombuffer(weights["4x1"][name], dtype=numpy.float32)
        differing += int((a != b).sum())
        worst = max(worst, float((numpy.abs(a - b) / numpy.maximum(numpy.abs(a), 1e-3)).max()))
    check(worst <= 1e-5, f"resumed at 1 x 4 and at 4 x 1: relative difference {worst:.3g}")
    print(f"stopped at step {saved} at 2x2; resumed to step {end} at 4x1: bitwise equal to an "
          f"uninterrupted 2x2 run; at 1x4: {differing} of the weights differ, by at most "
          f"{worst:.3g} (relative: the shm allreduce's summation order)")


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
