#!/usr/bin/env bash
# Sequence models, as a user of nanoGPT or llm.c would train them, under mpirun:
#   1. the README's walk-through: a text file -> train.bin/val.bin (tools/text_to_bin.py) ->
#      a TorchScript GPT (tools/gpt_model.py) -> mpirun -np 3 with AdamW and clipping ->
#      pseval's val loss well below ln(vocabulary) -> tools/generate.py writes text;
#   2. equivalence: sync PS, AdamW + clipping, 2 workers x b windows for 20 steps, against
#      one PyTorch process (torch.optim.AdamW + clip_grad_norm_) on the same 2b windows
#      (redrawn in Python from the documented formula): max abs weight diff <= 1e-5;
#   3. --resume of a token-stream run with AdamW: exactly the uninterrupted weights and state;
#   4. elastic: 6 virtual shards, 2 -> 1 -> 3 workers, within 1e-5 of 2 throughout;
#   5. memory: a 4 GiB token file (sparse) trains with each worker's peak RSS within 500 MiB
#      of a run on a small file;
#   6. an embedding + GRU classifier on an int64 .npz trains in every mode; a tagger on
#      labels per position with padding; llm.c's token files;
#   7. bad input, each a clear one-line error and a non-zero exit.
# Usage: language_model.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
here=$(cd "$(dirname "$0")" && pwd)
tools=$here/../../tools
source "$here/../common/checks.sh"
python=$PSTRAIN_PYTHON
rm -rf "$scratch" && mkdir -p "$scratch" && cd "$scratch" || exit 1
common=(--device cpu --threads 1 --timeout 60)

# --- 1. the walk-through -----------------------------------------------------------------
# Any text will do: Debian's licences (base-files), else a text written here.
if [ -r /usr/share/common-licenses/GPL-3 ] && [ -r /usr/share/common-licenses/Apache-2.0 ]; then
  cat /usr/share/common-licenses/GPL-3 /usr/share/common-licenses/Apache-2.0 > input.txt
else
  "$python" -c "
import random; r = random.Random(1); w = 'the of a license to work you any program or this software source code'.split()
print('\n'.join(' '.join(r.choice(w) for _ in range(12)) + '.' for _ in range(4000)))" > input.txt
fi
"$python" "$tools/text_to_bin.py" input.txt text > text.log 2>&1 || { cat text.log; exit 1; }
"$python" "$tools/gpt_model.py" gpt.pt --meta text/meta.json --block-size 32 --layers 2 --heads 4 --embd 64 > gpt.log 2>&1 \
  || { cat gpt.log; exit 1; }
sed 's/^/     /' text.log gpt.log
vocab=$("$python" -c "import json; print(json.load(open('text/meta.json'))['vocab_size'])")
run_logged walk with_timeout 300 "$mpirun" -np 3 "$pstrain" "${common[@]}" --model gpt.pt --dataset text/train.bin \
  --block-size 32 --optimizer adamw --lr 3e-3 --weight-decay 0.1 --clip-grad-norm 1 --batch-size 16 --steps 150 \
  --log-every 50 --checkpoint-every 75 --train-dir walk
check "walk-through: trains, and writes the trained TorchScript module" test -s walk/trained_model.torchscript.pt
check "walk-through: the progress line counts tokens/s" has walk.log "tokens/s"
check "walk-through: the optimizer's state beside the weights" test -s walk/trained_model.optimizer.pt
"$pseval" --train-dir walk --model gpt.pt > walk.eval.log 2>&1
sed 's/^/     /' walk.eval.log
loss=$(tail -1 walk/eval.csv | cut -d, -f4) perplexity=$(tail -1 walk/eval.csv | cut -d, -f6)
ceiling=$(awk -v v="$vocab" 'BEGIN { printf "%.4f", 0.7 * log(v) }')
echo "     val loss $loss (ln $vocab = $(awk -v v="$vocab" 'BEGIN { printf "%.4f", log(v) }')), perplexity $perplexity"
check "walk-through: val loss well below ln(vocabulary) (< 0.7 x)" ge "$ceiling" "$loss"
check "walk-through: eval.csv has a perplexity column, exp(loss)" \
  awk -v l="$loss" -v p="$perplexity" 'BEGIN { d = exp(l) - p; exit !(d < 1e-3 && d > -1e-3) }'
"$python" "$tools/generate.py" walk/trained_model.torchscript.pt text/meta.json --prompt "The " --tokens 120 > sample.txt 2> generate.log
rc=$?
head -c 200 sample.txt | sed 's/^/     | /'; echo
check "walk-through: Python generates text from the trained module" \
  bash -c "[ $rc -eq 0 ] && [ \$(wc -c < sample.txt) -ge 120 ]"
"$python" - <<'PY' > optimizer.log 2>&1
import torch
state = torch.load("walk/trained_model.optimizer.pt")
weights = torch.load("walk/trained_model.pt")
assert state["step"] == 150, state["step"]
assert state["exp_avg"].keys() == weights.keys() and state["exp_avg_sq"].keys() == weights.keys()
print("optimizer state: step", state["step"], "exp_avg and exp_avg_sq of", len(weights), "tensors")
PY
check "walk-through: torch.load reads the AdamW state (step, exp_avg, exp_avg_sq by parameter)" test $? -eq 0
sed 's/^/     /' optimizer.log

brief_ends_here

# --- 2. equivalence with torch.optim.AdamW + clip_grad_norm_ ----------------------------
"$python" "$tools/gpt_model.py" tiny.pt --meta text/meta.json --block-size 16 --layers 1 --heads 2 --embd 32 --seed 3 > /dev/null
# shellcheck disable=SC2054 # --betas takes B1,B2
same=(--model tiny.pt --dataset text/train.bin --block-size 16 --optimizer adamw --betas 0.9,0.95 --weight-decay 0.1
      --lr 3e-3 --lr-scaling none --clip-grad-norm 0.5 --batch-size 4 --seed 5 --steps 20 --log-every 1)
run_logged equivalent with_timeout 120 "$mpirun" -np 3 "$pstrain" "${common[@]}" "${same[@]}" --train-dir equivalent
"$python" - "$(dirname "$0")/../common" <<'PY' > equivalence.log 2>&1
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import lm_reference as ref
model = torch.jit.load("tiny.pt")
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)
norms = ref.train(model, opt, ref.read_tokens("text/train.bin"), steps=20, seed=5, shards=2, batch=4, block=16, clip=0.5)
diff = ref.max_diff(torch.load("equivalent/trained_model.pt"), model)
logged = [json.loads(l)["grad_norm"] for l in open("equivalent/metrics.jsonl")]
print(f"{diff:.3g} {sum(n > 0.5 for n in norms)} {max(abs(a - b) / b for a, b in zip(logged, norms)):.3g}")
PY
read -r diff clipped normdiff < <(tail -1 equivalence.log)
echo "     2 workers x 4 windows vs torch.optim.AdamW on 8: max abs diff ${diff:-?} after 20 steps; clipped at" \
     "${clipped:-?} of 20 steps; grad_norm within ${normdiff:-?} (relative) of clip_grad_norm_'s"
check "equivalence: sync PS with AdamW + clipping = one PyTorch process (<= 1e-5)" ge 1e-5 "${diff:-1}"
check "equivalence: the clipping took effect" ge "${clipped:-0}" 1
check "equivalence: metrics' grad_norm is the norm clip_grad_norm_ saw (1e-4)" ge 1e-4 "${normdiff:-1}"

# --- 3. --resume, exactly ------------------------------------------------------------------
resumable=(--model tiny.pt --dataset text/train.bin --block-size 16 --optimizer adamw --lr 3e-3 --clip-grad-norm 1
           --batch-size 4 --steps 40 --checkpoint-every 10 --log-every 10)
run_logged resume-reference with_timeout 120 "$mpirun" -np 3 "$pstrain" "${common[@]}" "${resumable[@]}" --train-dir resume-reference
with_timeout 120 "$mpirun" -np 3 "$pstrain" "${common[@]}" "${resumable[@]}" --train-dir resumed --straggle 1:100 > resumed.log 2>&1 &
job=$!
for _ in $(seq 600); do [ -e resumed/ckpt/step-00000020.ok ] && break; sleep 0.1; done
stop_job $job; wait $job
run_logged resumed with_timeout 120 "$mpirun" -np 3 "$pstrain" "${common[@]}" "${resumable[@]}" --train-dir resumed --resume
diff=$(max_weight_diff resume-reference/trained_model.pt resumed/trained_model.pt)
state_diff=$("$python" -c "
import torch; a, b = (torch.load(d + '/trained_model.optimizer.pt') for d in ('resume-reference', 'resumed'))
print(max((a[n][k] - b[n][k]).abs().max().item() for n in ('exp_avg', 'exp_avg_sq') for k in a[n]), a['step'] - b['step'])")
echo "     stopped after step 20, resumed: max abs weight diff $diff; optimizer state diff, step diff: $state_diff"
check "--resume: a token-stream run with AdamW continues exactly (weights diff 0)" test "$diff" = 0.0
check "--resume: and its AdamW state (diff 0, same step)" test "$state_diff" = "0.0 0"

# --- 4. elastic: 2 -> 1 -> 3 workers over 6 virtual shards ------------------------------
stop_after() {  # stop_after DIR STEP: SIGUSR1 to the job training into DIR once STEP is published
  for _ in $(seq 600); do [ -e "$1/ckpt/$(printf 'step-%08d.ok' "$2")" ] && break; sleep 0.1; done
  pkill -USR1 -f "^$mpirun .*--train-dir $1( |$)"
}
# At lr 1e-3: at 3e-3 this small attention model's training amplifies the summation-order
# differences of 1, 2 and 3 workers (rounding) to 9e-5 in 40 steps; at 1e-3 they stay at 3e-7.
elastic=(--model tiny.pt --dataset text/train.bin --block-size 16 --optimizer adamw --lr 1e-3 --clip-grad-norm 1
         --batch-size 4 --steps 40 --log-every 10 --virtual-shards 6 --checkpoint-every 5 --straggle 1:30)
run_logged elastic-whole with_timeout 300 "$mpirun" -np 3 "$pstrain" "${common[@]}" "${elastic[@]}" --train-dir elastic-whole
"$mpirun" -np 3 "$pstrain" "${common[@]}" "${elastic[@]}" --train-dir elastic > elastic1.log 2>&1 &
stop_after elastic 10; wait $!; rc1=$?
"$mpirun" -np 2 "$pstrain" "${common[@]}" "${elastic[@]}" --train-dir elastic --resume > elastic2.log 2>&1 &
stop_after elastic 25; wait $!; rc2=$?
run_logged elastic3 with_timeout 300 "$mpirun" -np 4 "$pstrain" "${common[@]}" "${elastic[@]}" --train-dir elastic --resume
diff=$(max_weight_diff elastic-whole/trained_model.pt elastic/trained_model.pt)
echo "     6 virtual shards, 2 -> 1 -> 3 workers vs 2 throughout: max abs diff $diff (stops: exit $rc1, $rc2)"
check "elastic: the token-stream run that changed workers ends with the same weights (<= 1e-5)" \
  bash -c "[ '$rc1$rc2' = 33 ] && awk -v d='$diff' 'BEGIN { exit !(d <= 1e-5) }'"

# --- 5. memory: a token file larger than the ranks' memory budget -----------------------
# peak_rss_kib DIR: runs a 3-rank job on DIR/train.bin, sampling the workers' resident memory.
peak_rss_kib() {
  "$mpirun" -np 3 "$pstrain" "${common[@]}" --model tiny.pt --dataset "$1/train.bin" --block-size 16 --batch-size 8 \
    --steps 300 --log-every 100 --checkpoint-every 0 --train-dir "$1-run" > "$1.log" 2>&1 &
  local job=$! peak=0 pid rss
  while kill -0 $job 2>/dev/null; do
    for rank in 1 2; do
      pid=$(rank_pid "$1-run" $rank)
      rss=$( [ -n "$pid" ] && ps -o rss= -p "$pid" 2>/dev/null | tr -d ' ')
      [ -n "$rss" ] && [ "$rss" -gt "$peak" ] && peak=$rss
    done
    sleep 0.2
  done
  wait $job || { echo "     $1 failed:" >&2; tail -3 "$1.log" >&2; }
  echo "$peak"
}
mkdir -p small big
cp text/train.bin text/val.bin small/ && cp text/val.bin big/
"$python" -c "
f = open('big/train.bin', 'wb'); f.seek(4 << 30); f.write(b'\x07\x00'); f.close()  # 4 GiB of id 0, sparse"
small_peak=$(peak_rss_kib small) big_peak=$(peak_rss_kib big)
echo "     workers' peak RSS: $((small_peak / 1024)) MiB on a $(file_size small/train.bin)-byte file," \
     "$((big_peak / 1024)) MiB on a $(file_size big/train.bin)-byte one"
check "memory: a 4 GiB token file trains (300 steps)" has big.log "done in"
check "memory: each worker's peak RSS within 500 MiB of the small file's run" \
  bash -c "[ $small_peak -gt 0 ] && [ $((big_peak - small_peak)) -lt $((500 * 1024)) ]"
rm -f big/train.bin

# --- 6. models on token ids in every mode, labels per position, llm.c's files -----------
# (A file: torch.jit.script reads the classes' source.)
cat > id_models.py <<'PY'
import numpy as np, torch, torch.nn as nn
g = np.random.default_rng(0)
def sequences(n):  # class: more ids below 25 than above (ids 0..49, 12 per sequence)
    x = g.integers(0, 50, size=(n, 12))
    return x.astype(np.int64), ((x < 25).sum(1) > 6).astype(np.int64)
(xa, ya), (xb, yb) = sequences(2000), sequences(400)
np.savez("ids.npz", x_train=xa, y_train=ya, x_test=xb, y_test=yb)
tags = lambda x: np.where(np.arange(12) < 9, x % 3, -100)  # tag: id mod 3; the last 3 positions padding
np.savez("tags.npz", x_train=xa.astype(np.int32), y_train=tags(xa), x_test=xb.astype(np.int32), y_test=tags(xb))
np.savez("floaty.npz", x_train=xa, y_train=ya.astype(np.float32), x_test=xb, y_test=yb.astype(np.float32))

class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(50, 16)
        self.gru = nn.GRU(16, 32, batch_first=True)
        self.head = nn.Linear(32, 2)
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        out, _ = self.gru(self.embedding(ids))
        return self.head(out[:, -1])

class Tagger(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(50, 16)
        self.head = nn.Linear(16, 3)
    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.embedding(ids))

torch.manual_seed(0)
torch.jit.script(Classifier()).save("gru.pt")
torch.jit.script(Tagger()).save("tagger.pt")
PY
"$python" id_models.py || exit 1
first_last_loss() { metric "$1" "f\"{lines[0]['loss']} {last['loss']}\""; }
for mode in sync "backup --aggregate 1" async allreduce gossip; do
  read -r name rest <<< "$mode"
  np=3; [ "$name" = allreduce ] || [ "$name" = gossip ] && np=2
  # shellcheck disable=SC2086
  run_logged "ids-$name" with_timeout 120 "$mpirun" -np $np "$pstrain" "${common[@]}" --model gru.pt --dataset ids.npz \
    --mode $name $rest --optimizer adam --lr 0.01 --batch-size 32 --steps 150 --log-every 30 --checkpoint-every 0 \
    --train-dir "ids-$name"
  read -r first last <<< "$(first_last_loss "ids-$name")"
  echo "     $mode: loss $first -> $last"
  check "$mode: an embedding + GRU classifier on int64 ids trains (loss falls by a third)" \
    awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a * 2 / 3) }'
done
run_logged tags with_timeout 120 "$mpirun" -np 3 "$pstrain" "${common[@]}" --model tagger.pt --dataset tags.npz \
  --optimizer adamw --lr 0.05 --batch-size 32 --steps 60 --log-every 20 --checkpoint-every 0 --train-dir tags
"$pseval" --train-dir tags --model tagger.pt > tags.eval.log 2>&1
accuracy=$(tail -1 tags/eval.csv | cut -d, -f5)
echo "     tagger: $(tail -1 tags.eval.log)"
check "labels per position: pseval counts the positions, not the padding (token accuracy > 0.95)" ge "$accuracy" 0.95
"$python" "$tools/text_to_bin.py" input.txt llmc --format llmc --name story > /dev/null
run_logged llmc with_timeout 120 "$mpirun" -np 3 "$pstrain" "${common[@]}" --model tiny.pt --dataset llmc/story_train.bin \
  --block-size 16 --batch-size 4 --steps 5 --checkpoint-every 0 --train-dir llmc-run
"$pseval" --train-dir llmc-run --model tiny.pt > llmc.eval.log 2>&1
check "llm.c's token files train, their val split beside them" has llmc.eval.log "perplexity"

# --- 7. bad input -------------------------------------------------------------------------
mkdir -p odd magic version
head -c 1001 text/train.bin > odd/train.bin && cp text/val.bin odd/
"$python" - <<'PY'
import numpy as np
for d, magic, version in (("magic", 20240521, 1), ("version", 20240520, 2)):
    header = np.zeros(256, "<i4"); header[:3] = [magic, version, 100]
    open(f"{d}/story_train.bin", "wb").write(header.tobytes() + np.zeros(100, "<u2").tobytes())
PY
"$python" "$tools/gpt_model.py" small-vocab.pt --vocab 20 --block-size 16 --layers 1 --embd 16 > /dev/null
echo "a run that must stay" > keep.txt && mkdir -p bad-run && cp keep.txt bad-run/
job_refused "a .bin of odd size" "odd/train.bin: 1001 bytes, an odd size" --model tiny.pt --dataset odd/train.bin --block-size 16
job_refused "an llm.c header with a wrong magic" "magic/story_train.bin: not an llm.c token file \(its first int32 is [0-9-]+; llm.c's are magic 20240520 version 1" \
  --model tiny.pt --dataset magic/story_train.bin --block-size 16
job_refused "an llm.c header of another version" "version/story_train.bin: an llm.c token file \(magic 20240520\) of version 2" \
  --model tiny.pt --dataset version/story_train.bin --block-size 16
job_refused "--block-size larger than a split" "text/val.bin: [0-9]+ tokens, too few for one window of --block-size 10000" \
  --model tiny.pt --dataset text/train.bin --block-size 10000
job_refused "ids beyond the model's vocabulary" "largest is the data's largest id, $((vocab - 1)) .*at least $vocab rows" \
  --model small-vocab.pt --dataset text/train.bin --block-size 16
job_refused "y whose shape does not fit the output" "output is \[2, 12, 3\] for a batch of 2, but the targets are \[2\] of 2 classes" \
  --model tagger.pt --dataset ids.npz
job_refused "float y with cross-entropy" "float targets, not class labels: use --loss mse" \
  --model gru.pt --dataset floaty.npz --loss cross-entropy
job_refused "--block-size without a token file" "--block-size 16 takes a token file" --model gru.pt --dataset ids.npz --block-size 16
job_refused "a token file without --block-size" "is a token file: give its window length, --block-size L" \
  --model tiny.pt --dataset text/train.bin
job_refused "a token file with a zoo model" "is a token file: it takes a sequence model of your own" --dataset text/train.bin --block-size 16
# pseval on a val split that holds an id beyond the model's vocabulary (the train split did
# not): a refusal naming it, exit 2, not the model's traceback.
# (pstrain checks both splits' ids at start-up: the val split goes wide after training.)
mkdir -p wide-val && cp text/train.bin text/val.bin text/meta.json wide-val/
run_logged wide with_timeout 120 "$mpirun" -np 2 "$pstrain" "${common[@]}" --model tiny.pt --dataset wide-val/train.bin \
  --block-size 16 --steps 2 --train-dir wide
"$python" -c "import numpy as np; np.full(64, $vocab + 5, '<u2').tofile('wide-val/val.bin')"
"$pseval" --train-dir wide --model tiny.pt > wide.eval 2>&1
rc=$?
check "pseval: a val split with an id beyond the model's vocabulary: exit 2 (got $rc), naming the id" \
  eval '[ $rc -eq 2 ] && has wide.eval "largest is the data'"'"'s largest id, $((vocab + 5)) .*at least $((vocab + 6)) rows"'
check "bad input: nothing of an earlier file in the train dir overwritten" cmp -s keep.txt bad-run/keep.txt
left=$(pids_of pstrain "$scratch/bad-run")
check "nothing left running" test -z "$left"
checks_done
