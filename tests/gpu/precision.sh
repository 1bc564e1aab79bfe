#!/usr/bin/env bash
# --precision on CUDA workers (issue 41), under mpirun, with the README's walk-through LM (a
# 2-layer GPT on text, AdamW, clipping, 2 workers sharing the GPU, 150 steps):
#   1. fp32, bf16 and fp16 train; bf16's and fp16's val loss (pseval) within 3% of fp32's,
#      their first loss not fp32's (the forward pass did run in the lower precision), no
#      weight that is not finite; each run's step time and, for fp16, the loss scale it
#      ended with and the overflows it skipped (the real ones of float16, not injected);
#   2. fp16 with an overflow injected on worker 1 at step 4: that update is skipped (weights
#      and Adam's state as before it), the scale halves, and the checkpoint's "scaler" loads
#      into PyTorch's own GradScaler on CUDA with that scale.
# Exits 77 ("skipped") where pstrain has no CUDA device.
# Usage: precision.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
here=$(cd "$(dirname "$0")" && pwd)
tools=$here/../../tools
source "$here/../common/checks.sh"
python=$PSTRAIN_PYTHON
rm -rf "$scratch" && mkdir -p "$scratch" && cd "$scratch" || exit 1
with_timeout 60 "$mpirun" -np 1 "$pstrain" --device cuda --mode allreduce --dataset synthetic --train-dir plan \
  --dry-run > plan.log 2>&1
if grep -q -- "--device cuda: this libtorch or machine lacks it" plan.log; then
  echo "skipped: $(grep -m1 -o 'this libtorch or machine lacks it.*' plan.log)"
  exit 77
fi
val_loss() { tail -1 "$1/eval.csv" | cut -d, -f4; }

sample_text input.txt
"$python" "$tools/text_to_bin.py" input.txt text > text.log 2>&1 || { cat text.log; exit 1; }
"$python" "$tools/gpt_model.py" gpt.pt --meta text/meta.json --block-size 32 --layers 2 --heads 4 --embd 64 > gpt.log 2>&1 \
  || { cat gpt.log; exit 1; }
common=(--device cuda --threads 2 --timeout 120 --model gpt.pt --dataset text/train.bin --block-size 32
        --optimizer adamw --lr 3e-3 --weight-decay 0.1 --clip-grad-norm 1 --batch-size 16)

# --- 1. fp32, bf16, fp16 ------------------------------------------------------------------
for precision in fp32 bf16 fp16; do
  run_logged "$precision" with_timeout 600 "$mpirun" -np 3 "$pstrain" "${common[@]}" --steps 150 --log-every 1 \
    --checkpoint-every 150 --precision $precision --train-dir $precision
  "$pseval" --train-dir $precision --model gpt.pt > $precision.eval.log 2>&1 || tail -3 $precision.eval.log
done
fp32=$(val_loss fp32)
for precision in fp32 bf16 fp16; do
  echo "     $precision: val loss $(val_loss $precision), first loss $(metric $precision "lines[0]['loss']" 2>/dev/null)," \
       "$(metric $precision "round(1000 * last['elapsed_s'] / len(lines), 2)" 2>/dev/null) ms a step" \
       "$([ $precision = fp16 ] && metric fp16 "f\"loss scale at the end {last.get('loss_scale')}, {last.get('skipped_nonfinite', 0)} update(s) skipped\"" 2>/dev/null)"
done
first32=$(metric fp32 "lines[0]['loss']" 2>/dev/null)
for precision in bf16 fp16; do
  check "$precision: val loss within 3% of fp32's" \
    awk -v a="${fp32:-0}" -v b="$(val_loss $precision)" 'BEGIN { exit !(a > 0 && b > 0 && b <= 1.03 * a) }'
  check "$precision: the forward pass ran in $precision (its first loss is not fp32's)" \
    test "$(metric $precision "lines[0]['loss'] != $first32" 2>/dev/null)" = True
  check "$precision: every trained weight is finite" "$python" -c "
import sys, torch
w = torch.load('$precision/trained_model.pt', weights_only=True)
sys.exit(0 if all(torch.isfinite(t).all() for t in w.values()) else 1)"
done
check "fp16: the loss scale is on and logged" test "$(metric fp16 "'loss_scale' in last" 2>/dev/null)" = True
check "bf16: no loss scale" test "$(metric bf16 "'loss_scale' not in last" 2>/dev/null)" = True

# --- 2. fp16, an overflow injected --------------------------------------------------------
run_logged overflow with_timeout 300 "$mpirun" -np 3 "$pstrain" "${common[@]}" --steps 8 --log-every 1 \
  --checkpoint-every 1 --precision fp16 --inject-overflow 1:4 --train-dir overflow
check "overflow: the skip is said" grep -qE "step 4: the gradient overflowed at loss scale [0-9]+; update skipped" overflow.log
check "overflow: the skipped update changed neither weights nor Adam's state; the scale halved; GradScaler loads it" \
  "$python" - <<'PY'
import torch
def ckpt(step):
    return torch.load(f"overflow/ckpt/step-{step:08d}.pt")  # weights_only by default since PyTorch 2.6
def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
before, after = ckpt(4), ckpt(5)
assert same(before["model"], after["model"]), "the weights moved"
assert same(before["optimizer"]["exp_avg"], after["optimizer"]["exp_avg"]), "Adam's state moved"
assert not same(ckpt(5)["model"], ckpt(6)["model"]), "the next update did not move the weights"
assert after["scaler"]["scale"] == before["scaler"]["scale"] / 2, (before["scaler"], after["scaler"])
scaler = torch.amp.GradScaler("cuda")
scaler.load_state_dict(after["scaler"])
assert scaler.get_scale() == after["scaler"]["scale"], scaler.get_scale()
print(f"     scale {before['scaler']['scale']} -> {after['scaler']['scale']}; GradScaler('cuda').get_scale() = {scaler.get_scale()}")
PY
checks_done
