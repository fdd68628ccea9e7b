#!/bin/bash
# sim_cluster.sh: K simulated nodes on this machine, for multi-node tests and experiments.
#
#   sim_cluster.sh up --nodes K [--rate RATE] [--name PREFIX] [--slots S] [--fresh]
#   sim_cluster.sh run [--name PREFIX] [--node I] -- CMD...
#   sim_cluster.sh status [--name PREFIX]
#   sim_cluster.sh down [--name PREFIX]
#
# Each node is a network namespace PREFIX-nodeI whose processes run with host name nodeI
# (their own UTS namespace: Open MPI groups ranks into nodes by host name, and with one name
# for every namespace it took them for one node and used shared memory between them) and a
# private /etc/hosts naming every node (bind-mounted in a mount namespace of their own, so
# the machine's /etc/hosts is never edited). The nodes hang off one bridge that lives in a
# namespace of its own, PREFIX-switch, so nothing is added to the machine's own network.
# Addresses are 198.18.0.I/24 (198.18.0.0/15 is reserved for benchmarking, RFC 2544).
# --rate shapes both directions of every node's link with a token bucket (tbf: netem, which
# could add delay, is not available on every kernel).
#
# `run` executes CMD inside node I (default 1) with what mpirun needs to start ranks on the
# other nodes: the rsh agent (OMPI_MCA_plm_rsh_agent), the MCA settings that keep the traffic
# on the simulated links and make waiting ranks yield the core (busy polling starves the
# kernel's packet processing on a small machine: 8 ms for a 1 KiB allreduce instead of
# 10 us), Open MPI's run-as-root variables (namespaces need root, so mpirun runs as root),
# and SIM_CLUSTER_HOSTFILE (every node with S slots, default 2), so that
#   sim_cluster.sh run -- sh -c 'mpirun --hostfile "$SIM_CLUSTER_HOSTFILE" -np 4 ./program'
# places 2 ranks on node1 and 2 on node2 (`--map-by node` puts one rank on each node).
# CMD runs as given (no shell), with the caller's environment and working folder (all nodes
# see the same files).
#
# State lives in $SIM_CLUSTER_RUN_DIR (default /run/mpitrain-sim-cluster)/PREFIX: what `up`
# created, one line each, so `down` removes exactly that. `up` twice is fine (the second
# says so, or rebuilds a cluster of another shape); `down` with nothing up is fine. `up
# --fresh` first removes a cluster of that name left up (by a test run that was killed:
# CTest's fixture uses it, so no process of an earlier run stays in the nodes).
# `down` ends the processes still running inside the cluster's namespaces (left by a failed
# test: nothing else runs there), by pid.
#
# Exit codes: 0 done; 2 bad usage; 77 this machine does not allow the namespaces (not root,
# no CAP_SYS_ADMIN/CAP_NET_ADMIN, a missing tool): one line says why, and CTest reports the
# multinode tests as skipped (SKIP_RETURN_CODE 77); 1 anything else.
set -u -o pipefail

readonly SKIP=77
readonly SUBNET=198.18.0
readonly MAX_NODES=64
run_root=${SIM_CLUSTER_RUN_DIR:-/run/mpitrain-sim-cluster}
lock_file=${SIM_CLUSTER_LOCK:-/run/lock/mpitrain-sim-cluster.lock}
name=mpitrain
nodes=""
rate=""
slots=2
node=1
fresh=0
self=$(readlink -f "$0")

say() { echo "sim_cluster: $*" >&2; }
die() { say "$*"; exit 1; }
usage() { sed -n '3,7p' "$self" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# Parses the options of every command; what follows `--` is the command of `run`.
parse() {
  while [ $# -gt 0 ]; do
    case $1 in
      --nodes) nodes=${2:-}; shift 2 || usage ;;
      --rate) rate=${2:-}; shift 2 || usage ;;
      --name) name=${2:-}; shift 2 || usage ;;
      --slots) slots=${2:-}; shift 2 || usage ;;
      --node) node=${2:-}; shift 2 || usage ;;
      --fresh) fresh=1; shift ;;
      --) shift; cmd=("$@"); return ;;
      *) say "unknown option '$1'"; usage ;;
    esac
  done
}

check_options() {
  # The prefix names namespaces, a folder and a lock file: a safe alphabet. (Interface
  # names, limited to 15 characters, do not derive from it: they live inside the namespaces.)
  [[ $name =~ ^[a-z][a-z0-9-]{0,30}$ ]] || { say "--name '$name': use a-z, 0-9 and '-' (up to 31)"; exit 2; }
  [[ $slots =~ ^[1-9][0-9]*$ ]] || { say "--slots '$slots': a positive integer"; exit 2; }
  [[ $node =~ ^[1-9][0-9]*$ ]] || { say "--node '$node': a positive integer"; exit 2; }
  if [ -n "$rate" ] && ! [[ $rate =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit|[kmg]?bps)$ ]]; then
    say "--rate '$rate': a tc rate such as 2gbit or 500mbit"; exit 2
  fi
}

state_dir() { echo "$run_root/$name"; }
ns_node() { echo "$name-node$1"; }
ns_switch() { echo "$name-switch"; }

# Exits 77 with one line naming why this machine cannot hold the cluster.
require_namespaces() {
  local tool reason=""
  for tool in ip unshare mount hostname flock; do
    command -v "$tool" >/dev/null || { reason="'$tool' is not installed"; break; }
  done
  if [ -z "$reason" ] && [ -n "$rate" ] && ! command -v tc >/dev/null; then
    reason="'tc' (iproute2) is not installed, and --rate needs it"
  fi
  if [ -z "$reason" ] && [ "$(id -u)" != 0 ]; then
    reason="network namespaces need root (CAP_SYS_ADMIN and CAP_NET_ADMIN); uid is $(id -u)"
  fi
  local probe="$name-probe$$" out
  if [ -z "$reason" ]; then
    if ! out=$(ip netns add "$probe" 2>&1); then
      reason="'ip netns add' failed: $(echo "$out" | head -1)"
    else
      # Not in any state file: removed here even when the script is interrupted.
      trap 'ip netns del "$probe" 2>/dev/null' EXIT
      trap 'exit 130' INT TERM
      if ! out=$(ip netns exec "$probe" unshare --uts --mount /bin/sh -c \
          'hostname probe && mount --bind /etc/hostname /etc/hostname' 2>&1); then
        reason="a UTS and mount namespace inside a network namespace failed: $(echo "$out" | head -1)"
      fi
      ip netns del "$probe" 2>/dev/null || say "warning: could not delete probe namespace $probe"
      trap - EXIT INT TERM
    fi
  fi
  if [ -n "$reason" ]; then
    echo "sim_cluster: SKIPPED: cannot simulate nodes on this machine: $reason" >&2
    exit $SKIP
  fi
}

# Records in the state one thing `up` created ("netns NAME"), for `down`.
created() { echo "$1" >>"$(state_dir)/created"; }

# Builds the cluster; any failure leaves what was made recorded, and the caller tears it down.
build_cluster() {
  local dir sw i ns peer
  dir=$(state_dir)
  sw=$(ns_switch)
  ip netns add "$sw" && created "netns $sw" || return 1
  ip -n "$sw" link add br0 type bridge && ip -n "$sw" link set br0 up || return 1
  : >"$dir/hosts.new"
  printf '127.0.0.1 localhost\n' >>"$dir/hosts.new"
  : >"$dir/hostfile.new"
  for i in $(seq 1 "$nodes"); do
    ns=$(ns_node "$i")
    peer="n$i"
    ip netns add "$ns" && created "netns $ns" || return 1
    ip -n "$ns" link set lo up || return 1
    # The node's end is eth0; its peer, in the switch namespace, joins the bridge.
    ip -n "$ns" link add eth0 type veth peer name "$peer" netns "$sw" || return 1
    ip -n "$ns" addr add "$SUBNET.$i/24" dev eth0 || return 1
    ip -n "$ns" link set eth0 up || return 1
    ip -n "$sw" link set "$peer" master br0 up || return 1
    if [ -n "$rate" ]; then
      # Both directions: node -> switch on eth0, switch -> node on the peer.
      tc -n "$ns" qdisc replace dev eth0 root tbf rate "$rate" burst 256kb latency 20ms || return 1
      tc -n "$sw" qdisc replace dev "$peer" root tbf rate "$rate" burst 256kb latency 20ms || return 1
    fi
    printf '%s.%s node%s\n' "$SUBNET" "$i" "$i" >>"$dir/hosts.new"
    printf 'node%s slots=%s\n' "$i" "$slots" >>"$dir/hostfile.new"
  done
  mv "$dir/hosts.new" "$dir/hosts" && mv "$dir/hostfile.new" "$dir/hostfile" || return 1
  write_agent "$dir" || return 1
  printf 'nodes=%s\nrate=%s\nslots=%s\n' "$nodes" "$rate" "$slots" >"$dir/config"
}

# The rsh agent: Open MPI calls it as `agent [options] HOST COMMAND...` (COMMAND a shell
# command line, as ssh takes it); it runs COMMAND inside node HOST.
write_agent() {
  local dir=$1
  cat >"$dir/agent.sh" <<EOF || return 1
#!/bin/bash
# Generated by $self for cluster '$name'.
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\${1:?usage: agent [options] HOST COMMAND...}
shift
case \$host in
  node[0-9]*) ;;
  *) echo "sim_cluster agent: unknown host '\$host'" >&2; exit 255 ;;
esac
exec "$self" --enter --name "$name" --node "\${host#node}" -- /bin/sh -c "\$*"
EOF
  chmod +x "$dir/agent.sh"
}

# Prints the variables `run` exports (also shown by `status`).
environment() {
  local dir
  dir=$(state_dir)
  cat <<EOF
SIM_CLUSTER_NAME=$name
SIM_CLUSTER_NODES=$(config_value nodes)
SIM_CLUSTER_HOSTFILE=$dir/hostfile
OMPI_MCA_plm_rsh_agent=$dir/agent.sh
OMPI_MCA_plm_rsh_no_tree_spawn=1
OMPI_MCA_btl=tcp,vader,self
OMPI_MCA_btl_tcp_if_include=$SUBNET.0/24
OMPI_MCA_oob_tcp_if_include=$SUBNET.0/24
OMPI_MCA_mpi_yield_when_idle=1
OMPI_ALLOW_RUN_AS_ROOT=1
OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
EOF
}

config_value() { sed -n "s/^$1=//p" "$(state_dir)/config" 2>/dev/null; }

# True when the state says the cluster is complete and every namespace of it exists.
is_up() {
  local dir n i
  dir=$(state_dir)
  [ -f "$dir/config" ] || return 1
  n=$(config_value nodes)
  ip netns list | awk '{print $1}' | grep -qx "$(ns_switch)" || return 1
  for i in $(seq 1 "$n"); do
    ip netns list | awk '{print $1}' | grep -qx "$(ns_node "$i")" || return 1
  done
}

# Ends the processes inside namespace $1 (only the cluster's processes can be there), by pid:
# SIGTERM, then SIGKILL to those left after 5 s.
end_processes() {
  local ns=$1 pids
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  [ -n "${pids// /}" ] || return 0
  say "ending processes left in $ns: $pids"
  # shellcheck disable=SC2086
  kill -TERM $pids 2>/dev/null
  for _ in $(seq 1 50); do
    [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && return 0
    sleep 0.1
  done
  pids=$(ip netns pids "$ns" 2>/dev/null | tr '\n' ' ')
  # shellcheck disable=SC2086
  [ -n "${pids// /}" ] && kill -KILL $pids 2>/dev/null
  return 0
}

teardown() {
  local dir line kind what failed=0
  dir=$(state_dir)
  [ -d "$dir" ] || return 0
  if [ -f "$dir/created" ]; then
    # Newest first: the nodes before the switch.
    while read -r kind what; do
      case $kind in
        netns)
          if ip netns list | awk '{print $1}' | grep -qx "$what"; then
            end_processes "$what"
            ip netns del "$what" || { say "could not delete namespace $what"; failed=1; }
          fi ;;
        *) say "unknown state line '$kind $what' in $dir/created"; failed=1 ;;
      esac
    done < <(tac "$dir/created")
  fi
  [ $failed = 0 ] || return 1
  rm -rf "$dir"
}

# One up or down at a time on this machine: a lock on a file that is never removed (down
# removes the run folder when no cluster is left: a lock on the folder itself would then be
# held on a deleted folder while the next up locks a new one).
with_lock() {
  mkdir -p "$run_root" "$(dirname "$lock_file")" || die "cannot create $run_root"
  exec 9>>"$lock_file" || die "cannot open $lock_file"
  flock -w 60 9 || die "another sim_cluster.sh holds $lock_file for 60 s"
}

cmd_up() {
  if ! [[ ${nodes:-} =~ ^[1-9][0-9]*$ ]] || [ "$nodes" -gt $MAX_NODES ]; then
    say "up needs --nodes K, 1 <= K <= $MAX_NODES"; exit 2
  fi
  require_namespaces
  with_lock
  if [ $fresh = 1 ] && [ -d "$(state_dir)" ]; then
    say "--fresh: removing the '$name' that is up"
    teardown || die "could not remove the previous '$name'"
  fi
  if is_up; then
    if [ "$(config_value nodes)" = "$nodes" ] && [ "$(config_value rate)" = "$rate" ] &&
       [ "$(config_value slots)" = "$slots" ]; then
      say "'$name' is already up ($nodes nodes${rate:+, $rate links})"
      return 0
    fi
    say "'$name' is up with another shape; rebuilding it"
  fi
  teardown || die "could not remove the previous '$name'"
  mkdir -p "$(state_dir)" || die "cannot create $(state_dir)"
  if ! build_cluster; then
    say "bringing up '$name' failed; removing what was made"
    teardown
    exit 1
  fi
  say "'$name' is up: $nodes nodes (node1..node$nodes, $SUBNET.1-$nodes)${rate:+, links shaped to $rate}"
  say "hostfile: $(state_dir)/hostfile"
}

cmd_down() {
  # Nothing to do needs no lock, nor rights: a machine where up was skipped downs fine.
  if [ ! -d "$(state_dir)" ]; then
    say "'$name' is not up; nothing to do"
    return 0
  fi
  with_lock
  teardown || die "could not remove everything of '$name' (state kept in $(state_dir))"
  rmdir "$run_root" 2>/dev/null  # when no other cluster is up
  say "'$name' is down"
}

cmd_status() {
  local i ns
  if ! is_up; then
    echo "'$name' is not up"
    [ -d "$(state_dir)" ] && echo "(incomplete state in $(state_dir): run down)"
    return 3
  fi
  local shaped
  shaped=$(config_value rate)
  echo "'$name' is up: $(config_value nodes) nodes, links ${shaped:+shaped to }${shaped:-not shaped}"
  for i in $(seq 1 "$(config_value nodes)"); do
    ns=$(ns_node "$i")
    echo "  node$i  $SUBNET.$i  namespace $ns  processes: $(ip netns pids "$ns" | wc -l)"
  done
  echo "environment of 'run':"
  environment | sed 's/^/  /'
}

# Runs cmd inside node $node: network namespace, its own host name and /etc/hosts.
enter() {
  local dir ns
  dir=$(state_dir)
  ns=$(ns_node "$node")
  [ -f "$dir/hosts" ] || die "'$name' is not up (no $dir/hosts)"
  # The mount namespace of unshare is private: the bind-mounted hosts file is seen inside the
  # node only. exec all the way down, so the caller's pid ends up being CMD itself.
  # shellcheck disable=SC2016  # $1 and $2 are the inner shell's arguments
  exec ip netns exec "$ns" unshare --uts --mount /bin/sh -c \
    'mount --bind "$1" /etc/hosts && hostname "$2" && shift 2 && exec "$@"' \
    sim-node "$dir/hosts" "node$node" "${cmd[@]}"
}

cmd_run() {
  [ ${#cmd[@]} -gt 0 ] || { say "run needs -- CMD..."; exit 2; }
  # A machine that cannot hold the cluster skips (77, with the reason), as `up` did.
  is_up || require_namespaces
  is_up || die "'$name' is not up: sim_cluster.sh up --nodes K${name:+ --name $name} first"
  [ "$node" -le "$(config_value nodes)" ] || die "--node $node: '$name' has $(config_value nodes) nodes"
  local line
  while IFS= read -r line; do export "${line?}"; done < <(environment)
  enter
}

main() {
  [ $# -ge 1 ] || usage
  local command=$1
  shift
  cmd=()
  parse "$@"
  check_options
  case $command in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    run) cmd_run ;;
    --enter) enter ;;  # used by the generated agent
    -h|--help|help) usage ;;
    *) say "unknown command '$command'"; usage ;;
  esac
}

main "$@"
