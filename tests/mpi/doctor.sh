#!/usr/bin/env bash
# pstrain --doctor: the preflight names the rank and host of each problem, exits 2 and
# trains nothing; exits 0 when all is well. Ranks started in different folders (mpirun -wdir)
# read different copies under one relative path, as hosts would.
#   1. all well: every rank's copy of Fashion-MNIST the same;
#   2. one rank's copy with one label changed (still a valid file: the dry run passes);
#   3. one rank without the data set;
#   4. a train dir on a read-only file system, and one without room for 3 checkpoints.
# Usage: doctor.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -uo pipefail
pstrain=$1 mpirun=$3 scratch=$4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$scratch" && mkdir -p "$scratch" && cd "$scratch" || exit 1
source "$here/../common/checks.sh"
data=$PSTRAIN_DATA_DIR/fashion-mnist
mkdir -p same other none
cp -r "$data" same/fm && cp -r "$data" other/fm
# One label of the training set changed to another class: a valid file, another data set.
python3 - other/fm/train-labels-idx1-ubyte.gz <<'PY'
import gzip, sys
raw = bytearray(gzip.open(sys.argv[1]).read())
raw[8 + 1234] = (raw[8 + 1234] + 1) % 10
gzip.open(sys.argv[1], "wb").write(bytes(raw))
PY

# doctor LOG FOLDER-OF-RANK-3 [flags...]: ranks 0-2 in same/, rank 3 in FOLDER; its exit status.
doctor() {
  local log=$1 last=$2; shift 2
  local flags=(--doctor --threads 1 --dataset fashion-mnist --data-dir fm "$@")
  with_timeout 120 "$mpirun" -np 3 -wdir "$scratch/same" "$pstrain" "${flags[@]}" \
    : -np 1 -wdir "$scratch/$last" "$pstrain" "${flags[@]}" > "$log" 2>&1
}
trained_nothing() { ! [ -e "$1/metrics.jsonl" ] && ! [ -e "$1/ckpt" ] && ! [ -e "$1/run.json" ]; }

doctor all-well.log same --train-dir "$scratch/run1"
rc=$?
sed 's/^/     /' all-well.log
check "all well: exit 0, every file compared" \
  bash -c "[ $rc -eq 0 ] && grep -q 'all well' all-well.log && grep -q 'files compared: 4 ' all-well.log"
check "all well: it says the host's --memory and why" has all-well.log "memory: host .*: fast \(--memory auto: .* within half of its"

doctor changed.log other --train-dir "$scratch/run2"
rc=$?
grep -E 'problem|doctor:' changed.log | sed 's/^/     /'
check "one label changed on rank 3: exit 2" test $rc -eq 2
check "... the problem names rank 3, its host and the file" \
  grep -qE "problem: rank 3 \([^)]+\): fm/train-labels-idx1-ubyte.gz differs from the other ranks' copy .*rsync" changed.log
check "... one problem only" test "$(grep -c 'problem:' changed.log)" -eq 1
check "... and trained nothing" trained_nothing "$scratch/run2"
with_timeout 120 "$mpirun" -np 3 -wdir "$scratch/same" "$pstrain" --dry-run --threads 1 --dataset fashion-mnist \
  --data-dir fm --train-dir "$scratch/run3" : -np 1 -wdir "$scratch/other" "$pstrain" --dry-run --threads 1 \
  --dataset fashion-mnist --data-dir fm --train-dir "$scratch/run3" > dry.log 2>&1
check "... which the dry run cannot tell (it passes)" test $? -eq 0

doctor missing.log none --train-dir "$scratch/run4"
rc=$?
check "no data set on rank 3: exit 2, named" \
  bash -c "[ $rc -eq 2 ] && grep -qE 'problem: rank 3 \([^)]+\): .*fm' missing.log"

if mkdir -p ro small && mount -t tmpfs -o ro,size=1m tmpfs ro 2> /dev/null; then
  doctor readonly.log same --train-dir "$scratch/ro/run"
  rc=$?
  grep 'problem' readonly.log | sed 's/^/     /'
  check "train dir on a read-only file system: exit 2, rank 0 named" \
    bash -c "[ $rc -eq 2 ] && grep -qE 'problem: rank 0 \([^)]+\): --train-dir .*/ro/run: cannot write in .*Read-only file system' readonly.log"
  umount ro
  mount -t tmpfs -o size=1m tmpfs small
  doctor small.log same --train-dir "$scratch/small/run" --model resnet18 --dataset synthetic-cifar
  rc=$?
  grep 'problem' small.log | sed 's/^/     /'
  check "train dir with 1 MiB free, resnet18: exit 2, no room for 3 checkpoints" \
    bash -c "[ $rc -eq 2 ] && grep -qE 'problem: rank 0 \([^)]+\): --train-dir .*/small/run: .* MiB free .*3 checkpoints need' small.log"
  umount small
else
  echo "SKIP the train dir checks: mounting a tmpfs needs root"
fi
checks_done
