#!/usr/bin/env bash
# Models as big as a Mac holds (issue 41), under mpirun, as a user of nanoGPT or llm.c would:
#   1. a vocabulary of more than 65,536 ids: tools/text_to_bin.py writes llm.c's version 7
#      (uint32 ids), the dry run and run.json name the id type, a GPT whose embedding has that
#      many rows trains on ids above 65,535, and pseval's val loss falls well below ln(vocab);
#   2. --grad-accum: 4 micro-batches of 4 windows give --batch-size 16's weights (AdamW +
#      clipping; <= 1e-5), and the run counts 16 windows per worker (the dry run; the server
#      checks every step's sample count);
#   3. --precision bf16 and bf16-weights: the README's walk-through LM within 3% of fp32's val loss, and
#      computed differently (its first loss is not fp32's);
#   4. bad input, each a clear one-line error and a non-zero exit.
# Usage: big_models.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
here=$(cd "$(dirname "$0")" && pwd)
tools=$here/../../tools
source "$here/../common/checks.sh"
python=$PSTRAIN_PYTHON
rm -rf "$scratch" && mkdir -p "$scratch" && cd "$scratch" || exit 1
common=(--device cpu --threads 1 --timeout 60)
val_loss() { tail -1 "$1/eval.csv" | cut -d, -f4; }

# --- 1. uint32 ids --------------------------------------------------------------------------
# 70,000 distinct characters (code points from U+10000: each is one id), then a repeating
# phrase of the 7 highest: ids 69,993 to 69,999 make up most of train.bin and all of val.bin.
"$python" - <<'PY' > wide.txt
import sys
chars = [chr(0x10000 + i) for i in range(70000)]
phrase = "".join(chars[-7:])
sys.stdout.write("".join(chars) + phrase * 60000)
PY
"$python" "$tools/text_to_bin.py" wide.txt wide > wide-bin.log 2>&1 || { cat wide-bin.log; exit 1; }
sed 's/^/     /' wide-bin.log
"$python" - <<'PY' > wide-ids.log
import numpy as np
for split in ("train", "val"):
    head = np.fromfile(f"wide/{split}.bin", dtype="<i4", count=3)
    ids = np.fromfile(f"wide/{split}.bin", dtype="<u4", offset=1024)
    print(split, *head, ids.size, ids.max(), (ids > 65535).sum())
PY
read -r _ magic version count size largest above < <(head -1 wide-ids.log)
echo "     train.bin: magic $magic, version $version, $count tokens ($size read), largest id $largest, $above above 65,535"
check "uint32: text_to_bin.py writes llm.c's version 7 header (magic 20240801) for 70,000 ids" \
  test "$magic $version $count" = "20240801 7 $size"
check "uint32: train.bin holds ids above 65,535" ge "$largest" 65536
"$python" "$tools/gpt_model.py" wide.pt --meta wide/meta.json --block-size 16 --layers 1 --heads 2 --embd 16 > wide-model.log 2>&1 \
  || { cat wide-model.log; exit 1; }
wide=(--model wide.pt --dataset wide/train.bin --block-size 16 --optimizer adamw --lr 1e-2 --batch-size 8 --steps 30
      --log-every 10 --checkpoint-every 30)
run_logged wide-plan with_timeout 120 "$mpirun" -np 3 "$pstrain" "${common[@]}" "${wide[@]}" --train-dir wide-run --dry-run
grep "  data " wide-plan.log | sed 's/^/     /'
check "uint32: the dry run names the id type" has wide-plan.log "  data .*uint32 ids"
run_logged wide-run with_timeout 300 "$mpirun" -np 3 "$pstrain" "${common[@]}" "${wide[@]}" --train-dir wide-run
check "uint32: run.json names the id type" has wide-run/run.json '"token_ids": ?"uint32"'
"$pseval" --train-dir wide-run --model wide.pt > wide-eval.log 2>&1
loss=$(val_loss wide-run)
echo "     val loss after 30 steps: ${loss:-?} (ln 70,000 = 11.1563)"
check "uint32: trains on ids above 65,535: val loss below 0.3 x ln(70,000)" ge 3.35 "${loss:-99}"

# --- 2. --grad-accum --------------------------------------------------------------------------
sample_text input.txt
"$python" "$tools/text_to_bin.py" input.txt text > /dev/null || exit 1
"$python" "$tools/gpt_model.py" tiny.pt --meta text/meta.json --block-size 16 --layers 1 --heads 2 --embd 32 --seed 3 > /dev/null
accum=(--model tiny.pt --dataset text/train.bin --block-size 16 --optimizer adamw --lr 3e-3 --clip-grad-norm 0.5
       --steps 20 --log-every 5)
run_logged whole with_timeout 120 "$mpirun" -np 3 "$pstrain" "${common[@]}" "${accum[@]}" --batch-size 16 --train-dir whole
run_logged accumulated with_timeout 120 "$mpirun" -np 3 "$pstrain" "${common[@]}" "${accum[@]}" --batch-size 4 \
  --grad-accum 4 --train-dir accumulated
diff=$(max_weight_diff whole/trained_model.pt accumulated/trained_model.pt)
echo "     --batch-size 4 --grad-accum 4 vs --batch-size 16, AdamW + clipping, 2 workers, 20 steps: max abs diff $diff"
check "--grad-accum: 4 micro-batches of 4 give --batch-size 16's weights (<= 1e-5)" ge 1e-5 "${diff:-1}"
check "--grad-accum: the start-up line says the batch" has accumulated.log "batch 16 \(4 micro-batches of 4\) per worker"
run_logged accumulated-plan with_timeout 120 "$mpirun" -np 3 "$pstrain" "${common[@]}" "${accum[@]}" --batch-size 4 \
  --grad-accum 4 --train-dir accumulated-plan --dry-run
grep "  data " accumulated-plan.log | sed 's/^/     /'
check "--grad-accum: the dry run counts 2 x 16 windows an update" \
  has accumulated-plan.log "batch 16 \(4 micro-batches of 4\) per worker, 32 per update \(512 tokens\)"

# --- 3. --precision bf16 -------------------------------------------------------------------
"$python" "$tools/gpt_model.py" gpt.pt --meta text/meta.json --block-size 32 --layers 2 --heads 4 --embd 64 > /dev/null
walk=(--model gpt.pt --dataset text/train.bin --block-size 32 --optimizer adamw --lr 3e-3 --weight-decay 0.1
      --clip-grad-norm 1 --batch-size 16 --steps 150 --log-every 1 --checkpoint-every 150)
for precision in fp32 bf16 bf16-weights; do
  run_logged "$precision" with_timeout 600 "$mpirun" -np 3 "$pstrain" "${common[@]}" "${walk[@]}" --precision $precision \
    --train-dir $precision
  "$pseval" --train-dir $precision --model gpt.pt > $precision.eval.log 2>&1
done
fp32=$(val_loss fp32) bf16=$(val_loss bf16)
first32=$(metric fp32 "lines[0]['loss']" 2>/dev/null) first16=$(metric bf16 "lines[0]['loss']" 2>/dev/null)
time32=$(metric fp32 "last['elapsed_s']" 2>/dev/null) time16=$(metric bf16 "last['elapsed_s']" 2>/dev/null)
echo "     val loss after 150 steps: fp32 ${fp32:-?}, bf16 ${bf16:-?}; first loss ${first32:-?} and ${first16:-?};" \
     "${time32:-?} s and ${time16:-?} s"
check "--precision bf16: val loss within 3% of fp32's" \
  awk -v a="${fp32:-0}" -v b="${bf16:-99}" 'BEGIN { exit !(a > 0 && b <= 1.03 * a) }'
check "--precision bf16: the forward pass ran in bf16 (its first loss is not fp32's)" \
  bash -c "[ -n '$first16' ] && [ '$first16' != '$first32' ]"
check "--precision bf16: in the fingerprint's config of run.json" has bf16/run.json '"precision": ?"bf16"'
weights16=$(val_loss bf16-weights)
echo "     --precision bf16-weights (the workers hold bfloat16 weights, the server float32 master weights): val loss" \
     "${weights16:-?}"
check "--precision bf16-weights: val loss within 3% of fp32's" \
  awk -v a="${fp32:-0}" -v b="${weights16:-99}" 'BEGIN { exit !(a > 0 && b <= 1.03 * a) }'
run_logged bf16-weights-plan with_timeout 120 "$mpirun" -np 3 "$pstrain" "${common[@]}" "${walk[@]}" \
  --precision bf16-weights --train-dir bf16-weights-plan --dry-run
grep -E "  model |per step" bf16-weights-plan.log | sed 's/^/     /'
check "--precision bf16-weights: the dry run says the workers hold bfloat16 weights" \
  has bf16-weights-plan.log "the workers hold them in bfloat16"

# --- 4. bad input -----------------------------------------------------------------------------
job_refused "a precision with no row" "--precision 'fp8' is not one of: fp32 \| bf16 \| fp16" --precision fp8
job_refused "--grad-accum 0" "--grad-accum must be in \[1, 65536\] \(got 0\)" --grad-accum 0
job_refused "a batch x accumulation over the bound" "--batch-size x --grad-accum must be at most 1000000 \(got 1000 x 2000\)" \
  --batch-size 1000 --grad-accum 2000
job_refused "an accumulated batch larger than a shard" "a batch of 40000 \(4 micro-batches of 10000\) is more than" \
  --dataset synthetic --synthetic-size 30000 --batch-size 10000 --grad-accum 4
left=$(pgrep -f "$pstrain .*--train-dir $scratch" || true)
check "nothing left running" test -z "$left"
checks_done
