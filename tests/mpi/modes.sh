#!/usr/bin/env bash
# The training modes under mpirun, each asserting what makes the mode itself:
#   backup    drops the straggler's late gradients and keeps the fast workers' pace;
#   async     with --max-staleness 0 rejects a straggler's stale gradients, yet converges;
#   allreduce equals sync on identical samples;
#   gossip    keeps the ranks' models close (closer than without averaging) and converges.
# Usage: modes.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 pseval=$2 mpirun=$3 scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch"
source "$(dirname "$0")/../common/checks.sh"
train() {  # train NP DIR [flags...]
  local np=$1 dir=$2; shift 2
  run_logged "$dir" with_timeout 240 "$mpirun" -np "$np" "$pstrain" --device cpu --model mlp --batch-size 32 --lr 0.02 --log-every 20 \
    --checkpoint-every 0 --timeout 60 --train-dir "$dir" "$@"
}
accuracy() { final_accuracy "$pseval" "$1"; }

# --- backup: 3 workers, 2 gradients per step, worker 3 sleeps 200 ms per batch ----------
# The fast workers sleep 10 ms per batch too, so that what the checks count (steps, late
# batches) follows from the sleeps, not from how fast this machine computes: with a 0.5 ms
# step the run would end before the straggler's first batch.
# (Sync runs 60 steps: at the straggler's pace, 200 ms each; the rates are per step.)
common=(--dataset synthetic --steps 120)
train 4 "$scratch/sync-straggler" --dataset synthetic --steps 60 --straggle 1:10,2:10,3:200
train 4 "$scratch/backup-straggler" "${common[@]}" --mode backup --aggregate 2 --straggle 1:10,2:10,3:200
train 3 "$scratch/backup-fast" "${common[@]}" --mode backup --aggregate 2 --straggle 1:10,2:10
rate() { metric "$1" "sum(l['samples_per_s'] for l in lines[1:]) / (len(lines) - 1)"; }
sync_rate=$(rate "$scratch/sync-straggler") backup_rate=$(rate "$scratch/backup-straggler")
fast_rate=$(rate "$scratch/backup-fast")
dropped=$(metric "$scratch/backup-straggler" "last['dropped_total']")
dropped3=$(metric "$scratch/backup-straggler" "last['dropped_by_rank'].get('3', 0)")
# Sync's metrics see through the straggler: its 200 ms per batch are the slowest compute of
# each step (the mean of 3 workers holds a third of it), not communication.
slowest=$(metric "$scratch/sync-straggler" "min(l['slowest_compute_s'] for l in lines[1:])")
mean=$(metric "$scratch/sync-straggler" "max(l['compute_s'] for l in lines[1:])")
comm=$(metric "$scratch/sync-straggler" "max(l['comm_s'] for l in lines[1:])")
echo "     sync+straggler per step: slowest compute $slowest s, mean compute $mean s, comm $comm s"
check "sync: the straggler's batches are the slowest compute (>= 0.2 s)" ge "$slowest" 0.2
check "sync: the mean compute holds a third of them (< 0.15 s)" ge 0.15 "$mean"
check "sync: comm_s leaves the straggler's wait out, not the messages (0 < comm_s < 0.05 s)" \
  awk -v c="$comm" 'BEGIN { exit !(c > 0 && c < 0.05) }'
echo "     backup: samples/s sync+straggler $sync_rate, backup+straggler $backup_rate, the fast two alone $fast_rate;" \
     "dropped $dropped ($dropped3 from rank 3)"
# The straggler finishes about one batch per 200 ms of the run; most of those come too late.
straggler_batches=$(metric "$scratch/backup-straggler" "last['elapsed_s'] / 0.2")
check "backup: late gradients are dropped and counted (>= half the straggler's ~$straggler_batches batches)" \
  ge "$dropped" "$(awk -v n="$straggler_batches" 'BEGIN { print n / 2 }')"
check "backup: the dropped ones are the straggler's" ge "$dropped3" "$((dropped * 9 / 10))"
check "backup: 3x the throughput of sync with the same straggler" ge "$backup_rate" "$(awk -v r="$sync_rate" 'BEGIN{print 3 * r}')"
check "backup: the fast workers' pace (>= 0.7 x the two fast workers alone)" ge "$backup_rate" "$(awk -v r="$fast_rate" 'BEGIN{print 0.7 * r}')"

# --- async, strict: worker 2 sleeps 60 ms per batch; its gradients are always stale ------
# (worker 1 sleeps 5 ms: 400 updates take 2 s or more, about 30 of worker 2's batches.)
train 3 "$scratch/async" --dataset fashion-mnist --steps 400 --mode async --max-staleness 0 --straggle 1:5,2:60
rejected=$(metric "$scratch/async" "last['rejected_total']")
rejected2=$(metric "$scratch/async" "last['rejected_by_rank'].get('2', 0)")
hist=$(metric "$scratch/async" "last['staleness_histogram']")
acc=$(accuracy "$scratch/async")
echo "     async S=0: rejected $rejected ($rejected2 from rank 2), staleness histogram $hist, accuracy $acc%"
check "async S=0: the straggler's stale gradients are rejected" ge "$rejected2" 5
check "async S=0: only fresh gradients applied" test "$hist" = "{'0': 400}"
check "async S=0: converges (Fashion-MNIST test accuracy >= 70%)" ge "$acc" 70
# A bound well above the staleness of worker 2's 30 ms batches against worker 1's 5 ms ones
# (about 6 updates, fewer when computing takes long), so that some stale gradients must be
# applied: the ratio of the sleeps decides it, not the machine's speed.
train 3 "$scratch/async-s20" --dataset synthetic --steps 200 --mode async --max-staleness 20 --straggle 1:5,2:30
check "async S=20: stale gradients within the bound are applied" \
  test "$(metric "$scratch/async-s20" "int(sum(v for k, v in last['staleness_histogram'].items() if k != '0') > 0)")" = 1

# --- allreduce equals sync on identical samples -------------------------------------------
same=(--dataset synthetic --steps 60 --momentum 0.9 --weight-decay 1e-4 --warmup-steps 10 --lr-decay cosine)
train 3 "$scratch/sync" "${same[@]}"
train 2 "$scratch/allreduce" "${same[@]}" --mode allreduce
diff=$(max_weight_diff "$scratch/sync/trained_model.pt" "$scratch/allreduce/trained_model.pt")
echo "     allreduce (2 ranks) vs sync (2 workers): max abs weight difference $diff"
check "allreduce: same weights as sync (<= 1e-5)" ge 1e-5 "$diff"

# --- gossip ---------------------------------------------------------------------------------
gossip=(--dataset fashion-mnist --steps 400 --mode gossip --lr-decay cosine --log-every 40)
train 3 "$scratch/gossip" "${gossip[@]}" --fetch-probability 0.5
train 3 "$scratch/alone" "${gossip[@]}" --fetch-probability 0
d_gossip=$(metric "$scratch/gossip" "last['peer_distance']")
d_peak=$(metric "$scratch/gossip" "max(l['peer_distance'] for l in lines)")
d_alone=$(metric "$scratch/alone" "last['peer_distance']")
reads=$(metric "$scratch/gossip" "sum(l['gossip_reads'] for l in lines)")
acc=$(accuracy "$scratch/gossip")
echo "     gossip: relative distance rank 0 to a peer: final $d_gossip (peak $d_peak), without averaging $d_alone;" \
     "$reads averaging reads by rank 0; accuracy $acc%"
check "gossip: ranks average with peers" ge "$reads" 100
check "gossip: models closer than without averaging (< 1/3)" ge "$(awk -v d="$d_alone" 'BEGIN{print d / 3}')" "$d_gossip"
check "gossip: the distance shrinks toward the end (< 1/2 of its peak)" ge "$(awk -v d="$d_peak" 'BEGIN{print d / 2}')" "$d_gossip"
check "gossip: converges (Fashion-MNIST test accuracy >= 70%)" ge "$acc" 70
check "gossip: rank 0's checkpoint is published" test -f "$scratch/gossip/ckpt/step-00000400.ok"

checks_done
