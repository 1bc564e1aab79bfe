#!/usr/bin/env bash
# Multi-host for real, on one machine: three network namespaces (the project's own test
# hosts, 198.18.77.1-3 on a bridge), a hostfile of their addresses, and an Open MPI
# plm_rsh_agent that starts each daemon inside the right namespace instead of using ssh.
# MPI traffic is TCP restricted to that subnet. Run 1 trains to completion. Run 2 has a
# host's link cut mid-run (ip link set ... down): the job must end with a clear error
# within the timeout, and --resume (link restored) must finish the run.
# Usage: multihost.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 mpirun=$3 scratch=$4
source "$(dirname "$0")/../../tools/testhosts.sh"
if ! testhosts_available; then
  echo "SKIP multihost: needs root and 'ip netns' (iproute2) to create test hosts"; exit 0
fi
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "$0")/../common/checks.sh"
trap testhosts_down EXIT
testhosts_up "$scratch" 3 || { echo "FAIL cannot create the test hosts"; exit 1; }
ns=("${TESTHOSTS_NS[@]}") addr=("${TESTHOSTS_ADDR[@]}") link=("${TESTHOSTS_LINK[@]}")

job() {  # job DIR [flags...]: mpirun from the first host over all three
  local dir=$1; shift
  testhosts_mpirun "$scratch" 3 "$mpirun" "$pstrain" --model mlp --dataset synthetic --steps 200 --batch-size 32 \
    --checkpoint-every 20 --log-every 50 --train-dir "$dir" "$@"
}
runjob() {  # runjob LOG DIR [flags...]: job under a timeout, in a child shell
  local log=$1; shift
  # shellcheck disable=SC2154  # testhosts_tag: set by testhosts.sh
  with_timeout 180 bash -c "source '$(dirname "$0")/../../tools/testhosts.sh'; $(declare -f job); $(declare -p TESTHOSTS_NS testhosts_tag scratch mpirun pstrain); job $(printf '%q ' "$@")" > "$log" 2>&1
}

# launch LOG DIR [flags...]: starts runjob in the background ($runner) and returns once a
# rank has started (or the job has ended). Open MPI's launch of its daemons through the
# namespaces has hung, rarely, before starting any rank (twice in CI, each time a later
# launch into the same hosts). That is the launcher, not pstrain: a launch that starts no
# rank within 60 s is cleared and tried once more, saying so.
launch() {
  local log=$1 attempt
  for attempt in 1 2; do
    runjob "$@" &
    runner=$!
    for _ in $(seq 600); do
      grep -qE '^(\[[0-9]+@[^]]*\] )?pstrain: ' "$log" 2>/dev/null && return 0
      kill -0 "$runner" 2>/dev/null || return 0
      sleep 0.1
    done
    echo "     launch $attempt of $(basename "$log" .log): no rank started within 60 s; clearing the hosts"
    testhosts_clear
    wait "$runner"
    sleep 2
  done
}

# Run 1: to completion across the three hosts.
launch "$scratch/run1.log" "$scratch/run1"
wait "$runner"
rc=$?
tail -3 "$scratch/run1.log" | sed 's/^/     /'
check "3 hosts: the run completes" test $rc -eq 0 -a -f "$scratch/run1/trained_model.pt"
check "3 hosts: every rank ran on its own host" bash -c "grep -q '\"world_size\":3' '$scratch/run1/run.json'"

# --servers 2 placed two per host (ppr:2:node: ranks 0 and 1 on the first host, a host
# without one): refused before training, naming the ranks, the hosts and the fix; allowed
# with --stack-servers. Dry runs.
servers_dry_run() {  # servers_dry_run LOG [flags...]
  local log=$1; shift
  with_timeout 120 bash -c "source '$(dirname "$0")/../../tools/testhosts.sh'; $(declare -p TESTHOSTS_NS testhosts_tag); testhosts_mpirun $(printf '%q ' "$scratch" 4 "$mpirun") --oversubscribe --map-by ppr:2:node $(printf '%q ' "$pstrain") --model mlp --dataset synthetic --servers 2 --dry-run --train-dir $(printf '%q' "$scratch/servers") ${*:+$(printf '%q ' "$@")}" > "$log" 2>&1
}
servers_dry_run "$scratch/stacked.log"
rc=$?
grep -m1 "servers ranks 0, 1" "$scratch/stacked.log" | sed 's/^/     /'
check "--servers 2 on one host while another has none: refused, naming them and the fix" \
  bash -c "[ $rc -ne 0 ] && grep -qE 'servers ranks 0, 1 on [^ ]+ \\(${addr[0]}\\) share one link while host [^ ]+ \\((${addr[1]}|${addr[2]})\\) has no server; .*--map-by node.*--stack-servers' '$scratch/stacked.log'"
servers_dry_run "$scratch/stacked-allowed.log" --stack-servers
check "--stack-servers allows it" grep -q "2 parameter servers + 2 worker(s)" "$scratch/stacked-allowed.log"

# Run 2: cut the third host's link mid-run, once step 40 is checkpointed.
launch "$scratch/run2.log" "$scratch/run2" --timeout 60
for _ in $(seq 600); do [ -e "$scratch/run2/ckpt/step-00000040.ok" ] && break; sleep 0.1; done
check "run 2 under way (step 40 checkpointed)" test -e "$scratch/run2/ckpt/step-00000040.ok"
ip netns exec "${ns[2]}" ip link set "${link[2]}" down
cut=$(date +%s)
wait $runner; rc=$?
took=$(( $(date +%s) - cut ))
grep -vE '^(\[[^]]*\] )?step ' "$scratch/run2.log" | sed 's/^/     /' | head -12
check "link cut: the job ends non-zero (exit $rc)" test $rc -ne 0 -a $rc -ne 124
check "link cut: it ends within the timeout (took ${took} s after the cut)" test $took -le 90
# Open MPI's keepalive (5 + 3 x 2 s) notices the lost host first and ends the whole job,
# naming it. pstrain's --timeout is the backstop for a rank that hangs on a live link: if
# it fired first, its MPI_Abort would wait for the unreachable daemon (see README).
check "link cut: the message names the lost host" \
  bash -c "grep -q 'lost communication with a remote daemon' '$scratch/run2.log' && grep -q 'Remote daemon: .* on node ${addr[2]}' '$scratch/run2.log'"
# Daemons and ranks cut off from mpirun may linger on the hosts: clear them, as an
# administrator would before restarting a job.
testhosts_clear
ip netns exec "${ns[2]}" ip link set "${link[2]}" up
sleep 2
launch "$scratch/resume.log" "$scratch/run2" --resume
wait "$runner"
rc=$?
grep -E 'resum|done' "$scratch/resume.log" | sed 's/^/     /'
check "link restored: --resume completes the run" test $rc -eq 0 -a -f "$scratch/run2/trained_model.pt"

checks_done
