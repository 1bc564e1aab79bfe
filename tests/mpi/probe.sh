#!/usr/bin/env bash
# pstrain --probe under a real mpirun: it writes a well-formed probe.json and trains
# nothing; a slowed worker lowers the sync prediction and turns the recommendation to a mode
# that tolerates it; bad flags fail as they would for a real run. And the compute stand-in
# of the scaling benchmark (--simulate-compute): its batches take the time asked, in the
# streamed (sync, overlap) and whole-message (backup) paths, and the probe measures them.
# Usage: probe.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
source "$(dirname "$0")/../common/checks.sh"
pstrain=$1 mpirun=$3 scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch"
job=(--model lenet --dataset synthetic --synthetic-size 2000 --batch-size 32 --threads 1)

out=$(with_timeout 300 "$mpirun" -np 3 "$pstrain" "${job[@]}" --probe --train-dir "$scratch/even" 2>&1); rc=$?
echo "$out"
check "probe exits 0" test $rc -eq 0
check "probe prints a recommendation" \
  grep -qE "recommendation: (sync|backup|async|allreduce) with 2 workers( and [24] servers \(--servers [24][^)]*\))?, .*x one worker" <<<"$out"
check "probe predicts sync with 2 and 4 servers (--servers)" grep -qE "^(\[[^]]*\] )? +sync, 4 servers +[0-9]+ \(" <<<"$out"
check "probe trains nothing" bash -c "[ ! -e '$scratch/even/ckpt' ] && [ ! -e '$scratch/even/metrics.jsonl' ] && [ ! -e '$scratch/even/trained_model.pt' ]"
check "probe.json is well-formed and complete" python3 - "$scratch/even/probe.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert p["model"] == "lenet" and p["batch_size"] == 32, p
m = p["measured"]
assert m["ranks"] == [1, 2] and len(m["compute_s"]) == 2 and all(0 < c < 10 for c in m["compute_s"]), m
assert all(b > 0 for b in m["bytes_per_s"]) and all(l >= 0 for l in m["latency_s"]) and m["update_s"] > 0, m
assert set(m["gradient_codecs"]) == {"none", "fp16", "int4", "topk:0.01", "powersgd:4"}, m
assert m["gradient_codecs"]["int4"]["bytes"] < 0.2 * m["gradient_codecs"]["none"]["bytes"], m
assert m["gradient_codecs"]["topk:0.01"]["bytes"] < m["gradient_codecs"]["fp16"]["bytes"] < m["gradient_codecs"]["none"]["bytes"]
keys = {(x["mode"], x["codec"], x["workers"]) for x in p["predictions"]}
for mode in ("sync", "backup", "async", "allreduce"):
    for codec in ("none", "fp16", "topk:0.01", "powersgd:4"):
        for workers in (1, 2):
            assert (mode, codec, workers) in keys, (mode, codec, workers)
servers = {(x["codec"], x["workers"], x["servers"]) for x in p["predictions"] if x["mode"] == "sync"}
for k in (1, 2, 4):
    assert ("none", 2, k) in servers, ("sync, servers", k)
for x in p["predictions"]:
    assert x["samples_per_s"] > 0 and 0 < x["efficiency"] <= 1.5 and x["step_s"] > 0, x
assert "x one worker" in p["recommendation"], p
# What diloco's defaults would decide (exchanges/rounds/RoundsPlan.h): H within its clamp.
assert 10 <= p["diloco_local_steps"] <= 500 and p["diloco_overlap"] in (True, False), p
# ... and its predicted time to a loss, against one worker's (2 workers: at most 2x) and sync's.
assert 0 < p["diloco_time_to_loss_x_one_worker"] <= 2 and p["diloco_time_to_loss_x_sync"] > 0, p
PY
check "probe says what diloco's --local-steps auto would take" grep -qE "diloco: --local-steps auto would take [0-9]+ local steps a round" <<<"$out"
check "probe says why, and diloco's predicted time to a loss" \
  grep -qE "s a step of sync's quality.*diloco: reaches a loss [0-9.]+x as fast as one worker and [0-9.]+x as fast as sync" \
  <<<"$(tr '\n' ' ' <<<"$out")"

# One worker 300 ms slower per batch: sync waits for it, backup and async need not.
out=$(with_timeout 300 "$mpirun" -np 3 "$pstrain" "${job[@]}" --probe --straggle 2:300 --train-dir "$scratch/slow" 2>&1); rc=$?
echo "$out"
check "probe with a straggler exits 0" test $rc -eq 0
check "a straggler lowers the sync prediction and the recommendation tolerates it" python3 - "$scratch/even/probe.json" "$scratch/slow/probe.json" <<'PY'
import json, sys
even, slow = (json.load(open(f)) for f in sys.argv[1:3])
sync = lambda p: max(x["samples_per_s"] for x in p["predictions"] if x["mode"] == "sync" and x["workers"] == 2)
assert sync(slow) < 0.5 * sync(even), (sync(even), sync(slow))
assert slow["recommendation"].split()[0] in ("backup", "async"), slow["recommendation"]
PY

# The compute stand-in: 60 ms per batch, a random gradient of the model's size, loss 0.
for mode in sync backup; do
  out=$(with_timeout 300 "$mpirun" -np 3 "$pstrain" "${job[@]}" --simulate-compute 60 --mode $mode --steps 12 \
        --log-every 4 --checkpoint-every 0 --train-dir "$scratch/sim-$mode" 2>&1); rc=$?
  check "--simulate-compute, $mode: exits 0 (exit $rc)" test $rc -eq 0
  check "--simulate-compute, $mode: 60 ms batches, loss 0, rank 0's CPU recorded" python3 - "$scratch/sim-$mode" <<'PY'
import json, sys
d = sys.argv[1]
lines = [json.loads(l) for l in open(f"{d}/metrics.jsonl")]
assert len(lines) == 3 and all(0.055 < l["compute_s"] < 0.3 and l["loss"] == 0 for l in lines), lines
assert all(l["rank0_cpu_s"] > 0 for l in lines), lines
assert float(json.load(open(f"{d}/run.json"))["config"]["simulate-compute"]) == 60
PY
done
out=$(with_timeout 300 "$mpirun" -np 3 "$pstrain" "${job[@]}" --simulate-compute 60 --probe --train-dir "$scratch/sim-probe" 2>&1); rc=$?
check "--probe with --simulate-compute measures the stand-in's batches (exit $rc)" python3 - "$scratch/sim-probe/probe.json" <<'PY'
import json, sys
p = json.load(open(sys.argv[1]))
assert all(0.055 < c < 0.3 for c in p["measured"]["compute_s"]), p["measured"]
sync2 = [x for x in p["predictions"]
         if (x["mode"], x["codec"], x["weights_codec"], x["workers"], x["servers"]) == ("sync", "none", "none", 2, 1)]
assert len(sync2) == 1 and sync2[0]["step_s"] > 0.06, sync2
PY

# Bad flags fail as a real run's would (exit 2, the same message), and --dry-run with it too.
expect_error() {  # expect_error NAME PATTERN ARGS...
  local name=$1 pattern=$2; shift 2
  local out rc
  out=$(with_timeout 60 "$mpirun" -np 3 "$pstrain" "${job[@]}" --train-dir "$scratch/bad" "$@" 2>&1); rc=$?
  check "$name (exit $rc)" bash -c "[ $rc -eq 2 ] && grep -qE -- '$pattern' <<<\"\$0\"" "$out"
}
expect_error "probe with an unknown mode" "--mode" --probe --mode nonsense
expect_error "probe with --dry-run" "--probe and --dry-run" --probe --dry-run
expect_error "probe with a codec that does not exist" "compress" --probe --compress zip9
expect_error "a negative --simulate-compute" "--simulate-compute" --simulate-compute -5
out=$(with_timeout 60 "$mpirun" -np 3 "$pstrain" --probe --dataset fashion-mnist --data-dir "$scratch/nowhere" \
      --train-dir "$scratch/bad" 2>&1); rc=$?
check "probe with a missing dataset fails (exit $rc)" bash -c "[ $rc -ne 0 ] && grep -q 'nowhere' <<<\"\$0\"" "$out"
check "failed probes write no probe.json" test ! -e "$scratch/bad/probe.json"

checks_done
