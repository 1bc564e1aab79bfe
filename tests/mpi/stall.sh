#!/usr/bin/env bash
# A rank that stops answering (SIGSTOP) in a real mpirun job, in each mode that waits for
# others: within --stall-warning seconds the waiting ranks print a line naming it, its host
# and its last step; after SIGCONT the run goes on and ends with exit 0. And every rank
# stopped together for longer than --timeout (a laptop asleep): continued, the run goes on.
# Usage: stall.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 mpirun=$3 scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "$0")/../common/checks.sh"
host=$(hostname)

# stall NAME SECONDS WARNING STOPPED_RANKS FLAGS...: trains into $scratch/NAME, stops
# STOPPED_RANKS (space-separated) once the run is under way, waits up to SECONDS for a line
# naming the first of them from $waiters ranks (default 1), continues them. Sets $took
# (seconds to the lines, or "none"). (Continued at the first line, a second waiting rank
# that started its wait a moment later never got to say it: sync's check flaked under load.)
stall() {
  local name=$1 limit=$2 warning=$3 stopped=$4; shift 4
  local dir="$scratch/$name" r pid started
  # Each worker sleeps 10 ms per batch: the run lasts seconds after its first metrics line on
  # any machine (an async run of 400 fast updates ended before its ranks could be stopped).
  with_timeout 180 "$mpirun" -np 3 "$pstrain" --device cpu --model mlp --dataset synthetic --steps 400 --batch-size 32 \
    --log-every 20 --checkpoint-every 0 --stall-warning "$warning" --straggle 1:10,2:10 --train-dir "$dir" "$@" \
    > "$dir.log" 2>&1 &
  local job=$!
  for _ in $(seq 600); do [ -s "$dir/metrics.jsonl" ] && break; sleep 0.1; done
  local pids=""
  for r in $stopped; do pid=$(rank_pid "$dir" "$r"); pids="$pids $pid"; done
  # shellcheck disable=SC2086  # the pids are words
  kill -STOP $pids
  started=$(now_seconds)
  took=none
  local first=${stopped%% *}
  while ge "$limit" "$(awk -v a="$(now_seconds)" -v b="$started" 'BEGIN { print a - b }')"; do
    if [ "$(grep -E "waiting [0-9]+ s for .*rank $first \\($host\\), last at step [0-9]+" "$dir.log" | cut -d@ -f1 |
            sort -u | wc -l)" -ge "${waiters:-1}" ]; then
      took=$(awk -v a="$(now_seconds)" -v b="$started" 'BEGIN { printf "%.1f", a - b }')
      break
    fi
    sleep 0.2
  done
  # shellcheck disable=SC2086
  kill -CONT $pids
  wait "$job"
  rc=$?
  grep -E "waiting [0-9]+ s for" "$dir.log" | head -4 | sed 's/^/     /'
}

waiters=2 stall sync 15 10 2
check "sync: a line names rank 2, its host and last step within 15 s (took $took s)" test "$took" != none
check "sync: rank 0 and rank 1 each say it" \
  bash -c "grep -qE '^\\[0@$host\\] pstrain: step [0-9]+: waiting 1[0-9] s for rank 2' '$scratch/sync.log' &&
           grep -qE '^\\[1@$host\\] pstrain: step [0-9]+: waiting 1[0-9] s for rank 2' '$scratch/sync.log'"
check "sync: after SIGCONT the run finishes with exit 0" test "$rc" -eq 0
check "sync: the stopped rank, continued, does not count its own stop as waiting" \
  bash -c "! grep -qE '^\\[2@$host\\] .*waiting [0-9]+ s for' '$scratch/sync.log'"
check "sync: every line a rank printed names its rank and host" \
  bash -c "! grep -vE '^\\[[0-2]@$host\\] ' '$scratch/sync.log'"

stall allreduce 6 2 2 --mode allreduce
check "allreduce: a line names rank 2 (took $took s)" test "$took" != none
check "allreduce: after SIGCONT the run finishes with exit 0" test "$rc" -eq 0

stall backup 6 2 2 --mode backup --aggregate 2
check "backup (a quorum of both workers): a line names rank 2 (took $took s)" test "$took" != none
check "backup: after SIGCONT the run finishes with exit 0" test "$rc" -eq 0

stall async 6 2 "1 2" --mode async
check "async (both workers stopped): rank 0 names them (took $took s)" \
  bash -c "[ '$took' != none ] || grep -qE '^\\[0@$host\\] .*waiting [0-9]+ s for rank 2 ' '$scratch/async.log'"
check "async: after SIGCONT the run finishes with exit 0" test "$rc" -eq 0

# Every rank stopped for 12 s under --timeout 6, then continued: time a rank did not run is
# no time it waited, so none gives up on the others.
dir=$scratch/asleep
with_timeout 180 "$mpirun" -np 3 "$pstrain" --device cpu --model mlp --dataset synthetic --steps 400 --batch-size 32 \
  --log-every 20 --checkpoint-every 0 --timeout 6 --straggle 1:10,2:10 --train-dir "$dir" > "$dir.log" 2>&1 &
job=$!
for _ in $(seq 600); do [ -s "$dir/metrics.jsonl" ] && break; sleep 0.1; done
pids="$(rank_pid "$dir" 0) $(rank_pid "$dir" 1) $(rank_pid "$dir" 2)"
# shellcheck disable=SC2086  # the pids are words
kill -STOP $pids
sleep 12
# shellcheck disable=SC2086
kill -CONT $pids
wait "$job"
rc=$?
grep -E "no answer|waiting" "$dir.log" | head -3 | sed 's/^/     /'
check "every rank stopped 12 s under --timeout 6 (a laptop asleep): the run finishes with exit 0" test "$rc" -eq 0
checks_done
