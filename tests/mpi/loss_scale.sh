#!/usr/bin/env bash
# Dynamic loss scaling (--loss-scale, what --precision fp16 turns on) under mpirun: an
# injected overflow skips its update (weights and optimizer state as before it), halves the
# scale, and good updates double it again, with GradScaler's rule and its state_dict in
# every checkpoint; a scaled fp32 run ends where an unscaled one does; --resume continues
# the scale; async, allreduce, gossip and diloco survive an overflow; --precision fp16
# trains where this libtorch autocasts to float16 and is refused where it does not.
# Last, --inject-overflow's refusals, and its overflow without loss scaling.
# Usage: loss_scale.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 mpirun=$3 scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "$0")/../common/checks.sh"
train() {  # train DIR [flags...]: 2 workers, an MLP on synthetic data, Adam, 8 steps
  local dir=$1; shift
  run_logged "$dir" with_timeout 120 "$mpirun" -np 3 "$pstrain" --device cpu --model mlp --dataset synthetic \
    --steps 8 --batch-size 16 --optimizer adam --lr 0.001 --checkpoint-every 1 --log-every 1 --train-dir "$dir" "$@"
}
# checkpoints DIR PYTHON: PYTHON with `ckpt(step)` (DIR's checkpoint after that many updates).
checkpoints() {
  "$PSTRAIN_PYTHON" - "$1" "$2" <<'PY'
import os, sys, torch
directory, code = sys.argv[1], sys.argv[2]
def ckpt(step):
    return torch.load(os.path.join(directory, "ckpt", f"step-{step:08d}.pt"))
def same(a, b):
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
sys.exit(0 if eval(code) else 1)
PY
}

# 1. Window 3, an overflow on worker 1 at step 4: scales 65536 -> 131072 after steps 0-2,
#    back to 65536 at step 4 (skipped), 131072 again after steps 5-7.
train "$scratch/overflow" --loss-scale dynamic --loss-scale-window 3 --inject-overflow 1:4
check "overflow: the run completes" test -f "$scratch/overflow/trained_model.pt"
check "overflow: the skip is said with its scales" \
  grep -q "step 4: the gradient overflowed at loss scale 131072; update skipped, the scale is now 65536" "$scratch/overflow.log"
check "overflow: the skipped update changed neither weights nor Adam's state" \
  checkpoints "$scratch/overflow" "same(ckpt(4)['model'], ckpt(5)['model']) and same(ckpt(4)['optimizer']['exp_avg'], ckpt(5)['optimizer']['exp_avg']) and not same(ckpt(3)['model'], ckpt(4)['model']) and not same(ckpt(5)['model'], ckpt(6)['model'])"
check "overflow: Adam counted 7 updates of 8 steps" checkpoints "$scratch/overflow" "ckpt(8)['optimizer']['step'] == 7"
check "overflow: each checkpoint's scaler follows GradScaler's rule" \
  checkpoints "$scratch/overflow" "[(ckpt(s)['scaler']['scale'], ckpt(s)['scaler']['_growth_tracker']) for s in range(1, 9)] == [(65536.0, 1), (65536.0, 2), (131072.0, 0), (131072.0, 1), (65536.0, 0), (65536.0, 1), (65536.0, 2), (131072.0, 0)]"
check "overflow: the scaler is GradScaler.state_dict()'s form" \
  checkpoints "$scratch/overflow" "ckpt(8)['scaler'] == {'scale': 131072.0, 'growth_factor': 2.0, 'backoff_factor': 0.5, 'growth_interval': 3, '_growth_tracker': 0}"
check "overflow: metrics.jsonl counts the skip and logs the scale" \
  test "$(metric "$scratch/overflow" "last['skipped_nonfinite'] == 1 and [l['loss_scale'] for l in lines][3:5] == [131072, 65536]")" = True
with_timeout 120 "$mpirun" -np 3 "$pstrain" --device cpu --model mlp --dataset synthetic --train-dir "$scratch/plan" \
  --loss-scale dynamic --loss-scale-window 3 --dry-run > "$scratch/plan.log" 2>&1
check "the dry run's plan names the loss scale" grep -q "dynamic loss scale from 65536 (doubled after 3 good updates" "$scratch/plan.log"

brief_ends_here

# 2. Without an overflow a scaled fp32 run ends where an unscaled one does: the scales are
#    powers of two, so scaling and unscaling are exact.
train "$scratch/scaled" --loss-scale dynamic --loss-scale-window 3
train "$scratch/unscaled"
diff=$(max_weight_diff "$scratch/scaled/trained_model.pt" "$scratch/unscaled/trained_model.pt")
check "no overflow: scaled and unscaled weights agree (max |diff| $diff)" ge 1e-6 "$diff"
check "no overflow: an unscaled run saves no scaler" checkpoints "$scratch/unscaled" "'scaler' not in ckpt(8)"

# 3. --resume from step 7 (scale 65536, two good updates counted): the next good update
#    doubles the scale as in the straight run, and the weights are the straight run's.
cp -R "$scratch/overflow" "$scratch/resumed"
rm -f "$scratch/resumed/ckpt/step-00000008".* "$scratch/resumed"/trained_model*
train "$scratch/resumed" --loss-scale dynamic --loss-scale-window 3 --inject-overflow 1:4 --resume
check "resume: the scale goes on from the checkpoint's" \
  checkpoints "$scratch/resumed" "ckpt(8)['scaler'] == {'scale': 131072.0, 'growth_factor': 2.0, 'backoff_factor': 0.5, 'growth_interval': 3, '_growth_tracker': 0}"
diff=$(max_weight_diff "$scratch/overflow/trained_model.pt" "$scratch/resumed/trained_model.pt")
check "resume: the straight run's weights (max |diff| $diff)" test "$diff" = "0.0"

# 4. The other exchanges skip an overflow alike: point to point (async), every rank's own
#    update (allreduce, gossip), the workers' inner steps (diloco). Not backup: its quorum
#    of one may drop the overflowed gradient as late.
#    An async worker counts its own batches: worker 1's first (batch 0) is missed only if
#    worker 2 makes all 8 updates before it; its fourth was missed under CI's load.
for mode in async allreduce gossip diloco; do
  extra=() at=3
  [ "$mode" = diloco ] && extra=(--local-steps 2)
  [ "$mode" = async ] && at=0
  train "$scratch/$mode" --mode "$mode" --loss-scale dynamic --inject-overflow "1:$at" ${extra[@]+"${extra[@]}"}
  check "$mode: an overflow is skipped and the run completes" \
    bash -c "test -f '$scratch/$mode/trained_model.pt' && grep -q 'the gradient overflowed at loss scale 65536; update skipped, the scale is now 32768' '$scratch/$mode.log'"
done
# diloco, a round in which a worker's scale skipped every local step (one a round, H = 1):
# that worker's pseudo-gradient weighs nothing, and the run goes on (it once stopped the job
# as a non-finite sum). With one worker no worker has a step: the outer step is skipped.
train "$scratch/diloco-h1" --mode diloco --local-steps 1 --balance=off --loss-scale dynamic --inject-overflow 1:3
check "diloco, H = 1: a round whose only step overflowed weighs nothing; the run completes" \
  bash -c "test -f '$scratch/diloco-h1/trained_model.pt' && grep -q 'step 3: the gradient overflowed' '$scratch/diloco-h1.log'"
run_logged "$scratch/diloco-alone" with_timeout 120 "$mpirun" -np 2 "$pstrain" --device cpu --model mlp --dataset synthetic \
  --steps 8 --batch-size 16 --optimizer adam --lr 0.001 --log-every 1 --train-dir "$scratch/diloco-alone" \
  --mode diloco --local-steps 1 --loss-scale dynamic --inject-overflow 1:3
check "diloco, one worker: its overflowed round skips the outer step, said; the run completes" \
  bash -c "test -f '$scratch/diloco-alone/trained_model.pt' && grep -q 'steps 3-3: every worker.s local steps overflowed; the outer step is skipped' '$scratch/diloco-alone.log'"

# 5. --precision fp16: libtorch 1.13's CPU autocast has no float16 (refused at start-up,
#    naming why); a libtorch whose CPU autocast has it trains, with the loss scale on.
dir="$scratch/fp16"
with_timeout 120 "$mpirun" -np 3 "$pstrain" --device cpu --model mlp --dataset synthetic --steps 4 --batch-size 16 \
  --train-dir "$dir" --precision fp16 > "$dir.log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then
  check "fp16: trains with the loss scale on" test "$(metric "$dir" "'loss_scale' in last and last['loss'] == last['loss']")" = True
else
  check "fp16: refused at start-up, naming the precision and this libtorch (exit $rc)" \
    bash -c "[ $rc -eq 2 ] && grep -qE -- '--precision fp16 on cpu: this libtorch \([0-9.]+\) (refuses it|computed)' '$dir.log' && ! grep -q 'frame #' '$dir.log'"
fi

# 5b. What docs/files.md says of torch.load(..., weights_only=True): a loss-scaled
#     checkpoint's scaler is floats, which PyTorch 1.13's weights-only unpickler cannot read
#     and 2.x's can; its trained_model.pt loads on both.
check "weights_only=True: trained_model.pt loads; the loss-scaled checkpoint as docs/files.md says for this PyTorch" \
  "$PSTRAIN_PYTHON" - "$scratch/overflow" <<'PY'
import os, sys, torch
run = sys.argv[1]
torch.load(os.path.join(run, "trained_model.pt"), weights_only=True)
try:
    torch.load(os.path.join(run, "ckpt", "step-00000008.pt"), weights_only=True)
    loaded = True
except Exception as e:
    loaded = False
    print("     torch", torch.__version__, ":", str(e).splitlines()[0][:100])
old = int(torch.__version__.split(".")[0]) < 2
sys.exit(0 if loaded != old else 1)
PY

# 6. --inject-overflow never does nothing without a word: a rank that computes nothing
#    (rank 0 of a server mode, a rank past the world) or a step past any run's is refused
#    (exit 2); without loss scaling, in sync's overlapped exchange, the overflow does reach
#    the server, which stops at that step.
job_refused "--inject-overflow on the server: refused" "inject-overflow 0:3: rank 0 computes no gradients here" \
  --model mlp --dataset synthetic --inject-overflow 0:3
job_refused "--inject-overflow past the world: refused" "inject-overflow 5:3: rank 5 computes no gradients here" \
  --model mlp --dataset synthetic --inject-overflow 5:3
job_refused "--inject-overflow at a step past any run's: refused" "inject-overflow wants a whole STEP of at most" \
  --model mlp --dataset synthetic --inject-overflow 1:1e30
train "$scratch/overflow-unscaled" --optimizer sgd --inject-overflow 1:3
check "--inject-overflow without loss scaling, overlapped sync: it fires, the run stops at step 3" \
  bash -c "grep -q 'step 3: the summed gradient of the workers is not finite' '$scratch/overflow-unscaled.log' && ! test -f '$scratch/overflow-unscaled/trained_model.pt'"
checks_done
