# Shared by the tools/ scripts and the test scripts: source it (it only defines functions
# and variables; each script sets its own shell options). It holds
#   - the platform shim: the one place where Linux (GNU tools) and macOS (bash 3.2, BSD
#     tools, no timeout/nproc/sha256sum, Homebrew) differ for scripts;
#   - setup_dependencies, build_project, mpirun_flags and print_help.
# Keep to what bash 3.2 accepts (tools/portability lints it): no associative arrays, no
# ${x,,}, no mapfile, and an array that may be empty expands as ${a[@]+"${a[@]}"} under set -u.

PSTRAIN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$PSTRAIN_ROOT/build}

# libopenblas0-pthread: Debian's libtorch calls the libblas.so.3 alternative, which is netlib's
# slow reference BLAS until an optimized one is installed (README, "The BLAS"). Not the
# -serial build: it is not safe to call from two threads at once (wrong results).
DEBIAN_PACKAGES=(g++ cmake ccache libtorch-dev libopenblas0-pthread libopenmpi-dev openmpi-bin libcxxopts-dev libfmt-dev
                 zlib1g-dev libgtest-dev dataset-fashion-mnist python3-torch python3-numpy python3-jinja2 gnuplot-nox
                 clang libclang-rt-14-dev libc++-dev libc++abi-dev shellcheck lsof iproute2)
BREW_PACKAGES=(cmake ccache pytorch open-mpi fmt cxxopts googletest gnuplot)

log() { printf '==> %s\n' "$*" >&2; }

# --- platform shim -----------------------------------------------------------------------

is_macos() { [ "$(uname)" = Darwin ]; }

cpu_count() { getconf _NPROCESSORS_ONLN 2>/dev/null || sysctl -n hw.ncpu; }

# file_size FILE: its size in bytes (GNU stat -c %s, BSD stat -f %z: wc -c is on both).
file_size() { wc -c < "$1" | tr -d ' '; }

# sha256_of FILE...: "DIGEST  FILE" lines (sha256sum is missing before macOS 15; shasum is there).
sha256_of() {
  if command -v sha256sum >/dev/null 2>&1; then sha256sum "$@"; else shasum -a 256 "$@"; fi  # shim
}

# with_timeout SECONDS COMMAND...: COMMAND, stopped (its whole process group: SIGTERM,
# then SIGKILL 2 s later) after SECONDS; exit status 124 then, as GNU timeout's. SIGTERM,
# SIGINT, SIGHUP and SIGUSR1 sent to it go on to COMMAND. GNU timeout where there is one
# (coreutils' gtimeout on macOS), else perl (on every Mac).
with_timeout() {
  if command -v timeout >/dev/null 2>&1; then timeout "$@"; return; fi  # shim
  if command -v gtimeout >/dev/null 2>&1; then gtimeout "$@"; return; fi
  perl -e '
    my $seconds = shift;
    my $child = fork();
    die "with_timeout: fork: $!\n" unless defined $child;
    if ($child == 0) { setpgrp(0, 0); exec { $ARGV[0] } @ARGV or exit 127; }
    for my $signal (qw(TERM INT HUP USR1)) { $SIG{$signal} = sub { kill $signal, $child; }; }
    $SIG{ALRM} = sub {
      kill "TERM", -$child;
      for (1 .. 20) { last if waitpid($child, 1) == $child; select(undef, undef, undef, 0.1); }  # 1: WNOHANG
      kill "KILL", -$child;
      exit 124;
    };
    alarm $seconds;
    while (waitpid($child, 0) != $child) {}
    exit(($? & 127) ? 128 + ($? & 127) : $? >> 8);' "$@"
}

# stop_job PID: SIGTERM to a job started in the background as `with_timeout ... &`: the
# subshell that $! names, and its child (the timeout wrapper, which passes it on).
stop_job() {
  pkill -TERM -P "$1" 2>/dev/null
  kill -TERM "$1" 2>/dev/null
  return 0
}

# now_seconds: seconds since the epoch, to the microsecond (GNU date has +%N, BSD's not).
now_seconds() { perl -MTime::HiRes=time -e 'printf "%.6f\n", time'; }

# rank_pid DIR RANK: the pid of rank RANK of the job training into DIR (its run.json), while
# it runs; nothing otherwise (a zombie does not run).
rank_pid() {
  local pid
  pid=$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["ranks"][int(sys.argv[2])]["pid"])' \
        "$1/run.json" "$2" 2>/dev/null) || return 0
  case "$(ps -o stat= -p "$pid" 2>/dev/null)" in
    ""|Z*) ;;  # gone, or a zombie nobody reaped yet
    *) echo "$pid" ;;
  esac
}
# pids_of NAMES ARG: the pids of running processes whose program is one of NAMES (a regex:
# 'mpirun|mpiexec|orterun|prterun') and one of whose arguments is ARG (ps: Linux and macOS).
pids_of() {
  ps -A -ww -o pid= -o args= | awk -v names="^($1)\$" -v arg="$2" '
    { program = $2; sub(".*/", "", program); if (program !~ names) next
      for (i = 3; i <= NF; i++) if ($i == arg) { print $1; next } }'
}
# The python that has torch (tests, tools): PSTRAIN_PYTHON, else Homebrew's pytorch's python
# on macOS, else Debian's /usr/bin/python3 (package python3-torch).
if [ -z "${PSTRAIN_PYTHON:-}" ]; then
  if is_macos && command -v brew >/dev/null 2>&1; then
    PSTRAIN_PYTHON="$(brew --prefix pytorch 2>/dev/null)/libexec/bin/python"
  else
    PSTRAIN_PYTHON=/usr/bin/python3
  fi
fi
# Where the datasets' folders are (fashion-mnist/, mnist/, ...): pstrain and pseval read it
# too. Debian's packages put them in /usr/share/datasets; macOS's system volume is read-only.
if [ -z "${PSTRAIN_DATA_DIR:-}" ]; then
  if is_macos; then PSTRAIN_DATA_DIR=$HOME/data; else PSTRAIN_DATA_DIR=/usr/share/datasets; fi
fi
export PSTRAIN_PYTHON PSTRAIN_DATA_DIR
# macOS's $TMPDIR (/var/folders/...) is too long for the Unix sockets of Open MPI's session
# directories.
if is_macos; then export TMPDIR=/tmp; fi

# Prints the comment block that heads script $1 (after the shebang): its --help. (BSD sed
# wants the ';' before '}'.)
print_help() { sed -n '2,/^[^#]/{/^#/p;}' "$1"; }

# Flags every local mpirun needs: root is allowed in containers, and a laptop may run more
# ranks than it has cores (Open MPI 5 spells that --map-by :OVERSUBSCRIBE).
mpirun_flags() {
  local flags
  case "$(mpirun --version 2>/dev/null | head -n 1)" in
    *" "[5-9].*) flags="--map-by :OVERSUBSCRIBE" ;;
    *) flags=--oversubscribe ;;
  esac
  [ "$(id -u)" -ne 0 ] || flags="$flags --allow-run-as-root"
  echo "$flags"
}

# gpt2_small PYTHON DIR: the benchmarks' GPT-2-small-sized LM (tools/gpt_model.py: 12 layers
# x 12 heads x 768, vocabulary 50,257, block 128, untied head: 162 M parameters, 650 MB) as
# DIR/gpt.pt, and 2 M random ids as DIR/train.bin (nanoGPT's flat uint16), with PYTHON (torch
# and numpy).
gpt2_small() {
  "$1" "$PSTRAIN_ROOT/tools/gpt_model.py" "$2/gpt.pt" --vocab 50257 --block-size 128 --layers 12 --heads 12 \
    --embd 768 > /dev/null
  "$1" -c "
import numpy as np, sys
np.random.default_rng(0).integers(0, 50257, size=2_000_000, dtype=np.uint16).tofile(sys.argv[1])" "$2/train.bin"
}

# raw_bytes_of RUN_DIR: the bytes that its last step sent and received, uncompressed (metrics.jsonl).
raw_bytes_of() {
  python3 -c "import json,sys; l=json.loads(open(sys.argv[1]).readlines()[-1]); print(l['raw_bytes_sent'], l['raw_bytes_received'])" \
    "$1/metrics.jsonl"
}

# blas_of PSTRAIN: the BLAS that the pstrain binary PSTRAIN computes with, as its --version names it.
blas_of() { "$1" --version 2>&1 | sed -n 's/.*BLAS: \(.*\))$/\1/p'; }

# reference_blas_dir DIR: makes DIR hold a libblas.so.3 that is Debian's reference BLAS, so
# that a program run with LD_LIBRARY_PATH=DIR computes on it, as Debian's alternative would
# make it (the loader looks there first; the system stays as it is). Fails where there is
# no such BLAS (macOS, other distributions).
reference_blas_dir() {
  local candidate
  for candidate in /usr/lib/*/blas/libblas.so.3; do  # linux-only
    [ -e "$candidate" ] || continue
    mkdir -p "$1" && ln -sf "$candidate" "$1/libblas.so.3" && return 0
  done
  return 1
}

# --- set-up and build --------------------------------------------------------------------

# Installs the build and test dependencies that are missing (Debian/Ubuntu: apt-get, as
# root or through sudo; macOS: Homebrew, and Fashion-MNIST into $PSTRAIN_DATA_DIR). Does
# nothing when all are present.
setup_dependencies() {
  local missing=() p
  if is_macos; then
    command -v brew >/dev/null || { log "install Homebrew first: https://brew.sh"; exit 1; }
    for p in "${BREW_PACKAGES[@]}"; do brew list --formula "$p" >/dev/null 2>&1 || missing+=("$p"); done
    if [ ${#missing[@]} -gt 0 ]; then log "brew install ${missing[*]}"; brew install ${missing[@]+"${missing[@]}"}; fi
    "$PSTRAIN_ROOT/tools/get-data" fashion-mnist "$PSTRAIN_DATA_DIR/fashion-mnist" >&2
    return
  fi
  for p in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  log "installing ${missing[*]}"
  ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get update -q
  ${sudo[@]+"${sudo[@]}"} env DEBIAN_FRONTEND=noninteractive apt-get install -y -q ${missing[@]+"${missing[@]}"}
}

# Configures (Release, tests on, ccache when present) and builds. `--target NAME` (any
# number of them) builds only those targets and what they need, else everything; other
# arguments go to cmake's configure step.
build_project() {
  local extra=() targets=()
  while [ $# -gt 0 ]; do
    if [ "$1" = --target ]; then targets+=(--target "$2"); shift 2; else extra+=("$1"); shift; fi
  done
  if is_macos; then
    extra+=(-DCMAKE_PREFIX_PATH="$(brew --prefix pytorch)")
  fi
  export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
  log "building ${targets[*]:-everything} in $BUILD_DIR"
  cmake -S "$PSTRAIN_ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON ${extra[@]+"${extra[@]}"} >/dev/null
  cmake --build "$BUILD_DIR" -j"$(cpu_count)" ${targets[@]+"${targets[@]}"}
}
