#!/usr/bin/env bash
# (Also: --memory auto between lean and fast; a LoRA model's choice made alike by --doctor,
# the dry run and the run.)
# Bigger than one Mac, as a user sees it: each of 4 "Macs" (a server and a worker: ranks k
# and 4 + k) in a memory cgroup of its own, capped below what plain PyTorch needs to train
# the same model alone (tools/benchmarks/lm_step_python.py's loop: AdamW, clipping, one
# thread), at 0.8 of that peak. PyTorch alone is killed under that cap; pstrain with
# --servers 4 and --precision bf16-weights trains to the end under it, every Mac capped.
# The model: a GPT of tools/gpt_model.py (vocabulary 50,257, 4 layers x 512, block 128: 64 M
# parameters). Skips (exit 77), saying why, where no memory cgroup can be made (cgroup v1's
# controller at /sys/fs/cgroup/memory, as root).
# Usage: memory_cgroup.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 mpirun=$3 scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch" && cd "$scratch" || exit 1
source "$(dirname "$0")/../common/checks.sh"
controller=/sys/fs/cgroup/memory
group=pstrain-mac-$$
if ! mkdir "$controller/$group-test" 2>/dev/null || ! [ -w "$controller/$group-test/memory.limit_in_bytes" ]; then
  rmdir "$controller/$group-test" 2>/dev/null
  echo "skipped: no memory cgroup can be made here (needs cgroup v1's memory controller at $controller, as root)"
  exit 77
fi
rmdir "$controller/$group-test"
cleanup() { for g in "$controller/$group"*; do [ -d "$g" ] && rmdir "$g" 2>/dev/null; done; return 0; }
trap cleanup EXIT
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1

"$PSTRAIN_PYTHON" "$(dirname "$0")/../../tools/gpt_model.py" gpt.pt --vocab 50257 --block-size 128 --layers 4 --heads 8 \
  --embd 512 > /dev/null || exit 1
"$PSTRAIN_PYTHON" -c "
import numpy as np
rng = np.random.default_rng(0)
rng.integers(0, 50257, size=400_000, dtype=np.uint16).tofile('train.bin')
rng.integers(0, 50257, size=40_000, dtype=np.uint16).tofile('val.bin')" || exit 1
reference() {  # reference [CGROUP]: plain PyTorch's loop, 3 steps; its peak RSS (MiB) in pytorch.peak
  "$PSTRAIN_PYTHON" -c '
import os, resource, subprocess, sys
group = sys.argv[1]
def enter():
    if group:
        open(group + "/cgroup.procs", "w").write(str(os.getpid()))
status = subprocess.call(sys.argv[2:], preexec_fn=enter)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, file=open("pytorch.peak", "w"))
sys.exit(status if status >= 0 else 128 - status)' "${1:-}" "$PSTRAIN_PYTHON" \
    "$(dirname "$0")/../../tools/benchmarks/lm_step_python.py" 1 4 3 train.bin 128 -- 4 8 512 50257 eager
}
reference > pytorch-free.log 2>&1 || { tail -3 pytorch-free.log; exit 1; }
needs=$(cut -d. -f1 pytorch.peak)
cap=$((needs * 8 / 10))
echo "     plain PyTorch alone: $needs MiB at its peak; each Mac capped at $cap MiB"

mkdir "$controller/$group" || exit 1
echo $((cap << 20)) > "$controller/$group/memory.limit_in_bytes"
reference "$controller/$group" > pytorch-capped.log 2>&1
rc=$?
check "plain PyTorch, capped at $cap MiB: killed (exit $rc)" bash -c "[ $rc -ne 0 ] && ! grep -q '^gpt/eager' pytorch-capped.log"
rmdir "$controller/$group"

for k in 0 1 2 3; do
  mkdir "$controller/$group$k" && echo $((cap << 20)) > "$controller/$group$k/memory.limit_in_bytes" || exit 1
done
# Rank r joins Mac r mod 4 (server k = rank k, worker k = rank 4 + k), then becomes pstrain.
with_timeout 900 "$mpirun" -np 8 bash -c 'echo $$ > "$0$((OMPI_COMM_WORLD_RANK % 4))/cgroup.procs" && exec "$@"' \
  "$controller/$group" "$pstrain" --model gpt.pt --dataset train.bin --block-size 128 --batch-size 4 --optimizer adamw \
  --lr 1e-4 --clip-grad-norm 1 --steps 3 --log-every 1 --checkpoint-every 0 --threads 1 --timeout 600 --doorbell off \
  --servers 4 --precision bf16-weights --train-dir run > pstrain.log 2>&1
rc=$?
peaks=""
for k in 0 1 2 3; do peaks="$peaks $(( $(cat "$controller/$group$k/memory.max_usage_in_bytes") >> 20 ))"; done
echo "     pstrain, 4 Macs (a server and a worker each): each Mac's peak (MiB, the cgroup's):$peaks"
[ $rc -eq 0 ] || tail -5 pstrain.log | sed 's/^/     /'
check "pstrain --servers 4 --precision bf16-weights, every Mac capped at $cap MiB: trains to the end" \
  bash -c "[ $rc -eq 0 ] && [ -f run/trained_model.pt ] && grep -q '\"step\": *3' run/metrics.jsonl"

# One host of 700 MiB (a cgroup of every rank): the dry run measures the host by the
# cgroup's limit, not the machine's memory.
in_cgroup() {  # in_cgroup MIB NP ARGS...: NP ranks of pstrain in a new cgroup of MIB MiB (removed after)
  local cgroup=$controller/${group}-$1 mib=$1 np=$2 rc; shift 2
  mkdir "$cgroup" && echo $((mib << 20)) > "$cgroup/memory.limit_in_bytes" || return 1
  with_timeout 300 "$mpirun" -np "$np" bash -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cgroup" "$pstrain" --threads 1 \
    --timeout 600 --doorbell off "$@"
  rc=$?
  rmdir "$cgroup"
  return $rc
}
in_cgroup 700 3 --model mlp --dataset synthetic --steps 3 --dry-run --train-dir small-plan > small-plan.log 2>&1
sed -n '/memory    host/p' small-plan.log | sed 's/^/     /'
check "dry run in a 700 MiB cgroup: the host's memory is the cgroup's limit (0.68 GiB)" \
  has small-plan.log "memory    host .* of its 0.68 GiB"
# A rank killed for memory, its host's other ranks alive: in a 700 MiB cgroup, rank 2 is a
# stand-in that takes 1 GiB once the others run (5 s in); the kernel kills it, mpirun says
# only "signal 9" and stops the others, and they name the OOM killer. (With pstrain on
# every rank the kernel may kill them all: each loads the model, and how much of
# libtorch's code the cgroup is charged for depends on the page cache.)
oom=$controller/${group}-oom
mkdir "$oom" && echo $((700 << 20)) > "$oom/memory.limit_in_bytes" || exit 1
with_timeout 300 "$mpirun" -np 3 bash -c 'echo $$ > "$0/cgroup.procs" || exit 1
  [ "$OMPI_COMM_WORLD_RANK" != 2 ] || exec "$1" -c "import time; time.sleep(5); x = b\"x\" * (1 << 30)"
  shift; exec "$@"' "$oom" "$PSTRAIN_PYTHON" "$pstrain" --threads 1 --timeout 600 --doorbell off --model mlp \
  --dataset synthetic --steps 100000 --checkpoint-every 0 --train-dir small-run > small-run.log 2>&1
rc=$?
rmdir "$oom"
check "a rank killed for memory in a 700 MiB cgroup: its host's other ranks name the OOM killer (exit $rc)" \
  eval '[ $rc -ne 0 ] && has small-run.log "OOM killer ended [0-9]+ process\(es\) of this host.s memory cgroup"'

# --memory auto on a host with some room, but not fast's: lean, whose ranks share the room
# left under half the host's memory for more in flight (a worker's buckets, a server's
# receive slots beyond two parts a worker), with fast's floats. The model: 9.5 M parameters,
# 2 servers (5 parts of 4 MiB a range) and 2 workers. The host: a cgroup whose half is 8 MiB
# under the plan's peak under fast before activations (a dry run on the whole machine says
# it), so that fast does not fit and lean's least (about 40 MiB less here) does.
wide_mlp wider.pt 12000 || exit 1
spare=(--model wider.pt --steps 6 --log-every 1 --checkpoint-every 0 --servers 2 --optimizer sgd --momentum 0.9)
with_timeout 300 "$mpirun" -np 4 "$pstrain" --threads 1 --timeout 600 --doorbell off "${spare[@]}" --memory fast \
  --train-dir spare-fast > spare-fast.log 2>&1 || { tail -5 spare-fast.log; exit 1; }
with_timeout 300 "$mpirun" -np 4 "$pstrain" --threads 1 --timeout 600 --doorbell off "${spare[@]}" --dry-run \
  --train-dir spare-plan > spare-plan.log 2>&1 || { tail -5 spare-plan.log; exit 1; }
fast_gib=$(sed -n 's/.*--memory auto: \([0-9.]*\) GiB under fast before activations.*/\1/p' spare-plan.log | head -1)
cap=$(python3 -c "print(2 * (round(${fast_gib:-0} * 1024) - 8))")
in_cgroup "$cap" 4 "${spare[@]}" --dry-run --train-dir spare-capped-plan > spare-capped-plan.log 2>&1
sed -n '/memory    host .*: lean/p' spare-capped-plan.log | sed 's/^/     /'
in_cgroup "$cap" 4 "${spare[@]}" --train-dir spare-capped > spare-capped.log 2>&1 || tail -5 spare-capped.log
spared=$(python3 -c '
import json, sys
ranks = json.load(open("spare-capped/run.json"))["ranks"]
print(ranks[0]["lean_spare_mib"] if {r["memory"] for r in ranks} == {"lean"} else -1)' 2> /dev/null)
echo "     a host of $cap MiB (fast: ${fast_gib:-?} GiB before activations): lean, each rank ${spared:-?} MiB more in flight"
check "--memory auto, a host between lean's least and fast: lean, its room spared (said by the dry run)" \
  has spare-capped-plan.log "host .*: lean \(--memory auto: .*each of its 4 rank\(s\) may keep [1-9][0-9]* MiB more in flight"
# Fewer than fast's slots and buckets (a spare under 20 MiB: under 10 slots, under the 36 MiB gradient).
check "run.json: lean on every rank, with a spare between lean's least and fast's ($spared MiB)" \
  python3 -c "import sys; sys.exit(not 0 < float('${spared:-0}') < 20)"
check "--memory auto, lean with a spare: fast's weights exactly" \
  test "$(max_weight_diff spare-fast/trained_model.pt spare-capped/trained_model.pt)" = 0.0

# A LoRA model (a 64 M-weight base frozen, 0.2 M adapters): --doctor, the dry run and the run
# count its trained parameters in one function (models::parameterCount), and its frozen
# weights as what every rank holds, so they choose alike. The host: a cgroup whose half lies
# 300 MiB above the dry run's plan under fast, far under what counting every weight as trained
# plans (the doctor's file size / 4 once: lean where the run took fast).
"$PSTRAIN_PYTHON" "$(dirname "$0")/../../tools/gpt_model.py" lora.pt --vocab 50257 --block-size 128 --layers 4 --heads 8 \
  --embd 512 --lora 4 > /dev/null || exit 1
lora=(--model lora.pt --dataset train.bin --block-size 128 --batch-size 4 --steps 2 --checkpoint-every 0 --optimizer adamw)
with_timeout 300 "$mpirun" -np 2 "$pstrain" --threads 1 --timeout 600 --doorbell off "${lora[@]}" --dry-run \
  --train-dir lora-plan > lora-plan.log 2>&1 || { tail -5 lora-plan.log; exit 1; }
fast_gib=$(sed -n 's/.*--memory auto: \([0-9.]*\) GiB under fast before activations.*/\1/p' lora-plan.log | head -1)
cap=$(python3 -c "print(2 * (round(${fast_gib:-0} * 1024) + 300))")
in_cgroup "$cap" 2 "${lora[@]}" --doctor --train-dir lora-doctor > lora-doctor.log 2>&1
in_cgroup "$cap" 2 "${lora[@]}" --dry-run --train-dir lora-capped-plan > lora-capped-plan.log 2>&1
in_cgroup "$cap" 2 "${lora[@]}" --train-dir lora-capped > lora-capped.log 2>&1 || tail -5 lora-capped.log
sed -n '/memory: host\|memory    host/p' lora-doctor.log lora-capped-plan.log | sed 's/^/     /'
chosen=$(python3 -c '
import json
print(" ".join(sorted({r["memory"] for r in json.load(open("lora-capped/run.json"))["ranks"]})))' 2> /dev/null)
check "a LoRA model in a $cap MiB host: --doctor, the dry run and run.json choose alike (fast)" \
  eval "has lora-doctor.log 'memory: host .*: fast' && has lora-capped-plan.log 'memory    host .*: fast' && \
        test '${chosen:-}' = fast"
checks_done
