#!/usr/bin/python3
"""The trainer's progress line on a terminal (issue 18), a real `mpiexec` job at 2 ranks
whose stdout and stderr are a pseudo-terminal of COLUMNS columns:

  progress_terminal_test.py --trainer EXE --mpiexec MPIEXEC --work DIR --columns N [--resize-to M]

The output is fed to a terminal emulator (python3-pyte, scripts/install-deps.sh) and checked:
- every redraw of the line ("\\r" ... up to the next "\\r", newline or escape) is at most
  N - 1 characters, so it never wraps;
- at every moment the screen holds at most one progress line (training or evaluation):
  redraws replace it, messages appear above it, nothing stacks;
- the line shows each evaluation ("eval epoch E [") and returns to the training count;
- at the end, one progress line in its final state (total/total 100%) stands above the last
  message ("done after"), every message is whole, and no screen line is wider than N.
With --resize-to M the terminal shrinks to M columns once training is under way (as tmux
does when a pane is resized): the redraws after that fit in M - 1.
"""
import argparse
import errno
import fcntl
import os
import pty
import re
import select
import shutil
import struct
import subprocess
import sys
import termios
import time

import pyte

ROWS = 200
BAR = re.compile(r"^(eval )?epoch \d+ ")
SYNTHETIC = ["data.kind=synthetic", "data.synthetic.train_size=40000", "data.synthetic.test_size=20000",
             "data.synthetic.features=100", "data.synthetic.classes=5", "model.hidden=[256, 256]",
             "data.batch_size=32", "training.log_every=200"]


class Failure(Exception):
    pass


def check(condition, message):
    if not condition:
        raise Failure(message)


def set_size(fd, columns):
    fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", ROWS, columns, 0, 0))


def progress_lines(screen):
    return [line.rstrip() for line in screen.display if BAR.match(line)]


def run(args, epochs):
    """Runs the trainer on a pseudo-terminal; returns (exit code, raw output, screen, offset in
    the output from which redraws must fit the resized terminal or None, the most progress
    lines seen on the screen at once)."""
    master, slave = pty.openpty()
    set_size(slave, args.columns)
    cmd = [args.mpiexec, "-n", "2", "--oversubscribe", args.trainer]
    for s in SYNTHETIC + [f"training.epochs={epochs}", f"project.dir={os.path.join(args.work, 'run')}"]:
        cmd += ["--set", s]
    proc = subprocess.Popen(cmd, cwd=args.work, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave)
    os.close(slave)
    screen = pyte.Screen(args.columns, ROWS)
    stream = pyte.ByteStream(screen)
    raw = b""
    resized_at = None  # when the terminal was resized (monotonic seconds)
    settled_at = None  # output offset from half a second after the resize
    most = 0
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 120)
            check(ready, f"no output for 120 s:\n{raw.decode(errors='replace')}")
            try:
                chunk = os.read(master, 65536)
            except OSError as e:  # EIO: every writer closed the terminal
                if e.errno != errno.EIO:
                    raise
                break
            if not chunk:
                break
            if resized_at is not None and settled_at is None and time.monotonic() > resized_at + 0.5:
                settled_at = len(raw.decode(errors="replace"))
            raw += chunk
            stream.feed(chunk)
            most = max(most, len(progress_lines(screen)))
            if args.resize_to and resized_at is None and b"\repoch 0 [" in raw:
                # As a terminal does: it knows its new size, the program learns it next.
                set_size(master, args.resize_to)
                screen.resize(ROWS, args.resize_to)
                resized_at = time.monotonic()
    finally:
        os.close(master)
    code = proc.wait(timeout=120)
    if args.resize_to:
        check(settled_at is not None, "training ended within half a second of the resize: nothing to check")
    return code, raw.decode(errors="replace"), screen, settled_at, most


def redraws(text):
    """Returns (offset, text) of every redraw: from a "\\r" to the next "\\r", newline or escape."""
    return [(m.start(), m.group(1)) for m in re.finditer(r"\r([^\r\n\x1b]*)", text)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--trainer", required=True)
    p.add_argument("--mpiexec", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--columns", type=int, required=True)
    p.add_argument("--resize-to", type=int, default=0)
    args = p.parse_args()
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(args.work)
    epochs = 4 if args.resize_to else 2
    try:
        code, text, screen, settled_at, most = run(args, epochs)
        check(code == 0, f"exit code {code}\n{text}")
        drawn = [(at, line) for at, line in redraws(text) if line]
        check(drawn, f"no progress line was drawn on a terminal:\n{text!r}")
        for at, line in drawn:
            limit = args.columns - 1
            # Redraws already on their way when the terminal shrank may still be wide; those
            # output half a second later must fit the new width.
            if settled_at is not None and at >= settled_at:
                limit = args.resize_to - 1
            check(len(line) <= limit, f"a redraw of {len(line)} characters on {limit + 1} columns: {line!r}")
        check(most == 1, f"{most} progress lines on the screen at once:\n" + "\n".join(screen.display))
        for epoch in range(epochs):
            check(f"\reval epoch {epoch} [" in text, f"no evaluation line for epoch {epoch}")
            check(f"[rank 0] epoch {epoch}: test accuracy" in text, f"no evaluation message for epoch {epoch}")
        lines = [line.rstrip() for line in screen.display]
        bars = [i for i, line in enumerate(lines) if BAR.match(line)]
        done = [i for i, line in enumerate(lines) if line.startswith("[rank 0] done after")]
        check(len(bars) == 1 and len(done) == 1 and bars[0] < done[0],
              "the final progress line must stand above the last message:\n" + "\n".join(lines[:40]))
        final = lines[bars[0]]
        total = epochs * 625
        check(final.startswith(f"epoch {epochs - 1} [") and f"] {total}/{total} 100% ETA 0s loss " in final,
              f"the final line is not the final state: {final!r}")
        width = args.resize_to or args.columns
        check(all(len(line) <= width for line in lines), "a screen line is wider than the terminal")
        check(not any("eval epoch" in line for line in lines), "an evaluation line was left on the screen")
    except Failure as e:
        print(f"FAILED at {args.columns} columns: {e}")
        return 1
    print(f"passed at {args.columns} columns" + (f", resized to {args.resize_to}" if args.resize_to else ""))
    print("\n".join(line.rstrip() for line in screen.display if line.strip()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
