#!/usr/bin/env bash
# End to end: a real 3-rank run on Fashion-MNIST with pseval following it, the weights
# loaded into PyTorch, and the evaluator's handling of damaged checkpoints.
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
out=$("$pseval" --train-dir "$damaged" 2>&1) || fail "pseval crashed on damaged checkpoints: $out"
echo "$out"
grep -q "skipping step 50 (after 3 tries): .*checksum" <<<"$out" || fail "flipped bytes not reported"
grep -q "skipping step 100 (after 3 tries): .*truncated" <<<"$out" || fail "truncation not reported"
grep -q "skipping step 200 (after 3 tries): .*marker" <<<"$out" || fail "garbage marker not reported"
[ "$(tail -n +2 "$damaged/eval.csv" | cut -d, -f1)" = "150" ] || fail "the good checkpoint was not evaluated"
echo "e2e: all checks passed"
