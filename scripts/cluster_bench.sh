#!/bin/bash
# cluster_bench.sh: runs a benchmark across simulated nodes and reports what crossed the links.
#
#   cluster_bench.sh [--nodes K] [--rate RATE] [--name PREFIX] [--ranks-per-node R]
#                    [--build DIR] [--] BENCH [BENCH ARGS...]
#
# BENCH is collective_bench or train_bench (taken from DIR/benchmarks/, default the build
# folder beside this script's folder) or a path to a program; its arguments are passed through.
# It runs under mpirun on node1 of the simulated cluster PREFIX (scripts/sim_cluster.sh;
# default PREFIX cluster-bench, K 2 nodes, RATE 2gbit, R 1), R ranks on each of node1..nodeK
# (`--hostfile $SIM_CLUSTER_HOSTFILE --host node1:R,...`: the first K hosts of the hostfile
# with R slots each, so that a larger cluster, such as CTest's 4-node fixture, serves fewer).
# `--bind-to none`: every node's Open MPI daemon sees the whole machine, so binding would put
# rank 0 of each node on the same core.
#
# The cluster is reused when PREFIX is up with at least K nodes at RATE, otherwise brought up
# and taken down again on exit (also on failure or a signal). Another shape under PREFIX is
# refused (it may be someone's): down it or use another --name.
#
# Before and after the benchmark it reads the byte counters of the token-bucket qdisc (tc -s)
# on both ends of each used node's link: "out" is the node's eth0 (node -> switch), "in" its
# peer in the switch namespace (switch -> node). After the benchmark's own output it prints,
# per node and direction, the bytes that crossed, packets, drops, the mean rate and the link
# utilisation = bytes / (rate x elapsed), with elapsed the wall time of the whole mpirun
# (start-up, warm-up and every row of the benchmark included: for a utilisation figure of
# one message size, run that size alone with enough iterations), and the load average before
# and after.
#
# Needs root (network namespaces). Exit codes: the benchmark's own when it fails; 2 bad usage;
# 77 this machine does not allow the namespaces (sim_cluster.sh says why); 1 anything else.
set -u -o pipefail

readonly SKIP=77
self_dir=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
sim_cluster=$self_dir/sim_cluster.sh
run_root=${SIM_CLUSTER_RUN_DIR:-/run/mpitrain-sim-cluster}
nodes=2
rate=2gbit
name=cluster-bench
per_node=1
build=$self_dir/../build
bench=()
brought_up=0
bench_pid=""

say() { echo "cluster_bench: $*" >&2; }
die() { say "$*"; exit 1; }
usage() { sed -n '3,5p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

parse() {
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) nodes=${2:-}; shift 2 || usage ;;
      --rate) rate=${2:-}; shift 2 || usage ;;
      --name) name=${2:-}; shift 2 || usage ;;
      --ranks-per-node) per_node=${2:-}; shift 2 || usage ;;
      --build) build=${2:-}; shift 2 || usage ;;
      -h|--help) usage ;;
      --) shift; bench=("$@"); return ;;
      -*) say "unknown option '$1'"; usage ;;
      *) bench=("$@"); return ;;
    esac
  done
}

# Bytes per second of a tc rate (tc's prefixes are decimal: 2gbit = 2e9 bit/s = 250 MB/s).
rate_bytes_per_s() {
  [[ $1 =~ ^([0-9]+(\.[0-9]+)?)([kmg]?)(bit|bps)$ ]] || return 1
  local scale=1
  case ${BASH_REMATCH[3]} in k) scale=1e3 ;; m) scale=1e6 ;; g) scale=1e9 ;; esac
  awk -v n="${BASH_REMATCH[1]}" -v s="$scale" -v u="${BASH_REMATCH[4]}" \
    'BEGIN { printf "%.0f\n", n * s / (u == "bit" ? 8 : 1) }'
}

check_options() {
  if ! [[ $nodes =~ ^[1-9][0-9]*$ ]] || [ "$nodes" -lt 2 ]; then
    say "--nodes '$nodes': 2 or more"; exit 2
  fi
  [[ $per_node =~ ^[1-9][0-9]*$ ]] || { say "--ranks-per-node '$per_node': a positive integer"; exit 2; }
  rate_bps=$(rate_bytes_per_s "$rate") || { say "--rate '$rate': a tc rate such as 2gbit or 500mbit"; exit 2; }
  [ ${#bench[@]} -gt 0 ] || { say "no benchmark given"; usage; }
  local exe=${bench[0]}
  case $exe in
    */*) ;;
    *) exe=$build/benchmarks/$exe ;;
  esac
  [ -x "$exe" ] || { say "'$exe' is not an executable (build it: make build, or give --build DIR)"; exit 2; }
  bench[0]=$(readlink -f "$exe")
}

config_value() { sed -n "s/^$1=//p" "$run_root/$name/config" 2>/dev/null; }

# Reuses PREFIX when it is up with enough nodes at the rate; brings it up otherwise.
ensure_cluster() {
  local rc
  if "$sim_cluster" status --name "$name" >/dev/null 2>&1; then
    local have_nodes have_rate
    have_nodes=$(config_value nodes)
    have_rate=$(config_value rate)
    if [ "$have_rate" != "$rate" ] || [ "${have_nodes:-0}" -lt "$nodes" ]; then
      die "'$name' is up with ${have_nodes:-?} nodes and links ${have_rate:-not shaped}, not >= $nodes at $rate: scripts/sim_cluster.sh down --name $name, or use another --name"
    fi
    say "reusing '$name' ($have_nodes nodes, $have_rate links); it stays up"
    return 0
  fi
  # Taken down on exit from here on, even if up fails half-way (up cleans up after itself too).
  brought_up=1
  "$sim_cluster" up --nodes "$nodes" --rate "$rate" --name "$name"
  rc=$?
  [ $rc = $SKIP ] && exit $SKIP
  [ $rc = 0 ] || die "scripts/sim_cluster.sh up failed (exit $rc)"
}

cleanup() {
  local rc=$?
  if [ -n "$bench_pid" ] && kill -0 "$bench_pid" 2>/dev/null; then
    say "ending the benchmark (pid $bench_pid)"
    kill -TERM "$bench_pid" 2>/dev/null
    # mpirun forwards TERM to its ranks; one that ignores it is killed after 5 s, so that the
    # cluster still comes down.
    local _
    for _ in $(seq 1 50); do
      kill -0 "$bench_pid" 2>/dev/null || break
      sleep 0.1
    done
    kill -0 "$bench_pid" 2>/dev/null && kill -KILL "$bench_pid" 2>/dev/null
    wait "$bench_pid" 2>/dev/null
  fi
  if [ $brought_up = 1 ]; then
    "$sim_cluster" down --name "$name" || { say "could not take '$name' down"; rc=1; }
  fi
  exit $rc
}

# Prints "bytes packets dropped" of the tbf qdisc on device $2 in namespace $1.
tbf_counters() {
  local out line
  out=$(tc -n "$1" -s qdisc show dev "$2" 2>&1) || { say "tc -n $1 -s qdisc show dev $2: $out"; return 1; }
  line=$(awk '/^qdisc tbf/ { t = 1; next } /^qdisc/ { t = 0 }
              t && $1 == "Sent" { gsub(/[(),]/, ""); print $2, $4, $7; exit }' <<<"$out")
  [ -n "$line" ] || { say "no tbf qdisc with counters on $2 in $1 (is the link shaped?):"$'\n'"$out"; return 1; }
  echo "$line"
}

# Fills the associative array named $1 with node/direction -> "bytes packets dropped".
# shellcheck disable=SC2034  # `into` refers to the caller's array
read_links() {
  local -n into=$1
  local i
  for i in $(seq 1 "$nodes"); do
    into[$i.out]=$(tbf_counters "$name-node$i" eth0) || return 1
    into[$i.in]=$(tbf_counters "$name-switch" "n$i") || return 1
  done
}

load1() { cut -d' ' -f1 /proc/loadavg; }

report() {
  local elapsed_ns=$1 load_before=$2 load_after=$3 i dir
  local -a b a
  awk -v ns="$elapsed_ns" -v r="$rate" -v bps="$rate_bps" -v lb="$load_before" -v la="$load_after" \
    'BEGIN { printf "# cluster_bench: elapsed %.3f s (the whole mpirun); links %s = %.1f MB/s each way; load average (1 min) %s before, %s after\n", ns / 1e9, r, bps / 1e6, lb, la }'
  echo "# cluster_bench: bytes on the links (tc -s, tbf qdisc; out = node -> switch, in = switch -> node); utilisation = bytes / (rate x elapsed)"
  for i in $(seq 1 "$nodes"); do
    for dir in out in; do
      read -r -a b <<<"${before[$i.$dir]}"
      read -r -a a <<<"${after[$i.$dir]}"
      awk -v node="node$i" -v dir="$dir" -v bytes=$((a[0] - b[0])) -v pkts=$((a[1] - b[1])) \
          -v drops=$((a[2] - b[2])) -v ns="$elapsed_ns" -v bps="$rate_bps" -v r="$rate" \
        'BEGIN { s = ns / 1e9; printf "# link %-6s %-3s %13.0f bytes %9.0f pkts %6.0f dropped %9.1f MB/s %6.1f%% of %s\n",
                 node, dir, bytes, pkts, drops, bytes / s / 1e6, 100 * bytes / (bps * s), r }'
    done
  done
}

main() {
  parse "$@"
  check_options
  [ -x "$sim_cluster" ] || die "$sim_cluster is missing or not executable"
  trap cleanup EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  trap 'exit 129' HUP
  ensure_cluster

  local hosts="" i
  for i in $(seq 1 "$nodes"); do hosts+=${hosts:+,}node$i:$per_node; done
  local -A before after
  read_links before || die "could not read the link counters before the benchmark"
  local load_before start_ns end_ns rc
  load_before=$(load1)
  start_ns=$(date +%s%N)
  # $SIM_CLUSTER_HOSTFILE names the nodes; --host picks the first K, R slots each.
  # shellcheck disable=SC2016  # expanded inside the node, where run sets it
  "$sim_cluster" run --name "$name" -- /bin/sh -c \
    'hosts=$1; shift; exec mpirun --hostfile "$SIM_CLUSTER_HOSTFILE" --host "$hosts" --bind-to none "$@"' \
    cluster-bench "$hosts" -np $((nodes * per_node)) "${bench[@]}" &
  bench_pid=$!
  wait "$bench_pid"
  rc=$?
  bench_pid=""
  end_ns=$(date +%s%N)
  [ $rc = $SKIP ] && exit $SKIP
  [ $rc = 0 ] || { say "the benchmark failed (exit $rc)"; exit $rc; }
  read_links after || die "could not read the link counters after the benchmark"
  report $((end_ns - start_ns)) "$load_before" "$(load1)"
}

main "$@"
