#!/usr/bin/env bash
# Models as people write them (docs/own-model.md, "Fine-tune on your Macs"), under mpirun,
# each against one PyTorch process on the same windows (tests/common/lm_reference.py):
#   1. a GPT written as nanoGPT's (its head tied to the token embedding, forward(idx,
#      targets) -> (logits, loss)), traced: 2 workers, AdamW + clipping, 20 steps, its own
#      loss: every key of trained_model.pt within 1e-5, the tied names equal; pseval reports
#      its loss, perplexity and token accuracy;
#   2. LoRA on a frozen base (tools/gpt_model.py --lora): after 20 steps of AdamW with weight
#      decay the frozen tensors are bit for bit the file's, the adapters within 1e-5 of
#      torch.optim.AdamW over the trainable tensors; rank 0 sends a few percent of a full
#      fine-tune's bytes;
#   3. pseval --export: .safetensors by the spec (each tie once), equal to trained_model.pt;
#      and a state dict torch.load reads;
#   (the default tier stops here)
#   4. --init-from a torch.save state dict: within 1e-5 of PyTorch started from it; the
#      .safetensors of the same weights gives the same run exactly; a base's weights into a
#      LoRA model: its adapters keep their values, the frozen ones are the base's;
#   5. --weight-decay-scope matrices: within 1e-5 of PyTorch with nanoGPT's parameter
#      groups, over 1 and 2 servers;
#   6. LoRA's bytes per step in every mode with a server (sync, backup, async, diloco,
#      localsgd), over 1 and 2 servers: under 20% of a full fine-tune's; frozen untouched;
#      trained_model.torchscript.pt equal to trained_model.pt, for the tied full model and
#      the LoRA one alike;
#   7. bad input, each exit 2 with no train dir written: safetensors files truncated or
#      forged (offsets out of range, overlapping, a huge header, an unknown dtype), a state
#      dict of wrong shapes, a pickle that would run code, a model returning two scalars,
#      --loss given to a model of its own loss; --resume whose frozen weights are not the
#      checkpoint's (another --init-from's base, a replaced model file), a rank without
#      --init-from.
# Usage: finetune.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
here=$(cd "$(dirname "$0")" && pwd)
tools=$here/../../tools
source "$here/../common/checks.sh"
python=$PSTRAIN_PYTHON
rm -rf "$scratch" && mkdir -p "$scratch" && cd "$scratch" || exit 1
common=(--device cpu --threads 1 --timeout 60)

sample_text input.txt
"$python" "$tools/text_to_bin.py" input.txt text > text.log 2>&1 || { cat text.log; exit 1; }
gpt() {  # gpt FILE FLAGS...: tools/gpt_model.py's GPT of 1 layer, 2 heads, 32 wide, windows of 16
  local file=$1; shift
  "$python" "$tools/gpt_model.py" "$file" --meta text/meta.json --block-size 16 --layers 1 --heads 2 --embd 32 --seed 3 \
    "$@" > "$file.log" 2>&1 || { cat "$file.log"; exit 1; }
}
# reference SCRIPT: Python with lm_reference imported as ref and torch, its last line printed.
reference() {
  "$python" - "$here/../common" > "reference.log" 2>&1 <<PY
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import lm_reference as ref
tokens = ref.read_tokens("text/train.bin")
$1
PY
  local rc=$?
  [ $rc -eq 0 ] || sed 's/^/     /' reference.log >&2
  tail -1 reference.log
}
# shellcheck disable=SC2054 # --betas takes B1,B2
adamw=(--optimizer adamw --betas 0.9,0.95 --weight-decay 0.1 --lr 3e-3 --lr-scaling none --batch-size 4 --seed 5
       --steps 20 --log-every 1)
train() {  # train DIR FLAGS...: 2 workers, 20 steps of AdamW
  local dir=$1; shift
  run_logged "$dir" with_timeout 180 "$mpirun" -np 3 "$pstrain" "${common[@]}" --dataset text/train.bin --block-size 16 \
    "${adamw[@]}" --train-dir "$dir" "$@"
}
adamw_py="torch.optim.AdamW(%s, lr=3e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1)"

# --- 1. a GPT written as nanoGPT's ---------------------------------------------------------
gpt nano.pt --tie --own-loss
sed 's/^/     /' nano.pt.log
train nano --model nano.pt --clip-grad-norm 0.5
check "nanoGPT's way: the run says it trains the model's own loss and the tie" \
  eval 'has nano.log "tied to tokens.weight" && has nano.log "model nano.pt"'
result=$(reference "
model = torch.jit.load('nano.pt')
opt = $(printf "$adamw_py" "model.parameters()")
norms = ref.train(model, opt, tokens, steps=20, seed=5, shards=2, batch=4, block=16, clip=0.5, own_loss=True)
ours = torch.load('nano/trained_model.pt')
print(ref.max_diff(ours, model), sum(n > 0.5 for n in norms), torch.equal(ours['head.weight'], ours['tokens.weight']))")
read -r diff clipped tied <<< "$result"
echo "     nanoGPT's way, 2 workers x 4 windows vs PyTorch on 8: max abs diff ${diff:-?}; clipped at ${clipped:-?} of 20 steps"
check "nanoGPT's way: tied, its own loss, AdamW + clipping: one PyTorch process's weights (<= 1e-5)" ge 1e-5 "${diff:-1}"
check "nanoGPT's way: the clipping took effect" ge "${clipped:-0}" 1
check "nanoGPT's way: trained_model.pt holds both tied names, equal" test "${tied:-}" = True
"$pseval" --train-dir nano --model nano.pt > nano.eval.log 2>&1
check "nanoGPT's way: pseval reports its own loss, perplexity and token accuracy" \
  eval 'has nano.eval.log "test loss [0-9.]+, perplexity [0-9.]+, token accuracy [0-9.]+%"'

# --- 2. LoRA on a frozen base --------------------------------------------------------------
gpt lora.pt --tie --own-loss --lora 4
gpt full.pt --tie --own-loss
sed 's/^/     /' lora.pt.log
train lora --model lora.pt
train full --model full.pt
result=$(reference "
model = torch.jit.load('lora.pt')
frozen = {k: v.clone() for k, v in model.state_dict().items()}
trained = [p for p in model.parameters() if p.requires_grad]
ref.train(model, $(printf "$adamw_py" "trained"), tokens, steps=20, seed=5, shards=2, batch=4, block=16, own_loss=True)
ours = torch.load('lora/trained_model.pt')
names = [n for n, p in model.named_parameters() if not p.requires_grad]
still = all(torch.equal(ours[n], frozen[n]) for n in names) and torch.equal(ours['head.weight'], frozen['head.weight'])
print(ref.max_diff(ours, model), len(names), still)")
read -r diff frozen still <<< "$result"
echo "     LoRA rank 4: adapters vs AdamW over the trainable tensors: max abs diff ${diff:-?}; $frozen frozen tensors"
check "LoRA: the frozen tensors are bit for bit the file's after 20 steps of AdamW with weight decay" test "${still:-}" = True
check "LoRA: the adapters are PyTorch's (AdamW over the trainable tensors, <= 1e-5)" ge 1e-5 "${diff:-1}"
bytes_ratio() {  # bytes_ratio LORA_DIR FULL_DIR: rank 0's bytes sent per step, LoRA over full
  python3 - "$1/metrics.jsonl" "$2/metrics.jsonl" <<'PY'
import json, sys
sent = [sum(json.loads(l)["bytes_sent"] for l in open(f)) for f in sys.argv[1:]]
print(f"{sent[0] / sent[1]:.4f}")
PY
}
ratio=$(bytes_ratio lora full)
echo "     sync: rank 0 sends $ratio of a full fine-tune's bytes per step"
check "LoRA, sync: rank 0 sends under 20% of a full fine-tune's bytes per step ($ratio)" ge 0.2 "$ratio"

# --- 3. pseval --export ----------------------------------------------------------------------
"$pseval" --train-dir nano --export nano.safetensors > export.log 2>&1 &&
  "$pseval" --train-dir nano --export nano-export.pt >> export.log 2>&1
check "pseval --export: says what it wrote" has export.log "step 20's weights \(16 tensors"
exported=$("$python" - <<'PY' 2>&1 | tail -1
import json, struct, torch
raw = open("nano.safetensors", "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
header = json.loads(raw[8:8 + n])
meta = header.pop("__metadata__")
data, at, ok = raw[8 + n:], 0, n % 8 == 0
ours = torch.load("nano/trained_model.pt")
for name, e in sorted(header.items(), key=lambda item: item[1]["data_offsets"]):
    begin, end = e["data_offsets"]
    ok = ok and begin == at and e["dtype"] == "F32"
    at = end
    t = torch.frombuffer(bytearray(data[begin:end]), dtype=torch.float32).view(e["shape"])
    ok = ok and torch.equal(t, ours[name])
ok = ok and at == len(data) and meta == {"format": "pt", "head.weight": "tokens.weight"} and len(header) + 1 == len(ours)
pt = torch.load("nano-export.pt", weights_only=True)
print(ok and pt.keys() == ours.keys() and all(torch.equal(pt[k], ours[k]) for k in ours))
PY
)
check "pseval --export x.safetensors parses by the spec (each tie once, in __metadata__ after \"format\": \"pt\") and equals trained_model.pt; the .pt too" \
  test "$exported" = True

brief_ends_here

# --- 4. --init-from ------------------------------------------------------------------------
# Pretrained weights: the model's, moved; tied as its state_dict has them; as .pt and, by
# tools/gpt_model.py's writer, .safetensors (the tie once).
"$python" - "$tools" <<'PY'
import sys, torch
sys.path.insert(0, sys.argv[1])
from gpt_model import save_safetensors
torch.manual_seed(9)
state = {k: v + 0.01 * torch.randn_like(v) for k, v in torch.jit.load("nano.pt").state_dict().items()}
state["head.weight"] = state["tokens.weight"]
torch.save(state, "pretrained.pt")
save_safetensors(state, "pretrained.safetensors")
PY
train init-pt --model nano.pt --init-from pretrained.pt
train init-st --model nano.pt --init-from pretrained.safetensors
result=$(reference "
model = torch.jit.load('nano.pt')
model.load_state_dict(torch.load('pretrained.pt'))
ref.train(model, $(printf "$adamw_py" "model.parameters()"), tokens, steps=20, seed=5, shards=2, batch=4, block=16, own_loss=True)
print(ref.max_diff(torch.load('init-pt/trained_model.pt'), model))")
echo "     --init-from pretrained.pt vs PyTorch started from it: max abs diff ${result:-?}"
check "--init-from a state dict: PyTorch's run from it (<= 1e-5)" ge 1e-5 "${result:-1}"
diff=$(max_weight_diff init-pt/trained_model.pt init-st/trained_model.pt)
check "--init-from the same weights as .safetensors: the same run exactly (diff ${diff:-?})" test "${diff:-}" = 0.0
check "--init-from: the run says what it read" has init-st.log "--init-from pretrained.safetensors: 15 tensors \(crc32"
# A pretrained base into a LoRA model: its adapters are not in the base's file.
"$pseval" --train-dir init-pt --export base.safetensors > /dev/null 2>&1
train lora-init --model lora.pt --init-from base.safetensors --steps 5
check "--init-from a base into a LoRA model: says the adapters keep their values" \
  has lora-init.log "2 trained tensor\(s\) it lacks keep the model's values"
check "--init-from a base into a LoRA model: the frozen tensors are the base's, bit for bit" "$python" - <<'PY'
import sys, torch
ours, base = torch.load("lora-init/trained_model.pt"), torch.load("init-pt/trained_model.pt")
sys.exit(not all(torch.equal(ours[k], base[k]) for k in base))
PY

# --- 5. --weight-decay-scope matrices ------------------------------------------------------
for k in 1 2; do
  run_logged "scope-k$k" with_timeout 180 "$mpirun" -np $((k + 2)) "$pstrain" "${common[@]}" --dataset text/train.bin \
    --block-size 16 "${adamw[@]}" --weight-decay 0.5 --model nano.pt --weight-decay-scope matrices --servers "$k" \
    --train-dir "scope-k$k"
done
result=$(reference "
model = torch.jit.load('nano.pt')
decay = [p for p in model.parameters() if p.dim() >= 2]
rest = [p for p in model.parameters() if p.dim() < 2]
opt = torch.optim.AdamW([{'params': decay, 'weight_decay': 0.5}, {'params': rest, 'weight_decay': 0.0}], lr=3e-3,
                        betas=(0.9, 0.95), eps=1e-8)
ref.train(model, opt, tokens, steps=20, seed=5, shards=2, batch=4, block=16, own_loss=True)
print(ref.max_diff(torch.load('scope-k1/trained_model.pt'), model), ref.max_diff(torch.load('scope-k2/trained_model.pt'), model))")
read -r one two <<< "$result"
echo "     --weight-decay-scope matrices vs nanoGPT's groups: max abs diff ${one:-?} (1 server), ${two:-?} (2 servers)"
check "--weight-decay-scope matrices: PyTorch with nanoGPT's parameter groups, 1 server (<= 1e-5)" ge 1e-5 "${one:-1}"
check "--weight-decay-scope matrices: the same over 2 servers (<= 1e-5)" ge 1e-5 "${two:-1}"

# --- 6. LoRA's bytes in every mode with a server, over 1 and 2 servers -------------------------
for k in 1 2; do
  for mode in sync backup async diloco localsgd; do
    flags=(--mode "$mode" --servers "$k" --steps 10)
    case $mode in diloco|localsgd) flags+=(--local-steps 5) ;; esac
    for m in lora full; do
      run_logged "$m-$mode-k$k" with_timeout 180 "$mpirun" -np $((k + 2)) "$pstrain" "${common[@]}" \
        --dataset text/train.bin --block-size 16 "${adamw[@]}" --model "$m.pt" "${flags[@]}" --train-dir "$m-$mode-k$k"
    done
    ratio=$(bytes_ratio "lora-$mode-k$k" "full-$mode-k$k")
    echo "     $mode, $k server(s): rank 0 sends $ratio of a full fine-tune's bytes"
    check "LoRA, $mode, $k server(s): under 20% of a full fine-tune's bytes ($ratio)" ge 0.2 "${ratio:-1}"
    check "LoRA, $mode, $k server(s): the frozen tensors untouched" "$python" - "lora-$mode-k$k" <<'PY'
import sys, torch
ours, model = torch.load(sys.argv[1] + "/trained_model.pt"), torch.jit.load("lora.pt")
state = model.state_dict()
frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
sys.exit(not (frozen and all(torch.equal(ours[n], state[n]) for n in frozen)))
PY
    # The TorchScript module is written from the same weights as trained_model.pt, every
    # byte through the servers' ranges (a small model's flat storage was once written stale).
    for m in lora full; do
      check "$m, $mode, $k server(s): trained_model.torchscript.pt holds trained_model.pt's weights exactly" \
        "$python" - "$m-$mode-k$k" <<'PY'
import sys, torch
ours = torch.load(sys.argv[1] + "/trained_model.pt")
script = torch.jit.load(sys.argv[1] + "/trained_model.torchscript.pt").state_dict()
sys.exit(not (ours.keys() == script.keys() and all(torch.equal(ours[k], script[k]) for k in ours)))
PY
    done
  done
done

# --- 7. bad input ---------------------------------------------------------------------------
# refused_cleanly NAME PATTERN FLAGS...: the job exits 2 within 60 s saying PATTERN, and no
# train dir is made.
refused_cleanly() {
  local name=$1 pattern=$2 rc; shift 2
  rm -rf bad-run
  with_timeout 60 "$mpirun" -np 2 "$pstrain" "${common[@]}" --dataset text/train.bin --block-size 16 --steps 5 \
    --train-dir bad-run "$@" > bad-run.out 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -qE -- "$pattern" bad-run.out && [ ! -e bad-run ]; then
    echo "ok   $name: $(grep -E -- "$pattern" bad-run.out | head -1 | cut -c1-200)"; passed=$((passed + 1))
  else
    echo "FAIL $name (exit $rc$([ -e bad-run ] && echo ', a train dir written')):"; tail -5 bad-run.out | sed 's/^/     /'
    failures=$((failures + 1))
  fi
}
forge() {  # forge FILE PYTHON: a copy of nano.safetensors, changed by PYTHON (raw bytes `b`, header `h`)
  "$python" - "$1" <<PY
import json, struct, sys
b = bytearray(open("nano.safetensors", "rb").read())
n = struct.unpack("<Q", b[:8])[0]
h = json.loads(b[8:8 + n])
$2
open(sys.argv[1], "wb").write(b)
PY
}
rewrite='t = json.dumps(h).encode(); t += b" " * (-len(t) % 8); b = bytearray(struct.pack("<Q", len(t)) + t + b[8 + n:])'
forge truncated.safetensors 'b = b[:20]'
forge huge.safetensors 'b[:8] = struct.pack("<Q", 1 << 40)'
forge outside.safetensors "h['tokens.weight']['data_offsets'][1] += 1 << 20; $rewrite"
forge overlap.safetensors "h['ln_f.bias']['data_offsets'] = h['ln_f.weight']['data_offsets']; $rewrite"
forge dtype.safetensors "h['ln_f.bias']['dtype'] = 'F7'; $rewrite"
refused_cleanly "--init-from a truncated safetensors file" "reaches past the file's end" --model nano.pt --init-from truncated.safetensors
refused_cleanly "--init-from a header of 2^40 bytes" "more than the format's 100000000" --model nano.pt --init-from huge.safetensors
refused_cleanly "--init-from offsets out of range" "not within the [0-9]+ bytes of data" --model nano.pt --init-from outside.safetensors
refused_cleanly "--init-from overlapping tensors" "a gap or an overlap" --model nano.pt --init-from overlap.safetensors
refused_cleanly "--init-from an unknown dtype" "dtype 'F7' is not one of the format's" --model nano.pt --init-from dtype.safetensors
"$python" - <<'PY'
import os, torch
state = torch.jit.load("nano.pt").state_dict()
state["ln_f.weight"] = torch.zeros(7)
torch.save(state, "shapes.pt")
class Runs:
    def __reduce__(self):
        return (os.system, ("touch pwned",))
torch.save({"w": torch.ones(2), "x": Runs()}, "runs-code.pt")
class TwoScalars(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.e = torch.nn.Embedding(100, 4)
    def forward(self, x, y):
        h = self.e(x).sum()
        return h, h * 2
torch.jit.trace(TwoScalars(), (torch.zeros(2, 16, dtype=torch.long),) * 2).save("two-scalars.pt")
PY
refused_cleanly "--init-from a state dict of wrong shapes" "ln_f.weight is \[7\], the model's \[32\]" --model nano.pt --init-from shapes.pt
refused_cleanly "--init-from a pickle that would run code" "names posix.system, which a file of weights does not" --model nano.pt \
  --init-from runs-code.pt
check "--init-from a pickle that would run code: it did not run" test ! -e pwned
refused_cleanly "a model whose forward returns two scalars" "holding 2 scalars" --model two-scalars.pt
refused_cleanly "--loss cross-entropy for a model of its own loss" "computes its own loss \(its forward\(Tensor" --model nano.pt \
  --loss cross-entropy
gpt plain.pt
refused_cleanly "--loss model for a model without one" "computes no loss of its own" --model plain.pt --loss model
# --resume: the checkpoint's weights go on, and the frozen weights every rank takes from its
# files (they never travel) must be the checkpoint's, bit for bit: another --init-from
# giving another base is refused, as is a model file replaced by one of another base (same
# names and shapes); the same base given again, as another file, goes on.
train resumed --model lora.pt --init-from base.safetensors --steps 10 --checkpoint-every 5 --stop-at 5
resume_with() {  # resume_with MODEL INIT_FROM: the resumed run's command
  with_timeout 60 "$mpirun" -np 3 "$pstrain" "${common[@]}" --dataset text/train.bin --block-size 16 "${adamw[@]}" \
    --steps 10 --checkpoint-every 5 --model "$1" --init-from "$2" --train-dir resumed --resume
}
refused "--resume with an --init-from of another base: refused, naming the frozen weights" \
  "the model's frozen weights are not those step 5 was trained with" resume_with lora.pt pretrained.pt
# A run whose base is its model file's: that file replaced in place between the run and its
# --resume (the same path, names and shapes, another base) is refused.
train resumed-file --model lora.pt --steps 10 --checkpoint-every 5 --stop-at 5
cp lora.pt lora-kept.pt
gpt lora.pt --tie --own-loss --lora 4 --seed 5
refused "--resume with the model file replaced by one of another base (same names and shapes): refused" \
  "the model's frozen weights are not those step 5 was trained with" with_timeout 60 "$mpirun" -np 3 "$pstrain" \
  "${common[@]}" --dataset text/train.bin --block-size 16 "${adamw[@]}" --steps 10 --checkpoint-every 5 --model lora.pt \
  --train-dir resumed-file --resume
mv lora-kept.pt lora.pt
"$pseval" --train-dir init-pt --export base-again.pt > /dev/null 2>&1
resume_with lora.pt base-again.pt > resumed-again.log 2>&1
check "--resume with the same base in another file (another --init-from): goes on" \
  eval 'has resumed-again.log "resum" && test -s resumed/trained_model.pt'
# A rank without --init-from (its host's --config lacks the line) trains on its model file's
# frozen weights: the handshake compares an empty identity too.
printf 'init-from = base.safetensors\n' > with.conf
: > without.conf
refused "a rank without --init-from: refused by the handshake" "ranks disagree on 'init-from-file'" \
  with_timeout 60 "$mpirun" -np 1 "$pstrain" "${common[@]}" --config with.conf --dataset text/train.bin --block-size 16 \
  --steps 2 --model lora.pt --train-dir bad-run : -np 1 "$pstrain" "${common[@]}" --config with.conf --dataset \
  text/train.bin --block-size 16 --steps 2 --model lora.pt --train-dir bad-run : -np 1 "$pstrain" "${common[@]}" \
  --config without.conf --dataset text/train.bin --block-size 16 --steps 2 --model lora.pt --train-dir bad-run

checks_done
