# Test hosts on one machine, shared by tests/e2e/multihost.sh and tools/bench: network
# namespaces on a bridge (198.18.77.1..N), a hostfile of their addresses, and an Open MPI
# plm_rsh_agent that starts each daemon inside the right namespace instead of using ssh.
# Each host has its own TMPDIR (/tmp/pst<tag>h<i>, short: Open MPI puts Unix sockets
# there), as real hosts have their own /tmp: the hosts share one hostname, and Open MPI's
# session directories are named after it.
# Source it, then:
#   testhosts_up DIR N        creates N hosts (needs root and iproute2); DIR gets hostfile, agent
#   testhosts_mpirun DIR NP MPIRUN ARGS...   mpirun from the first host over them (TCP on the subnet)
#   testhosts_limit RATE [2]  shapes every host's link both ways with tc tbf (for example
#                             100mbit), as a switch port of that speed would (2: the
#                             second subnet's links)
#   testhosts_second_subnet   gives every host a second link, on a bridge of its own
#                             (198.18.78.1..N): two paths between hosts, as Wi-Fi and a
#                             Thunderbolt bridge between Macs
#   testhosts_clear           kills every process on them (daemons and ranks a lost job left)
#   testhosts_down            removes them (callers: trap it on EXIT)
# Sets TESTHOSTS_NS (namespace names), TESTHOSTS_ADDR (addresses), TESTHOSTS_LINK (each
# namespace's interface), and TESTHOSTS_ADDR2, TESTHOSTS_LINK2 for the second subnet.
# testhosts_mpirun restricts MPI to the first subnet unless TESTHOSTS_BTL_INCLUDE says
# otherwise ("" for none: MPI then uses every interface, as a user's mpirun does).
testhosts_tag=$$
TESTHOSTS_NS=() TESTHOSTS_ADDR=() TESTHOSTS_LINK=() TESTHOSTS_ADDR2=() TESTHOSTS_LINK2=()
testhosts_bridge=pstbr$testhosts_tag

testhosts_available() {
  [ "$(id -u)" -eq 0 ] && command -v ip >/dev/null && ip netns list >/dev/null 2>&1
}

testhosts_tmpdir() { echo "/tmp/pst${testhosts_tag}h$1"; }  # testhosts_tmpdir I: host I's TMPDIR

testhosts_clear() {
  local n p
  for n in ${TESTHOSTS_NS[@]+"${TESTHOSTS_NS[@]}"}; do
    for p in $(ip netns pids "$n" 2>/dev/null); do kill -9 "$p" 2>/dev/null || true; done
  done
}

testhosts_down() {
  local n i t2 t3
  testhosts_clear
  if [ -n "$testhosts_neigh" ]; then
    read -r t2 t3 <<< "$testhosts_neigh"
    sysctl -qw net.ipv4.neigh.default.gc_thresh2="$t2" net.ipv4.neigh.default.gc_thresh3="$t3" || true
  fi
  testhosts_neigh=
  for n in ${TESTHOSTS_NS[@]+"${TESTHOSTS_NS[@]}"}; do ip netns del "$n" 2>/dev/null || true; done
  for ((i = 0; i < ${#TESTHOSTS_NS[@]}; i++)); do rm -rf "$(testhosts_tmpdir "$i")"; done
  ip link del "$testhosts_bridge" 2>/dev/null || true
  ip link del "${testhosts_bridge}b" 2>/dev/null || true
  TESTHOSTS_NS=() TESTHOSTS_ADDR=() TESTHOSTS_LINK=() TESTHOSTS_ADDR2=() TESTHOSTS_LINK2=()
}

# The kernel's ARP table is one for all namespaces (1024 entries by default): N hosts that
# all talk to each other need N (N - 1), and past it connections fail with EAGAIN (Open
# MPI: "failed to TCP connect to a peer"; 33 hosts took 44-114 s to start instead of 9-11).
# testhosts_up raises the limit while its hosts live; a real host needs one entry per peer.
testhosts_neigh=
testhosts_make_room() {
  local needed=$(($1 * $1 + 512)) t2 t3
  t2=$(sysctl -n net.ipv4.neigh.default.gc_thresh2 2>/dev/null) || return 0
  t3=$(sysctl -n net.ipv4.neigh.default.gc_thresh3 2>/dev/null) || return 0
  [ "$t3" -lt "$needed" ] || return 0
  testhosts_neigh="$t2 $t3"
  sysctl -qw net.ipv4.neigh.default.gc_thresh2="$needed" net.ipv4.neigh.default.gc_thresh3="$needed" || true
}

testhosts_up() {
  local dir=$1 count=$2 i
  testhosts_make_room "$count"
  ip link add "$testhosts_bridge" type bridge && ip link set "$testhosts_bridge" up || return 1
  for ((i = 0; i < count; i++)); do
    TESTHOSTS_NS+=("pst${testhosts_tag}$i")
    TESTHOSTS_ADDR+=("198.18.77.$((i + 1))")
    TESTHOSTS_LINK+=("n$testhosts_tag$i")
    ip netns add "${TESTHOSTS_NS[$i]}"
    ip link add "h$testhosts_tag$i" type veth peer name "n$testhosts_tag$i"
    ip link set "n$testhosts_tag$i" netns "${TESTHOSTS_NS[$i]}"
    ip link set "h$testhosts_tag$i" master "$testhosts_bridge" up
    ip netns exec "${TESTHOSTS_NS[$i]}" ip link set lo up
    ip netns exec "${TESTHOSTS_NS[$i]}" ip addr add "${TESTHOSTS_ADDR[$i]}/24" dev "n$testhosts_tag$i"
    ip netns exec "${TESTHOSTS_NS[$i]}" ip link set "n$testhosts_tag$i" up
    mkdir -p "$(testhosts_tmpdir "$i")"
  done
  printf '%s slots=1\n' ${TESTHOSTS_ADDR[@]+"${TESTHOSTS_ADDR[@]}"} > "$dir/hostfile"
  {
    echo '#!/bin/bash'
    echo '# plm_rsh_agent: "agent HOST COMMAND..." runs COMMAND on HOST, i.e. in its namespace.'
    echo 'host=$1; shift'
    echo 'case "$host" in'
    for ((i = 0; i < count; i++)); do echo "  ${TESTHOSTS_ADDR[$i]}) n=${TESTHOSTS_NS[$i]} tmp=$(testhosts_tmpdir "$i") ;;"; done
    echo '  *) echo "agent: unknown host $host" >&2; exit 1 ;;'
    echo 'esac'
    echo 'exec ip netns exec "$n" env TMPDIR="$tmp" /bin/sh -c "$*"'
  } > "$dir/agent"
  chmod +x "$dir/agent"
}

testhosts_second_subnet() {
  local i bridge=${testhosts_bridge}b
  ip link add "$bridge" type bridge && ip link set "$bridge" up || return 1
  for ((i = 0; i < ${#TESTHOSTS_NS[@]}; i++)); do
    TESTHOSTS_ADDR2+=("198.18.78.$((i + 1))")
    TESTHOSTS_LINK2+=("m$testhosts_tag$i")
    ip link add "g$testhosts_tag$i" type veth peer name "m$testhosts_tag$i"
    ip link set "m$testhosts_tag$i" netns "${TESTHOSTS_NS[$i]}"
    ip link set "g$testhosts_tag$i" master "$bridge" up
    ip netns exec "${TESTHOSTS_NS[$i]}" ip addr add "${TESTHOSTS_ADDR2[$i]}/24" dev "m$testhosts_tag$i"
    ip netns exec "${TESTHOSTS_NS[$i]}" ip link set "m$testhosts_tag$i" up
  done
}

# Both ways: what a host sends (its end of the veth) and what it receives (the bridge's
# end), so that N hosts sending to one share its link, as they would share a real one.
testhosts_limit() {
  local i inside=n outside=h
  [ "${2:-1}" = 2 ] && inside=m outside=g
  for ((i = 0; i < ${#TESTHOSTS_NS[@]}; i++)); do
    ip netns exec "${TESTHOSTS_NS[$i]}" tc qdisc replace dev "$inside$testhosts_tag$i" root tbf rate "$1" burst 256kb latency 50ms
    tc qdisc replace dev "$outside$testhosts_tag$i" root tbf rate "$1" burst 256kb latency 50ms
  done
}

# Open MPI's keepalive is shortened so that a lost host ends the job in seconds.
testhosts_mpirun() {
  local dir=$1 np=$2 mpirun=$3 include=()
  shift 3
  local subnet=${TESTHOSTS_BTL_INCLUDE-198.18.77.0/24}
  [ -z "$subnet" ] || include=(--mca btl_tcp_if_include "$subnet")
  ip netns exec "${TESTHOSTS_NS[0]}" env TMPDIR="$(testhosts_tmpdir 0)" "$mpirun" --hostfile "$dir/hostfile" -np "$np" \
    --mca plm_rsh_agent "$dir/agent" --mca plm_rsh_no_tree_spawn 1 \
    --mca btl tcp,self ${include[@]+"${include[@]}"} --mca oob_tcp_if_include 198.18.77.0/24 \
    --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 --mca oob_tcp_keepalive_probes 3 "$@"
}
