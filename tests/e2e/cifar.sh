#!/usr/bin/env bash
# resnet20 on a small CIFAR-10-format set written here: a real 3-rank run, evaluated by
# pseval; then a truncated batch file must stop the job with a message naming it.
# Usage: cifar.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -euo pipefail
source "$(dirname "$0")/../common/checks.sh"
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch/cifar-10-batches-bin"
fail() { echo "FAIL: $*"; exit 1; }
data="$scratch/cifar-10-batches-bin"
python3 - "$data" <<'PY'
import os, random, sys
random.seed(5)
def write(name, n):
    with open(os.path.join(sys.argv[1], name), "wb") as f:
        for i in range(n):
            label = i % 10
            # class-dependent colour bias, so the set is learnable, plus noise
            f.write(bytes([label]) + bytes(min(255, max(0, 25 * label * (c + 1) // 3 + random.randint(-40, 40)))
                                           for c in range(3) for _ in range(1024)))
for b in range(1, 6):
    write(f"data_batch_{b}.bin", 24)
write("test_batch.bin", 40)
PY
run="$scratch/run"
with_timeout 240 "$mpirun" -np 3 "$pstrain" --device cpu --model resnet20 --dataset cifar10 --data-dir "$data" --batch-size 8 \
  --steps 8 --checkpoint-every 4 --log-every 4 --lr 0.05 --train-dir "$run" --overwrite | tee "$scratch/pstrain.log"
grep -q "step 8/8" "$scratch/pstrain.log" || fail "no final progress line"
grep -q '"data_wait_s":' "$run/metrics.jsonl" || fail "metrics.jsonl lacks data_wait_s"
"$pseval" --train-dir "$run" --data-dir "$data" | tee "$scratch/pseval.log"
[ "$(tail -n +2 "$run/eval.csv" | cut -d, -f1,3 | tr '\n' ' ')" = "4,40 8,40 " ] || fail "eval.csv: $(cat "$run/eval.csv")"
"$PSTRAIN_PYTHON" - "$run/ckpt/step-00000008.pt" <<'PY'
import sys, torch
ckpt = torch.load(sys.argv[1], weights_only=True)
assert ckpt["__meta__"]["model"] == "resnet20", ckpt["__meta__"]
mean = ckpt["model"]["bn1.running_mean"]
assert mean.abs().max() > 1e-3, "BatchNorm statistics never reached the server"
print("checkpoint: resnet20, bn1.running_mean", [round(v, 4) for v in mean[:4].tolist()], "...")
PY

# A truncated batch file stops every rank with a message naming it.
head -c 50000 "$data/data_batch_2.bin" > "$scratch/short" && mv "$scratch/short" "$data/data_batch_2.bin"
if out=$(with_timeout 60 "$mpirun" -np 3 "$pstrain" --model resnet20 --dataset cifar10 --data-dir "$data" --steps 2 \
         --train-dir "$scratch/run2" 2>&1); then fail "a truncated CIFAR file was accepted"; fi
grep -qE "rank [12]: .*data_batch_2.bin: 50000 bytes is not a whole number of 3073-byte CIFAR-10 records" <<<"$out" \
  || fail "unclear message for a truncated file: $out"
echo "cifar e2e: all checks passed"
