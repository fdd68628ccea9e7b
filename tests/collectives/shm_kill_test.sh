#!/bin/bash
# Usage: shm_kill_test.sh <mpiexec> <shm_kill_helper>
# Starts a 2-rank job looping shared-memory allreduces, records every /dev/shm file its ranks
# map, SIGKILLs rank 1 (by the pid it printed) in the middle of the loop, waits for the job to
# end, and fails if any of those files is still in /dev/shm. Files of other processes are
# ignored: only names our ranks mapped are checked.
set -u
mpiexec=$1
helper=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT

"$mpiexec" -n 2 --oversubscribe "$helper" >"$out" 2>&1 &
job=$!

pids=""
for _ in $(seq 1 600); do
  pids=$(awk '$1 == "ready" { print $3 }' "$out")
  [ "$(echo "$pids" | grep -c .)" -eq 2 ] && break
  if ! kill -0 "$job" 2>/dev/null; then
    cat "$out"; echo "FAIL: the job ended before both ranks were ready"; exit 1
  fi
  sleep 0.1
done
if [ "$(echo "$pids" | grep -c .)" -ne 2 ]; then
  kill -9 "$job"; cat "$out"; echo "FAIL: the ranks did not become ready"; exit 1
fi

# Every /dev/shm name the ranks map (the window's file shows as "(deleted)" once unlinked).
mapped=$(for pid in $pids; do awk '$6 ~ "^/dev/shm/" { print $6 }' "/proc/$pid/maps"; done |
         sort -u)
echo "mapped by the ranks:"; echo "$mapped"
victim=$(awk '$1 == "ready" && $2 == 1 { print $3 }' "$out")
sleep 0.5   # let the loop run: rank 1 dies in the middle of a collective
kill -9 "$victim"

for _ in $(seq 1 300); do
  kill -0 "$job" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$job" 2>/dev/null; then
  kill -9 "$job"; echo "FAIL: the job did not end within 30 s after rank 1 was killed"; exit 1
fi
wait "$job"
echo "job ended with status $?"

left=""
for name in $mapped; do
  [ -e "$name" ] && left="$left $name"
done
if [ -n "$left" ]; then
  echo "FAIL: left in /dev/shm:$left"; exit 1
fi
echo "PASS: nothing the job mapped is left in /dev/shm"
