#!/usr/bin/env bash
# Hardening, under mpirun:
#   1. a UDP flood at every rank's doorbell: the job completes and rank 0's CPU while it
#      waits stays bounded; --doorbell off trains too;
#   2. a failed --overwrite start (ranks that disagree; a model that does not fit the data)
#      leaves the earlier run intact; a start killed after it set the earlier run aside
#      keeps it in .replaced/ and the next start says so; a successful one replaces it;
#   3. two jobs on one train dir: the second is refused; a train dir that other users can
#      write is refused;
#   4. pseval looks again at a checkpoint that fails its check (as while it is republished);
#   5. a --config file missing on one host: every rank's failure is reported, none waits.
# Usage: hardening.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch" && cd "$scratch" || exit 1
source "$(dirname "$0")/../common/checks.sh"
has() { grep -qE -- "$2" "$1"; }
common=(--dataset synthetic --synthetic-size 2000 --batch-size 32 --threads 1 --log-every 50 --timeout 60)
fingerprint() { (cd "$1" && find . -type f ! -name .lock | sort | while read -r f; do sha256_of "$f"; done) ; }

# --- 1. a flood at the doorbells ------------------------------------------------------
# The flooder finds the UDP ports the pstrain processes listen on (lsof: Linux and macOS)
# and sends junk to all of them until the job ends.
cat > flood.py <<'PY'
import os, re, socket, subprocess, sys, time
stop = sys.argv[1]
ports, sent = set(), 0
sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
junk = os.urandom(12)
deadline = time.time() + 120
while not os.path.exists(stop) and time.time() < deadline:
    if len(ports) < 3:  # the job's three ranks, as their doorbells appear
        listing = subprocess.run(["lsof", "-nP", "-a", "-c", "pstrain", "-iUDP", "-Fn"], capture_output=True,
                                 text=True).stdout
        for m in re.finditer(r"^n(\S+):(\d+)$", listing, re.M):
            ports.add((m.group(1).strip("[]").replace("*", "0.0.0.0"), int(m.group(2))))
        time.sleep(0.05)
    for address, port in ports:
        target = "127.0.0.1" if address == "0.0.0.0" else address
        for _ in range(50):
            try:
                sock.sendto(junk, (target, port))
                sent += 1
            except OSError:
                pass
print(f"{sent} datagrams to {len(ports)} doorbell(s)")
PY
python3 flood.py "$scratch/flood.stop" > flood.log 2>&1 &
flooder=$!
run_logged flooded with_timeout 240 "$mpirun" -np 3 "$pstrain" --model lenet "${common[@]}" --steps 150 \
  --checkpoint-every 0 --train-dir flooded
rc=$?
touch flood.stop; wait $flooder
cpu=$(metric flooded "max(l['exchange_cpu_share'] for l in lines[1:])")
echo "     flood: $(cat flood.log); rank 0's CPU while waiting, worst window: $cpu of a core"
check "flood: the job completes" test $rc -eq 0
check "flood: it reached the 3 ranks' doorbells" has flood.log "^[1-9][0-9]* datagrams to 3 doorbell"
check "flood: rank 0's CPU while waiting stays bounded (<= 0.5 of a core)" ge 0.5 "$cpu"
run_logged quiet with_timeout 240 "$mpirun" -np 3 "$pstrain" --model lenet "${common[@]}" --steps 60 --checkpoint-every 0 \
  --train-dir no-doorbell --doorbell off
check "--doorbell off: trains" test -f no-doorbell/trained_model.pt

# --- 2. --overwrite keeps the earlier run until the new one has a checkpoint ------------
run_logged old with_timeout 120 "$mpirun" -np 3 "$pstrain" --model mlp "${common[@]}" --steps 40 --checkpoint-every 20 \
  --train-dir run
before=$(fingerprint run)
# Ranks that disagree (rank 2 another lr): the handshake stops every rank.
with_timeout 60 "$mpirun" -np 2 "$pstrain" --model mlp "${common[@]}" --steps 40 --train-dir "$scratch/run" --overwrite \
  : -np 1 "$pstrain" --model mlp "${common[@]}" --steps 40 --lr 0.5 --train-dir "$scratch/run" --overwrite > failed1.log 2>&1
check "failed --overwrite (ranks disagree): refused" has failed1.log "ranks disagree on 'lr'"
check "failed --overwrite (ranks disagree): the earlier run is intact" test "$(fingerprint run)" = "$before"
# Workers without their data: they stop the job while rank 0 waits in the handshake.
with_timeout 60 "$mpirun" -np 3 "$pstrain" --model mlp --dataset fashion-mnist --data-dir "$scratch/nowhere" \
  --train-dir "$scratch/run" --overwrite --steps 5 > failed2.log 2>&1
check "failed --overwrite (workers without data): refused" has failed2.log "nowhere/train-images-idx3-ubyte.*not found"
check "failed --overwrite (workers without data): the earlier run is intact" test "$(fingerprint run)" = "$before"
# Killed after it set the earlier run aside (a NaN at its first step stops the job).
with_timeout 60 "$mpirun" -np 3 "$pstrain" --model mlp "${common[@]}" --steps 40 --checkpoint-every 20 --train-dir "$scratch/run" \
  --overwrite --inject-nan 1:0 > failed3.log 2>&1
check "killed --overwrite: the earlier run waits in .replaced/" test "$(fingerprint run/.replaced)" = "$before"
with_timeout 60 "$mpirun" -np 3 "$pstrain" --model mlp "${common[@]}" --steps 40 --train-dir "$scratch/run" --overwrite > next.log 2>&1
check "killed --overwrite: the next start says where the earlier run is" has next.log "run/.replaced holds the files of a run"
rm -rf run/ckpt run/metrics.jsonl run/run.json run/events.out.tfevents.* && mv run/.replaced/* run/ && rmdir run/.replaced
check "killed --overwrite: moved back, the earlier run is whole again" test "$(fingerprint run)" = "$before"
run_logged replaced with_timeout 120 "$mpirun" -np 3 "$pstrain" --model mlp "${common[@]}" --steps 30 --checkpoint-every 10 \
  --train-dir run --overwrite
check "--overwrite: the new run replaces the earlier one" bash -c "[ ! -e run/.replaced ] && [ -e run/ckpt/step-00000030.ok ] && [ ! -e run/ckpt/step-00000040.ok ]"

# --- 3. one job per train dir, and only its owner writes it ------------------------------
with_timeout 120 "$mpirun" -np 3 "$pstrain" --model lenet "${common[@]}" --steps 400 --checkpoint-every 0 \
  --train-dir busy --straggle 1:20 > busy.log 2>&1 &
first=$!
for _ in $(seq 300); do [ -e busy/run.json ] && break; sleep 0.1; done
with_timeout 60 "$mpirun" -np 3 "$pstrain" --model lenet "${common[@]}" --steps 10 --train-dir "$scratch/busy" --overwrite > second.log 2>&1
check "a second job on the same train dir: refused" has second.log "another pstrain job is using it \(pid [0-9]+ on [^)]+\)"
stop_job $first; wait $first
mkdir -p shared && chmod 0777 shared
with_timeout 60 "$mpirun" -np 3 "$pstrain" --model lenet "${common[@]}" --steps 10 --train-dir "$scratch/shared" > shared.log 2>&1
check "a train dir that others can write: refused" has shared.log "other users can write it .*mode 0777"

# --- 4. pseval looks again before it skips a checkpoint ----------------------------------
cp run/ckpt/step-00000010.pt good.pt
printf 'x' | dd of=run/ckpt/step-00000010.pt bs=1 seek=5000 conv=notrunc 2>/dev/null
( sleep 0.5; cp good.pt run/ckpt/step-00000010.pt ) &
"$pseval" --train-dir run > pseval.log 2>&1
wait
check "pseval: a checkpoint repaired while it retries is evaluated, not skipped" \
  bash -c "grep -q 'step 10 ' pseval.log && ! grep -q skipping pseval.log"

# --- 5. a --config file missing on one host ----------------------------------------------
mkdir -p hostA hostB && printf 'steps = 5\ndataset = synthetic\n' > hostA/cluster.conf
with_timeout 60 "$mpirun" -np 1 -wdir "$scratch/hostA" "$pstrain" --config cluster.conf --train-dir "$scratch/cfg" \
  : -np 2 -wdir "$scratch/hostB" "$pstrain" --config cluster.conf --train-dir "$scratch/cfg" > config.log 2>&1
rc=$?
cat config.log | grep pstrain | sed 's/^/     /'
check "--config missing on ranks 1 and 2: exit 2, the ranks named" \
  bash -c "[ $rc -eq 2 ] && grep -q 'pstrain: error: ranks 1, 2: cluster.conf: cannot read the config file' config.log"
checks_done
