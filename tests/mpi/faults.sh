#!/usr/bin/env bash
# Faults in real mpirun jobs: a worker SIGKILLed mid-run, SIGTERM to mpirun, a corrupt
# newest checkpoint, NaN losses, a checkpoint of another model. Each must end the job
# quickly with a message that says what happened, leave only complete checkpoints, and
# --resume must then finish with exactly the weights of an uninterrupted run.
# Usage: faults.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "$0")/../common/checks.sh"
train() {  # train DIR [flags...]: the run every case uses (synthetic data, fast)
  local dir=$1; shift
  with_timeout 120 "$mpirun" -np 3 "$pstrain" --device cpu --model mlp --dataset synthetic --steps 300 --batch-size 32 \
    --lr 0.02 --lr-decay cosine --warmup-steps 20 --checkpoint-every 20 --log-every 50 --train-dir "$dir" "$@"
}
same_weights() {  # same_weights A.pt B.pt: max |a - b| <= 1e-6 over every tensor
  "$PSTRAIN_PYTHON" - "$1" "$2" <<'PY'
import sys, torch
a, b = torch.load(sys.argv[1], weights_only=True), torch.load(sys.argv[2], weights_only=True)
assert a.keys() == b.keys()
diff = max((a[k] - b[k]).abs().max().item() for k in a)
print(f"     max |uninterrupted - resumed| = {diff:.3g}")
sys.exit(0 if diff <= 1e-6 else 1)
PY
}
wait_for() {  # wait_for FILE: up to 60 s
  for _ in $(seq 600); do [ -e "$1" ] && return 0; sleep 0.1; done; return 1
}

# The uninterrupted reference.
train "$scratch/reference" > "$scratch/reference.log" 2>&1
check "reference run completes" test -f "$scratch/reference/trained_model.pt"

# 1. SIGKILL a worker mid-run.
train "$scratch/killed" > "$scratch/killed.log" 2>&1 &
job=$!
wait_for "$scratch/killed/ckpt/step-00000060.ok"
victim=$(rank_pid "$scratch/killed" 2)
kill -9 "$victim"
killed_at=$(date +%s)
wait $job; rc=$?
took=$(( $(date +%s) - killed_at ))
cat "$scratch/killed.log" | grep -vE '^(\[[^]]*\] )?step ' | sed 's/^/     /'
check "killed worker: the job ends non-zero" test $rc -ne 0
check "killed worker: every rank gone within 30 s (took ${took} s)" test $took -le 30
check "killed worker: mpirun names the lost rank" has "$scratch/killed.log" "process rank 2 .* exited on signal 9"
check "killed worker: the others say at which step they stopped" has "$scratch/killed.log" "pstrain: rank 0: stopped by signal 15 at step [0-9]+"
check "killed worker: no pstrain process left" test -z "$(rank_pid "$scratch/killed" 0)$(rank_pid "$scratch/killed" 1)"
last=$(find "$scratch/killed/ckpt" -name '*.ok' | wc -l | tr -d ' ')
"$pseval" --train-dir "$scratch/killed" > "$scratch/killed-eval.log" 2>&1
check "killed worker: every published checkpoint is whole ($last evaluated)" \
  bash -c "! grep -q skipping '$scratch/killed-eval.log' && [ \$(tail -n +2 '$scratch/killed/eval.csv' | wc -l) -eq $last ]"

brief_ends_here

# 2. Corrupt the newest checkpoint, then resume: the previous one is used, and the result
#    equals the uninterrupted run.
newest=$(ls "$scratch/killed/ckpt"/*.pt | tail -1)
printf 'garbage' | dd of="$newest" bs=1 seek=1000 conv=notrunc 2>/dev/null
train "$scratch/killed" --resume > "$scratch/resumed.log" 2>&1
check "resume: completes" test -f "$scratch/killed/trained_model.pt"
check "resume: the corrupt newest checkpoint is reported and skipped" has "$scratch/resumed.log" "resume: skipping step [0-9]+: .*checksum"
check "resume: continues from the previous valid checkpoint" has "$scratch/resumed.log" "resuming at step [0-9]+"
check "resume: same weights as the uninterrupted run" same_weights "$scratch/reference/trained_model.pt" "$scratch/killed/trained_model.pt"
check "resume: metrics.jsonl goes on to the last step" has "$scratch/killed/metrics.jsonl" '"step":300,'
check "resume: a second TensorBoard event file whose steps go on from the checkpoint to 300" \
  python3 - "$(dirname "$0")/../common" "$scratch/killed" <<'PY'
import glob, sys
sys.path.insert(0, sys.argv[1])
import tfevents
files = sorted(glob.glob(sys.argv[2] + "/events.out.tfevents.*"), key=lambda f: tfevents.read(f)[0]["wall_time"])
training = [events[1:] for events in map(tfevents.read, files) if "train/loss" in events[-1]["scalars"]]  # not pseval's
assert len(training) == 2, files
first, second = ([e["step"] for e in events] for events in training)
assert second[0] > 0 and second[-1] == 300 and second == sorted(second), (first, second)
PY

# 3. SIGTERM to mpirun (what Ctrl-C does): every rank stops, checkpoints stay whole.
train "$scratch/term" > "$scratch/term.log" 2>&1 &
job=$!
wait_for "$scratch/term/ckpt/step-00000040.ok"
sleep 0.3
for p in $(pids_of 'mpiexec|mpirun|orterun|prterun' "$scratch/term"); do kill -TERM "$p"; done
wait $job; rc=$?
sleep 1
# mpirun stops its output forwarding first, so the ranks' own last words may not show here.
check "SIGTERM: the job ends non-zero" test $rc -ne 0
check "SIGTERM: no pstrain process left" test -z "$(rank_pid "$scratch/term" 0)$(rank_pid "$scratch/term" 1)$(rank_pid "$scratch/term" 2)"
published=$(find "$scratch/term/ckpt" -name '*.ok' | wc -l | tr -d ' ')
"$pseval" --train-dir "$scratch/term" > "$scratch/term-eval.log" 2>&1
check "SIGTERM: all $published published checkpoints are whole" \
  bash -c "! grep -q skipping '$scratch/term-eval.log' && [ \$(tail -n +2 '$scratch/term/eval.csv' | wc -l) -eq $published ]"
train "$scratch/term" --resume > "$scratch/term-resume.log" 2>&1
check "SIGTERM: --resume completes with the uninterrupted weights" same_weights "$scratch/reference/trained_model.pt" "$scratch/term/trained_model.pt"

# 4. NaN: stop naming step and rank, keeping the last good checkpoint; or skip and count.
train "$scratch/nan" --inject-nan 2:45 > "$scratch/nan.log" 2>&1; rc=$?
check "NaN: the job ends non-zero" test $rc -ne 0
check "NaN: the message names step and rank" has "$scratch/nan.log" "pstrain: rank 2: step 45: the loss of this worker's batch is nan"
check "NaN: the last good checkpoint (step 40) is kept, nothing after it" \
  bash -c "[ \"\$(ls '$scratch/nan/ckpt' | grep '\.ok$' | tail -1)\" = step-00000040.ok ]"
train "$scratch/skip" --inject-nan 1:45 --skip-nonfinite > "$scratch/skip.log" 2>&1; rc=$?
check "--skip-nonfinite: completes" test $rc -eq 0
check "--skip-nonfinite: says so at the step" has "$scratch/skip.log" "step 45: non-finite loss or gradient .*update skipped"
check "--skip-nonfinite: counted in metrics.jsonl" has "$scratch/skip/metrics.jsonl" '"step":300,.*"skipped_nonfinite":1'

# 5. Resuming with another model's checkpoints, and --resume with --overwrite.
out="$scratch/other.log"
with_timeout 60 "$mpirun" -np 3 "$pstrain" --model convnet --dataset synthetic --steps 10 --train-dir "$scratch/reference" --resume > "$out" 2>&1; rc=$?
check "resume with another model: refused" bash -c "[ $rc -ne 0 ] && grep -q 'a checkpoint of mlp on synthetic, but this run trains convnet' '$out'"
with_timeout 60 "$mpirun" -np 3 "$pstrain" --dataset synthetic --train-dir "$scratch/x" --resume --overwrite > "$out" 2>&1; rc=$?
check "--resume with --overwrite: refused" bash -c "[ $rc -eq 2 ] && grep -q 'choose one' '$out'"
train "$scratch/fresh" --resume > "$out" 2>&1; rc=$?
check "--resume in an empty dir: starts at step 0" bash -c "[ $rc -eq 0 ] && grep -q 'no valid checkpoint' '$out'"

# 6. A full disk (a 48 MiB tmpfs, filled after the first checkpoint): the periodic
#    checkpoints, metrics lines and TensorBoard records that cannot be written are
#    reported and training goes on; published checkpoints stay whole; only the final
#    write is fatal. Linux as root (mount); elsewhere skipped.
disk="$scratch/disk"
mkdir -p "$disk"
if [ "$(uname)" = Linux ] && mount -t tmpfs -o size=48m tmpfs "$disk" 2>/dev/null; then  # linux-only
  trap 'umount "$disk" 2>/dev/null' EXIT
  full_run() {  # full_run NAME FREE_AFTER_SECONDS (empty: the disk stays full)
    train "$disk/$1" --straggle 2:20 > "$scratch/$1.log" 2>&1 &
    local job=$!
    wait_for "$disk/$1/ckpt/step-00000020.ok"
    dd if=/dev/zero of="$disk/filler" bs=64k 2>/dev/null
    if [ -n "$2" ]; then sleep "$2"; rm -f "$disk/filler"; fi
    wait $job
    rc=$?
    rm -f "$disk/filler"
    grep -E "not written|could not|error" "$scratch/$1.log" | head -4 | sed 's/^/     /'
  }
  whole() {  # whole DIR: every published checkpoint evaluates, metrics.jsonl parses, every event record's CRC holds
    "$pseval" --train-dir "$1" > "$1.eval.log" 2>&1 && ! grep -q skipping "$1.eval.log" &&
      [ "$(tail -n +2 "$1/eval.csv" | wc -l)" -eq "$(find "$1/ckpt" -name '*.ok' | wc -l)" ] &&
      python3 -c 'import json, sys; [json.loads(l) for l in open(sys.argv[1])]' "$1/metrics.jsonl" &&
      python3 "$(dirname "$0")/../common/tfevents.py" dump "$1"/events.out.tfevents.* > /dev/null &&
      [ -z "$(find "$1/ckpt" -name '*.tmp*')" ]
  }
  full_run filled 2
  check "full disk: a periodic checkpoint fails with a message naming the step and why" \
    has "$scratch/filled.log" "pstrain: step [0-9]+: checkpoint not written, training goes on: .*No space left on device"
  check "full disk, freed before the end: training finishes (exit 0) with its final checkpoint" \
    bash -c "[ $rc -eq 0 ] && [ -f '$disk/filled/ckpt/step-00000300.ok' ] && [ -f '$disk/filled/trained_model.pt' ]"
  check "full disk: every published checkpoint loads, no torn line or record, no temporary left" whole "$disk/filled"
  rm -rf "$disk/filled"
  full_run stays ""
  check "disk full to the end: only the final write fails the job" \
    bash -c "[ $rc -ne 0 ] && grep -q 'could not be saved\|write failed' '$scratch/stays.log' && grep -q 'step 300/300' '$scratch/stays.log'"
  check "disk full to the end: the last good checkpoint still loads" whole "$disk/stays"
  umount "$disk"
  trap - EXIT
else
  echo "skipped: a full disk needs Linux and root (mount -t tmpfs)"
fi

checks_done
