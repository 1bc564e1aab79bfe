#!/usr/bin/env bash
# Models as the hub ships them (docs/language-models.md, "Fine-tune a Hugging Face model"):
# tools/hf_model.py's model files, their weights from hub folders by --init-from, against an
# independent implementation (tests/common/hf_reference.py) and one PyTorch process:
#   1. a llama with GQA, tied embeddings and llama3's rope scaling, in two shards with their
#      index: pstrain's loaded model gives the reference's logits (to 1e-4 of their size);
#   2. a qwen2 stored in bfloat16, with its q/k/v biases and untied; a gpt2 from a file of the
#      hub's names (no "transformer.", no lm_head, the old attention masks beside): the same;
#   3. LoRA (PEFT's targets) on the sharded llama, 2 workers, 20 steps of AdamW (eps 1e-3):
#      the adapters within 1e-6 of PyTorch's, the frozen tensors bit for bit the hub's; its
#      exports: PEFT's names, shapes and config, mlx-lm's transposed adapters and config, the
#      merged hub folder (W + alpha/r B A, no adapter left), whose model, loaded as a hub
#      model, gives the LoRA model's logits;
#   (the default tier stops here)
#   4. a full fine-tune of the qwen2: within 1e-6 of PyTorch; a 1 GB sharded folder: each
#      rank's memory as loaded grows by at most its own share of the weights (a server's
#      range, a worker's all), read with no second copy;
#   5. bad input, each exit 2 with nothing written: an unknown model_type, another
#      rope_scaling type (hf_model.py); a shard missing from the index, a tensor of the wrong
#      shape, no --init-from for a hub model's architecture (pstrain).
# Usage: hub_models.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
here=$(cd "$(dirname "$0")" && pwd)
tools=$here/../../tools
source "$here/../common/checks.sh"
python=$PSTRAIN_PYTHON
rm -rf "$scratch" && mkdir -p "$scratch" && cd "$scratch" || exit 1
common=(--device cpu --threads 1 --timeout 60 --dataset text/train.bin --block-size 16)

sample_text input.txt
"$python" "$tools/text_to_bin.py" input.txt text > text.log 2>&1 || { cat text.log; exit 1; }
# Three hub folders of random weights, laid out as the hub lays them out.
"$python" - "$tools" <<'PY' || exit 1
import json, os, sys, torch
sys.path.insert(0, sys.argv[1])
from gpt_model import save_safetensors
torch.manual_seed(7)
def folder(name, config, weights, shards=1, dtype=torch.float32):
    os.makedirs(name, exist_ok=True)
    json.dump(config, open(f"{name}/config.json", "w"))
    weights = {k: v.to(dtype) for k, v in weights.items()}
    torch.save(weights, f"{name}/weights.pt")  # what the reference reads
    if shards == 1:
        return save_safetensors(weights, f"{name}/model.safetensors")
    names, index = list(weights), {}
    for s in range(shards):
        part = names[s::shards]
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        save_safetensors({k: weights[k] for k in part}, f"{name}/{file}")
        index.update({k: file for k in part})
    json.dump({"metadata": {"total_size": 0}, "weight_map": index}, open(f"{name}/model.safetensors.index.json", "w"))
def llama_weights(c, bias=False, tied=True):
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    d = h // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * d
    w = {"model.embed_tokens.weight": torch.randn(v, h) * 0.2, "model.norm.weight": 1 + 0.1 * torch.randn(h)}
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        for n, shape in [("self_attn.q_proj", (h, h)), ("self_attn.k_proj", (kv, h)), ("self_attn.v_proj", (kv, h)),
                         ("self_attn.o_proj", (h, h)), ("mlp.gate_proj", (i, h)), ("mlp.up_proj", (i, h)),
                         ("mlp.down_proj", (h, i))]:
            w[p + n + ".weight"] = torch.randn(*shape) / shape[1] ** 0.5
            if bias and n.split(".")[1] in ("q_proj", "k_proj", "v_proj"):
                w[p + n + ".bias"] = 0.1 * torch.randn(shape[0])
        w[p + "input_layernorm.weight"] = 1 + 0.1 * torch.randn(h)
        w[p + "post_attention_layernorm.weight"] = 1 + 0.1 * torch.randn(h)
    if not tied:
        w["lm_head.weight"] = torch.randn(v, h) * 0.2
    return w
llama = {"model_type": "llama", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 2, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 8},
         "tie_word_embeddings": True, "max_position_embeddings": 128, "hidden_act": "silu"}
folder("llama", llama, llama_weights(llama), shards=2)
qwen2 = {"model_type": "qwen2", "vocab_size": 96, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
         "num_attention_heads": 4, "num_key_value_heads": 4, "rms_norm_eps": 1e-6, "rope_theta": 1000000.0,
         "tie_word_embeddings": False, "max_position_embeddings": 128, "hidden_act": "silu",
         "use_sliding_window": False, "sliding_window": 4096}
folder("qwen2", qwen2, llama_weights(qwen2, bias=True, tied=False), dtype=torch.bfloat16)
gpt2 = {"model_type": "gpt2", "vocab_size": 96, "n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64,
        "layer_norm_epsilon": 1e-5, "activation_function": "gelu_new"}
w = {"wte.weight": torch.randn(96, 32) * 0.2, "wpe.weight": torch.randn(64, 32) * 0.1,
     "ln_f.weight": 1 + 0.1 * torch.randn(32), "ln_f.bias": 0.1 * torch.randn(32)}
for l in range(2):
    p = f"h.{l}."
    for n, shape in [("attn.c_attn", (32, 96)), ("attn.c_proj", (32, 32)), ("mlp.c_fc", (32, 128)), ("mlp.c_proj", (128, 32))]:
        w[p + n + ".weight"] = torch.randn(*shape) / shape[0] ** 0.5
        w[p + n + ".bias"] = 0.1 * torch.randn(shape[1])
    for n in ("ln_1", "ln_2"):
        w[p + n + ".weight"] = 1 + 0.1 * torch.randn(32)
        w[p + n + ".bias"] = 0.1 * torch.randn(32)
    w[p + "attn.bias"] = torch.ones(1, 1, 64, 64).tril()  # the old causal mask, which transformers leaves unread
folder("gpt2", gpt2, w)
PY
hf() {  # hf FOLDER OUT FLAGS...
  local folder=$1 out=$2; shift 2
  "$python" "$tools/hf_model.py" "$folder" "$out" --block-size 16 "$@" > "$out.log" 2>&1 || { cat "$out.log"; return 1; }
}
# loaded FOLDER MODEL DIR: one step of SGD at lr 1e-30 (no weight moves: each update is far below its
# last bit) from --init-from FOLDER: DIR's TorchScript module
# holds the weights as pstrain read them.
loaded() {
  run_logged "$3" with_timeout 120 "$mpirun" -np 2 "$pstrain" "${common[@]}" --model "$2" --init-from "$1" --steps 1 \
    --optimizer sgd --lr 1e-30 --momentum 0 --train-dir "$3"
}
# logits_diff FOLDER DIR: the largest difference of DIR's module's logits from the reference's,
# over the largest logit.
logits_diff() {
  "$python" - "$here/../common" "$1" "$2" <<'PY' 2>&1 | tail -1
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import hf_reference
config = json.load(open(sys.argv[2] + "/config.json"))
weights = torch.load(sys.argv[2] + "/weights.pt")
ids = torch.randint(0, 76, (3, 16), generator=torch.Generator().manual_seed(1))
ours, _ = torch.jit.load(sys.argv[3] + "/trained_model.torchscript.pt").eval()(ids, ids)
theirs = hf_reference.logits(config, weights, ids)
print(f"{((ours - theirs).abs().max() / theirs.abs().max()).item():.3g}")
PY
}
for family in llama qwen2 gpt2; do
  hf "$family" "$family.pt" || exit 1
  loaded "$family" "$family.pt" "$family-loaded"
  diff=$(logits_diff "$family" "$family-loaded")
  echo "     $family: logits of the model pstrain loaded against the reference's: ${diff:-?} of their size"
  check "$family: the hub's weights loaded by name give the reference's logits (<= 1e-4 of their size)" ge 1e-4 "${diff:-1}"
done
check "llama: the shards were read by their index" has llama-loaded.log "--init-from llama: [0-9]+ tensors"
check "gpt2: the hub's bare names got their prefix, its old masks left unread (30 tensors in the file)" \
  has gpt2-loaded.log "--init-from gpt2: 30 tensors"

# The llama in bfloat16, as --precision bf16-weights runs it (weights in bf16, autocast):
# its RMSNorm is float32 arithmetic on bf16 activations (only the last rounding to bf16 may
# differ), and its logits are the float32 reference's within bf16's precision.
half=$("$python" - "$here/../common" llama llama-loaded <<'PY' 2>&1 | tail -1
import json, sys, torch
sys.path.insert(0, sys.argv[1])
import hf_reference
config = json.load(open(sys.argv[2] + "/config.json"))
weights = {k: v.bfloat16().float() for k, v in torch.load(sys.argv[2] + "/weights.pt").items()}
ids = torch.randint(0, 76, (3, 16), generator=torch.Generator().manual_seed(1))
model = torch.jit.load(sys.argv[3] + "/trained_model.torchscript.pt").eval().to(torch.bfloat16)
x = torch.randn(3, 16, config["hidden_size"], generator=torch.Generator().manual_seed(2)).bfloat16()
w, eps = model.model.norm.weight, config["rms_norm_eps"]
theirs = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)).bfloat16()
norm = ((model.model.norm(x) / w).float() - theirs.float()).abs().max() / theirs.float().abs().max()
with torch.autocast("cpu", dtype=torch.bfloat16):
    ours, _ = model(ids, ids)
theirs = hf_reference.logits(config, weights, ids)
print(f"{norm.item():.3g} {((ours.float() - theirs).abs().max() / theirs.abs().max()).item():.3g}")
PY
)
echo "     llama in bfloat16: RMSNorm against float32 arithmetic, logits against the float32 reference: ${half:-?}"
check "llama in bfloat16: RMSNorm is float32 arithmetic (<= one bf16 step), logits within 3e-2 of the reference" \
  bash -c '[ "$(echo "$0" | awk "{print (\$1 <= 0.0079 && \$2 <= 0.03)}")" = 1 ]' "${half:-1 1}"

# --- 3. LoRA on the sharded llama against PyTorch ----------------------------------------
hf llama llama-lora.pt --lora 4 || exit 1
# shellcheck disable=SC2054 # --betas takes B1,B2
adamw=(--optimizer adamw --betas 0.9,0.95 --eps 1e-3 --weight-decay 0.1 --lr 3e-3 --lr-scaling none --batch-size 4 --seed 5
       --steps 20)
run_logged lora with_timeout 180 "$mpirun" -np 3 "$pstrain" "${common[@]}" --model llama-lora.pt --init-from llama \
  "${adamw[@]}" --train-dir lora
loaded llama llama-lora.pt lora-start
result=$("$python" - "$here/../common" <<'PY' 2>&1 | tail -1
import sys, torch
sys.path.insert(0, sys.argv[1])
import lm_reference as ref
tokens = ref.read_tokens("text/train.bin")
model = torch.jit.load("lora-start/trained_model.torchscript.pt")
start = {k: v.clone() for k, v in model.state_dict().items()}
trained = [p for p in model.parameters() if p.requires_grad]
opt = torch.optim.AdamW(trained, lr=3e-3, betas=(0.9, 0.95), eps=1e-3, weight_decay=0.1)
ref.train(model, opt, tokens, steps=20, seed=5, shards=2, batch=4, block=16, own_loss=True)
ours = torch.load("lora/trained_model.pt")
frozen = [n for n, p in model.named_parameters() if not p.requires_grad]
hub = torch.load("llama/weights.pt")
same = all(torch.equal(ours[n], hub[n]) for n in frozen if n in hub) and torch.equal(ours["lm_head.weight"], hub["model.embed_tokens.weight"])
state = model.state_dict()
print(max((ours[k] - state[k]).abs().max().item() for k in ours), len(trained), same)
PY
)
read -r diff adapters same <<< "$result"
echo "     LoRA on the sharded llama: $adapters adapters vs AdamW over them in PyTorch: max abs diff ${diff:-?}"
check "LoRA from a sharded hub folder: the adapters are PyTorch's (<= 1e-6)" ge 1e-6 "${diff:-1}"
check "LoRA from a sharded hub folder: the frozen tensors are the hub's, bit for bit" test "${same:-}" = True
check "LoRA from a sharded hub folder: the start-up line names the first 4 adapters the folder lacks, then counts" \
  has lora.log "8 trained tensor\(s\) it lacks keep the model's values \(a fine-tune's adapters\): [^ ]+, [^ ]+, [^ ]+, [^ ]+ and 4 more$"

# --- the exports: hf (merged), peft, mlx ---------------------------------------------------
for format in hf peft mlx; do
  "$pseval" --train-dir lora --export "lora-$format" --format "$format" > "export-$format.log" 2>&1 || cat "export-$format.log"
done
check "pseval --export --format peft|mlx|hf: PEFT's names, shapes and config; mlx-lm's, transposed; the merged folder" \
  "$python" - <<'PY'
import json, struct, sys, torch
def read(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__")
    assert meta.get("format") == "pt", meta
    return {k: torch.frombuffer(bytearray(raw[8 + n + e["data_offsets"][0]:8 + n + e["data_offsets"][1]]),
                                dtype=torch.float32).view(e["shape"]) for k, e in header.items()}
ours = torch.load("lora/trained_model.pt")
modules = [k[:-len(".lora_A.weight")] for k in ours if k.endswith(".lora_A.weight")]
scale = 16.0 / 4
peft = read("lora-peft/adapter_model.safetensors")
config = json.load(open("lora-peft/adapter_config.json"))
ok = config["peft_type"] == "LORA" and config["task_type"] == "CAUSAL_LM" and config["r"] == 4 and config["lora_alpha"] == 16
ok = ok and sorted(config["target_modules"]) == ["q_proj", "v_proj"] and len(peft) == 2 * len(modules) == 8
mlx = read("lora-mlx/adapters.safetensors")
mconfig = json.load(open("lora-mlx/adapter_config.json"))
ok = ok and mconfig["fine_tune_type"] == "lora" and mconfig["lora_parameters"]["rank"] == 4
ok = ok and mconfig["lora_parameters"]["scale"] == scale and mconfig["num_layers"] == 2
hf = read("lora-hf/model.safetensors")
ok = ok and not any("lora" in k for k in hf) and "lm_head.weight" not in hf and len(hf) == 20
ok = ok and json.load(open("lora-hf/config.json")) == json.load(open("llama/config.json"))
for m in modules:
    a, b = ours[m + ".lora_A.weight"], ours[m + ".lora_B.weight"]
    ok = ok and torch.equal(peft["base_model.model." + m + ".lora_A.weight"], a) and torch.equal(peft["base_model.model." + m + ".lora_B.weight"], b)
    ok = ok and torch.equal(mlx[m + ".lora_a"], a.t()) and torch.equal(mlx[m + ".lora_b"], b.t())
    ok = ok and torch.allclose(hf[m + ".weight"], ours[m + ".weight"] + scale * b @ a, rtol=0, atol=1e-6)
    ok = ok and b.abs().max() > 0  # the adapters trained
sys.exit(not ok)
PY
# The merged folder is a hub folder: the plain model loaded from it gives the LoRA model's logits.
hf lora-hf merged.pt || exit 1
loaded lora-hf merged.pt merged-loaded
diff=$("$python" - <<'PY' 2>&1 | tail -1
import torch
ids = torch.randint(0, 76, (3, 16), generator=torch.Generator().manual_seed(2))
merged, _ = torch.jit.load("merged-loaded/trained_model.torchscript.pt").eval()(ids, ids)
lora, _ = torch.jit.load("lora/trained_model.torchscript.pt").eval()(ids, ids)
print(f"{((merged - lora).abs().max() / lora.abs().max()).item():.3g}")
PY
)
echo "     the merged hf folder, loaded as a hub model: its logits against the LoRA model's: ${diff:-?} of their size"
check "pseval --export --format hf: a hub folder whose model gives the LoRA model's logits (<= 1e-5)" ge 1e-5 "${diff:-1}"

brief_ends_here

# --- 4. a full fine-tune of the qwen2 (bfloat16 on the hub) ---------------------------------
run_logged full with_timeout 180 "$mpirun" -np 3 "$pstrain" "${common[@]}" --model qwen2.pt --init-from qwen2 \
  "${adamw[@]}" --train-dir full
result=$("$python" - "$here/../common" <<'PY' 2>&1 | tail -1
import sys, torch
sys.path.insert(0, sys.argv[1])
import lm_reference as ref
tokens = ref.read_tokens("text/train.bin")
model = torch.jit.load("qwen2-loaded/trained_model.torchscript.pt")
opt = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), eps=1e-3, weight_decay=0.1)
ref.train(model, opt, tokens, steps=20, seed=5, shards=2, batch=4, block=16, own_loss=True)
ours, state = torch.load("full/trained_model.pt"), model.state_dict()
print(max((ours[k] - state[k]).abs().max().item() for k in ours))
PY
)
echo "     a full fine-tune of the qwen2: max abs diff ${result:-?} from PyTorch"
check "a full fine-tune from a bfloat16 hub folder: PyTorch's (<= 1e-6)" ge 1e-6 "${result:-1}"

# --- a 1 GB sharded folder: each rank reads only its share -----------------------------------
# A llama of 291 M float32 weights in 4 shards (1.1 GB), fully trained: 2 servers (each holds
# half the weights) and a worker (all of them). The dry run measures each rank as loaded.
"$python" - "$tools" <<'PY' || exit 1
import json, os, sys, torch
sys.path.insert(0, sys.argv[1])
from gpt_model import save_safetensors
c = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 20,
     "num_attention_heads": 16, "num_key_value_heads": 4, "rms_norm_eps": 1e-5, "tie_word_embeddings": False,
     "max_position_embeddings": 256, "hidden_act": "silu"}
os.makedirs("big", exist_ok=True)
json.dump(c, open("big/config.json", "w"))
h, i = 1024, 2816
shapes = {"model.embed_tokens.weight": (32000, h), "lm_head.weight": (32000, h), "model.norm.weight": (h,)}
for l in range(20):
    for n, s in [("self_attn.q_proj", (h, h)), ("self_attn.k_proj", (256, h)), ("self_attn.v_proj", (256, h)),
                 ("self_attn.o_proj", (h, h)), ("mlp.gate_proj", (i, h)), ("mlp.up_proj", (i, h)), ("mlp.down_proj", (h, i))]:
        shapes[f"model.layers.{l}.{n}.weight"] = s
    for n in ("input_layernorm", "post_attention_layernorm"):
        shapes[f"model.layers.{l}.{n}.weight"] = (h,)
names, index = list(shapes), {}
for s in range(4):
    file = f"model-{s + 1:05d}-of-00004.safetensors"
    save_safetensors({k: 0.02 * torch.randn(*shapes[k]) for k in names[s::4]}, f"big/{file}")
    index.update({k: file for k in names[s::4]})
json.dump({"metadata": {}, "weight_map": index}, open("big/model.safetensors.index.json", "w"))
PY
hf big big.pt || exit 1
loaded_gib() {  # loaded_gib LOG: each rank's "GiB as loaded", in rank order
  sed -n 's/.*memory    rank \([0-9]*\) .* \([0-9.]*\) GiB as loaded.*/\2/p' "$1" | tr '\n' ' '
}
run_logged big-plan with_timeout 300 "$mpirun" -np 3 "$pstrain" "${common[@]}" --model big.pt --init-from big --servers 2 \
  --batch-size 1 --optimizer sgd --lr 1e-3 --steps 1 --dry-run --train-dir big-plan
run_logged small-plan with_timeout 120 "$mpirun" -np 3 "$pstrain" "${common[@]}" --model llama.pt --init-from llama \
  --servers 2 --batch-size 1 --optimizer sgd --lr 1e-3 --steps 1 --dry-run --train-dir small-plan
read -r server0 server1 worker <<< "$(loaded_gib big-plan.log)"
read -r base0 base1 baseworker <<< "$(loaded_gib small-plan.log)"
echo "     a 1.1 GB sharded folder, as loaded: servers ${server0:-?} and ${server1:-?} GiB, the worker ${worker:-?} GiB (a tiny model's: ${base0:-?}, ${base1:-?}, ${baseworker:-?} GiB)"
# The weights are 1.084 GiB: each server's share half of it, the worker's all; 5% beside.
check "--init-from a 1 GB sharded folder: each server grows by at most its half of the weights" \
  python3 -c "import sys; sys.exit(not (${server0:-9} - ${base0:-0} <= 0.542 * 1.05 and ${server1:-9} - ${base1:-0} <= 0.542 * 1.05))"
check "--init-from a 1 GB sharded folder: the worker grows by at most the weights, read with no second copy" \
  python3 -c "import sys; sys.exit(not ${worker:-9} - ${baseworker:-0} <= 1.084 * 1.05)"
rm -rf big

# --- 5. bad input ----------------------------------------------------------------------------
bad_config() {  # bad_config NAME PATTERN PYTHON: a copy of llama/ whose config PYTHON changed (c)
  rm -rf bad && cp -r llama bad
  "$python" -c "import json; c = json.load(open('bad/config.json')); $3; json.dump(c, open('bad/config.json', 'w'))"
  "$python" "$tools/hf_model.py" bad bad.pt --block-size 16 > bad.log 2>&1
  local rc=$?
  check "hf_model.py, $1: exit 2, naming it, nothing written" \
    bash -c '[ "$0" -eq 2 ] && grep -qE -- "$1" bad.log && [ ! -e bad.pt ]' "$rc" "$2"
}
bad_config "an unknown model_type" "model_type 'falcon'" "c['model_type'] = 'falcon'"
bad_config "another rope_scaling type" "rope_scaling type 'yarn'" "c['rope_scaling'] = {'rope_type': 'yarn', 'factor': 4.0}"
bad_config "a sliding window shorter than --block-size" "sliding_window 8" "c['model_type'] = 'mistral'; c['sliding_window'] = 8"
refused_hub() {  # refused_hub NAME PATTERN FLAGS...: pstrain exits 2 saying PATTERN, no train dir
  local name=$1 pattern=$2 rc; shift 2
  rm -rf bad-run
  with_timeout 60 "$mpirun" -np 2 "$pstrain" "${common[@]}" --steps 2 --train-dir bad-run "$@" > bad-run.out 2>&1
  rc=$?
  check "$name: exit 2, nothing written" bash -c '[ "$0" -eq 2 ] && grep -qE -- "$1" bad-run.out && [ ! -e bad-run ]' \
    "$rc" "$pattern"
}
rm -rf missing-shard && cp -r llama missing-shard && rm missing-shard/model-00002-of-00002.safetensors
refused_hub "--init-from a folder whose index names a missing shard" "which is missing" --model llama.pt \
  --init-from missing-shard
rm -rf wrong-shape && mkdir wrong-shape && cp qwen2/config.json wrong-shape/
"$python" - "$tools" <<'PY'
import sys, torch
sys.path.insert(0, sys.argv[1])
from gpt_model import save_safetensors
w = torch.load("qwen2/weights.pt")
w["model.norm.weight"] = torch.ones(7)
save_safetensors(w, "wrong-shape/model.safetensors")
PY
refused_hub "--init-from a tensor of the wrong shape" "model.norm.weight is \[7\], the model's \[32\]" --model qwen2.pt \
  --init-from wrong-shape
refused_hub "a hub model's architecture without --init-from" "the file holds no values for" --model llama.pt

checks_done
