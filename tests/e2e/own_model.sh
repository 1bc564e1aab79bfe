#!/usr/bin/env bash
# A model and data of the user's: a TorchScript file from Python and an .npz, under mpirun.
#   1. the README's walk-through, shortened: tools/example_model.py (a small CNN with
#      BatchNorm and dropout) and tools/idx_to_npz.py (a Fashion-MNIST subset), 3 ranks,
#      pseval; Python loads trained_model.pt into the nn.Module and
#      trained_model.torchscript.pt with torch.jit.load: both predict what pseval predicts;
#   2. the zoo's LeNet and the same network scripted from Python with the same initial
#      weights train to the same weights (sync, 2 workers, 20 steps, momentum, weight decay);
#   3. every mode and the codecs fp16 and topk:0.01 train the BatchNorm model (loss falls);
#   4. --resume of a file model after SIGTERM equals the uninterrupted run exactly;
#   5. regression: float targets (--loss auto: mse); pseval reports the loss;
#   6. bad input, each a clear message and a non-zero exit, nothing left hanging.
# Usage: own_model.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
here=$(cd "$(dirname "$0")" && pwd)
tools=$here/../../tools
source "$here/../common/checks.sh"
python=$PSTRAIN_PYTHON
data=$PSTRAIN_DATA_DIR/fashion-mnist
rm -rf "$scratch" && mkdir -p "$scratch" && cd "$scratch" || exit 1
[ -f "$data/t10k-images-idx3-ubyte.gz" ] || { echo "Fashion-MNIST missing in $data (apt-get install dataset-fashion-mnist)"; exit 1; }
run() {  # run NP DIR [flags...]: a job with the example model on the subset
  local np=$1 dir=$2; shift 2
  run_logged "$dir" with_timeout 240 "$mpirun" -np "$np" "$pstrain" --device cpu --model cnn.pt --dataset small.npz --batch-size 32 \
    --lr 0.05 --threads 1 --log-every 15 --checkpoint-every 0 --timeout 60 --train-dir "$dir" "$@"
}
first_last_loss() { metric "$1" "f\"{lines[0]['loss']} {last['loss']}\""; }

"$python" "$tools/example_model.py" cnn.pt > /dev/null || exit 1
"$python" "$tools/idx_to_npz.py" "$data" small.npz --limit 4000 --compressed > /dev/null || exit 1

# --- 1. the walk-through ----------------------------------------------------------------
run 3 "$scratch/walk" --epochs 2 --lr 0.01 --lr-decay cosine --checkpoint-every 60
check "walk-through: trains" test -f walk/trained_model.pt
check "walk-through: writes the TorchScript module with its weights" test -s walk/trained_model.torchscript.pt
"$pseval" --train-dir walk --model cnn.pt --predictions predictions.txt > walk.eval.log 2>&1
accuracy=$(tail -1 walk/eval.csv | cut -d, -f5 | awk '{printf "%.2f", $1 * 100}')
echo "     4000 samples, 2 epochs: test accuracy $accuracy%"
check "walk-through: pseval evaluates the checkpoints (accuracy >= 75%)" ge "$accuracy" 75
"$python" - "$tools" <<'PY' > python.log 2>&1
import sys, numpy as np, torch
sys.path.insert(0, sys.argv[1])
from example_model import SmallCNN
d = np.load("small.npz")
x = (torch.from_numpy(d["x_test"]).float() / 255 - float(d["mean"][0])) / float(d["std"][0])
module = SmallCNN()
module.load_state_dict(torch.load("walk/trained_model.pt", weights_only=True))  # strict
script = torch.jit.load("walk/trained_model.torchscript.pt")
module.eval(), script.eval()
with torch.no_grad():  # in batches of 100: 4000 at once took 13 s (im2col buffers of 450 MB), these 1 s
    a = torch.cat([module(c) for c in x.split(100)]).argmax(1).numpy()
    b = torch.cat([script(c) for c in x.split(100)]).argmax(1).numpy()
p = np.loadtxt("predictions.txt", dtype=np.int64)
print(f"{len(p)} predictions; nn.Module agrees on {(a == p).sum()}, TorchScript on {(b == p).sum()}")
sys.exit(0 if len(p) == len(x) and (a == p).all() and (b == p).all() else 1)
PY
rc=$?
sed 's/^/     /' python.log
check "walk-through: the nn.Module and the TorchScript file predict what pseval predicts" test $rc -eq 0

brief_ends_here

# --- 2. the zoo's LeNet against the same network scripted from Python --------------------
"$(dirname "$pseval")/tests/export_models" zoo > /dev/null || exit 1
"$python" - "$tools" <<'PY' || exit 1
import sys, torch
sys.path.insert(0, sys.argv[1])
import pstrain_models
model = pstrain_models.build("lenet")
model.load_state_dict(torch.load("zoo/lenet.pt", weights_only=True))  # the zoo's initial weights at seed 1
torch.jit.script(model).save("lenet-script.pt")
PY
same=(--device cpu --dataset synthetic --synthetic-size 600 --batch-size 16 --lr 0.02 --momentum 0.9 --weight-decay 1e-4
      --steps 20 --threads 1 --checkpoint-every 0 --log-every 10)
run_logged zoo-run with_timeout 120 "$mpirun" -np 3 "$pstrain" --model lenet "${same[@]}" --train-dir zoo-run
run_logged file-run with_timeout 120 "$mpirun" -np 3 "$pstrain" --model lenet-script.pt --loss nll "${same[@]}" --train-dir file-run
diff=$(max_weight_diff zoo-run/trained_model.pt file-run/trained_model.pt)
echo "     zoo LeNet vs scripted LeNet after 20 steps: max abs diff $diff"
check "equivalence: the scripted LeNet ends with the zoo LeNet's weights (<= 1e-5)" ge 1e-5 "$diff"

# --- 3. every mode and two codecs with the BatchNorm model ------------------------------
for variant in "sync" "backup --aggregate 1" "async" "allreduce" "gossip" "sync --compress fp16" \
               "sync --compress topk:0.01"; do
  read -r mode rest <<< "$variant"
  dir=mode-${variant//[ :]/_}
  np=3; [ "$mode" = allreduce ] || [ "$mode" = gossip ] && np=2
  # shellcheck disable=SC2086
  run $np "$dir" --steps 60 --mode $mode $rest
  read -r first last <<< "$(first_last_loss "$dir")"
  echo "     $variant: loss $first -> $last"
  check "$variant: trains the BatchNorm file model (loss falls)" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }'
done

# --- 4. --resume of a file model ----------------------------------------------------------
resumable=(--steps 60 --checkpoint-every 10)
run 3 resume-reference "${resumable[@]}"
with_timeout 240 "$mpirun" -np 3 "$pstrain" --device cpu --model cnn.pt --dataset small.npz --batch-size 32 --lr 0.05 --threads 1 \
  --log-every 15 --timeout 60 --train-dir resumed "${resumable[@]}" --straggle 1:50 > resumed.log 2>&1 &
job=$!
for _ in $(seq 600); do [ -e resumed/ckpt/step-00000020.ok ] && break; sleep 0.1; done
stop_job $job; wait $job
run 3 resumed "${resumable[@]}" --resume
diff=$(max_weight_diff resume-reference/trained_model.pt resumed/trained_model.pt)
echo "     stopped after step 20, resumed: max abs diff $diff"
check "--resume: a file model continues exactly (max diff 0)" test "$diff" = 0.0

# --- 5. regression: --loss auto is mse for float targets -------------------------------
"$python" - <<'PY' || exit 1
import numpy as np, torch
g = np.random.default_rng(0)
w = g.normal(size=(8,)).astype(np.float32)
x = g.normal(size=(1200, 8)).astype(np.float32)
np.savez("regression.npz", x_train=x[:1000], y_train=(x[:1000] @ w), x_test=x[1000:], y_test=(x[1000:] @ w))
torch.manual_seed(0)
torch.jit.script(torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))).save("mlp.pt")
PY
run_logged regression with_timeout 120 "$mpirun" -np 3 "$pstrain" --device cpu --model mlp.pt --dataset regression.npz \
  --batch-size 25 --lr 0.02 --steps 100 --threads 1 --log-every 25 --checkpoint-every 50 --train-dir regression
read -r first last <<< "$(first_last_loss regression)"
"$pseval" --train-dir regression --model mlp.pt > regression.eval.log 2>&1
echo "     mse: training loss $first -> $last; $(tail -1 regression.eval.log)"
auto_loss=$("$python" -c "import torch; print(torch.load('regression/ckpt/step-00000100.pt')['__meta__']['loss'])")
check "mse: --loss auto chose it for the float targets" test "$auto_loss" = mse
check "mse: the loss falls" awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a / 2) }'
check "mse: pseval reports the test loss, no accuracy" bash -c "grep -q 'test loss' regression.eval.log && ! grep -q accuracy regression.eval.log"

# --- 6. bad input ------------------------------------------------------------------------
# (--overwrite: a refusal after the train dir got its run must not refuse the next check.)
fails_with() { job_refused "$1" "$2" --overwrite "${@:3}"; }
echo "not a model" > text.pt
"$python" -c "import torch, sys; sys.path.insert(0, '$tools'); from example_model import SmallCNN; torch.save(SmallCNN().state_dict(), 'state.pt')"
"$python" "$tools/example_model.py" colour.pt --channels 3 > /dev/null
"$python" "$tools/example_model.py" five.pt --classes 5 > /dev/null
"$python" "$tools/example_model.py" other.pt --seed 1 > /dev/null
"$python" - <<'PY'
import numpy as np
x = np.zeros((20, 1, 28, 28), np.uint8); y = np.arange(20) % 10
np.savez("missing.npz", x_train=x, y_train=y, x_test=x)
np.savez("lengths.npz", x_train=x, y_train=y[:15], x_test=x, y_test=y)
np.savez("negative.npz", x_train=x, y_train=y - 1, x_test=x, y_test=y)
np.savez("toofew.npz", x_train=x, y_train=y, x_test=x, y_test=y, classes=np.array(5))
f = x.astype(np.float32); f[3, 0, 2, 2] = np.nan
np.savez("nan.npz", x_train=f, y_train=y, x_test=f, y_test=y)
np.savez("float64.npz", x_train=x.astype(np.float64), y_train=y, x_test=x, y_test=y)
np.savez("int16.npz", x_train=x.astype(np.int16), y_train=y, x_test=x, y_test=y)
np.savez("uint32.npz", x_train=x.astype(np.uint32), y_train=y, x_test=x, y_test=y)
np.savez("corrupt.npz", x_train=np.full((20, 1, 28, 28), 7, np.uint8), y_train=y, x_test=x, y_test=y)
data = bytearray(open("corrupt.npz", "rb").read()); data[len(data) // 4] ^= 0xff
open("corrupt.npz", "wb").write(bytes(data))
open("truncated.npz", "wb").write(open("small.npz", "rb").read()[:100000])
PY
fails_with "no such model file" "nothere.pt: no such file" --model nothere.pt --dataset small.npz
fails_with "a file that is not TorchScript" "text.pt: not a TorchScript file" --model text.pt --dataset small.npz
fails_with "a state_dict instead of a module" "state.pt: not a TorchScript module but a file of torch.save" --model state.pt --dataset small.npz
fails_with "forward fails on the data's shape" "forward\(Tensor x\) -> Tensor fails on a batch of shape \[2, 1, 28, 28\]" --model colour.pt --dataset small.npz
fails_with "forward fails on the data's shape (--dry-run)" "forward\(Tensor x\) -> Tensor fails on a batch of shape \[2, 1, 28, 28\]" --model colour.pt --dataset small.npz --dry-run
fails_with "output size is not the classes" "output is \[2, 5\] for a batch of 2, but the targets are \[2\] of 10 classes" --model five.pt --dataset small.npz
# The data's own errors with a zoo model: the same message, without a model file's check process per rank.
fails_with "npz without y_test" "missing.npz: no array 'y_test'" --model lenet --dataset missing.npz
fails_with "truncated npz" "truncated.npz: (truncated|not an .npz)" --model lenet --dataset truncated.npz
fails_with "corrupt npz member" "corrupt.npz: array 'x_train': CRC-32 mismatch" --model lenet --dataset corrupt.npz
fails_with "lengths disagree" "lengths.npz: 'x_train' holds 20 samples but 'y_train' 15 labels" --model lenet --dataset lengths.npz
fails_with "negative label" "negative.npz: a label is negative" --model lenet --dataset negative.npz
fails_with "label beyond 'classes'" "toofew.npz: a label is 9 but 'classes' says 5" --model lenet --dataset toofew.npz
fails_with "NaN in x" "nan.npz: 'x_train' holds nan" --model lenet --dataset nan.npz
fails_with "float64 samples" "float64.npz: 'x_train' is f8; samples are uint8" --model lenet --dataset float64.npz
fails_with "unsupported dtype" "uint32.npz: array 'x_train': dtype '<u4' is not supported" --model lenet --dataset uint32.npz
fails_with "token ids into an image model" "forward\(Tensor x\) -> Tensor fails on a batch of int64 token ids of shape \[2, 1, 28, 28\]" --model cnn.pt --dataset int16.npz
fails_with "mse with a zoo model" "--loss mse needs a model of your own" --model lenet --loss mse
fails_with "mse on class labels" "--loss mse needs float targets" --model cnn.pt --dataset small.npz --loss mse
# A model file is a program: one that reaches files is refused unless trusted, whether its
# forward, its __setstate__ (which loading runs), a forked body or a helper does so, however
# the archive's source spells the call, whatever namespace its classes are in
# (tests/e2e/untrusted_models.py: 15 files); refused before any of it ran (no *-wrote.bin),
# by pstrain and by pseval alike (one loader). The unit tier runs that loader on all 15
# (ScriptModel.TheUntrustedCorpus...); here four go through mpirun: the call in forward, in
# __setstate__, in a helper's __setstate__ spelled across a line continuation, and in the
# __setstate__ of classes moved out of the __torch__ namespace.
"$python" "$here/untrusted_models.py" untrusted > /dev/null || exit 1
for file in saves.pt setstate.pt continued-helper-setstate.pt namespace.pt; do
  fails_with "untrusted $file: refused, the operator named" \
    "untrusted/$file: its code calls (aten::save|aten::from_file) .*--trust-model" --model "untrusted/$file" --dataset small.npz
done
"$pstrain" --check-model untrusted/namespace.pt > check-model.log 2>&1; rc=$?
check "pstrain --check-model: the namespace-moved file refused (exit $rc)" \
  bash -c "[ $rc -eq 2 ] && grep -q 'its code calls aten::save' check-model.log"
check "... each refused before loading ran any of it (nothing written)" bash -c "! ls ./*-wrote.bin 2> /dev/null"
# A file on which libtorch 1.13's TorchScript parser dies of SIGSEGV (found by the fuzz tier):
# the check runs in a process of its own, whose death refuses the file; no rank dies.
cp "$here/../fuzz/corpus/model/parser-segv.pt" .
fails_with "a file that crashes libtorch's TorchScript parser: refused, no rank killed" \
  "parser-segv.pt: libtorch .*TorchScript compiler (died of signal|ended with status)" --model parser-segv.pt --dataset small.npz
cp untrusted/saves.pt saves.pt
run_logged trusted with_timeout 60 "$mpirun" -np 3 "$pstrain" --threads 1 --steps 4 --checkpoint-every 2 \
  --model saves.pt --dataset small.npz --trust-model --train-dir trusted
check "--trust-model: the same file trains (and its forward wrote its file)" \
  bash -c "[ -f trusted/trained_model.pt ] && [ -f forward-wrote.bin ]"
"$pseval" --train-dir trusted > trusted.eval.log 2>&1
check "pseval: a model file is run only when --model names it" \
  bash -c "! [ -f trusted/eval.csv ] && grep -q 'pass --model FILE' trusted.eval.log"
"$pseval" --train-dir trusted --model saves.pt > trusted.eval.log 2>&1
check "pseval --model: refused without --trust-model" grep -q "its code calls aten::save" trusted.eval.log
refused "pseval --model: a file that crashes the TorchScript parser refused" \
  "parser-segv.pt: libtorch .*TorchScript compiler (died of signal|ended with status)" \
  with_timeout 60 "$pseval" --train-dir trusted --model parser-segv.pt
"$pseval" --train-dir trusted --model saves.pt --trust-model > trusted.eval.log 2>&1
check "pseval --model --trust-model: evaluates" test "$(tail -n +2 trusted/eval.csv | wc -l)" -eq 2
# Ranks holding different files under one relative path (as hosts with different copies).
mkdir -p a b && cp cnn.pt a/net.pt && cp other.pt b/net.pt && cp small.npz a/ && cp small.npz b/
out=$scratch/bad.out
with_timeout 60 "$mpirun" -np 1 -wdir "$scratch/a" "$pstrain" --model net.pt --dataset small.npz --train-dir "$scratch/x" \
  : -np 2 -wdir "$scratch/b" "$pstrain" --model net.pt --dataset small.npz --train-dir "$scratch/x" > "$out" 2>&1
rc=$?
check "ranks with different model files: stopped, naming both files" \
  bash -c "[ $rc -ne 0 ] && grep -qE \"ranks disagree on 'model-file': 'crc32 [0-9a-f]+, [0-9]+ bytes' \(net.pt\) on rank 0 but 'crc32 [0-9a-f]+, [0-9]+ bytes' \(net.pt\) on rank 1\" '$out'"
left=$(pids_of pstrain "$scratch/x")
check "nothing left running" test -z "$left"
checks_done
