#!/usr/bin/env bash
# Compressed runs under mpirun: lossless zlib gives exactly the uncompressed weights; top-k
# with error feedback sends >= 50x fewer gradient bytes and still learns; fp16 weights and
# gradients in the point-to-point modes; int8 in allreduce; a bad codec spec is refused.
# Usage: compression.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "$0")/../common/checks.sh"
train() {  # train NP DIR [flags...]
  local np=$1 dir=$2; shift 2
  run_logged "$dir" with_timeout 240 "$mpirun" -np "$np" "$pstrain" --device cpu --model mlp --dataset synthetic --batch-size 32 \
    --lr 0.02 --log-every 10 --checkpoint-every 0 --timeout 60 --train-dir "$dir" "$@"
}
accuracy() { final_accuracy "$pseval" "$1"; }

# Byte ratios and exactness need a few steps (zlib's are the slow ones); learning, 150.
train 3 "$scratch/none" --steps 40
train 3 "$scratch/zlib" --steps 40 --compress zlib
d=$(max_weight_diff "$scratch/none/trained_model.pt" "$scratch/zlib/trained_model.pt")
ratio=$(metric "$scratch/zlib" "last['raw_bytes_received'] / last['bytes_received']")
echo "     zlib: weights differ from none by $d; raw/sent gradient bytes $ratio"
check "zlib: lossless, the same weights as none" ge 1e-7 "$d"

train 3 "$scratch/topk" --steps 150 --compress topk:0.01
ratio=$(metric "$scratch/topk" "last['raw_bytes_received'] / last['bytes_received']")
acc=$(accuracy "$scratch/topk")
echo "     topk:0.01: raw/sent gradient bytes $ratio, accuracy $acc%, codec $(metric "$scratch/topk" "last['codec_s']") s/step"
check "topk:0.01 sends >= 50x fewer gradient bytes" ge "$ratio" 50
check "topk:0.01 with error feedback learns (synthetic test accuracy >= 90%)" ge "$acc" 90

for mode in backup async; do
  train 3 "$scratch/$mode-fp16" --steps 40 --mode "$mode" --aggregate 1 --compress fp16 --compress-weights fp16
  down=$(metric "$scratch/$mode-fp16" "last['raw_bytes_sent'] / last['bytes_sent']")
  up=$(metric "$scratch/$mode-fp16" "last['raw_bytes_received'] / last['bytes_received']")
  echo "     $mode fp16: weights raw/sent $down, gradients raw/sent $up"
  check "$mode: fp16 halves the weight bytes" ge "$down" 1.9
  check "$mode: fp16 halves the gradient bytes" ge "$up" 1.9
  check "$mode: fp16 both ways completes" test -f "$scratch/$mode-fp16/trained_model.pt"
done

train 3 "$scratch/allreduce-int8" --steps 150 --mode allreduce --compress int8
acc=$(accuracy "$scratch/allreduce-int8")
check "allreduce: int8 gradients learn (accuracy $acc% >= 90%)" ge "$acc" 90

with_timeout 60 "$mpirun" -np 3 "$pstrain" --compress topk:3 --dataset synthetic --train-dir "$scratch/bad" > "$scratch/bad.log" 2>&1
rc=$?
check "a bad codec spec is refused (exit $rc): $(head -1 "$scratch/bad.log")" grep -q "topk:3.*RATIO in (0, 1\]" "$scratch/bad.log"
with_timeout 60 "$mpirun" -np 3 "$pstrain" --compress-weights topk:0.1 --dataset synthetic --train-dir "$scratch/bad2" > "$scratch/bad2.log" 2>&1
check "sparse weights are refused: $(head -1 "$scratch/bad2.log")" grep -q "sparsified weights make no sense" "$scratch/bad2.log"

checks_done
