#!/usr/bin/env bash
# --servers K under mpirun (exchanges/range_servers, point_to_point, rounds): K servers give one
# server's weights (SGD momentum, AdamW with clipping, int8 with error feedback, int4 weights;
# async with one worker, backup with every gradient in; diloco's outer step, and its resume
# with another K; --balance); each server's traffic and memory
# in the metrics; the dry run and run.json say who serves what; a worker killed mid-run,
# then --resume with another K gives the uninterrupted run's weights; bad layouts refused.
# Usage: servers.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "$0")/../common/checks.sh"
train() {  # train NP DIR [flags...]
  local np=$1 dir=$2; shift 2
  run_logged "$dir" with_timeout 240 "$mpirun" -np "$np" "$pstrain" --device cpu --threads 1 --model mlp \
    --dataset synthetic --batch-size 32 --lr 0.02 --log-every 10 --checkpoint-every 0 --timeout 60 --train-dir "$dir" "$@"
}
same() {  # same NAME A.pt B.pt: max |a - b| <= 1e-6
  local diff
  diff=$(max_weight_diff "$2" "$3")
  echo "     $1: max abs diff $diff"
  ge 1e-6 "${diff:-1}"
}

# --- exactness, 20 steps: 2 servers here, 4 and the codecs after the brief. mlp's first
# tensor is 99% of it, so without a codec the cuts fall inside it. 3 workers (2 for AdamW):
# one server's sum is MPI's reduce, whose order of 3 addends is its own, the servers' the
# workers' order: a last bit apart, which SGD keeps (7e-8 here) and Adam's normalisation of
# tiny second moments grows to 8e-7 in 20 steps; 2 addends sum alike in any order.
# exact NAME WORKERS K FLAGS...: NAME trained over 1 server (once) and over K: the same weights.
exact() {
  local name=$1 workers=$2 k=$3; shift 3
  [ -d "$scratch/$name-k1" ] || train $((workers + 1)) "$scratch/$name-k1" --steps 20 "$@"
  train $((k + workers)) "$scratch/$name-k$k" --steps 20 --servers "$k" "$@"
  check "$name: $k servers give 1 server's weights" same "$name, $k servers" "$scratch/$name-k1/trained_model.pt" \
    "$scratch/$name-k$k/trained_model.pt"
}
sgd=(--momentum 0.9)
adamw=(--optimizer adamw --lr 0.002 --weight-decay 0.01 --clip-grad-norm 0.01)
exact sgd 3 2 "${sgd[@]}"
exact adamw 2 2 "${adamw[@]}"
# The final checkpoint's weights and optimizer state, gathered on server 0: one server's.
checkpoints_agree() {
  "$PSTRAIN_PYTHON" - "$@" <<'PY'
import sys, torch
ckpts = [torch.load(d + "/ckpt/step-00000020.pt", weights_only=True) for d in sys.argv[1:]]
one, *others = [c["optimizer"] for c in ckpts]
for o in others:
    if o["step"] != one["step"] or sorted(o) != sorted(one):
        sys.exit(1)
    for name in ("exp_avg", "exp_avg_sq"):
        if any(not torch.equal(one[name][k], o[name][k]) for k in one[name]):
            sys.exit(1)
for d, c in zip(sys.argv[1:], ckpts):  # the gathered weights are the final files' (server 0 whole at the end)
    final = torch.load(d + "/trained_model.pt", weights_only=True)
    if sorted(final) != sorted(c["model"]) or any(not torch.equal(final[k], c["model"][k]) for k in final):
        sys.exit(1)
    if any(not torch.equal(ckpts[0]["model"][k], c["model"][k]) for k in final):
        sys.exit(1)
PY
}
check "adamw: the final checkpoint's weights and optimizer state, written as server 0 gathers them, are one server's" \
  checkpoints_agree "$scratch/adamw-k1" "$scratch/adamw-k2"
# Point to point: server 0 decides each arrival, the others follow. async with one worker
# (AdamW, clipped by the combined norm, int4 weights), backup with both gradients in (2
# addends: any order of arrival sums alike; int8 with error feedback).
exact async 1 2 --mode async --optimizer adamw --lr 0.002 --clip-grad-norm 0.01 --compress-weights int4
exact backup 2 2 --mode backup --aggregate 2 --compress int8 --momentum 0.9
check "backup, 2 servers: both gradients in every update, none dropped" \
  test "$(metric "$scratch/backup-k2" "last['dropped_total']")" = 0
norm=$(metric "$scratch/adamw-k2" "min(l['grad_norm'] for l in lines)")
check "adamw: every step's gradient norm ($norm) is above the clip (0.01): clipped by the combined norm" ge "$norm" 0.01

# --- ranges of many parts (4 MiB each), updated part by part as they arrive (no clipping:
# runtime/exchanges/Servers.h, RangeUpdate::beginParts): a model file of 2.4 M parameters
# holds two parts per range at K = 2 (9.5 M, three at K = 4, after the brief). From a fresh
# start and resumed from a K-server checkpoint: one server's weights and its gradient norms.
# parts NAME K FILE FLAGS...: 12 steps over 1 server and K, and K resumed at step 6 (its
# checkpoint copied into a new train dir): within 1e-5 of one server, grad_norm equal.
parts() {
  local name=$1 k=$2 file=$3; shift 3
  local flags=(--model "$file" --steps 12 --log-every 1 --checkpoint-every 6 "$@")
  [ -d "$scratch/$name-k1" ] || train 3 "$scratch/$name-k1" "${flags[@]}"
  train $((k + 2)) "$scratch/$name-k$k" "${flags[@]}" --servers "$k"
  mkdir -p "$scratch/$name-k$k-resumed/ckpt"
  cp "$scratch/$name-k$k"/ckpt/step-00000006.* "$scratch/$name-k$k-resumed/ckpt/"
  train $((k + 2)) "$scratch/$name-k$k-resumed" "${flags[@]}" --servers "$k" --resume
  local run=$name  # check's own `name` hides this one inside it
  check "$run: $k servers, ranges of many parts: 1 server's weights, from the start and resumed" \
    eval 'within_1e5 "$run, $k servers" "$scratch/$run-k1" "$scratch/$run-k$k" &&
          within_1e5 "$run, $k servers, resumed at step 6" "$scratch/$run-k1" "$scratch/$run-k$k-resumed"'
  local norms
  norms=$(python3 - "$scratch/$name-k1" "$scratch/$name-k$k" <<'PY'
import json, sys
a, b = ([json.loads(l)["grad_norm"] for l in open(d + "/metrics.jsonl")] for d in sys.argv[1:])
print(f"{a[0]:.6g} and {b[0]:.6g} at step 1," if a and b else "none,", "equal within 1e-5 at every step:",
      len(a) == len(b) == 12 and all(abs(x - y) <= 1e-5 * max(1, abs(x)) for x, y in zip(a, b)))
PY
)
  check "$name: $k servers' grad_norm is one server's ($norms)" test "${norms##* }" = True
}
within_1e5() {  # within_1e5 NAME DIR_A DIR_B: their trained_model.pt within 1e-5
  local diff
  diff=$(max_weight_diff "$2/trained_model.pt" "$3/trained_model.pt")
  echo "     $1: max abs diff $diff"
  ge 1e-5 "${diff:-1}"
}
wide_mlp "$scratch/wide.pt" 3000
parts adamw-parts 2 "$scratch/wide.pt" --optimizer adamw --lr 0.001 --weight-decay 0.01
# --memory: the same floats whichever a host takes. Here (a big host, a small model) auto
# takes fast: the workers keep their gradient, every part goes out at once and each server
# takes them all; lean gives each part's pages back and keeps a few in flight.
train 4 "$scratch/adamw-parts-lean" --model "$scratch/wide.pt" --steps 12 --log-every 1 --checkpoint-every 6 \
  --optimizer adamw --lr 0.001 --weight-decay 0.01 --servers 2 --memory lean
check "--memory lean: 2 servers over ranges of many parts give auto's (fast's) weights exactly" \
  test "$(max_weight_diff "$scratch/adamw-parts-k2/trained_model.pt" "$scratch/adamw-parts-lean/trained_model.pt")" = 0.0
check "run.json: every rank says its host's --memory (auto: fast here; lean as given)" python3 - "$scratch" <<'PY'
import json, sys
auto, lean = (json.load(open(f"{sys.argv[1]}/{d}/run.json")) for d in ("adamw-parts-k2", "adamw-parts-lean"))
sys.exit(not (auto["config"]["memory"] == "auto" and {r["memory"] for r in auto["ranks"]} == {"fast"}
              and {r["memory"] for r in lean["ranks"]} == {"lean"}))
PY

# --- point to point, stopped and resumed: each worker goes on from its own batch (server 0
# counts them into every checkpoint), so backup with every gradient in and async with one
# worker end with the uninterrupted run's weights, over 1 server and 2. SIGUSR1 at step 10.
stopped_and_resumed() {  # stopped_and_resumed NAME WORKERS K FLAGS...
  local name=$1 workers=$2 k=$3; shift 3
  local flags=(--steps 30 --checkpoint-every 5 --straggle "$k:20" --servers "$k" "$@") run=$name-k$k
  local dir=$scratch/$run-stopped
  train $((k + workers)) "$scratch/$run-whole" "${flags[@]}"
  train $((k + workers)) "$dir" "${flags[@]}" &
  local job=$! stopped
  for _ in $(seq 600); do [ -e "$dir/ckpt/step-00000010.ok" ] && break; sleep 0.1; done
  pkill -USR1 -f "^$mpirun .*--train-dir $dir( |$)"
  wait $job
  stopped=$(grep -oE 'stopped on request at step [0-9]+' "$dir.log" | head -1)
  train $((k + workers)) "$dir" "${flags[@]}" --resume
  # (check's own `name` would hide $name inside it: the eval reads $run)
  check "$name, $k server(s): ${stopped:-not stopped}, resumed: the uninterrupted run's weights" \
    eval '[ -n "$stopped" ] && grep -q "resuming at step" "$dir.log" &&
          same "$run, resumed" "$scratch/$run-whole/trained_model.pt" "$dir/trained_model.pt"'
}
resumed_modes() {  # resumed_modes K
  stopped_and_resumed backup-resumed 2 "$1" --mode backup --aggregate 2 --momentum 0.9
  stopped_and_resumed async-resumed 1 "$1" --mode async --optimizer adamw
}
resumed_modes 2

brief_ends_here
resumed_modes 1

# Ranges of many parts, the rest: Adam with and without clipping (clipped: each range summed
# whole first), and 4 servers on a wider model (three parts per range).
parts adam-parts 2 "$scratch/wide.pt" --optimizer adam --lr 0.001
parts adam-clipped-parts 2 "$scratch/wide.pt" --optimizer adam --lr 0.001 --clip-grad-norm 0.5
wide_mlp "$scratch/wider.pt" 12000
parts adamw-wider-parts 4 "$scratch/wider.pt" --optimizer adamw --lr 0.001 --weight-decay 0.01
# The dry run's plan of a server that decodes int8 gradients (backup, 2 servers: its decoded
# range and the frames it takes them in, beside the sum and the state): within 10% of what it
# measures when it runs.
plan_vs_run=(--model "$scratch/wider.pt" --mode backup --servers 2 --compress int8 --momentum 0.9 --steps 5)
train 4 "$scratch/int8-plan" "${plan_vs_run[@]}" --dry-run
train 4 "$scratch/int8-run" "${plan_vs_run[@]}"
planned=$(sed -n 's/.*memory    rank 0 *server *\([0-9.]*\) GiB at its peak.*/\1/p' "$scratch/int8-plan.log")
measured=$(metric "$scratch/int8-run" "round(last['server0_peak_rss_mib'] / 1024, 3)")
echo "     backup, int8, 2 servers: server 0 planned $planned GiB, measured $measured GiB"
check "backup with int8 gradients, 2 servers: the plan of server 0 within 10% of its measured peak" \
  python3 -c "import sys; p, m = float('${planned:-0}'), float('${measured:-1}'); sys.exit(abs(p - m) > 0.1 * m)"

# --- exactness, the rest: 4 servers; int8 with error feedback and int4 weights (whole
# tensors, a codec's: mlp's 4 are one per server, shown by 2 servers); a model file.
exact sgd 3 4 "${sgd[@]}"
exact adamw 2 4 "${adamw[@]}"
check "adamw, 4 servers: the final checkpoint is one server's" \
  checkpoints_agree "$scratch/adamw-k1" "$scratch/adamw-k4"
exact int8 3 2 --compress int8 --error-feedback on
exact int4-weights 3 2 --compress-weights int4
# A model file with BatchNorm (buffers beside the weights), 2 servers, a checkpoint midway:
# its TorchScript module, written once server 0 holds the whole model again, holds the
# trained weights and buffers, as trained_model.pt and the last checkpoint do.
"$PSTRAIN_PYTHON" "$(dirname "$0")/../../tools/example_model.py" "$scratch/cnn.pt" > /dev/null
train 4 "$scratch/file-k2" --model "$scratch/cnn.pt" --steps 12 --checkpoint-every 6 --servers 2 --optimizer adamw \
  --lr 0.001
check "model file, 2 servers: the TorchScript module, trained_model.pt and the checkpoints agree" \
  "$PSTRAIN_PYTHON" - "$scratch/file-k2" <<'PY'
import sys, torch
d = sys.argv[1]
final = torch.load(d + "/trained_model.pt", weights_only=True)
script = torch.jit.load(d + "/trained_model.torchscript.pt").state_dict()
last = torch.load(d + "/ckpt/step-00000012.pt", weights_only=True)["model"]
mid = torch.load(d + "/ckpt/step-00000006.pt", weights_only=True)["model"]
same = lambda a, b: sorted(a) == sorted(b) and all(torch.equal(a[k], b[k]) for k in a)
moved = any(not torch.equal(mid[k], final[k]) for k in final if final[k].is_floating_point())
sys.exit(not (same(final, script) and same(final, last) and moved))
PY
# The same model file over 1 and 4 servers, and resumed from the 2-server run's midway
# checkpoint with 4: one server's weights. Its 1.6 MiB fully connected weight is a large
# storage, read from the file by the server that owns it only (training::weightsNeeded);
# the other servers take their ranges from their own copy of the file, not from server 0.
train 3 "$scratch/file-k1" --model "$scratch/cnn.pt" --steps 12 --optimizer adamw --lr 0.001
train 6 "$scratch/file-k4" --model "$scratch/cnn.pt" --steps 12 --servers 4 --optimizer adamw --lr 0.001
check "model file: 2 and 4 servers give 1 server's weights" \
  eval 'same "model file, 2 servers" "$scratch/file-k1/trained_model.pt" "$scratch/file-k2/trained_model.pt" &&
        same "model file, 4 servers" "$scratch/file-k1/trained_model.pt" "$scratch/file-k4/trained_model.pt"'
mkdir -p "$scratch/file-resumed/ckpt"
cp "$scratch"/file-k2/ckpt/step-00000006.* "$scratch/file-resumed/ckpt/"
train 6 "$scratch/file-resumed" --model "$scratch/cnn.pt" --steps 12 --servers 4 --optimizer adamw --lr 0.001 --resume
check "model file, resumed at step 6 with 4 servers: one server's weights" \
  eval 'grep -q "resuming at step 6" "$scratch/file-resumed.log" &&
        same "model file, resumed" "$scratch/file-k1/trained_model.pt" "$scratch/file-resumed/trained_model.pt"'

# --- metrics and run.json: per-server traffic, balanced by bytes; the roles.
mib0=$(metric "$scratch/sgd-k2" "last['server0_mib_per_step']")
mib1=$(metric "$scratch/sgd-k2" "last['server1_mib_per_step']")
echo "     sgd, 2 servers: server 0 moves $mib0 MiB per step, server 1 $mib1"
check "metrics: each of 2 servers moves about half (within 5%)" python3 -c "import sys; a, b = $mib0, $mib1; sys.exit(abs(a - b) > 0.05 * (a + b))"
check "metrics: each server's peak RSS is logged" test "$(metric "$scratch/sgd-k4" "min(last['server%d_peak_rss_mib' % k] for k in range(4)) > 0")" = True
check "run.json: 2 servers, ranks 0 and 1 serve, 2..4 work" python3 - "$scratch/sgd-k2/run.json" <<'PY'
import json, sys
run = json.load(open(sys.argv[1]))
roles = [r["role"] for r in run["ranks"]]
sys.exit(not (run["servers"] == 2 and run["workers"] == 3 and roles == ["server"] * 2 + ["worker"] * 3))
PY

# --- dry run: who serves which range.
with_timeout 60 "$mpirun" -np 4 "$pstrain" --device cpu --threads 1 --model mlp --dataset synthetic --servers 2 --dry-run \
  --train-dir "$scratch/plan" > "$scratch/plan.log" 2>&1
sed -n '/world/,/exchange/p' "$scratch/plan.log" | sed 's/^/     /'
check "dry run: 2 parameter servers + 2 workers" grep -q "2 parameter servers + 2 worker(s)" "$scratch/plan.log"
check "dry run: rank 1 owns the second range" grep -qE "rank 1 owns parameters \[[0-9]+, 203530\)" "$scratch/plan.log"
check "dry run: ranks 0 and 1 are servers" bash -c "[ \$(grep -cE 'rank [0-9]+ +server +host' '$scratch/plan.log') = 2 ]"
check "dry run: the exchange line says its 2 servers each serve a range" grep -q "exchange  over 2 servers, each serving a range" "$scratch/plan.log"
check "dry run: the host's --memory, why, and its peak under fast and under lean" \
  grep -qE "memory    host .*: fast \(--memory auto: [0-9.]+ GiB under fast before activations, within half of its [0-9.]+ GiB; at the peak [0-9.]+ GiB under fast, [0-9.]+ GiB under lean\)" "$scratch/plan.log"
with_timeout 60 "$mpirun" -np 4 "$pstrain" --device cpu --threads 1 --model mlp --dataset synthetic --servers 2 --dry-run \
  --compress int8 --train-dir "$scratch/plan-int8" > "$scratch/plan-int8.log" 2>&1
check "dry run: whole tensors for int8 leave mlp's ranges uneven, and it says so" \
  grep -qE "uneven: the gradient codec keeps tensors whole, and the largest range is [0-9.]+x an even share" "$scratch/plan-int8.log"

# --- --balance over 2 servers: server 0 deals the virtual shards by speed, as one server does.
balanced=(--steps 30 --batch-size 8 --virtual-shards 12 --momentum 0.9 --balance)
train 4 "$scratch/balance-k1" "${balanced[@]}" --straggle 3:15
train 5 "$scratch/balance-k2" "${balanced[@]}" --servers 2 --straggle 4:15
shares=$(metric "$scratch/balance-k2" "last['virtual_shards_by_worker']")
echo "     --balance, 2 servers, the last worker slowed by 15 ms a shard: shares $shares"
check "--balance, 2 servers: the slow worker computes fewer shards than the others" \
  python3 -c "import sys; s = $shares; sys.exit(0 if s[2] < min(s[0], s[1]) and sum(s) == 12 else 1)"
check "--balance, 2 servers: one server's weights (the summation order aside)" same "--balance" \
  "$scratch/balance-k1/trained_model.pt" "$scratch/balance-k2/trained_model.pt"

# --- a worker killed mid-run, resumed with 3 servers instead of 2 (and the reference with 1).
resume=(--steps 60 --checkpoint-every 20 --lr-decay cosine --warmup-steps 10)
train 3 "$scratch/reference" "${resume[@]}"
train 4 "$scratch/killed" "${resume[@]}" --servers 2 --straggle 2:40,3:40 &
job=$!
for _ in $(seq 600); do [ -e "$scratch/killed/ckpt/step-00000020.ok" ] && break; sleep 0.1; done
kill -9 "$(rank_pid "$scratch/killed" 3)"
wait $job
check "killed worker: the job ends before its last step" test ! -e "$scratch/killed/trained_model.pt"
train 5 "$scratch/killed" "${resume[@]}" --servers 3 --resume
check "resume with 3 servers: completes" grep -q "resuming at step" "$scratch/killed.log"
check "resume with 3 servers: the uninterrupted 1-server run's weights" same "resumed" \
  "$scratch/reference/trained_model.pt" "$scratch/killed/trained_model.pt"
"$pseval" --train-dir "$scratch/killed" > "$scratch/eval.log" 2>&1
check "pseval reads the 2 servers' run's checkpoints as any" test "$(tail -n +2 "$scratch/killed/eval.csv" | wc -l)" -ge 2

# --- diloco: the outer step over K servers (exchanges/rounds/OuterRanges.h). Raw floats
# both ways, no overlap, no balance (as mpi.diloco's exact sections): K = 2 and 4 give one
# server's weights; a worker killed mid-run, resumed with 3 servers, gives the uninterrupted
# 1-server run's weights (outer momentum gathered into each checkpoint, split again at start).
diloco=(--mode diloco --synthetic-size 3000 --batch-size 16 --steps 120 --lr 0.05 --momentum 0 --checkpoint-every 20
        --local-steps 7 --outer-lr 0.7 --outer-momentum 0.9 --compress none --compress-weights none --overlap-rounds=off
        --balance=off)
train 3 "$scratch/diloco-k1" "${diloco[@]}"
for k in 2 4; do
  train $((k + 2)) "$scratch/diloco-k$k" "${diloco[@]}" --servers $k
  check "diloco: $k servers give 1 server's weights" same "diloco, $k servers" "$scratch/diloco-k1/trained_model.pt" \
    "$scratch/diloco-k$k/trained_model.pt"
done
train 4 "$scratch/diloco-killed" "${diloco[@]}" --servers 2 --straggle 2:40,3:40 &
job=$!
for _ in $(seq 600); do [ -e "$scratch/diloco-killed/ckpt/step-00000042.ok" ] && break; sleep 0.1; done
kill -9 "$(rank_pid "$scratch/diloco-killed" 3)"
wait $job
train 5 "$scratch/diloco-killed" "${diloco[@]}" --servers 3 --resume
check "diloco: killed, resumed with 3 servers: continues from a round's checkpoint" \
  grep -qE "resuming at step (42|56|63|84|98|105)" "$scratch/diloco-killed.log"
check "diloco: resumed with 3 servers: the uninterrupted 1-server run's weights" same "diloco, resumed" \
  "$scratch/diloco-k1/trained_model.pt" "$scratch/diloco-killed/trained_model.pt"
# The defaults (int4 both ways, H and overlap auto, dealt by speed) over 2 servers: each
# server sends its range's int4 updates; the metrics name both servers; pseval reads it.
train 4 "$scratch/diloco-defaults" --mode diloco --steps 120 --checkpoint-every 40 --servers 2
check "diloco defaults, 2 servers: completes, measuring H" grep -q "rounds 2 to 3 took" "$scratch/diloco-defaults.log"
check "diloco defaults, 2 servers: each server's bytes per round, balanced within 25%" \
  test "$(metric "$scratch/diloco-defaults" "(lambda a, b: a > 0 and abs(a - b) <= 0.25 * (a + b))(last['server0_mib_per_step'], last['server1_mib_per_step'])")" = True
"$pseval" --train-dir "$scratch/diloco-defaults" > "$scratch/diloco-eval.log" 2>&1
# (How many there are depends on H, measured: checkpoints come at the ends of rounds.)
check "diloco defaults, 2 servers: pseval reads every checkpoint" \
  test "$(tail -n +2 "$scratch/diloco-defaults/eval.csv" | wc -l)" -eq "$(ls "$scratch"/diloco-defaults/ckpt/*.ok | wc -l)"
with_timeout 60 "$mpirun" -np 4 "$pstrain" --device cpu --threads 1 --model mlp --dataset synthetic --servers 2 --dry-run \
  --mode diloco --train-dir "$scratch/plan-diloco" > "$scratch/plan-diloco.log" 2>&1
check "dry run, diloco: rank 1 owns the second range" grep -qE "rank 1 owns parameters \[[0-9]+, 203530\)" \
  "$scratch/plan-diloco.log"

# --- layouts refused before training, naming the fix.
job_refused "2 servers in 2 ranks: no worker left" "--servers 2 leaves no worker among 2 rank" --servers 2
job_refused "--servers 0" "--servers must be in \[1, 1024\]" --servers 0
refused "5 servers of a 4-tensor model under a codec (whole tensors): refused on every rank, naming the fix" \
  "--servers 5: the model has 4 parameter tensors, and --compress int8 codes each tensor whole on one server: use at most 4 servers, or --compress none" \
  with_timeout 60 "$mpirun" -np 6 "$pstrain" --device cpu --threads 1 --model convnet --dataset synthetic --servers 5 \
  --compress int8 --steps 5 --train-dir "$scratch/bad-run"
refused "5 servers of a 4-tensor model under a weight codec: names that codec and its fix" \
  "and --compress-weights int8 codes each tensor whole on one server: use at most 4 servers, or --compress-weights none" \
  with_timeout 60 "$mpirun" -np 6 "$pstrain" --device cpu --threads 1 --model mlp --dataset synthetic --servers 5 \
  --compress none --compress-weights int8 --steps 5 --train-dir "$scratch/bad-run"
refused "--aggregate 3 with 2 servers and 2 workers: refused at start-up, naming both numbers" \
  "--aggregate 3 is more than the 2 worker\(s\) of 4 ranks with 2 parameter servers" \
  with_timeout 60 "$mpirun" -np 4 "$pstrain" --device cpu --threads 1 --model mlp --dataset synthetic --servers 2 \
  --mode backup --aggregate 3 --steps 5 --timeout 600 --train-dir "$scratch/bad-run"
job_refused "--servers with allreduce" "--servers 2 shards the server of sync, backup, async, diloco and localsgd; --mode \
allreduce has no server" --mode allreduce --servers 2
checks_done
