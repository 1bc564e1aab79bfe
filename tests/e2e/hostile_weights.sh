#!/usr/bin/env bash
# The readers and exports of files someone else wrote, under hostile input (Hardening VII),
# end to end: each case a clear refusal naming the file and the cause, with no signal, no
# C++ backtrace and nothing trained or written.
#   1. deep pickles (a million nested tuples in 1.1 MB; deep lists and dicts) as --init-from,
#      as a published checkpoint (pseval skips it: exit 3; pseval --export: exit 2; --resume
#      skips it, saying why): "nested more than 128 deep";
#   2. a state dict that names a tensor twice (a pickle setting it twice; nanoGPT's ckpt.pt
#      holding X and _orig_mod.X): exit 2 naming it;
#   (the default tier stops here)
#   3. a sparse 3 GiB --init-from of zeros: refused at once (its header length is 0), each
#      rank's peak memory that of an empty run; a list of 8 M None (8 MB): each rank's peak
#      bounded by the file (measured); sizes whose element count wraps: exit 2;
#   4. pseval: --model of another model's state dict, and checkpoints whose loss does not
#      fit the model (an own-loss checkpoint with a one-input model, a zoo checkpoint saying
#      loss "model"): exit 2 at once, not after --retry-for; --help names --step's default once;
#   5. pseval --export's target: a FIFO, a device node, a folder that is not there, a name of
#      no format it writes, a published checkpoint: refused, each left as it was;
#   6. a model with nothing to train: the message says so, not the loss; --doctor checks
#      --init-from (a missing file is a problem, not "all well");
#   7. non-persistent buffers (tools/model_file.py records them): --init-from the nn.Module's
#      state dict, and trained_model.pt and pseval --export loaded strictly by the nn.Module.
# Usage: hostile_weights.sh PSTRAIN PSEVAL MPIRUN SCRATCH
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
# refused_cleanly NAME PATTERN FLAGS...: the job exits 2 within 60 s saying PATTERN, with no
# SIGSEGV and no backtrace (the other ranks end by MPI_Abort's SIGTERM), and no train dir is
# made.
refused_cleanly() {
  local name=$1 pattern=$2 rc; shift 2
  rm -rf bad-run
  with_timeout 60 "$mpirun" -np 2 "$pstrain" "${common[@]}" --dataset text/train.bin --block-size 16 --steps 5 \
    --train-dir bad-run "$@" > bad-run.out 2>&1
  rc=$?
  if [ $rc -eq 2 ] && grep -qE -- "$pattern" bad-run.out && ! grep -qE "signal 11|Segmentation|frame #|Exception raised from" bad-run.out &&
     [ ! -e bad-run ]; then
    echo "ok   $name: $(grep -E -- "$pattern" bad-run.out | head -1 | cut -c1-200)"; passed=$((passed + 1))
  else
    echo "FAIL $name (exit $rc$([ -e bad-run ] && echo ', a train dir written')):"; tail -5 bad-run.out | sed 's/^/     /'
    failures=$((failures + 1))
  fi
}
# publish_as DIR STEP FILE: FILE published as DIR/ckpt/step-STEP.pt, its .ok matching.
publish_as() {
  "$python" - "$@" <<'PY'
import os, sys, zlib
d, step, src = sys.argv[1], int(sys.argv[2]), sys.argv[3]
os.makedirs(d + "/ckpt", exist_ok=True)
raw = open(src, "rb").read()
base = f"{d}/ckpt/step-{step:08d}"
open(base + ".pt", "wb").write(raw)
open(base + ".ok", "w").write(f"pstrain-checkpoint 1\nbytes {len(raw)}\ncrc32 {zlib.crc32(raw):08x}\n")
PY
}

gpt plain.pt --own-loss
# Hostile pickles, each in a torch.save archive as torch.save lays it out.
"$python" - <<'PY'
import io, torch, zipfile
def archive(path, pickle):
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("archive/data.pkl", pickle)
        z.writestr("archive/version", b"3\n")
archive("deep-tuples.pt", b"\x80\x02)" + b"\x85" * 1000000 + b".")
archive("deep-lists.pt", b"\x80\x02" + b"(" * 300000 + b"N" + b"l" * 300000 + b".")
archive("deep-dicts.pt", b"\x80\x02" + b"}X\x01\x00\x00\x00k" * 300000 + b"N" + b"s" * 300000 + b".")
state = torch.jit.load("plain.pt").state_dict()
buf = io.BytesIO()
torch.save(state, buf)
raw = bytearray(buf.getvalue())
# A name set to another of the same length: a dict that sets one name twice.
names = [n.encode() for n in state]
first, second = next((a, b) for i, a in enumerate(names) for b in names[i + 1:] if len(a) == len(b))
at = raw.find(b"X" + len(second).to_bytes(4, "little") + second)
raw[at + 5:at + 5 + len(second)] = first
open("twice.pt", "wb").write(bytes(raw))
torch.save({"model": {**state, "_orig_mod." + list(state)[0]: state[list(state)[0]] + 1}, "iter_num": 3}, "compiled.pt")
PY
for kind in tuples lists dicts; do
  refused_cleanly "--init-from 1 MB-ish of nested $kind: refused, no SIGSEGV" "deep-$kind.pt: .*nested more than 128 deep" \
    --model plain.pt --init-from "deep-$kind.pt"
done
# The same as a published checkpoint (its .ok matching): pseval skips it, exit 3; --export
# and --resume refuse it; no rank is killed.
publish_as deep-run 5 deep-tuples.pt
"$pseval" --train-dir deep-run --model plain.pt --retry-for 0 > deep-eval.log 2>&1
rc=$?
check "pseval on a published deep checkpoint: skipped (exit 3), naming the nesting" \
  eval "[ $rc -eq 3 ] && has deep-eval.log 'nested more than 128 deep' && ! has deep-eval.log 'signal|frame #'"
"$pseval" --train-dir deep-run --export deep.safetensors > deep-export.log 2>&1
rc=$?
check "pseval --export of a published deep checkpoint: refused (exit 2), nothing written" \
  eval "[ $rc -eq 2 ] && has deep-export.log 'nested more than 128 deep' && [ ! -e deep.safetensors ]"
with_timeout 60 "$mpirun" -np 2 "$pstrain" "${common[@]}" --dataset text/train.bin --block-size 16 --steps 2 \
  --model plain.pt --train-dir deep-run --resume > deep-resume.log 2>&1
check "--resume past a published deep checkpoint: trains from step 0" \
  eval "has deep-resume.log 'resume: skipping step 5: .*nested more than 128 deep' && test -s deep-run/trained_model.pt"
refused_cleanly "--init-from a state dict that sets one name twice: refused, naming it" \
  "twice.pt: its state dict names '[a-z0-9_.]+' twice" --model plain.pt --init-from twice.pt
refused_cleanly "--init-from nanoGPT's ckpt.pt holding both X and _orig_mod.X: refused, naming both" \
  "named twice \(1\): ([a-z0-9_.]+) \(as \1 and _orig_mod\.\1\)" --model plain.pt --init-from compiled.pt

brief_ends_here

# --- 3. files that would take memory ------------------------------------------------------
# peak.py COMMAND...: runs COMMAND, then prints "peak N KiB", its peak resident memory.
cat > peak.py <<'PY'
import resource, subprocess, sys
status = subprocess.call(sys.argv[1:])
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print("peak %d KiB" % (peak // 1024 if sys.platform == "darwin" else peak), file=sys.stderr)
sys.exit(status)
PY
"$python" -c "open('sparse.safetensors', 'wb').truncate(3 << 30)"
start=$(now_seconds)
with_timeout 60 "$mpirun" -np 2 "$python" peak.py "$pstrain" "${common[@]}" --dataset text/train.bin \
  --block-size 16 --steps 5 --model plain.pt --init-from sparse.safetensors --train-dir bad-run > sparse.log 2>&1
rc=$? took=$(awk -v a="$start" -v b="$(now_seconds)" 'BEGIN { printf "%.1f", b - a }')
peak=$(grep -oE "peak [0-9]+ KiB" sparse.log | awk '{ if ($2 > m) m = $2 } END { print m + 0 }')
echo "     a sparse 3 GiB --init-from: exit $rc after $took s, each rank's peak at most $peak KiB"
check "a sparse 3 GiB --init-from of zeros: refused at once (its header is 0 bytes), in under 10 s" \
  eval "[ $rc -eq 2 ] && has sparse.log 'its header is 0 bytes' && ge 10 $took"
check "a sparse 3 GiB --init-from: no rank read it (peak under 1 GiB: $peak KiB)" ge 1048576 "$peak"
"$python" - <<'PY'
import zipfile
with zipfile.ZipFile("nones.pt", "w", zipfile.ZIP_STORED) as z:
    z.writestr("archive/data.pkl", b"\x80\x02(" + b"N" * 8000000 + b"l.")
PY
with_timeout 60 "$mpirun" -np 2 "$python" peak.py "$pstrain" "${common[@]}" --dataset text/train.bin \
  --block-size 16 --steps 5 --model plain.pt --init-from nones.pt --train-dir bad-run > nones.log 2>&1
rc=$?
peak=$(grep -oE "peak [0-9]+ KiB" nones.log | awk '{ if ($2 > m) m = $2 } END { print m + 0 }')
echo "     an 8 MB --init-from of one list of 8 M None: exit $rc, each rank's peak at most $peak KiB (2.31 GB before)"
check "an 8 MB list of 8 M None: refused as not a state dict" eval "[ $rc -eq 2 ] && has nones.log 'not a dict of tensors'"
check "an 8 MB list of 8 M None: each rank's peak under 600 MiB ($peak KiB)" ge 614400 "$peak"
"$python" - <<'PY'
import struct, zipfile
def text(t):
    return b"X" + struct.pack("<I", len(t)) + t
pickle = (b"\x80\x02}" + text(b"tokens.weight") + b"ctorch._utils\n_rebuild_tensor_v2\n((" + text(b"storage") +
          b"ctorch\nFloatStorage\n" + text(b"0") + text(b"cpu") + b"K\x01tQK\x00" +
          b"J\x00\x00\x10\x00\x8a\x06\x00\x00\x00\x00\x00\x10\x86" + b"K\x00K\x00\x86\x89)tRs.")
with zipfile.ZipFile("wraps.pt", "w", zipfile.ZIP_STORED) as z:
    z.writestr("archive/data.pkl", pickle)
    z.writestr("archive/data/0", b"\0" * 4)
PY
refused_cleanly "--init-from a tensor of sizes (2^20, 2^44), strides (0, 0): refused, no backtrace" \
  "more than 2\^62 elements" --model plain.pt --init-from wraps.pt

# --- 4. pseval: checkpoints that do not fit the model ----------------------------------------
gpt other.pt --own-loss --embd 16
gpt one-input.pt
with_timeout 120 "$mpirun" -np 2 "$pstrain" "${common[@]}" --dataset text/train.bin --block-size 16 --steps 4 \
  --checkpoint-every 2 --model plain.pt --train-dir gpt-run > gpt-run.log 2>&1 || tail -5 gpt-run.log
start=$(now_seconds)
"$pseval" --train-dir gpt-run --model other.pt --out-dir other-eval > other.log 2>&1
rc=$? took=$(awk -v a="$start" -v b="$(now_seconds)" 'BEGIN { printf "%.1f", b - a }')
check "pseval --model of another model: exit 2 at once ($took s), saying it does not fit" \
  eval "[ $rc -eq 2 ] && has other.log 'has shape|the model has' && ge 20 $took"
"$pseval" --train-dir gpt-run --model one-input.pt --out-dir one-eval > one.log 2>&1
rc=$?
check "pseval of an own-loss checkpoint with a one-input --model: exit 2, naming the loss" \
  eval "[ $rc -eq 2 ] && has one.log \"trained with the loss 'model', which does not fit\""
with_timeout 120 "$mpirun" -np 2 "$pstrain" "${common[@]}" --model mlp --dataset synthetic --steps 2 --train-dir zoo-run \
  > zoo-run.log 2>&1 || tail -5 zoo-run.log
"$python" - <<'PY'
import glob, torch
path = sorted(glob.glob("zoo-run/ckpt/step-*.pt"))[-1]
ckpt = torch.load(path)
ckpt["__meta__"]["loss"] = "model"
torch.save(ckpt, "zoo-model-loss.pt")
PY
publish_as zoo-forged 2 zoo-model-loss.pt
"$pseval" --train-dir zoo-forged --out-dir zoo-eval > zoo.log 2>&1
rc=$?
check "pseval of a zoo checkpoint whose __meta__.loss says 'model': exit 2, not an internal error" \
  eval "[ $rc -eq 2 ] && has zoo.log 'computes no loss of its own' && ! has zoo.log 'internal error'"
"$pseval" --help > pseval-help.txt
check "pseval --help names --step's default once" test "$(grep -A2 -- '--step' pseval-help.txt | grep -c default)" = 1

# --- 5. pseval --export's target ---------------------------------------------------------------
export_refused() {  # export_refused NAME PATTERN TARGET: --export TARGET exits 2 saying PATTERN
  "$pseval" --train-dir gpt-run --export "$3" > export.log 2>&1
  local rc=$?
  check "pseval --export $1: refused (exit 2)" eval "[ $rc -eq 2 ] && has export.log '$2'"
}
mkfifo fifo.safetensors
mknod null.pt c 1 3 2>/dev/null || ln -s /dev/null null.pt
export_refused "into a FIFO" "not a regular file" fifo.safetensors
check "pseval --export into a FIFO: the FIFO is still one" test -p fifo.safetensors
export_refused "into a device node" "not a regular file" null.pt
check "pseval --export into a device node: the node is still one" test -c null.pt
export_refused "into a folder that is not there" "there is no folder missing-folder" missing-folder/w.safetensors
for name in w.safetensor w.SAFETENSORS w.bin w.npz; do
  export_refused "to $name" "neither" "$name"
  check "pseval --export to $name: nothing written" test ! -e "$name"
done
before=$(sha256_of gpt-run/ckpt/step-00000002.pt | cut -d' ' -f1)
export_refused "over a published checkpoint" "among the run.s checkpoints" gpt-run/ckpt/step-00000002.pt
check "pseval --export over a published checkpoint: it is unchanged" \
  test "$(sha256_of gpt-run/ckpt/step-00000002.pt | cut -d' ' -f1)" = "$before"

# --- 6. a model with nothing to train; --doctor and --init-from -------------------------------
"$python" - <<'PY'
import torch
m = torch.jit.load("plain.pt")
for p in m.parameters():
    p.requires_grad_(False)
m.save("all-frozen.pt")
PY
refused_cleanly "a model with nothing to train: says so" "it has nothing to train: none of its parameters requires grad" \
  --model all-frozen.pt
with_timeout 60 "$mpirun" -np 2 "$pstrain" "${common[@]}" --dataset text/train.bin --block-size 16 --model plain.pt \
  --init-from missing.safetensors --doctor > doctor.log 2>&1
rc=$?
check "--doctor with a missing --init-from: a problem (exit 2), not all well" \
  eval "[ $rc -eq 2 ] && has doctor.log 'problem: .*--init-from missing.safetensors' && ! has doctor.log 'all well'"

# --- 7. non-persistent buffers ------------------------------------------------------------------
cat > scaled.py <<'PY'
import torch, torch.nn as nn
class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(76, 8)
        self.head = nn.Linear(8, 76)
        self.register_buffer("scale", torch.full((8,), 0.5), persistent=False)  # as Hugging Face's inv_freq
    def forward(self, x):
        return self.head(self.embed(x) * self.scale)
PY
"$python" - "$tools" <<'PY'
import sys, torch
sys.path.insert(0, sys.argv[1])
sys.path.insert(0, ".")
from model_file import save
from scaled import Scaled
torch.manual_seed(1)
m = Scaled()
save(m, "scaled.pt")
assert "scale" not in m.state_dict()
torch.save({k: v + 0.01 for k, v in m.state_dict().items()}, "scaled-pretrained.pt")
PY
with_timeout 120 "$mpirun" -np 2 "$pstrain" "${common[@]}" --dataset text/train.bin --block-size 16 --steps 3 \
  --model scaled.pt --init-from scaled-pretrained.pt --train-dir scaled-run > scaled-run.log 2>&1
rc=$?
check "a non-persistent buffer: --init-from the nn.Module's state dict (which lacks it) trains" eval "[ $rc -eq 0 ]"
"$pseval" --train-dir scaled-run --model scaled.pt --export scaled-export.pt > scaled-export.log 2>&1
check "a non-persistent buffer: trained_model.pt and pseval --export load strictly into the nn.Module" \
  "$python" - <<'PY'
import sys, torch
sys.path.insert(0, ".")
from scaled import Scaled
m = Scaled()
m.load_state_dict(torch.load("scaled-run/trained_model.pt"), strict=True)
m.load_state_dict(torch.load("scaled-export.pt"), strict=True)
scripted = torch.jit.load("scaled-run/trained_model.torchscript.pt")
sys.exit(not torch.equal(scripted.scale, torch.full((8,), 0.5)))
PY

checks_done
