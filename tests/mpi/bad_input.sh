#!/usr/bin/env bash
# Bad input to a real mpirun job: each case must end non-zero, quickly, with a message that
# says what is wrong. The default tier runs one case of each kind (a data file on the
# workers, a flag, the world, ranks that disagree); --all, every case.
# Usage: bad_input.sh PSTRAIN PSEVAL MPIRUN SCRATCH
set -u
source "$(dirname "$0")/../common/checks.sh"
pstrain=$1 mpirun=$3 scratch=$4
rm -rf "$scratch" && mkdir -p "$scratch"

# expect NAME PATTERN -- COMMAND...: COMMAND must exit non-zero within 60 s, its output
# matching PATTERN (grep -E).
expect() {
  local name=$1 pattern=$2
  shift 3
  local out rc
  out=$(with_timeout 60 "$@" 2>&1)
  rc=$?
  if [ $rc -eq 124 ]; then
    echo "FAIL $name: hung (killed after 60 s)"; failures=$((failures + 1))
  elif [ $rc -eq 0 ]; then
    echo "FAIL $name: exit code 0"; echo "$out" | tail -5; failures=$((failures + 1))
  elif ! grep -qE -- "$pattern" <<<"$out"; then
    echo "FAIL $name: exit $rc, output does not match /$pattern/:"; echo "$out" | tail -8; failures=$((failures + 1))
  else
    echo "ok   $name: exit $rc: $(grep -E -m1 -- "$pattern" <<<"$out")"; passed=$((passed + 1))
  fi
}

run3=("$mpirun" -np 3 "$pstrain" --train-dir "$scratch/run" --overwrite --steps 5)

# A valid tiny dataset, then broken copies of it.
data="$scratch/data"
mkdir -p "$data"
python3 - "$data" <<'PY'
import gzip, os, struct, sys
d = sys.argv[1]
n = 64
def write(name, magic, dims, payload):
    with gzip.open(os.path.join(d, name), "wb") as f:
        f.write(struct.pack(">I", magic) + b"".join(struct.pack(">I", x) for x in dims) + payload)
for prefix in ("train", "t10k"):
    write(prefix + "-images-idx3-ubyte.gz", 0x803, (n, 28, 28), bytes(i % 256 for i in range(n * 784)))
    write(prefix + "-labels-idx1-ubyte.gz", 0x801, (n,), bytes(i % 10 for i in range(n)))
PY
for kind in missing truncated garbled; do
  mkdir -p "$scratch/$kind" && cp "$data"/* "$scratch/$kind/"
done
rm "$scratch/missing/train-labels-idx1-ubyte.gz"
head -c 300 "$data/train-images-idx3-ubyte.gz" > "$scratch/truncated/train-images-idx3-ubyte.gz"
printf 'this is not an idx file at all' | gzip > "$scratch/garbled/train-images-idx3-ubyte.gz"

if ! out=$(with_timeout 120 "${run3[@]}" --data-dir "$data" --batch-size 8 2>&1); then
  echo "FAIL the valid tiny dataset did not train:"; echo "$out" | tail -5; failures=$((failures + 1))
else
  echo "ok   valid tiny dataset trains"; passed=$((passed + 1))
fi
expect "missing IDX file" "rank [12]: .*train-labels-idx1-ubyte\{\.gz,\}: not found" -- "${run3[@]}" --data-dir "$scratch/missing"
expect "wrong --model" "unknown model 'lenet7'" -- "${run3[@]}" --model lenet7
expect "one rank, no worker" "at least one worker" -- "$mpirun" -np 1 "$pstrain" --train-dir "$scratch/run" --overwrite
expect "ranks disagree on lr" "ranks disagree on 'lr': '0.01' on rank 0 but '0.02' on rank 2" -- \
  "$mpirun" -np 2 "$pstrain" --train-dir "$scratch/run" --overwrite --dataset synthetic --lr 0.01 : \
            -np 1 "$pstrain" --train-dir "$scratch/run" --overwrite --dataset synthetic --lr 0.02
expect "ranks disagree on model" "ranks disagree on 'model'" -- \
  "$mpirun" -np 2 "$pstrain" --train-dir "$scratch/run" --overwrite --dataset synthetic --model lenet : \
            -np 1 "$pstrain" --train-dir "$scratch/run" --overwrite --dataset synthetic --model mlp

brief_ends_here

expect "truncated IDX file" "rank [12]: .*train-images-idx3-ubyte.gz: (truncated|corrupt)" -- "${run3[@]}" --data-dir "$scratch/truncated"
expect "garbled IDX file" "rank [12]: .*train-images-idx3-ubyte.gz: not an IDX file" -- "${run3[@]}" --data-dir "$scratch/garbled"
expect "no data dir" "not found" -- "${run3[@]}" --data-dir "$scratch/nowhere"
expect "batch size 0" "--batch-size must be in \\[1, 1000000\\]" -- "${run3[@]}" --batch-size 0
expect "negative lr" "--lr must be a positive number" -- "${run3[@]}" --lr -0.1
mkdir -p "$scratch/old" && echo '{}' > "$scratch/old/run.json"
expect "train dir holds an earlier run" "already holds a run" -- \
  "$mpirun" -np 3 "$pstrain" --train-dir "$scratch/old" --dataset synthetic --steps 2
expect "unwritable train dir" "rank 0: .*(cannot create|Permission denied|Read-only|Not a directory)" -- \
  "$mpirun" -np 3 "$pstrain" --train-dir /dev/null/pstrain-run --dataset synthetic --steps 2
expect "a batch larger than a shard" "--batch-size 1000 is more than the 300 sample\(s\) of each of the 2 virtual shard" -- \
  "${run3[@]}" --dataset synthetic --synthetic-size 600 --batch-size 1000
expect "65536 virtual shards of a big batch, in a dry run" "--batch-size 1000000 is more than" -- \
  "$mpirun" -np 3 "$pstrain" --train-dir "$scratch/run" --overwrite --dry-run --virtual-shards 65536 --batch-size 1000000
if ! out=$(with_timeout 120 "${run3[@]}" --dataset "$data" --batch-size 8 2>&1); then
  echo "FAIL a folder of IDX files as --dataset did not train:"; echo "$out" | tail -5; failures=$((failures + 1))
else
  echo "ok   a folder of IDX files as --dataset trains (recognised by its contents)"; passed=$((passed + 1))
fi
mkdir -p "$scratch/no-format" && echo "some notes" > "$scratch/no-format/notes.txt"
expect "a folder no format reads as --dataset" "no-format: a folder that holds no format's files: give a built-in name" -- \
  "${run3[@]}" --dataset "$scratch/no-format"
expect "a file no format reads as --dataset" "notes.txt: a file that no format reads: .*the path of" -- \
  "${run3[@]}" --dataset "$scratch/no-format/notes.txt"
# A run file that is a symbolic link is refused, as a configuration error: exit 2, which
# pstrain-run does not retry.
mkdir -p "$scratch/linked" && chmod 700 "$scratch/linked" && ln -sf "$scratch/elsewhere.jsonl" "$scratch/linked/metrics.jsonl"
out=$(with_timeout 60 "$mpirun" -np 3 "$pstrain" --train-dir "$scratch/linked" --dataset synthetic --steps 2 2>&1); rc=$?
check "metrics.jsonl a symbolic link: exit 2, named (exit $rc)" \
  bash -c "[ $rc -eq 2 ] && grep -q 'metrics.jsonl: a symbolic link' <<<\"\$1\" && [ ! -e '$scratch/elsewhere.jsonl' ]" _ "$out"

checks_done
