#!/usr/bin/env bash
# End to end: a real 3-rank run on Fashion-MNIST with pseval following it, the weights
# loaded into PyTorch, the evaluator's handling of damaged checkpoints (looked at again
# with a backoff, as on a shared file system) and of a train dir it cannot write (--out-dir).
# Usage: train_evaluate.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -euo pipefail
source "$(dirname "$0")/../common/checks.sh"
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
here=$(cd "$(dirname "$0")" && pwd)
data=$PSTRAIN_DATA_DIR/fashion-mnist
[ -f "$data/t10k-images-idx3-ubyte.gz" ] || { echo "Fashion-MNIST missing in $data (apt-get install dataset-fashion-mnist)"; exit 1; }
rm -rf "$scratch" && mkdir -p "$scratch"
run="$scratch/run"
fail() { echo "FAIL: $*"; exit 1; }

# 1. Train with the evaluator following along.
mkdir -p "$run"
with_timeout 200 "$pseval" --train-dir "$run" --follow --poll-seconds 0.5 --idle-timeout 120 \
  --predictions "$scratch/predictions.txt" > "$scratch/pseval.log" 2>&1 &
follower=$!
with_timeout 200 "$mpirun" -np 3 "$pstrain" --model lenet --steps 150 --checkpoint-every 50 --log-every 25 \
  --lr 0.02 --train-dir "$run" --overwrite | tee "$scratch/pstrain.log"
wait $follower || { cat "$scratch/pseval.log"; fail "pseval --follow failed"; }
cat "$scratch/pseval.log"

grep -q "step 150/150" "$scratch/pstrain.log" || fail "no final progress line"
[ "$(cut -d, -f1 "$run/eval.csv" | tail -n +2 | tr '\n' ' ')" = "50 100 150 " ] || fail "eval.csv steps: $(cat "$run/eval.csv")"
[ "$(wc -l < "$run/eval.jsonl")" -eq 3 ] || fail "eval.jsonl should have 3 lines"
[ "$(wc -l < "$run/metrics.jsonl")" -eq 6 ] || fail "metrics.jsonl should have 6 lines"
for field in '"step":150' '"loss":' '"lr":' '"samples_per_s":' '"compute_s":' '"comm_s":' '"update_s":' '"bytes_sent":' '"bytes_received":'; do
  tail -1 "$run/metrics.jsonl" | grep -q "$field" || fail "metrics.jsonl lacks $field"
done
grep -q '"world_size":3' "$run/run.json" || fail "run.json lacks world_size"
# The start-up's phases, rank 0's to its first step and each rank's to the handshake, and
# mpi_yield_when_idle as pstrain chose it (3 ranks: on a host with fewer cores it is on).
python3 - "$run/run.json" <<'PY' || fail "run.json: start-up times or mpi_yield_when_idle missing or wrong"
import json, os, sys
run = json.load(open(sys.argv[1]))
phases = run["startup_s"]
for name in ("load", "mpi_init", "command_line", "model", "handshake", "first_step"):
    assert 0 <= phases[name] < 60, (name, phases)
assert abs(phases["total"] - sum(v for k, v in phases.items() if k != "total")) < 1e-6, phases
assert 0 < phases["total"] < 120, phases
for rank in run["ranks"]:
    assert "data" in rank["startup_s"] or rank["rank"] == 0, rank
    expected = "1 (set by pstrain" if 3 > os.cpu_count() else "default"
    assert rank["mpi_yield_when_idle"].startswith(expected), rank
PY
# The TensorBoard event files (rank 0's and pseval's), read by an independent reader: every
# CRC, and the scalars equal to metrics.jsonl and eval.jsonl/eval.csv.
python3 "$here/../common/tfevents.py" check "$run" || fail "the TensorBoard event files disagree with metrics.jsonl/eval.csv"
accuracy=$(tail -1 "$run/eval.csv" | cut -d, -f5)
python3 -c "import sys; sys.exit(0 if float('$accuracy') > 0.70 else 1)" || fail "accuracy $accuracy after 150 steps"

# 2. Running pseval again evaluates nothing twice.
"$pseval" --train-dir "$run" > "$scratch/again.log" 2>&1
[ "$(wc -l < "$run/eval.csv")" -eq 4 ] || fail "a second pseval evaluated checkpoints again"

# 3. PyTorch loads trained_model.pt into the twin module and predicts exactly as pseval did.
"$PSTRAIN_PYTHON" "$here/check_interop.py" lenet "$run/trained_model.pt" "$data" "$scratch/predictions.txt"

# 4. Damaged checkpoints are reported and skipped; the good one is still evaluated.
damaged="$scratch/damaged"
mkdir -p "$damaged/ckpt" && cp "$run"/ckpt/* "$damaged/ckpt/"
printf '\x00\x01\x02' | dd of="$damaged/ckpt/step-00000050.pt" bs=1 seek=100000 conv=notrunc 2>/dev/null
head -c 1000 "$damaged/ckpt/step-00000100.pt" > "$scratch/cut" && mv "$scratch/cut" "$damaged/ckpt/step-00000100.pt"
echo "garbage" > "$damaged/ckpt/step-00000200.pt" && echo "garbage" > "$damaged/ckpt/step-00000200.ok"
rc=0; out=$("$pseval" --train-dir "$damaged" --retry-for 1 2>&1) || rc=$?
echo "$out"
[ $rc -eq 3 ] || fail "pseval on damaged checkpoints: exit $rc, not 3 (some skipped)"
grep -q "3 checkpoint(s) could not be evaluated (exit 3)" <<<"$out" || fail "no summary of the skipped checkpoints"
grep -q "skipping step 50 (after 2 tries in 1 s): .*checksum" <<<"$out" || fail "flipped bytes not reported"
grep -q "skipping step 100 (after 2 tries in 1 s): .*truncated" <<<"$out" || fail "truncation not reported"
grep -q "skipping step 200 (after 2 tries in 1 s): .*marker" <<<"$out" || fail "garbage marker not reported"
[ "$(tail -n +2 "$damaged/eval.csv" | cut -d, -f1)" = "150" ] || fail "the good checkpoint was not evaluated"

# 5. A checkpoint that a shared file system shows incomplete for a while (here: cut short,
#    made whole 2 s later) is evaluated once it is whole, not skipped: pseval looks again
#    1, 2, 4 ... s later.
late="$scratch/late"
mkdir -p "$late/ckpt" && cp "$run"/ckpt/step-00000050.* "$late/ckpt/"
head -c 1000 "$run/ckpt/step-00000050.pt" > "$late/ckpt/step-00000050.pt"
(sleep 2 && cp "$run/ckpt/step-00000050.pt" "$late/ckpt/step-00000050.pt.tmp" &&
  mv "$late/ckpt/step-00000050.pt.tmp" "$late/ckpt/step-00000050.pt") &
out=$("$pseval" --train-dir "$late" 2>&1) || fail "pseval on a checkpoint whole after 2 s: $out"
wait
echo "$out"
[ "$(tail -n +2 "$late/eval.csv" | cut -d, -f1)" = "50" ] || fail "the checkpoint made whole after 2 s was not evaluated"

# 6. A train dir this user cannot write (a read-only copy): pseval says to give --out-dir,
#    and with it evaluates into that directory, the train dir untouched.
readonly_run="$scratch/readonly"
mkdir -p "$readonly_run"
# out_dir_checks: the checks of 6, on $readonly_run made read-only.
out_dir_checks() {
  local before after rc=0 out
  before=$(ls -lR "$readonly_run")
  out=$("$pseval" --train-dir "$readonly_run" 2>&1) || rc=$?
  echo "$out"
  { [ $rc -ne 0 ] && grep -q "read-only for this user): give --out-dir" <<<"$out"; } || fail "no --out-dir advice (exit $rc)"
  out=$("$pseval" --train-dir "$readonly_run" --out-dir "$scratch/mine/results" 2>&1) || fail "--out-dir: $out"
  after=$(ls -lR "$readonly_run")
  [ "$(tail -n +2 "$scratch/mine/results/eval.csv" | cut -d, -f1)" = "150" ] || fail "--out-dir: no eval.csv row"
  [ -s "$scratch/mine/results/eval.jsonl" ] && ls "$scratch/mine/results"/events.out.tfevents.* > /dev/null ||
    fail "--out-dir: eval.jsonl or the event file missing"
  [ "$before" = "$after" ] || fail "--out-dir: the train dir changed"
}
if [ "$(id -u)" -ne 0 ]; then
  mkdir -p "$readonly_run/ckpt" && cp "$run"/ckpt/step-00000150.* "$readonly_run/ckpt/"
  chmod -R a-w "$readonly_run"
  trap 'chmod -R u+w "$readonly_run"' EXIT
  out_dir_checks
elif [ "$(uname)" = Linux ] && mount -t tmpfs -o size=16m tmpfs "$readonly_run"; then  # linux-only
  # root writes whatever the modes say: a read-only mount
  trap 'umount "$readonly_run"' EXIT  # linux-only
  mkdir -p "$readonly_run/ckpt" && cp "$run"/ckpt/step-00000150.* "$readonly_run/ckpt/"
  mount -o remount,ro "$readonly_run"  # linux-only
  out_dir_checks
else
  echo "skipped: a train dir read-only to root needs Linux (mount -t tmpfs)"
fi
# 7. A FIFO in a checkpoint's place is skipped, not waited on (pseval exits 3, the others
#    evaluated); an empty eval.csv (a full disk's leftover) gets its header before the rows.
fifo="$scratch/fifo"
mkdir -p "$fifo/ckpt" && cp "$run"/ckpt/step-00000050.* "$run"/ckpt/step-00000150.* "$fifo/ckpt/"
rm "$fifo/ckpt/step-00000150.pt" && mkfifo "$fifo/ckpt/step-00000150.pt"
: > "$fifo/eval.csv"
rc=0; out=$(with_timeout 60 "$pseval" --train-dir "$fifo" --retry-for 0 2>&1) || rc=$?
echo "$out"
[ $rc -eq 3 ] || fail "a FIFO for a checkpoint: exit $rc, not 3"
grep -q "skipping step 150 .*not a regular file" <<<"$out" || fail "the FIFO not named"
[ "$(head -1 "$fifo/eval.csv" | cut -d, -f1)" = step ] && [ "$(tail -n +2 "$fifo/eval.csv" | cut -d, -f1)" = 50 ] ||
  fail "an empty eval.csv got no header, or the good checkpoint no row: $(cat "$fifo/eval.csv")"
echo "e2e: all checks passed"
