# Helpers of the test scripts; source it. Each check prints "ok   NAME" or "FAIL NAME";
# checks_done prints the count and fails when any check did. It brings tools/common.sh's
# platform shim (with_timeout, file_size, sha256_of, PSTRAIN_PYTHON, PSTRAIN_DATA_DIR).
source "$(cd "$(dirname "${BASH_SOURCE[0]}")/../../tools" && pwd)/common.sh"
failures=0 passed=0
check() {  # check NAME COMMAND...
  local name=$1; shift
  if "$@"; then echo "ok   $name"; passed=$((passed + 1)); else echo "FAIL $name"; failures=$((failures + 1)); fi
}
checks_done() {
  echo "$passed passed, $failures failed"
  [ "$failures" -eq 0 ]
}
# brief_ends_here: where a long script's first proof of each of its features ends. In the
# default tier (PSTRAIN_TEST_BRIEF=1: tools/test without --all) the script stops here, with
# its checks so far; in the full tier it goes on.
brief_ends_here() {
  [ -n "${PSTRAIN_TEST_BRIEF:-}" ] || return 0
  echo "     (the default tier stops here: tools/test --all runs the rest)"
  checks_done
  exit
}
# run_logged DIR COMMAND...: runs COMMAND with its output in DIR.log; on failure prints the
# exit status and the log's last lines. Returns COMMAND's status.
run_logged() {
  local dir=$1; shift
  "$@" > "$dir.log" 2>&1
  local rc=$?
  [ $rc -eq 0 ] || { echo "     $dir failed ($rc):"; tail -5 "$dir.log" | sed 's/^/     /'; }
  return $rc
}
# refused NAME PATTERN COMMAND...: a check that COMMAND exits non-zero, and not by a timeout's
# 124, saying PATTERN (an extended regex); prints the line that says it, or the output's end.
refused() {
  local name=$1 pattern=$2; shift 2
  local out rc
  out=$(mktemp)
  "$@" > "$out" 2>&1
  rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -qE -- "$pattern" "$out"; then
    echo "ok   $name: $(grep -E -- "$pattern" "$out" | head -1 | cut -c1-220)"; passed=$((passed + 1))
  else
    echo "FAIL $name (exit $rc):"; tail -5 "$out" | sed 's/^/     /'; failures=$((failures + 1))
  fi
  rm -f "$out"
}
# job_refused NAME PATTERN [pstrain flags...]: a job of $pstrain under $mpirun (the caller's
# variables), 5 steps into $scratch/bad-run, exits non-zero within 60 s saying PATTERN. Two
# ranks, a server and one worker: each refusal checked so is the server's or a worker's,
# and a third rank costs every launch a second more on 2 cores.
# shellcheck disable=SC2154  # pstrain, mpirun and scratch are the sourcing script's
job_refused() {
  refused "$1" "$2" with_timeout 60 "$mpirun" -np 2 "$pstrain" --device cpu --threads 1 --timeout 60 --steps 5 \
    --train-dir "$scratch/bad-run" "${@:3}"
}
# ge A B: A >= B, both numbers (an empty or non-numeric one, a measurement that failed, is false).
ge() {
  awk -v a="$1" -v b="$2" 'BEGIN { n = "^[-+]?([0-9]+[.]?[0-9]*|[.][0-9]+)([eE][-+]?[0-9]+)?$"
                                   exit !(a ~ n && b ~ n && a + 0 >= b + 0) }'
}
has() { grep -qE -- "$2" "$1"; }  # has FILE PATTERN: a line of FILE matches PATTERN (grep -E)
# sample_text FILE: English prose for the language-model tests: the GPL, or where a system
# has no copy, 3000 random sentences of its words.
sample_text() {
  if [ -r /usr/share/common-licenses/GPL-3 ]; then cp /usr/share/common-licenses/GPL-3 "$1"
  else python3 -c "
import random; r = random.Random(1); w = 'the of a license to work you any program or this software source code'.split()
print('\n'.join(' '.join(r.choice(w) for _ in range(12)) + '.' for _ in range(3000)))" > "$1"
  fi
}
# metric DIR EXPR: a Python expression over `lines` (DIR/metrics.jsonl as dicts) and `last`.
metric() {
  python3 - "$1/metrics.jsonl" "$2" <<'PY'
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
last = lines[-1]
print(eval(sys.argv[2]))
PY
}
# final_accuracy PSEVAL DIR: pseval's test accuracy of DIR's last checkpoint, in percent (0
# when pseval fails, with its output on stderr). pseval sees a copy of that checkpoint alone
# (in DIR.last), not the earlier ones it would evaluate too.
final_accuracy() {
  local last=$2.last ok
  ok=$(ls "$2"/ckpt/step-*.ok 2> /dev/null | tail -1)  # zero-padded steps: the last in name order
  [ -n "$ok" ] || { echo "no checkpoint in $2/ckpt" >&2; echo 0; return; }
  rm -rf "$last" && mkdir -p "$last/ckpt" && cp "${ok%.ok}.pt" "$ok" "$last/ckpt/"
  "$1" --train-dir "$last" > "$2.eval.log" 2>&1 || { cat "$2.eval.log" >&2; echo 0; return; }
  tail -1 "$last/eval.csv" | cut -d, -f5 | awk '{printf "%.2f", $1 * 100}'
}
# max_weight_diff A.pt B.pt: the largest |a - b| over the tensors of two state dicts (PyTorch).
max_weight_diff() {
  "$PSTRAIN_PYTHON" - "$1" "$2" <<'PY'
import sys, torch
a, b = torch.load(sys.argv[1], weights_only=True), torch.load(sys.argv[2], weights_only=True)
assert a.keys() == b.keys(), "different tensors"
print(max((a[k] - b[k]).abs().max().item() for k in a))
PY
}
# wide_mlp FILE HIDDEN: a 784-HIDDEN-10 perceptron as a TorchScript file (PyTorch)
wide_mlp() {
  "$PSTRAIN_PYTHON" - "$1" "$2" <<'PY'
import sys, torch
class Wide(torch.nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(784, hidden), torch.nn.Linear(hidden, 10)
    def forward(self, x):
        return torch.log_softmax(self.fc2(torch.relu(self.fc1(x.flatten(1)))), 1)
torch.manual_seed(0)  # traced: scripting needs the class's source in a file
torch.jit.trace(Wide(int(sys.argv[2])), torch.zeros(2, 1, 28, 28)).save(sys.argv[1])
PY
}
