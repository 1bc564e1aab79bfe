#!/usr/bin/env bash
# pstrain-run across three test hosts (network namespaces, as tests/e2e/multihost.sh):
# the third host's link is cut mid-run; the job fails, pstrain-run probes the hostfile's
# hosts, relaunches on the two that answer and goes on; the link comes back; pstrain-run
# finds the host again and takes it back (the job stops at a step and relaunches on three);
# the run completes and no step goes missing. Then the same with --servers 2 on four hosts:
# the job shrinks to 2 servers and 1 worker, and regrows to 2 workers (pstrain-run counts
# the workers of a layout through config::Layout, as pstrain does).
# Usage: elastic_netns.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 mpirun=$3 scratch=$4
pstrain_run=$(dirname "$pstrain")/pstrain-run
source "$(dirname "$0")/../../tools/testhosts.sh"
if ! testhosts_available; then
  echo "SKIP elastic across hosts: needs root and 'ip netns' (iproute2) to create test hosts"; exit 0
fi
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "$0")/../common/checks.sh"
trap 'testhosts_down' EXIT
testhosts_up "$scratch" 3 || { echo "FAIL cannot create the test hosts"; exit 1; }
ns=("${TESTHOSTS_NS[@]}") link=("${TESTHOSTS_LINK[@]}") addr=("${TESTHOSTS_ADDR[@]}")
# pstrain-run's mpirun: runs on the first host, reaches the others through the agent, TCP
# on the test subnet, and notices a lost host within about 11 s (the keepalive).
write_mpirun() {
  cat > "$scratch/mpirun" <<EOF
#!/bin/bash
exec ip netns exec ${ns[0]} env TMPDIR=$(testhosts_tmpdir 0) $mpirun --mca plm_rsh_agent $scratch/agent \\
  --mca plm_rsh_no_tree_spawn 1 --mca btl tcp,self --mca btl_tcp_if_include 198.18.77.0/24 \\
  --mca oob_tcp_if_include 198.18.77.0/24 --mca oob_tcp_keepalive_time 5 --mca oob_tcp_keepalive_intvl 2 \\
  --mca oob_tcp_keepalive_probes 3 "\$@"
EOF
  chmod +x "$scratch/mpirun"
}
write_mpirun

with_timeout 400 "$pstrain_run" --hostfile "$scratch/hostfile" --mpirun "$scratch/mpirun" --probe-timeout 8 \
  --discovery-interval 3 -- --model mlp --dataset synthetic --steps 900 --batch-size 32 --straggle 1:15 \
  --checkpoint-every 25 --log-every 1 --timeout 60 --threads 1 --train-dir "$scratch/run" > "$scratch/run.log" 2>&1 &
supervisor=$!
for _ in $(seq 900); do [ -e "$scratch/run/ckpt/step-00000050.ok" ] && break; sleep 0.1; done
check "under way on three hosts (step 50 checkpointed)" test -e "$scratch/run/ckpt/step-00000050.ok"
ip netns exec "${ns[2]}" ip link set "${link[2]}" down
# Back once the job goes on without it.
for _ in $(seq 1200); do [ "$(grep -c '"launch"' "$scratch/run/elastic.jsonl")" -ge 2 ] && break; sleep 0.1; done
sleep 3
testhosts_clear_host() { for p in $(ip netns pids "${ns[2]}" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done; }
testhosts_clear_host  # what the lost job left there (a laptop that wakes has those too)
ip netns exec "${ns[2]}" ip link set "${link[2]}" up
wait $supervisor; rc=$?
grep '^pstrain-run' "$scratch/run.log" | sed 's/^/     /'
events=$(python3 -c "import json; print(' '.join(f\"{e['event']}:{e['world_size']}\" for e in map(json.loads, open('$scratch/run/elastic.jsonl'))))")
echo "     events: $events"
check "link cut, then restored: the run completes" test $rc -eq 0 -a -f "$scratch/run/trained_model.pt"
check "the job failed, went on on two hosts, and took the third back" \
  bash -c "[[ '$events' =~ ^launch:3\ failure:3\ launch:2\ (regrow:2\ launch:3\ )+done:3$ ]]"
check "the relaunch named the hosts that answered" \
  bash -c "grep -q '\"event\":\"launch\",\"world_size\":2,\"hosts\":\"${addr[0]}:1 ${addr[1]}:1\"' '$scratch/run/elastic.jsonl'"
check "every step trained (metrics.jsonl reaches step 900)" bash -c "grep -q '\"step\":900,' '$scratch/run/metrics.jsonl'"

# --- --servers 2 on four hosts: a worker's host lost and back ---------------------------
testhosts_down
testhosts_up "$scratch" 4 || { echo "FAIL cannot create 4 test hosts"; exit 1; }
ns=("${TESTHOSTS_NS[@]}") link=("${TESTHOSTS_LINK[@]}")
write_mpirun
with_timeout 400 "$pstrain_run" --hostfile "$scratch/hostfile" --mpirun "$scratch/mpirun" --probe-timeout 8 \
  --discovery-interval 3 -- --model mlp --dataset synthetic --steps 900 --batch-size 32 --straggle 2:15 \
  --checkpoint-every 25 --log-every 1 --timeout 60 --threads 1 --servers 2 --train-dir "$scratch/servers" \
  > "$scratch/servers.log" 2>&1 &
supervisor=$!
for _ in $(seq 900); do [ -e "$scratch/servers/ckpt/step-00000050.ok" ] && break; sleep 0.1; done
ip netns exec "${ns[3]}" ip link set "${link[3]}" down  # rank 3, a worker (ranks 0 and 1 serve)
for _ in $(seq 1200); do [ "$(grep -c '"launch"' "$scratch/servers/elastic.jsonl")" -ge 2 ] && break; sleep 0.1; done
sleep 3
for p in $(ip netns pids "${ns[3]}" 2>/dev/null); do kill -9 "$p" 2>/dev/null; done
ip netns exec "${ns[3]}" ip link set "${link[3]}" up
wait $supervisor; rc=$?
grep '^pstrain-run' "$scratch/servers.log" | sed 's/^/     /'
events=$(python3 -c "import json; print(' '.join(f\"{e['event']}:{e['world_size']}\" for e in map(json.loads, open('$scratch/servers/elastic.jsonl'))))")
echo "     --servers 2, events: $events"
check "--servers 2: a worker's host lost: 2 servers and 1 worker go on, then 2 workers again; the run completes" \
  bash -c "[ $rc -eq 0 ] && [[ '$events' =~ ^launch:4\ failure:4\ launch:3\ (regrow:3\ launch:4\ )+done:4$ ]]"
check "--servers 2: pstrain-run's lines and events count the workers: 1 while shrunk, 2 regrown" \
  bash -c "grep -q 'launch: 3 rank(s) (2 parameter servers + 1 worker(s))' '$scratch/servers.log' && python3 -c \"
import json, sys
launches = [(e['world_size'], e['workers']) for e in map(json.loads, open('$scratch/servers/elastic.jsonl')) if e['event'] == 'launch']
sys.exit(not ((3, 1) in launches and (4, 2) in launches))\""
check "--servers 2: every step trained (metrics.jsonl reaches step 900)" \
  bash -c "grep -q '\"step\":900,' '$scratch/servers/metrics.jsonl'"
checks_done
