#!/usr/bin/env bash
# Safeguards around a run's files and inputs, under mpirun:
#   1. a failed --overwrite start (ranks that disagree; a model that does not fit the data)
#      leaves the earlier run intact; a start killed after it set the earlier run aside
#      keeps it in .replaced/ and the next start says so; a successful one replaces it;
#   2. two jobs on one train dir: the second is refused; a train dir that other users can
#      write is refused;
#   3. pseval looks again at a checkpoint that fails its check (as while it is republished);
#   4. a --config file missing on one host: every rank's failure is reported, none waits;
#   5. a model file whose code never ends (a __setstate__ that loops): under --timeout 15
#      the job ends within 60 s naming the file, with and without --trust-model; after
#      kill -9 of mpirun and its ranks mid-check, no pstrain process is left.
# Usage: safeguards.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch" && cd "$scratch" || exit 1
source "$(dirname "$0")/../common/checks.sh"
common=(--dataset synthetic --synthetic-size 2000 --batch-size 32 --threads 1 --log-every 50 --timeout 60)
fingerprint() { (cd "$1" && find . -type f ! -name .lock | sort | while read -r f; do sha256_of "$f"; done) ; }

# --- 1. --overwrite keeps the earlier run until the new one has a checkpoint -------------
run_logged old with_timeout 120 "$mpirun" -np 3 "$pstrain" --model mlp "${common[@]}" --steps 40 --checkpoint-every 20 \
  --train-dir run
before=$(fingerprint run)
# Ranks that disagree (rank 2 another lr): the handshake stops every rank.
with_timeout 60 "$mpirun" -np 2 "$pstrain" --model mlp "${common[@]}" --steps 40 --train-dir "$scratch/run" --overwrite \
  : -np 1 "$pstrain" --model mlp "${common[@]}" --steps 40 --lr 0.5 --train-dir "$scratch/run" --overwrite > failed1.log 2>&1
check "failed --overwrite (ranks disagree): refused" has failed1.log "ranks disagree on 'lr'"
check "failed --overwrite (ranks disagree): the earlier run is intact" test "$(fingerprint run)" = "$before"
# Workers without their data: they stop the job while rank 0 waits in the handshake.
with_timeout 60 "$mpirun" -np 3 "$pstrain" --model mlp --dataset fashion-mnist --data-dir "$scratch/nowhere" \
  --train-dir "$scratch/run" --overwrite --steps 5 > failed2.log 2>&1
check "failed --overwrite (workers without data): refused" has failed2.log "nowhere/train-images-idx3-ubyte.*not found"
check "failed --overwrite (workers without data): the earlier run is intact" test "$(fingerprint run)" = "$before"
# Stopped after it set the earlier run aside (a NaN at its first step stops the job, and
# mpirun sends SIGTERM to rank 0): rank 0 puts the earlier run back before it exits.
with_timeout 60 "$mpirun" -np 3 "$pstrain" --model mlp "${common[@]}" --steps 40 --checkpoint-every 20 --train-dir "$scratch/run" \
  --overwrite --inject-nan 1:0 > failed3.log 2>&1
check "stopped --overwrite (SIGTERM): the earlier run is back in place, nothing left aside" \
  bash -c "[ '$(fingerprint run)' = '$before' ] && [ ! -e run/.replaced ]"
# Killed outright (SIGKILL to rank 0 once it set the earlier run aside): no time to put it
# back, so the earlier run waits in .replaced/.
"$mpirun" -np 3 "$pstrain" --model mlp "${common[@]}" --steps 400 --checkpoint-every 0 --straggle 1:50 \
  --train-dir "$scratch/run" --overwrite > killed.log 2>&1 &
job=$!
victim=""
for _ in $(seq 300); do
  [ -d run/.replaced ] && victim=$(rank_pid run 0) && [ -n "$victim" ] && break
  sleep 0.1
done
[ -n "$victim" ] && kill -9 "$victim"
wait $job
check "killed --overwrite (SIGKILL): the earlier run waits in .replaced/" test "$(fingerprint run/.replaced)" = "$before"
with_timeout 60 "$mpirun" -np 3 "$pstrain" --model mlp "${common[@]}" --steps 40 --train-dir "$scratch/run" --overwrite > next.log 2>&1
check "killed --overwrite: the next start says where the earlier run is" has next.log "run/.replaced holds the files of a run"
rm -rf run/ckpt run/metrics.jsonl run/run.json run/events.out.tfevents.* && mv run/.replaced/* run/ && rmdir run/.replaced
check "killed --overwrite: moved back, the earlier run is whole again" test "$(fingerprint run)" = "$before"
run_logged replaced with_timeout 120 "$mpirun" -np 3 "$pstrain" --model mlp "${common[@]}" --steps 30 --checkpoint-every 10 \
  --train-dir run --overwrite
check "--overwrite: the new run replaces the earlier one" bash -c "[ ! -e run/.replaced ] && [ -e run/ckpt/step-00000030.ok ] && [ ! -e run/ckpt/step-00000040.ok ]"

# --- 2. one job per train dir, and only its owner writes it -------------------------------
with_timeout 120 "$mpirun" -np 3 "$pstrain" --model lenet "${common[@]}" --steps 400 --checkpoint-every 0 \
  --train-dir busy --straggle 1:20 > busy.log 2>&1 &
first=$!
for _ in $(seq 300); do [ -e busy/run.json ] && break; sleep 0.1; done
with_timeout 60 "$mpirun" -np 3 "$pstrain" --model lenet "${common[@]}" --steps 10 --train-dir "$scratch/busy" --overwrite > second.log 2>&1
check "a second job on the same train dir: refused" has second.log "another pstrain job is using it \(pid [0-9]+ on [^)]+\)"
stop_job $first; wait $first
mkdir -p shared && chmod 0777 shared
with_timeout 60 "$mpirun" -np 3 "$pstrain" --model lenet "${common[@]}" --steps 10 --train-dir "$scratch/shared" > shared.log 2>&1
check "a train dir that others can write: refused" has shared.log "other users can write it .*mode 0777"

# --- 3. pseval looks again before it skips a checkpoint -----------------------------------
cp run/ckpt/step-00000010.pt good.pt
printf 'x' | dd of=run/ckpt/step-00000010.pt bs=1 seek=5000 conv=notrunc 2>/dev/null
( sleep 0.5; cp good.pt run/ckpt/step-00000010.pt ) &
"$pseval" --train-dir run > pseval.log 2>&1
wait
check "pseval: a checkpoint repaired while it retries is evaluated, not skipped" \
  bash -c "grep -q 'step 10 ' pseval.log && ! grep -q skipping pseval.log"

# --- 4. a --config file missing on one host -----------------------------------------------
mkdir -p hostA hostB && printf 'steps = 5\ndataset = synthetic\n' > hostA/cluster.conf
with_timeout 60 "$mpirun" -np 1 -wdir "$scratch/hostA" "$pstrain" --config cluster.conf --train-dir "$scratch/cfg" \
  : -np 2 -wdir "$scratch/hostB" "$pstrain" --config cluster.conf --train-dir "$scratch/cfg" > config.log 2>&1
rc=$?
cat config.log | grep pstrain | sed 's/^/     /'
check "--config missing on ranks 1 and 2: exit 2, the ranks named" \
  bash -c "[ $rc -eq 2 ] && grep -q 'pstrain: error: ranks 1, 2: cluster.conf: cannot read the config file' config.log"

# --- 5. a model file whose code never ends -------------------------------------------------
cat > loops.py <<'PY'
import sys, torch
from typing import Tuple
class Loops(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(784, 10)
    def forward(self, x):
        return self.fc(x.flatten(1))
    @torch.jit.export
    def __getstate__(self):
        return (self.fc.weight, self.training)
    @torch.jit.export
    def __setstate__(self, state: Tuple[torch.Tensor, bool]):
        while True:
            self.training = state[1]
torch.jit.script(Loops()).save(sys.argv[1])
PY
"$PSTRAIN_PYTHON" loops.py loops.pt
for trust in "" --trust-model; do
  start=$(now_seconds)
  with_timeout 120 "$mpirun" -np 2 "$pstrain" --model loops.pt --dataset synthetic --timeout 15 $trust \
    --train-dir "loops$trust" > "loops$trust.log" 2>&1
  rc=$?
  took=$(awk -v a="$(now_seconds)" -v b="$start" 'BEGIN { printf "%.0f", a - b }')
  grep -m1 "loops.pt" "loops$trust.log" | sed 's/^/     /'
  check "a load that never ends${trust:+ ($trust)}: the job ends within 60 s (took $took s), naming the file" \
    bash -c "[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $took -le 60 ] && grep -q 'loops.pt: .*took more than 15 s' loops$trust.log"
done
with_timeout 120 "$mpirun" -np 2 "$pstrain" --model loops.pt --dataset synthetic --timeout 300 --train-dir killed \
  > killed.log 2>&1 &
for _ in $(seq 300); do [ "$(pids_of 'pstrain' --check-model | wc -l)" -ge 2 ] && break; sleep 0.1; done
checks_started=$(pids_of 'pstrain' --check-model | wc -l | tr -d ' ')
# shellcheck disable=SC2046  # pids are words
kill -9 $(pids_of 'mpirun|mpiexec|orterun|prterun' killed) $(pids_of 'pstrain' killed) 2>/dev/null
sleep 3
left=$(( $(pids_of 'pstrain' --check-model | wc -l) + $(pids_of 'pstrain' killed | wc -l) ))
check "kill -9 of mpirun and its ranks mid-check ($checks_started check processes): no pstrain process left" \
  bash -c "[ $checks_started -ge 2 ] && [ $left -eq 0 ]"
wait
checks_done
