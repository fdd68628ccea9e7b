#!/usr/bin/python3
"""End-to-end tests of the trainer's defences against runs that hurt each other or the user's
files, and against bad inputs found before training (issue 17 items 1 and 4-9; DESIGN.md
sections 5 and 6), each a real `mpiexec` job at 2 ranks, in the style of trainer_cli_test.py
(whose runner and helpers they use):

  trainer_faults_test.py --trainer EXE --mpiexec MPIEXEC --work DIR --source SRC SCENARIO

Scenarios:
  run_lock         a second run on a project.dir that a live run holds exits 2 naming the
                   holder (pid, host, since), before touching anything: the first run's
                   checkpoints and its in-progress save stay, and the first run ends well;
                   the next run, holding the lock, removes the abandoned save
  skipped_steps    training.max_consecutive_skipped_steps ends a run whose every step is
                   skipped (exit 1, once); a run that skipped steps says so at the end
  classes          data.classes: a label outside [0, classes) is a config error naming the
                   file and the example; the model has data.classes outputs
  start_checks     --config naming a folder, a missing or malformed data file, absurd
                   model.hidden or data.batch_size: exit 2, one message naming the key, no
                   MPI_ABORT banner
  resume_manifest  project.resume: PATH of a folder without MANIFEST.json: exit 2 naming it,
                   and the folder is kept; a PATH that does not exist or is a file: exit 2
                   before anything is written
  resume_fallback  resume: latest past a newest checkpoint that fails verification, with a
                   warning naming it; it is kept and numbered past
  write_access     a project.dir that cannot be written: exit 2 naming it, before training
Each failure prints the command and its output.
"""
import argparse
import os
import re
import shutil
import signal
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from trainer_cli_test import (SYNTHETIC, Failure, Runner, check, checkpoint_names,  # noqa: E402
                              rank_pids, read_metrics)

BANNER = "MPI_ABORT"


RANK0 = "[rank 0] "


def error_lines(out, prefix):
    """Returns the lines of `out` that rank 0 printed starting with `prefix`, without the
    "[rank 0] " every line of the trainer's log starts with."""
    return [line[len(RANK0):] for line in out.splitlines() if line.startswith(RANK0 + prefix)]


def check_once(out, expected):
    """Checks that the exact line `expected` is printed once, with no MPI_ABORT banner."""
    check(error_lines(out, "trainer: ") == [expected],
          f"expected exactly one line\n{expected}\ngot:\n{out}")
    check(BANNER not in out, f"no MPI_ABORT banner expected:\n{out}")


def check_one_match(out, pattern):
    """Checks that one line starts with "trainer: ", that it matches `pattern` whole, and
    that no MPI_ABORT banner came."""
    lines = error_lines(out, "trainer: ")
    check(len(lines) == 1 and re.fullmatch(pattern, lines[0]), f"expected one line matching\n{pattern}\n{out}")
    check(BANNER not in out, f"no MPI_ABORT banner expected:\n{out}")


class Background:
    """A trainer job whose output a thread collects, line by line, so the job never blocks
    on a full pipe; wait_for(text) returns once a line contains `text`."""

    def __init__(self, r, sets):
        self.proc = subprocess.Popen(r.command(2, sets=sets), cwd=r.work, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True)
        self.lines = []
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        for line in self.proc.stdout:
            with self.changed:
                self.lines.append(line)
                self.changed.notify_all()
        with self.changed:
            self.lines.append(None)  # end of output
            self.changed.notify_all()

    def wait_for(self, text, timeout=120):
        def seen():
            return any(line is None or text in line for line in self.lines)
        with self.changed:
            check(self.changed.wait_for(seen, timeout=timeout), f"no line with {text!r}:\n{self.output()}")
            check(None not in self.lines or any(line and text in line for line in self.lines),
                  f"the job ended before printing {text!r}:\n{self.output()}")

    def output(self):
        return "".join(line for line in self.lines if line)

    def finish(self, timeout=120):
        code = self.proc.wait(timeout=timeout)
        self.thread.join(timeout=timeout)
        return code, self.output()


def read_lock(project):
    """Returns the lock file's fields: {"pid": ..., "host": ..., "since": ...}."""
    path = os.path.join(project, ".mpitrain.lock")
    check(os.path.isfile(path), f"a running trainer holds no lock file {path}")
    with open(path) as f:
        return dict(line.split(" ", 1) for line in f.read().splitlines())


def manifests(project):
    """Returns {checkpoint folder: MANIFEST.json bytes} of the committed checkpoints. A save in
    progress (NAME.tmp-HEX) is left out although its manifest may be written already: the live
    run renames it into place at any moment."""
    folder = os.path.join(project, "checkpoints")
    out = {}
    for name in os.listdir(folder):
        if ".tmp-" in name:
            continue
        path = os.path.join(folder, name, "MANIFEST.json")
        if os.path.isfile(path):
            with open(path, "rb") as f:
                out[name] = f.read()
    return out


def scenario_run_lock(r):
    project = r.project("lock")
    run = SYNTHETIC + [f"project.dir={project}", "training.epochs=100000", "training.log_every=100000",
                       "training.eval=false", "project.save_every_steps=200"]
    first = Background(r, run)
    try:
        # Once the first run saved, it holds the lock and has written who it is.
        first.wait_for("step 200: saved")
        holder = read_lock(project)
        check(int(holder["pid"]) in rank_pids(first.proc.pid), f"lock file {holder}")
        # What a live run owns: its committed checkpoints, and a save in progress.
        in_progress = os.path.join(project, "checkpoints", "checkpoint_99.tmp-0123456789abcdef")
        os.makedirs(in_progress)
        before = manifests(project)
        code, out, _ = r.run(2, sets=run, expect=2)
        check_once(out, f"trainer: config error: --set project.dir={project}: project.dir: {project} is in use "
                        f"by another run (pid {holder['pid']} on {holder['host']} since {holder['since']}; "
                        f"lock file {project}/.mpitrain.lock); wait for it to end or choose another project.dir")
        check("mpitrain:" not in out, f"the refused run must not start:\n{out}")
        check(os.path.isdir(in_progress), "the live run's in-progress save was removed")
        after = manifests(project)
        check(all(after.get(name) == data for name, data in before.items()),
              f"the first run's checkpoints changed: {sorted(before)} -> {sorted(after)}")
        first.proc.send_signal(signal.SIGUSR1)
        code, out = first.finish()
        check(code == 0 and "stop requested" in out, f"the first run must end well, exit {code}:\n{out}")
        check("warning" not in out and "error" not in out, out)
    finally:
        if first.proc.poll() is None:  # a failed check: end the job (mpirun ends its ranks)
            first.proc.terminate()
            try:
                first.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                first.proc.kill()
                first.proc.wait()
    # Nobody holds the lock now: the next run takes it and removes the abandoned save.
    code, out, _ = r.run(2, sets=run + ["project.resume=latest", "training.max_steps=1"], expect=0)
    check(f"removed an abandoned checkpoint folder: {in_progress}" in out, out)
    check(not os.path.exists(in_progress), f"{in_progress} is still there")


def nan_file(r):
    """Returns an HDF5 file whose features are all NaN: every gradient is non-finite."""
    import h5py
    import numpy as np
    path = os.path.join(r.work, "nan.h5")
    with h5py.File(path, "w") as f:
        f["x"] = np.full((200, 4), np.nan, np.float32)
        f["y"] = np.arange(200) % 3
    return path


def hdf5_run(path, project):
    return ["data.kind=hdf5", f"data.train.file={path}", "data.train.features=x", "data.train.labels=y",
            "data.test.file=null", "data.batch_size=8", "model.hidden=[8]", f"project.dir={project}"]


def scenario_skipped_steps(r):
    run = hdf5_run(nan_file(r), r.project("skip")) + ["training.nan_policy=skip"]
    # 200 examples, 8 per rank on 2 ranks: 13 steps per epoch, every one skipped.
    code, out, _ = r.run(2, sets=run + ["training.epochs=100", "training.max_consecutive_skipped_steps=5"],
                         expect=1)
    check_once(out, "trainer: error: --set training.max_consecutive_skipped_steps=5: "
                    "training.max_consecutive_skipped_steps: 5 optimizer steps in a row were skipped for "
                    "inf/NaN gradients (steps 1 to 5, training.nan_policy: skip, training.mixed_precision: no); "
                    "stopping the run")
    # The default, 100, ends a run that would skip forever.
    code, out, _ = r.run(2, sets=run + ["training.epochs=100000", f"project.dir={r.project('skip2')}"], expect=1)
    check_once(out, "trainer: error: config: training.max_consecutive_skipped_steps: 100 optimizer steps in a "
                    "row were skipped for inf/NaN gradients (steps 1 to 100, training.nan_policy: skip, "
                    "training.mixed_precision: no); stopping the run")
    # 0: no limit; the run ends, and says how many steps it skipped.
    code, out, _ = r.run(2, sets=run + ["training.max_consecutive_skipped_steps=0", "training.max_steps=7",
                                        f"project.dir={r.project('skip3')}"], expect=0)
    check("warning: 7 of 7 optimizer steps were skipped for inf/NaN gradients (training.nan_policy: skip)\n"
          in out and "done after 7 steps" in out, out)


def scenario_classes(r):
    import h5py
    import numpy as np
    path = os.path.join(r.work, "labels.h5")
    with h5py.File(path, "w") as f:
        f["x"] = np.random.default_rng(0).random((200, 4), dtype=np.float32)
        y = np.arange(200) % 10
        y[123] = 57
        f["y"] = y
    config = os.path.join(r.work, "classes.yaml")
    with open(config, "w") as f:
        f.write("data:\n  classes: 10\n")
    run = hdf5_run(path, r.project("classes"))
    code, out, _ = r.run(2, "--config", config, sets=run, expect=2)
    check_once(out, f"trainer: config error: --set data.train.file={path}: data.train.file: HDF5 file '{path}', "
                    "dataset 'y': label 57 of example 123 is out of range [0, 10)")
    check(not os.path.exists(os.path.join(r.project("classes"), "metrics.jsonl")), "the run must not train")
    # A label within data.classes trains a model with data.classes outputs.
    with h5py.File(path, "r+") as f:
        f["y"][123] = 3
    code, out, _ = r.run(2, sets=run + ["data.classes=12", "training.max_steps=2"], expect=0)
    with h5py.File(os.path.join(r.project("classes"), "model.h5"), "r") as f:
        check(f["2.weight"].shape == (12, 8), f"model.h5: {f['2.weight'].shape}")
    code, out, _ = r.run(2, sets=["data.classes=1"], expect=2)
    check_once(out, "trainer: config error: --set data.classes=1: data.classes: expected a value >= 2, got '1'")


def scenario_start_checks(r):
    code, out, _ = r.run(2, "--config", r.work, expect=2)
    check_once(out, f"trainer: config error: {r.work}: --config names a folder, not a config file")
    missing_config = os.path.join(r.work, "missing.yaml")
    code, out, _ = r.run(2, "--config", missing_config, expect=2)
    check_once(out, f"trainer: config error: {missing_config}: --config: cannot open the config file")
    missing = os.path.join(r.work, "missing-images.gz")
    code, out, _ = r.run(2, sets=[f"data.train.images={missing}"], expect=2)
    check_once(out, f"trainer: config error: --set data.train.images={missing}: data.train.images: IDX images "
                    f"file '{missing}': cannot open: No such file or directory")
    malformed = os.path.join(r.work, "malformed.h5")
    with open(malformed, "w") as f:
        f.write("not an HDF5 file\n")
    code, out, _ = r.run(2, sets=["data.kind=hdf5", f"data.train.file={malformed}", "data.train.features=x",
                                  "data.train.labels=y", "data.test.file=null"], expect=2)
    lines = error_lines(out, "trainer: ")
    check(len(lines) == 1 and lines[0].startswith(
        f"trainer: config error: --set data.train.file={malformed}: data.train.file: HDF5 file '{malformed}'"),
        out)
    check(BANNER not in out, out)
    available = r"(\d+) bytes \(\d+\.\d GiB\) available"
    # features 20, classes 5: (20 + 1) * 1e8 + (1e8 + 1) * 5 parameters, 5 copies of 4 bytes
    # (adamw), plus a batch of 16: (20 + 1 + 3 * (1e8 + 5)) * 16 * 4 bytes, per rank.
    code, out, _ = r.run(2, sets=SYNTHETIC + ["model.hidden=[100000000]"], expect=2)
    check_one_match(out, 
        r"trainer: config error: --set model.hidden=\[100000000\]: model.hidden: the model's 2600000005 "
        r"parameters need 52000000100 bytes \(48\.4 GiB\) for weights, gradients, buckets and optimizer "
        r"state per rank; 2 ranks on this node need 142400004808 bytes \(132\.6 GiB\), more than the "
        + available)
    code, out, _ = r.run(2, sets=SYNTHETIC + ["data.batch_size=100000000000"], expect=2)
    check_one_match(out, 
        r"trainer: config error: --set data.batch_size=100000000000: data.batch_size: a batch of 100000000000 "
        r"needs 72000000000000 bytes \(67055\.2 GiB\) per rank; 2 ranks on this node need 144000000051400 "
        r"bytes \(134110\.5 GiB\), more than the " + available)


def scenario_resume_manifest(r):
    project = r.project("manifest")
    base = SYNTHETIC + [f"project.dir={project}", "training.max_steps=100"]
    r.run(2, sets=base + ["project.save_every_steps=40"], expect=0)
    folder = os.path.join(project, "checkpoints", "checkpoint_1")
    os.remove(os.path.join(folder, "MANIFEST.json"))
    kept = sorted(os.listdir(folder))
    code, out, _ = r.run(2, sets=base + [f"project.resume={folder}"], expect=2)
    check_once(out, f"trainer: config error: --set project.resume={folder}: project.resume: {folder} holds no "
                    "MANIFEST.json: it is not a committed checkpoint, so this run does not start (the folder is "
                    "left as it is); name a committed checkpoint, or resume from latest")
    check(os.path.isdir(folder) and sorted(os.listdir(folder)) == kept, f"{folder} was changed")
    # A path that does not exist, or a file: refused at start (exit 2), before the data is
    # loaded, and nothing is written (no metrics.jsonl in a new project.dir).
    fresh = r.project("never_written")
    for path, why in ((os.path.join(project, "checkpoints", "checkpoint_9"), "does not exist"),
                      (os.path.join(project, "metrics.jsonl"), "is a file, not a checkpoint folder")):
        code, out, _ = r.run(2, sets=SYNTHETIC + [f"project.dir={fresh}", f"project.resume={path}"], expect=2)
        check_once(out, f"trainer: config error: --set project.resume={path}: project.resume: {path} {why}; "
                        "name a committed checkpoint folder, or resume from latest")
        check("mpitrain:" not in out and not os.path.exists(os.path.join(fresh, "metrics.jsonl")), out)


def scenario_resume_fallback(r):
    project = r.project("fallback")
    base = SYNTHETIC + [f"project.dir={project}"]
    r.run(2, sets=base + ["project.save_every_steps=40"], expect=0)
    # Saved at steps 40, 80 and at the end of the epoch (94); the newest is damaged.
    check(checkpoint_names(project) == ["checkpoint_0", "checkpoint_1", "checkpoint_2"],
          f"{checkpoint_names(project)}")
    damaged = os.path.join(project, "checkpoints", "checkpoint_2")
    state = os.path.join(damaged, "state.h5")
    with open(state, "r+b") as f:
        f.seek(os.path.getsize(state) // 2)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 1]))
    code, out, _ = r.run(2, sets=base + ["project.resume=latest"], expect=0)
    # One warning, naming the damaged checkpoint and the next save's number; none says that
    # save will fail (it used to, though the run numbers past the damaged one).
    warnings = error_lines(out, "warning: ")
    loaded = os.path.join(project, "checkpoints", "checkpoint_1")
    check(len(warnings) == 1 and warnings[0].startswith(
              f"warning: Engine::load_state('{loaded}'): newer checkpoints were skipped and are kept: "
              "checkpoint_2 fails verification (")
          and "state.h5" in warnings[0] and warnings[0].endswith("; the next automatic save is checkpoint_3"),
          out)
    check("resumed at step 80" in out and "done after 94 steps (14 in this run)" in out, out)
    # The damaged one is kept; the run saved after it, not over it.
    check(checkpoint_names(project) == ["checkpoint_0", "checkpoint_1", "checkpoint_2", "checkpoint_3"],
          f"{checkpoint_names(project)}")
    code, out, _ = r.run(1, "checkpoints", "verify", os.path.join(project, "checkpoints", "checkpoint_3"),
                         expect=0)
    steps = [row["step"] for row in read_metrics(project) if "eval" not in row]
    check(steps[-1] == 94, f"{steps}")


def scenario_write_access(r):
    project = os.path.join(r.work, "read-only")
    os.makedirs(project)
    os.chmod(project, 0o555)
    cmd = r.command(2, sets=SYNTHETIC + [f"project.dir={project}"])
    if os.geteuid() == 0:
        # root writes anywhere: drop the capabilities that let it, for this job only.
        caps = "-dac_override,-dac_read_search"
        cmd = ["setpriv", "--bounding-set", caps, "--inh-caps", caps] + cmd
    p = subprocess.run(cmd, cwd=r.work, capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    check(p.returncode == 2, f"exit {p.returncode}, expected 2:\n{out}")
    check_once(out, f"trainer: config error: --set project.dir={project}: project.dir: cannot write to "
                    f"{project}: Permission denied")
    check("mpitrain:" not in out, f"the run must not start:\n{out}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trainer", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--source", required=True)
    p.add_argument("scenario")
    args = p.parse_args()
    if os.path.isdir(args.work):
        for root, dirs, _ in os.walk(args.work):  # a read-only folder of a previous run
            for d in dirs:
                os.chmod(os.path.join(root, d), 0o755)
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
