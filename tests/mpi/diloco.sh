#!/usr/bin/env bash
# --mode diloco under mpirun (issue 40):
#   1. the dry run explains the rounds; a run of rounds that do not divide the steps trains,
#      logs the rounds' figures (rounds, delta_norm, comm_share, bytes, outer lr) to
#      metrics.jsonl and TensorBoard, sends a model-sized message once a round only, and
#      pseval evaluates its checkpoints (the global weights);
#   2. a worker SIGKILLed mid-run ends the job; --resume continues from the last round's
#      checkpoint with the outer momentum and ends with the uninterrupted run's weights
#      (inner SGD without momentum: the inner state, reset at resume, is empty);
#   3. pstrain-run relaunches the job after a killed worker and it finishes; the lost round
#      is dropped (the checkpoints are whole, the steps in metrics.jsonl go on from one);
#   4. --balance with one worker slowed 2x (--straggle): the fast worker gets more local
#      steps, the round as many as without;
#   5. --compress int8 (the pseudo-gradient, error feedback) and --compress-weights fp16 train;
#   6. --overlap-rounds trains to the end (its exchange a round late; by default streamed in 2
#      fragments), with codecs too, the whole model each round (--fragments 1) and in 3
#      fragments (a round's message a fragment's);
#   7. the defaults (issue 52): the dry run says what each direction sends and that H comes
#      from the first round; a run measures H (stdout, run.json), sends at most a quarter of
#      float32's bytes each way, leaves the weights out of its first down message where the
#      workers hold them (issue 83; section 2's resume sends them, and ends equal), and
#      composes with pseval, --resume and pstrain-run;
#   8. --resume across modes and update rules: the optimizer state starts afresh, said.
# Usage: diloco.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
pstrain_run=$(dirname "$pstrain")/pstrain-run
rm -rf "$scratch" && mkdir -p "$scratch" && cd "$scratch" || exit 1
source "$(dirname "$0")/../common/checks.sh"
wait_for() { for _ in $(seq 600); do [ -e "$1" ] && return 0; sleep 0.1; done; return 1; }
# wait_for_checkpoints DIR N: until DIR has N published checkpoints (H auto: steps not known ahead).
wait_for_checkpoints() {
  for _ in $(seq 600); do [ "$(find "$1/ckpt" -name '*.ok' 2>/dev/null | wc -l)" -ge "$2" ] && return 0; sleep 0.1; done
  return 1
}
# Sections 1-6 send raw floats both ways without overlap or balance, so that a resumed run
# ends with the uninterrupted run's weights exactly; section 7 takes the defaults.
base=(--device cpu --mode diloco --model mlp --dataset synthetic --synthetic-size 3000 --batch-size 16 --steps 120
      --lr 0.05 --momentum 0 --checkpoint-every 20 --log-every 14 --threads 1 --timeout 60)
job=("${base[@]}" --local-steps 7 --outer-lr 0.7 --outer-momentum 0.9 --compress none --overlap-rounds=off --balance=off)
within() {  # within LIMIT A.pt B.pt: max |a - b| <= LIMIT over every tensor
  local diff; diff=$(max_weight_diff "$2" "$3") || return 1
  echo "     max |a - b| = $diff"
  awk -v d="$diff" -v l="$1" 'BEGIN { exit !(d <= l) }'
}
train() {  # train DIR [flags...]
  local dir=$1; shift
  with_timeout 200 "$mpirun" -np 3 "$pstrain" "${job[@]}" --train-dir "$dir" "$@"
}

# --- 1. the plan, a run, its metrics, pseval ----------------------------------------------
train "$scratch/plan" --dry-run > plan.log 2>&1
sed -n '/rounds/,/outer/p' plan.log | sed 's/^/     /'
check "dry run: 18 rounds of 7 local steps, and the outer step" \
  bash -c "grep -q 'rounds    18 round(s) of 7 local steps' plan.log && grep -q 'outer     nesterov, lr 0.7, momentum 0.9' plan.log"
run_logged reference train "$scratch/reference"
check "a diloco run completes" test -f "$scratch/reference/trained_model.pt"
grep '^pstrain: diloco' reference.log | sed 's/^/     /'
check "metrics: rounds counted, the mean pseudo-gradient's norm, the communication share, the outer lr" \
  test "$(metric "$scratch/reference" "(last['rounds'], last['delta_norm'] > 0, 0 <= last['comm_share'] < 1, last['outer_lr'], last['step'])")" = "(18, True, True, 0.7, 120)"
check "metrics: one model-sized message each way per round, a 7th of it per step" \
  test "$(metric "$scratch/reference" "abs(lines[1]['bytes_sent'] * 7 - lines[1]['round_bytes_sent']) <= 7 and lines[1]['local_steps_by_worker'] == [7, 7]")" = True
check "TensorBoard: the rounds' figures under mode/" \
  python3 - "$(dirname "$0")/../common" "$scratch/reference" <<'PY'
import glob, sys
sys.path.insert(0, sys.argv[1])
import tfevents
tags = {t for f in glob.glob(sys.argv[2] + "/events.out.tfevents.*") for e in tfevents.read(f) for t in e["scalars"]}
sys.exit(0 if {"mode/delta_norm", "mode/comm_share", "mode/outer_lr", "train/lr"} <= tags else 1)
PY
check "checkpoints at the rounds that pass each 20 steps, and the final one" \
  test "$(find "$scratch/reference/ckpt" -name '*.ok' | wc -l)" -eq 6
"$pseval" --train-dir "$scratch/reference" > reference-eval.log 2>&1
check "pseval evaluates every checkpoint of the global weights" \
  bash -c "[ \$(tail -n +2 '$scratch/reference/eval.csv' | wc -l) -eq 6 ]"

brief_ends_here

# --- 2. a killed worker, then --resume ----------------------------------------------------
train "$scratch/killed" --straggle 1:40,2:40 > killed.log 2>&1 &
pid=$!
wait_for "$scratch/killed/ckpt/step-00000042.ok"
kill -9 "$(rank_pid "$scratch/killed" 2)"
wait $pid; rc=$?
check "killed worker: the job ends non-zero" test $rc -ne 0
run_logged resumed train "$scratch/killed" --resume
check "resume: continues from a round's checkpoint" has resumed.log "resuming at step (42|56|63|84|98|105)"
check "resume: the uninterrupted run's weights (outer momentum restored)" \
  within 1e-6 "$scratch/reference/trained_model.pt" "$scratch/killed/trained_model.pt"

# --- 3. pstrain-run: kill -> relaunch -> finish ---------------------------------------------
mpi_args=(--mpirun-arg=--oversubscribe)
[ "$(id -u)" -ne 0 ] || mpi_args+=(--mpirun-arg=--allow-run-as-root)
printf '#!/bin/sh\necho "localhost:3"\n' > discover.sh && chmod +x discover.sh
"$pstrain_run" --host-discovery-script ./discover.sh "${mpi_args[@]}" --discovery-interval 1 --max-restarts 2 \
  -- "${job[@]}" --straggle 1:40,2:40 --log-every 1 --train-dir "$scratch/elastic" > elastic.log 2>&1 &
supervisor=$!
wait_for "$scratch/elastic/ckpt/step-00000042.ok"
kill -9 "$(rank_pid "$scratch/elastic" 2)"
wait $supervisor; rc=$?
grep '^pstrain-run' elastic.log | sed 's/^/     /'
check "pstrain-run: a killed worker, relaunched, resumed, done" \
  bash -c "[ $rc -eq 0 ] && [ -e '$scratch/elastic/ckpt/step-00000120.ok' ] && grep -q 'resuming at step' elastic.log"
# The relaunch goes on from its checkpoint's step (42) a whole round at a time: the lines the
# lost job wrote after that checkpoint are written again by the relaunch, none in between.
resumed_at=$(grep -oE 'resuming at step [0-9]+' elastic.log | grep -oE '[0-9]+$')
check "pstrain-run: the lost round dropped, never half-applied: the relaunch redoes whole rounds from step $resumed_at" \
  test "$(metric "$scratch/elastic" "(lambda want: [l['step'] for l in lines][-len(want):] == want)(list(range($resumed_at + 7, 120, 7)) + [120])")" = True
check "pstrain-run: the relaunched run's weights are the uninterrupted run's" \
  within 1e-6 "$scratch/reference/trained_model.pt" "$scratch/elastic/trained_model.pt"

# --- 4. unequal workers: local steps dealt by speed ----------------------------------------
# (tools/bench-lowcomm measures the throughput against the workers alone.)
run_logged balanced with_timeout 200 "$mpirun" -np 3 "$pstrain" "${job[@]}" --steps 280 --local-steps 20 \
  --straggle 1:10,2:20 --balance --checkpoint-every 0 --train-dir "$scratch/balanced"
echo "     local steps dealt per round: $(metric "$scratch/balanced" "[l['local_steps_by_worker'] for l in lines]")"
check "--balance: the worker twice as fast gets more local steps; the round keeps its 40" \
  test "$(metric "$scratch/balanced" "last['local_steps_by_worker'][0] > 1.5 * last['local_steps_by_worker'][1] and sum(last['local_steps_by_worker']) == 40")" = True

# --- 5. compressed pseudo-gradients and weights ----------------------------------------------
run_logged compressed train "$scratch/compressed" --compress int8 --compress-weights fp16
check "int8 pseudo-gradients and fp16 weights: trains, a quarter of the bytes up" \
  test "$(metric "$scratch/compressed" "last['bytes_received'] * 3.5 < last['raw_bytes_received'] and last['loss'] < 2.3")" = True

# --- 6. overlapped rounds -------------------------------------------------------------------
run_logged overlapped train "$scratch/overlapped" --overlap-rounds
check "--overlap-rounds: trains to the last step, its loss as low as without" \
  test "$(metric "$scratch/overlapped" "last['step'] == 120 and last['loss'] < 2 * $(metric "$scratch/reference" "last['loss']") + 0.05")" = True
run_logged overlapped_coded train "$scratch/overlapped-coded" --overlap-rounds --compress int4 --compress-weights int4 \
  --fragments 1
check "--overlap-rounds with int4 both ways: trains to the last step, its loss as low as without" \
  test "$(metric "$scratch/overlapped-coded" "last['step'] == 120 and last['loss'] < 2 * $(metric "$scratch/reference" "last['loss']") + 0.05")" = True
run_logged streamed train "$scratch/streamed" --overlap-rounds --fragments 3 --compress int4 --compress-weights int4
grep 'pstrain: diloco' streamed.log | sed 's/^/     /'
check "--fragments 3: rounds of 3 steps each exchange a third of the weights (said, run.json), train to the last step" \
  bash -c "grep -q '3 local steps a round from round 4 on.*each exchanging one of 3 fragments (each fragment every 9 steps)' streamed.log && python3 -c \"import json,sys; r = json.load(open('$scratch/streamed/run.json'))['rounds']; sys.exit(0 if r['fragments'] == 3 and r['local_steps'] == 3 else 1)\" && [ $(metric "$scratch/streamed" "last['step'] == 120 and last['loss'] < 2 * $(metric "$scratch/reference" "last['loss']") + 0.05") = True ]"
check "--fragments 3: a streamed round's message is a third of a whole round's" \
  test "$(metric "$scratch/streamed" "lines[-2]['round_bytes_sent'] * 2.5 < $(metric "$scratch/overlapped-coded" "lines[-2]['round_bytes_sent']")")" = True
# --- 7. the defaults: int4 both ways, H and overlap from the first round -----------------------
with_timeout 200 "$mpirun" -np 3 "$pstrain" "${base[@]}" --train-dir "$scratch/defaults" --dry-run > defaults-plan.log 2>&1
sed -n '/rounds/,/outer/p' defaults-plan.log | sed 's/^/     /'
check "defaults, dry run: H measured in the first rounds, of 10 steps; int4 both ways, updates down" \
  bash -c "grep -q 'local steps auto: the first rounds, of 10 local steps' defaults-plan.log && grep -q 'coding    up int4 with error feedback, down int4 updates' defaults-plan.log"
defaults() {  # defaults DIR [flags...]
  local dir=$1; shift
  with_timeout 200 "$mpirun" -np 3 "$pstrain" "${base[@]}" --train-dir "$dir" "$@"
}
run_logged defaults defaults "$scratch/defaults"
grep 'pstrain: diloco' defaults.log | sed 's/^/     /'
check "defaults: the first rounds measured H, said on stdout and in run.json" \
  bash -c "grep -q 'rounds 2 to 3 took .* s a local step' defaults.log && python3 -c \"import json,sys; r = json.load(open('$scratch/defaults/run.json'))['rounds']; sys.exit(0 if 10 <= r['local_steps'] <= 500 and r['local_steps_setting'] == 'auto' else 1)\""
check "defaults: every worker holds the initial weights (one seed), so the first down message leaves them out" \
  grep -q "every worker holds the server's initial weights (their CRC-32s agree): the first down message leaves them out" defaults.log
check "defaults: each way at most a quarter of float32's bytes" \
  test "$(metric "$scratch/defaults" "last['bytes_received'] * 4 <= last['raw_bytes_received'] and last['bytes_sent'] * 4 <= last['raw_bytes_sent'] and last['step'] == 120")" = True
"$pseval" --train-dir "$scratch/defaults" > defaults-eval.log 2>&1
check "defaults: pseval evaluates every checkpoint" \
  bash -c "[ \$(tail -n +2 '$scratch/defaults/eval.csv' | wc -l) -eq \$(find '$scratch/defaults/ckpt' -name '*.ok' | wc -l) ]"
defaults "$scratch/defaults-killed" --straggle 1:40,2:40 > defaults-killed.log 2>&1 &
pid=$!
wait_for_checkpoints "$scratch/defaults-killed" 2
kill -9 "$(rank_pid "$scratch/defaults-killed" 2)"
wait $pid
run_logged defaults_resumed defaults "$scratch/defaults-killed" --resume
trained=$(metric "$scratch/defaults-killed" "last['step'] == 120 and last['loss'] < 2 * $(metric "$scratch/defaults" "last['loss']") + 0.05")
check "defaults: --resume measures H again and ends as well trained as the uninterrupted run" \
  bash -c "grep -q 'resuming at step' defaults_resumed.log && grep -q 'rounds 2 to 3 took' defaults_resumed.log && [ $trained = True ]"
check "defaults: a resumed run's first down message carries the weights (rank 0 holds the checkpoint's)" \
  bash -c "! grep -q \"every worker holds the server's initial weights\" defaults_resumed.log"
"$pstrain_run" --host-discovery-script ./discover.sh "${mpi_args[@]}" --discovery-interval 1 --max-restarts 2 \
  -- "${base[@]}" --straggle 1:40,2:40 --log-every 1 --train-dir "$scratch/defaults-elastic" > defaults-elastic.log 2>&1 &
supervisor=$!
wait_for_checkpoints "$scratch/defaults-elastic" 2
kill -9 "$(rank_pid "$scratch/defaults-elastic" 2)"
wait $supervisor; rc=$?
check "defaults: pstrain-run relaunches after a killed worker and finishes" \
  bash -c "[ $rc -eq 0 ] && [ -e '$scratch/defaults-elastic/ckpt/step-00000120.ok' ] && grep -q 'resuming at step' defaults-elastic.log"
# --- 8. --resume across modes and update rules (issue 50, finding 5) ----------------------
# A sync AdamW run's state is no diloco outer momentum, nor the other way round: each such
# resume says that the state starts afresh and which flags changed, and trains on.
across() {  # across LOG MODE [flags...]: the run in "$scratch/across", in MODE
  local log=$1 mode=$2; shift 2
  run_logged "$log" with_timeout 200 "$mpirun" -np 3 "$pstrain" --device cpu --model mlp --dataset synthetic \
    --synthetic-size 3000 --batch-size 16 --optimizer adamw --lr 0.001 --checkpoint-every 20 --log-every 20 \
    --threads 1 --timeout 60 --mode "$mode" --train-dir "$scratch/across" "$@"
}
across across-sync sync --steps 40
across across-diloco diloco --steps 80 --local-steps 10 --resume
across across-back sync --steps 120 --resume
grep -h 'pstrain: resume' across-diloco.log across-back.log | sed 's/^/     /'
check "resume sync adamw -> diloco: Adam's state starts afresh, said with both rules and the flags that changed" \
  bash -c "grep -qE \"optimizer state belongs to 'update adamw', this run's rule is 'outer [a-z]+': it starts afresh\" across-diloco.log && grep -qE 'configuration differs .*--mode sync -> diloco' across-diloco.log"
check "resume diloco -> sync adamw: the outer momentum is not taken for Adam's state; the run trains to its end" \
  bash -c "grep -qE \"belongs to 'outer [a-z]+', this run's rule is 'update adamw'\" across-back.log && [ -e '$scratch/across/ckpt/step-00000120.ok' ] && [ -f '$scratch/across/trained_model.pt' ]"
checks_done
