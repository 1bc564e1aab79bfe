#!/usr/bin/env bash
# Elastic runs under mpirun:
#   1. with 6 virtual shards, a run stopped at step 10 as SIGUSR1 stops it (--stop-at:
#      checkpoint, exit 3) and resumed with 1 worker, stopped again at 30 and resumed with 3,
#      ends with the weights of an uninterrupted run with 2 workers; its metrics count every
#      step once;
#   2. pstrain-run, a worker SIGKILLed while a discovery script then offers one slot fewer:
#      relaunched within 10 s, finished with 1 worker; killed again after new checkpoints,
#      relaunched though --max-restarts is 1 (progress resets the count); elastic.jsonl says
#      launch, failure, launch (smaller), failure, launch, done; the result is the
#      uninterrupted run's (Fashion-MNIST accuracy);
#   3. pstrain-run, the slot offered again: the job stops at a step and relaunches larger,
#      no step lost (the steps of metrics.jsonl contiguous);
#   4. --balance: a slow worker gets fewer virtual shards, the weights do not change;
#   5. a configuration error, or a train dir that holds a run: exit 2, not retried;
#   6. SIGTERM to pstrain-run: the job checkpoints and stops (exit 3) at once, though the
#      discovery script hangs (and printed garbage before); a job that ignores SIGUSR1 and
#      SIGTERM is SIGKILLed after twice --stop-grace; a stop while waiting for hosts is a stop;
#   7. --overwrite however spelled (a --config file's "overwrite = true", --overwrite=true,
#      --overwrite): a worker killed after the new run's first checkpoint, or before it, is
#      relaunched and the run finishes, replacing the earlier one; no .replaced/ is left.
#   8. --servers 2 under pstrain-run: a server killed is a lost job, relaunched with 2
#      servers; the uninterrupted run's weights.
#   9. async with one worker under pstrain-run: the worker killed, the job relaunched; the
#      worker goes on from its own batch (in the checkpoint), not from batch 0: the
#      uninterrupted run's weights.
# Usage: elastic.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
pstrain_run=$(dirname "$pstrain")/pstrain-run
rm -rf "$scratch" && mkdir -p "$scratch" && cd "$scratch" || exit 1
source "$(dirname "$0")/../common/checks.sh"
mpi_args=(--mpirun-arg=--oversubscribe)
[ "$(id -u)" -ne 0 ] || mpi_args+=(--mpirun-arg=--allow-run-as-root)
wait_for() { for _ in $(seq 600); do [ -e "$1" ] && return 0; sleep 0.1; done; return 1; }
# steps_once DIR: every step of metrics.jsonl (logged every step) exactly once, in order.
steps_once() {
  python3 - "$1/metrics.jsonl" <<'PY'
import json, sys
steps = [json.loads(l)["step"] for l in open(sys.argv[1])]
sys.exit(0 if steps == list(range(1, len(steps) + 1)) else 1)
PY
}

# events DIR: elastic.jsonl's events as "event:world_size ...".
events() { python3 -c "import json,sys; print(' '.join(f\"{e['event']}:{e['world_size']}\" for e in map(json.loads, open(sys.argv[1]))))" "$1/elastic.jsonl"; }

# --- 1. 2 -> 1 -> 3 workers with 6 virtual shards, under mpirun ------------------------
# How many workers share a step's 6 virtual shards sets the order their gradients are summed
# in (6 on one, 3 + 3 on two, 2 + 2 + 2 on three): the same sum up to its last bits. A model
# of smooth functions keeps that a rounding difference (1e-8 here); LeNet's max-pools and
# ReLUs are not smooth: where two inputs of a pool are within rounding of each other, the
# order decides which one passes the gradient, and its weights jump (5.0e-5 after a
# 1-worker stretch over steps 10 to 20; 4.9e-4 once, at other steps, where SIGUSR1 stopped
# the job a step later or earlier). So these runs train a smooth MLP (tanh), and stop at
# steps 10 and 30 exactly (--stop-at: as SIGUSR1 stops a job), the same steps every run.
"$PSTRAIN_PYTHON" - <<'PY' || exit 1
import torch
class Smooth(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hidden, self.out = torch.nn.Linear(784, 64), torch.nn.Linear(64, 10)
    def forward(self, x):
        return self.out(torch.tanh(self.hidden(x.flatten(1))))
torch.manual_seed(0)
torch.jit.trace(Smooth(), torch.zeros(2, 1, 28, 28)).save("smooth.pt")
PY
job=(--device cpu --model smooth.pt --dataset synthetic --synthetic-size 1200 --batch-size 8 --virtual-shards 6
     --steps 60 --lr 0.01 --warmup-steps 5 --lr-decay cosine --momentum 0.9 --weight-decay 1e-4 --checkpoint-every 5
     --log-every 1 --threads 1 --timeout 60 --straggle 1:20)
run_logged whole with_timeout 300 "$mpirun" -np 3 "$pstrain" "${job[@]}" --train-dir "$scratch/whole"
"$mpirun" -np 3 "$pstrain" "${job[@]}" --train-dir "$scratch/elastic" --stop-at 10 > part1.log 2>&1; rc1=$?
"$mpirun" -np 2 "$pstrain" "${job[@]}" --train-dir "$scratch/elastic" --resume --stop-at 30 > part2.log 2>&1; rc2=$?
run_logged part3 with_timeout 300 "$mpirun" -np 4 "$pstrain" "${job[@]}" --train-dir "$scratch/elastic" --resume
check "a stop request: the job checkpoints, stops and exits 3 (twice)" test "$rc1$rc2" = 33
check "a stop request: it says where it stopped" has part1.log "stopped on request at step 10 of 60"
diff=$(max_weight_diff whole/trained_model.pt elastic/trained_model.pt)
echo "     6 virtual shards, 2 -> 1 -> 3 workers vs 2 throughout: max abs diff $diff"
check "virtual shards: the run that changed workers ends with the uninterrupted run's weights (<= 1e-5)" ge 1e-5 "${diff:-1}"
check "virtual shards: every step logged once (none lost, none repeated)" steps_once elastic

brief_ends_here

# --- 2. pstrain-run: a worker killed, one slot fewer offered -----------------------------
echo 3 > slots
printf '#!/bin/sh\necho "localhost:$(cat %s/slots)"\n' "$scratch" > discover.sh && chmod +x discover.sh
data=(--device cpu --model lenet --batch-size 32 --steps 240 --lr 0.02 --checkpoint-every 20 --log-every 1 --threads 1 --timeout 60)
run_logged reference with_timeout 300 "$mpirun" -np 3 "$pstrain" "${data[@]}" --train-dir "$scratch/reference"
"$pstrain_run" --host-discovery-script ./discover.sh "${mpi_args[@]}" --discovery-interval 1 --max-restarts 1 \
  -- "${data[@]}" --train-dir "$scratch/killed" > killed.log 2>&1 &
supervisor=$!
wait_for killed/ckpt/step-00000040.ok
echo 2 > slots
victim=$(rank_pid "$scratch/killed" 2)
[ -n "$victim" ] && kill -9 "$victim"
# The relaunch publishes checkpoints (steady progress): a second failure is relaunched too.
wait_for killed/ckpt/step-00000120.ok
victim=$(rank_pid "$scratch/killed" 1)
[ -n "$victim" ] && kill -9 "$victim"
wait $supervisor; rc=$?
grep '^pstrain-run' killed.log | sed 's/^/     /'
events=$(events killed)
relaunch=$(python3 -c "import json; print([e for e in map(json.loads, open('killed/elastic.jsonl')) if 'seconds_since_failure' in e][0]['seconds_since_failure'])")
echo "     events: $events; relaunched $relaunch s after the failure"
check "pstrain-run: finishes (exit 0)" test $rc -eq 0
check "pstrain-run: launch, failure, launch with the smaller world, failure, launch (the count reset), done" \
  test "$events" = "launch:3 failure:3 launch:2 failure:2 launch:2 done:2"
check "pstrain-run: relaunched within 10 s of the failure" ge 10 "$relaunch"
a=$(final_accuracy "$pseval" reference) b=$(final_accuracy "$pseval" killed)
diff=$(max_weight_diff reference/trained_model.pt killed/trained_model.pt)
echo "     Fashion-MNIST accuracy: uninterrupted $a%, with the failure $b%; max abs weight diff $diff"
check "pstrain-run: the accuracy of the uninterrupted run (within 1 point)" \
  awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; exit !(d <= 1 && d >= -1) }'

# --- 3. pstrain-run takes the slot back ------------------------------------------------
echo 2 > slots
# Its first launch has 1 worker: --virtual-shards 2 says the run may have 2.
"$pstrain_run" --host-discovery-script ./discover.sh "${mpi_args[@]}" --discovery-interval 1 \
  -- "${data[@]}" --virtual-shards 2 --train-dir "$scratch/regrow" > regrow.log 2>&1 &
supervisor=$!
wait_for regrow/ckpt/step-00000040.ok
echo 3 > slots
wait $supervisor; rc=$?
grep '^pstrain-run' regrow.log | sed 's/^/     /'
events=$(events regrow)
check "regrow: finishes (exit 0)" test $rc -eq 0
check "regrow: launch, regrow, launch with the larger world, done" test "$events" = "launch:2 regrow:2 launch:3 done:3"
check "regrow: no step lost or repeated (metrics.jsonl contiguous)" steps_once regrow
diff=$(max_weight_diff reference/trained_model.pt regrow/trained_model.pt)
echo "     regrown run vs uninterrupted: max abs weight diff $diff"
check "regrow: the uninterrupted run's weights (<= 1e-5)" ge 1e-5 "$diff"

# --- 4. --balance: a slow worker gets fewer virtual shards, the weights stay the same ----
# (The smooth model of section 1: the shares, dealt by measured speed, set the summation
# order, which it keeps a rounding difference. A lost or repeated shard changes the
# gradient itself, not only its rounding.)
balanced=(--device cpu --model smooth.pt --dataset synthetic --synthetic-size 1200 --batch-size 8 --virtual-shards 12
          --steps 30 --lr 0.01 --warmup-steps 5 --lr-decay cosine --weight-decay 1e-4 --momentum 0.9
          --checkpoint-every 0 --log-every 10 --threads 1 --straggle 3:15)
run_logged plain with_timeout 300 "$mpirun" -np 4 "$pstrain" "${balanced[@]}" --train-dir "$scratch/plain"
run_logged balanced with_timeout 300 "$mpirun" -np 4 "$pstrain" "${balanced[@]}" --balance --train-dir "$scratch/balanced"
shares=$(metric balanced "last['virtual_shards_by_worker']")
rates=$(metric plain "lines[-1]['samples_per_s']")/$(metric balanced "lines[-1]['samples_per_s']")
diff=$(max_weight_diff plain/trained_model.pt balanced/trained_model.pt)
echo "     --balance, worker 3 slowed by 15 ms per shard: shares $shares; samples/s plain/balanced $rates; max abs weight diff $diff"
check "--balance: the slow worker computes fewer shards than the others" \
  python3 -c "import sys; s = $shares; sys.exit(0 if s[2] < min(s[0], s[1]) and sum(s) == 12 else 1)"
check "--balance: the weights of the unbalanced run (<= 1e-5)" ge 1e-5 "${diff:-1}"

# --- 5. a configuration error is not retried -------------------------------------------
# pstrain's flags are read by pstrain-run itself: a bad value is refused before any launch.
"$pstrain_run" --host-discovery-script ./discover.sh "${mpi_args[@]}" -- --lr -1 --train-dir "$scratch/bad" > bad.log 2>&1
rc=$?
check "bad flag for pstrain: exit 2, nothing launched, the flag named" \
  bash -c "[ $rc -eq 2 ] && [ ! -e bad/elastic.jsonl ] && grep -q -- '--lr must be a positive number' bad.log"
# A name only pstrain's registries know: pstrain refuses it at start-up (exit 2), once.
"$pstrain_run" --host-discovery-script ./discover.sh "${mpi_args[@]}" -- --model lenet7 --train-dir "$scratch/bad2" > bad2.log 2>&1
rc=$?
check "configuration error at start-up: exit 2, one launch, not retried" \
  bash -c "[ $rc -eq 2 ] && [ \$(grep -c '\"launch\"' bad2/elastic.jsonl) -eq 1 ] && grep -q 'not retried' bad2/elastic.jsonl"
# A train dir that holds a finished run, without --overwrite: pstrain-run refuses it as
# pstrain would (exit 2) before it launches anything or writes an event there.
cp -R "$scratch/reference" "$scratch/held"
events=$( (cat "$scratch/held/elastic.jsonl" 2>/dev/null || true) | wc -l | tr -d ' ')
before=$(cd "$scratch/held" && sha256_of trained_model.pt metrics.jsonl)
"$pstrain_run" --host-discovery-script ./discover.sh "${mpi_args[@]}" -- "${data[@]}" --steps 300 \
  --train-dir "$scratch/held" > held.log 2>&1
rc=$?
after=$(cd "$scratch/held" && sha256_of trained_model.pt metrics.jsonl)
grep -E '^pstrain(-run)?: ' held.log | sed 's/^/     /'
check "a train dir that holds a run: exit 2, nothing launched, no event written there, the refusal named" \
  bash -c "[ $rc -eq 2 ] && [ \$( (cat held/elastic.jsonl 2>/dev/null || true) | wc -l) -eq $events ] &&
           ! grep -q 'pstrain-run: launch' held.log && grep -q 'already holds a run' held.log"
check "a train dir that holds a run: its trained_model.pt and metrics.jsonl unchanged" test "$before" = "$after"
# --config works under pstrain-run: its train dir and mode are the job's.
printf 'train-dir = %s\nmode = allreduce\nsteps = 6\nmodel = mlp\ndataset = synthetic\nlog-every = 2\n' "$scratch/configured" > job.conf
"$pstrain_run" --host-discovery-script ./discover.sh "${mpi_args[@]}" -- --config job.conf --threads 1 > configured.log 2>&1
rc=$?
check "--config under pstrain-run: its train dir gets the events, its mode the ranks (exit $rc)" \
  bash -c "[ $rc -eq 0 ] && grep -q '\"event\":\"done\"' '$scratch/configured/elastic.jsonl' && grep -q 'allreduce mode, 3 ranks' configured.log"

# --- 6. SIGTERM to pstrain-run ----------------------------------------------------------
# now: the time in seconds, to a microsecond; seconds_since T0: the seconds since T0 (a `now`).
now() { python3 -c 'import time; print(time.time())'; }
seconds_since() { python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$1"; }
# A script that offers 3 slots, then garbage (an overflowing slot count), then hangs. The
# job may grow (--virtual-shards 4): pstrain-run keeps asking the script while it runs.
cat > moody.sh <<EOF
#!/bin/sh
[ -e "$scratch/hang" ] && exec sleep 599
[ -e "$scratch/garbage" ] && { echo "localhost:99999999999"; exit 0; }
echo localhost:3
EOF
chmod +x moody.sh
endless=(--device cpu --model lenet --dataset synthetic --batch-size 32 --steps 1000000 --checkpoint-every 1000000
         --log-every 5 --threads 1 --timeout 60)
"$pstrain_run" --host-discovery-script ./moody.sh "${mpi_args[@]}" --discovery-interval 1 --stop-grace 20 \
  -- "${endless[@]}" --virtual-shards 4 --train-dir "$scratch/stopped" > stopped.log 2>&1 &
supervisor=$!
wait_for stopped/metrics.jsonl
touch garbage; sleep 2.5; touch hang; sleep 2
hanging=$(pgrep -f 'sleep 59[9]' | wc -l)
t0=$(now)
kill -TERM $supervisor
wait $supervisor; rc=$?
took=$(seconds_since "$t0")
grep '^pstrain-run' stopped.log | sed 's/^/     /'
echo "     SIGTERM to pstrain-run, discovery hanging: the job stopped ${took} s later (--stop-grace 20)"
check "garbage from the discovery script is reported and the job goes on" has stopped.log "line 1: the slots '99999999999' are not"
check "SIGTERM: the job checkpointed and stopped (exit 3, events launch, stop)" \
  bash -c "[ $rc -eq 3 ] && [ '$(events stopped)' = 'launch:3 stop:3' ] && ls stopped/ckpt/step-*.ok"
check "SIGTERM: the discovery script was hanging when it came" test "$hanging" -ge 1
check "SIGTERM: within the grace period, though the discovery script hangs" ge 19 "$took"
check "SIGTERM: the hanging discovery script is gone" bash -c "! pgrep -f 'sleep 59[9]'"
stopped_at=$(cd stopped/ckpt && ls step-*.ok | tail -1 | tr -dc 0-9 | sed 's/^0*//')
"$pstrain_run" --host-discovery-script ./discover.sh "${mpi_args[@]}" -- "${endless[@]}" --steps $((stopped_at + 10)) --resume \
  --train-dir "$scratch/stopped" > resumed.log 2>&1
rc=$?
check "SIGTERM: --resume continues the stopped run (exit $rc)" bash -c "[ $rc -eq 0 ] && grep -q 'resuming at step' resumed.log"
# A job deaf to SIGUSR1 and SIGTERM: SIGKILL after twice --stop-grace, nothing left running.
# (mpirun, given SIGTERM, kills its ranks itself about as late: on a loaded machine it may
# end the job first, at the SIGTERM stage, which is as good.)
printf '#!/bin/sh\ntrap "" USR1 TERM INT\nexec sleep 598\n' > deaf.sh && chmod +x deaf.sh
"$pstrain_run" --host-discovery-script ./discover.sh "${mpi_args[@]}" --stop-grace 2 --pstrain ./deaf.sh \
  -- --train-dir "$scratch/deaf" > deaf.log 2>&1 &
supervisor=$!
for _ in $(seq 300); do [ "$(pgrep -f 'sleep 59[8]' | wc -l)" -ge 3 ] && break; sleep 0.1; done  # its 3 ranks run
t0=$(now)
kill -TERM $supervisor
wait $supervisor; rc=$?
took=$(seconds_since "$t0"); sleep 0.5
echo "     a job deaf to SIGUSR1 and SIGTERM: pstrain-run exited ${took} s after SIGTERM (--stop-grace 2), exit $rc"
check "a deaf job: SIGUSR1, SIGTERM 2 s later, then SIGKILL unless mpirun ended it first (within 8 s), nothing left" \
  bash -c "[ $rc -eq 143 ] && grep -q 'gets SIGTERM' deaf.log && ! pgrep -f 'sleep 59[8]' &&
           if grep -q 'gets SIGKILL' deaf.log; then awk -v t=$took 'BEGIN { exit !(t >= 3.9 && t < 8) }';
           else grep -q 'the job ended' deaf.log && awk -v t=$took 'BEGIN { exit !(t >= 1.9 && t < 8) }'; fi"
# Too few slots: pstrain-run waits for hosts; a SIGTERM then is a stop, not "gave-up".
echo 1 > slots
"$pstrain_run" --host-discovery-script ./discover.sh "${mpi_args[@]}" -- "${endless[@]}" --train-dir "$scratch/waiting" \
  > waiting.log 2>&1 &
supervisor=$!
for _ in $(seq 300); do grep -q 'waiting for --min-workers' waiting.log && break; sleep 0.1; done
kill -TERM $supervisor
wait $supervisor; rc=$?
check "a stop while waiting for hosts: exit 143, logged as a stop" \
  bash -c "[ $rc -eq 143 ] && [ '$(events waiting)' = 'stop:0' ]"
# --- 7. --overwrite, however spelled, survives a killed worker --------------------------
# A train dir that holds a finished run; the job replaces it. After the job's own first
# checkpoint a relaunch resumes it; before, it starts afresh (still replacing the old run).
echo 3 > slots
replace=(--device cpu --model lenet --dataset synthetic --synthetic-size 1200 --batch-size 8 --steps 60 --lr 0.02
         --log-every 1 --threads 1 --timeout 60 --straggle 1:50)
# overwrite_survives NAME WAIT_FOR PSTRAIN_ARGS...: pstrain-run over a copy of the reference
# run; a worker SIGKILLed once WAIT_FOR (a path in the train dir) exists.
overwrite_survives() {
  local name=$1 marker=$2 victim; shift 2
  rm -rf "${scratch:?}/$name" && cp -R "$scratch/reference" "$scratch/$name"
  "$pstrain_run" --host-discovery-script ./discover.sh "${mpi_args[@]}" --discovery-interval 1 --max-restarts 2 \
    -- "$@" > "$name.log" 2>&1 &
  local supervisor=$!
  wait_for "$name/$marker"
  for _ in $(seq 100); do victim=$(rank_pid "$scratch/$name" 2); [ -n "$victim" ] && break; sleep 0.1; done
  [ -n "$victim" ] && kill -9 "$victim"
  wait $supervisor; local rc=$?
  grep '^pstrain-run' "$name.log" | sed 's/^/     /'
  local steps
  steps=$(python3 -c "import json; print(json.load(open('$name/run.json'))['config']['steps'])")
  [ $rc -eq 0 ] && [ "$(events "$name")" = "launch:3 failure:3 launch:3 done:3" ] && [ "$steps" = 60 ] &&
    [ -e "$name/ckpt/step-00000060.ok" ] && [ ! -e "$name/ckpt/step-00000240.ok" ] && [ ! -e "$name/.replaced" ]
}
printf 'overwrite = true\ntrain-dir = %s\ncheckpoint-every = 10\n' "$scratch/conf_overwrite" > overwrite.conf
check "overwrite = true in --config: a worker killed after the first checkpoint; relaunched, resumed, done" \
  overwrite_survives conf_overwrite ckpt/step-00000010.ok --config overwrite.conf "${replace[@]}"
check "--overwrite=true: a worker killed after the first checkpoint; relaunched, resumed, done" \
  overwrite_survives eq_overwrite ckpt/step-00000010.ok "${replace[@]}" --checkpoint-every 10 --overwrite=true \
  --train-dir "$scratch/eq_overwrite"
check "--overwrite: a worker killed before the first checkpoint; relaunched afresh, done" \
  overwrite_survives early_overwrite metrics.jsonl "${replace[@]}" --checkpoint-every 1000 --overwrite \
  --train-dir "$scratch/early_overwrite"
# killed_and_relaunched NAME RANKS VICTIM FLAGS...: an uninterrupted run of RANKS ranks, and
# the same under pstrain-run (RANKS slots) with rank VICTIM SIGKILLed after step 40's
# checkpoint; sets `events` (elastic.jsonl's) and `rc`, and `diff` between the two weights.
killed_and_relaunched() {
  local name=$1 ranks=$2 victim=$3; shift 3
  echo "$ranks" > slots
  run_logged "$name-reference" with_timeout 300 "$mpirun" -np "$ranks" "$pstrain" "$@" --train-dir "$scratch/$name-reference"
  "$pstrain_run" --host-discovery-script ./discover.sh "${mpi_args[@]}" --discovery-interval 1 --max-restarts 1 \
    -- "$@" --train-dir "$scratch/$name" > "$name.log" 2>&1 &
  local supervisor=$! pid
  wait_for "$name/ckpt/step-00000040.ok"
  pid=$(rank_pid "$scratch/$name" "$victim")
  [ -n "$pid" ] && kill -9 "$pid"
  wait $supervisor; rc=$?
  events=$(events "$name")
  diff=$(max_weight_diff "$name-reference/trained_model.pt" "$name/trained_model.pt")
  echo "     $name, rank $victim killed: events $events; relaunched vs uninterrupted: max abs diff $diff"
}

# --- 8. --servers 2: a lost server is a lost job, relaunched as any ---------------------
killed_and_relaunched servers 4 1 --device cpu --model mlp --dataset synthetic --batch-size 32 --steps 120 --lr 0.02 \
  --checkpoint-every 20 --log-every 1 --threads 1 --timeout 60 --straggle "2:30,3:30" --servers 2
check "--servers 2: a killed server is relaunched with 2 servers and 2 workers, and the run finishes (exit $rc)" \
  test $rc -eq 0 -a "$events" = "launch:4 failure:4 launch:4 done:4"
check "--servers 2, relaunched: the uninterrupted run's weights (<= 1e-6)" ge 1e-6 "${diff:-1}"

# --- 9. async, one worker, 2 servers: the worker killed, the job relaunched -----------------
killed_and_relaunched async 3 2 --device cpu --model mlp --dataset synthetic --batch-size 32 --steps 80 --lr 0.02 \
  --checkpoint-every 20 --log-every 1 --threads 1 --timeout 60 --straggle 2:30 --servers 2 --mode async --optimizer adamw
check "async: a killed worker's job is relaunched and finishes (exit $rc)" \
  test $rc -eq 0 -a "$events" = "launch:3 failure:3 launch:3 done:3"
check "async, relaunched: the worker goes on from its own batch: the uninterrupted run's weights (<= 1e-6)" ge 1e-6 "${diff:-1}"

checks_done
