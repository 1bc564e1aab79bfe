#!/usr/bin/env bash
# The user-facing surface: --list-models/--list-datasets, --help, --dry-run (and the bad
# configs it must reject), --config files with command-line overrides, tools/plot and
# pseval --plot on a real short run; the refusals of the dry run and of config files after
# the brief. Usage: usability.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
source "$(dirname "$0")/../common/checks.sh"
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$scratch" && mkdir -p "$scratch"
says() { grep -qE -- "$2" <<<"$1"; }  # says TEXT PATTERN: a line of TEXT matches PATTERN

# --list-models / --list-datasets / --help (no mpirun needed: a singleton run).
models=$("$pstrain" --list-models 2>&1)
echo "$models"
check "list-models: lenet with its parameter count and input" says "$models" "^lenet +431080 +1x28x28"
check "list-models: mlp and convnet" says "$models" "^mlp +203530" 
check "list-models: convnet" says "$models" "^convnet +1960"
datasets=$("$pstrain" --list-datasets 2>&1)
check "list-datasets: the three datasets" bash -c 'grep -q "^fashion-mnist" <<<"$1" && grep -q "^mnist" <<<"$1" && grep -q "^synthetic" <<<"$1"' _ "$datasets"
check "list-datasets: the formats a path may hold" says "$datasets" "a token file \(nanoGPT's or llm.c's .bin, NumPy's .npy"
help=$("$pstrain" --help 2>&1)
check "help: every flag with a default shows it" says "$help" "--batch-size arg +samples per worker .*\(default: 64\)"
check "help: --config and --dry-run" bash -c "grep -q -- '--config' <<<\"\$0\" && grep -q -- '--dry-run' <<<\"\$0\"" "$help"

# --dry-run: the plan, and nothing written.
plan=$(with_timeout 60 "$mpirun" -np 3 "$pstrain" --dataset synthetic --synthetic-size 1000 --batch-size 25 \
       --epochs 3 --checkpoint-every 15 --warmup-steps 5 --lr-decay cosine --train-dir "$scratch/dry" --dry-run 2>&1)
rc=$?
echo "$plan"
check "dry-run exits 0" test $rc -eq 0
check "dry-run: world" says "$plan" "world +3 ranks: 1 parameter server \+ 2 worker"
check "dry-run: rank lines with role, host, device, shard" says "$plan" "rank 2 +worker +host .* device (cpu|cuda:[0-9]+|mps) .* shard 500 samples"
check "dry-run: parameters" says "$plan" "model +lenet: 431080 parameters"
check "dry-run: steps" says "$plan" "steps +60 updates \(20 per epoch x 3 epochs\)"
# 431080 floats of weights + an 8-float header down; of gradient + 7 floats of accounting + 1 per rank up.
check "dry-run: bytes per step" says "$plan" "server -> each worker 1724364 bytes .* each worker -> server 1724360 bytes"
check "dry-run: checkpoint schedule" says "$plan" "4 checkpoint\(s\) into .*: steps 15 30 45 and final 60"
check "dry-run: lr plan" says "$plan" "lr +0.02 \(base 0.01 x 2 batches per update\), warm-up from 0.004 over 5 steps, then cosine to 0"
check "dry-run: exchange" says "$plan" "exchange +one broadcast of the weights, one sum-reduce of the gradients; in 7 buckets of 256 KiB, gradients reduced during backward, weights broadcast as each bucket is updated"
check "dry-run writes nothing" test ! -e "$scratch/dry"
# The BLAS: the one `pstrain --version` names (Debian: the libblas.so.3 alternative).
blas=$(blas_of "$pstrain")
echo "BLAS: $blas"
check "version names the BLAS" test -n "$blas"
check "dry-run: the BLAS line" says "$plan" "^\[0@[^]]*\]   blas +$(printf '%s' "$blas" | sed 's/[][().*+?^$|\\]/\\&/g')$"

# --config FILE, with a command-line override; then a real short run with pseval and plots.
cat > "$scratch/run.conf" <<CONF
# a cluster run in one file
model = mlp
dataset = synthetic
synthetic-size = 1200
batch-size = 20
lr = 0.05        # overridden on the command line below
nesterov = true
steps = 60
checkpoint-every = 20
log-every = 10
train-dir = $scratch/run
CONF
out=$(with_timeout 120 "$mpirun" -np 3 "$pstrain" --config "$scratch/run.conf" --lr 0.03 2>&1); rc=$?
echo "$out" | tail -3
check "config-file run succeeds" test $rc -eq 0
runjson=$(cat "$scratch/run/run.json" 2>/dev/null)
check "config file values apply" bash -c "grep -q '\"model\":\"mlp\"' <<<\"\$0\" && grep -q '\"nesterov\":\"true\"' <<<\"\$0\" && grep -q '\"batch-size\":\"20\"' <<<\"\$0\"" "$runjson"
check "command line overrides the config file" says "$runjson" '"lr":"0.03"'
check "run.json names the BLAS" python3 -c "
import json, sys
run = json.load(open(sys.argv[1]))
assert run['blas'] == sys.argv[2], run['blas']
assert all(r['blas'] == sys.argv[2] for r in run['ranks']), run['ranks']" "$scratch/run/run.json" "$blas"
check "the set-up's BLAS is an optimized one" test "$blas" != "reference BLAS (netlib)"
check "no reference-BLAS warning on it" bash -c "! grep -q 'reference BLAS' <<<\"\$0\"" "$out"
# The reference BLAS, as Debian's alternative would give it (tools/common.sh's reference_blas_dir).
if reference_blas_dir "$scratch/refblas"; then
  out=$(with_timeout 120 "$mpirun" -np 3 -x LD_LIBRARY_PATH="$scratch/refblas" "$pstrain" --dataset synthetic \
        --synthetic-size 200 --batch-size 20 --steps 3 --train-dir "$scratch/refrun" 2>&1); rc=$?
  echo "$out" | grep warning
  check "reference BLAS: the run succeeds" test $rc -eq 0
  check "reference BLAS: one warning line naming the ranks and the fix" bash -c "[ \$(grep -c 'warning: ranks 1 (.*), 2 (.*) compute on the reference BLAS.*apt-get install libopenblas0-pthread' <<<\"\$0\") -eq 1 ]" "$out"
  check "reference BLAS: run.json says so" grep -q '"blas":"reference BLAS (netlib)"' "$scratch/refrun/run.json"
else
  echo "skip the reference-BLAS checks: no /usr/lib/*/blas/libblas.so.3 here"
fi
"$pseval" --train-dir "$scratch/run" --plot > "$scratch/pseval.log" 2>&1; rc=$?
cat "$scratch/pseval.log"
check "pseval --plot succeeds" test $rc -eq 0
for png in loss lr throughput accuracy; do
  f="$scratch/run/plots/$png.png"
  check "plots/$png.png is a non-empty PNG" bash -c "[ \$(wc -c < '$f' 2>/dev/null || echo 0) -gt 5000 ] && [ \"\$(head -c 8 '$f' | od -An -tx1 | tr -d ' \n')\" = 89504e470d0a1a0a ]"
done
rm -rf "$scratch/run/plots"
"$root/tools/plot" "$scratch/run" > /dev/null; rc=$?
check "tools/plot alone renders the four plots" bash -c "[ $rc -eq 0 ] && [ \$(ls '$scratch/run/plots'/*.png | wc -l) -eq 4 ]"
"$root/tools/plot" "$scratch/run" "$scratch/elsewhere" > /dev/null; rc=$?
check "tools/plot TRAIN_DIR OUT_DIR: the plots in OUT_DIR (no eval.csv there: three)" \
  bash -c "[ $rc -eq 0 ] && [ \$(ls '$scratch/elsewhere/plots'/*.png | wc -l) -eq 3 ]"
out=$("$root/tools/plot" "$scratch/nothing-here" 2>&1); rc=$?
check "tools/plot on a non-run says so" bash -c "[ $rc -ne 0 ] && grep -q 'metrics.jsonl not found' <<<\"\$0\"" "$out"

brief_ends_here

# Refusals: the dry run's and the config file's.
out=$(with_timeout 60 "$mpirun" -np 3 "$pstrain" --data-dir "$scratch/nowhere" --dry-run --train-dir "$scratch/dry" 2>&1); rc=$?
check "dry-run rejects a missing dataset" bash -c "[ $rc -ne 0 ] && grep -q 'not found' <<<\"\$0\"" "$out"
out=$(with_timeout 60 "$mpirun" -np 3 "$pstrain" --dataset synthetic --dry-run --train-dir /dev/null/nope/run 2>&1); rc=$?
check "dry-run rejects an unwritable train dir" bash -c "[ $rc -ne 0 ] && grep -q 'not writable' <<<\"\$0\"" "$out"
out=$(with_timeout 60 "$mpirun" -np 1 "$pstrain" --dataset synthetic --dry-run : -np 1 "$pstrain" --dataset synthetic --dry-run --batch-size 8 2>&1); rc=$?
check "dry-run rejects ranks that disagree" bash -c "[ $rc -ne 0 ] && grep -q \"ranks disagree on 'batch-size'\" <<<\"\$0\"" "$out"
out=$(with_timeout 60 "$mpirun" -np 3 "$pstrain" --dataset synthetic --dry-run --lr-scaling quadratic 2>&1); rc=$?
check "dry-run rejects a nonsense value" bash -c "[ $rc -eq 2 ] && grep -q -- '--lr-scaling' <<<\"\$0\"" "$out"
echo "colour = blue" > "$scratch/bad.conf"
out=$(with_timeout 60 "$mpirun" -np 3 "$pstrain" --config "$scratch/bad.conf" 2>&1); rc=$?
check "config file with an unknown key is rejected" bash -c "[ $rc -eq 2 ] && grep -q 'bad.conf: .*colour' <<<\"\$0\"" "$out"
echo "lr 0.1" > "$scratch/bad2.conf"
out=$(with_timeout 60 "$mpirun" -np 3 "$pstrain" --config "$scratch/bad2.conf" 2>&1); rc=$?
check "config file with a malformed line names the line" bash -c "[ $rc -eq 2 ] && grep -q 'bad2.conf:1: expected' <<<\"\$0\"" "$out"

checks_done
