# Shared by the tools/ scripts: installs what is missing, configures and builds.
# Source it; it defines setup_dependencies, build_project, mpirun_flags and print_help.
set -euo pipefail

PSTRAIN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=${BUILD_DIR:-$PSTRAIN_ROOT/build}

DEBIAN_PACKAGES=(g++ cmake ccache libtorch-dev libopenmpi-dev openmpi-bin libcxxopts-dev libfmt-dev
                 zlib1g-dev libgtest-dev dataset-fashion-mnist python3-torch python3-numpy gnuplot-nox
                 clang libclang-rt-14-dev iproute2)
BREW_PACKAGES=(cmake ccache pytorch open-mpi fmt cxxopts googletest gnuplot)

log() { printf '==> %s\n' "$*" >&2; }

# Prints the comment block that heads script $1 (after the shebang): its --help.
print_help() { sed -n '2,/^[^#]/{/^#/p}' "$1"; }

# Installs the build and test dependencies that are missing (Debian/Ubuntu: apt-get, as
# root or through sudo; macOS: Homebrew). Does nothing when all are present.
setup_dependencies() {
  if [ "$(uname)" = Darwin ]; then
    command -v brew >/dev/null || { log "install Homebrew first: https://brew.sh"; exit 1; }
    local missing=()
    for p in "${BREW_PACKAGES[@]}"; do brew list --formula "$p" >/dev/null 2>&1 || missing+=("$p"); done
    [ ${#missing[@]} -eq 0 ] || { log "brew install ${missing[*]}"; brew install "${missing[@]}"; }
    return
  fi
  local missing=()
  for p in "${DEBIAN_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return
  local sudo=()
  [ "$(id -u)" -eq 0 ] || sudo=(sudo)
  log "installing ${missing[*]}"
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q
  "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
}

# Configures (Release, tests on, ccache when present) and builds. `--target NAME` (any
# number of them) builds only those targets and what they need, else everything; other
# arguments go to cmake's configure step.
build_project() {
  local jobs
  jobs=$(getconf _NPROCESSORS_ONLN 2>/dev/null || sysctl -n hw.ncpu)
  local extra=() targets=()
  while [ $# -gt 0 ]; do
    if [ "$1" = --target ]; then targets+=(--target "$2"); shift 2; else extra+=("$1"); shift; fi
  done
  if [ "$(uname)" = Darwin ]; then
    extra+=(-DCMAKE_PREFIX_PATH="$(brew --prefix pytorch)")
  fi
  export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
  log "building ${targets[*]:-everything} in $BUILD_DIR"
  cmake -S "$PSTRAIN_ROOT" -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON ${extra[@]+"${extra[@]}"} >/dev/null
  cmake --build "$BUILD_DIR" -j"$jobs" ${targets[@]+"${targets[@]}"}
}

# Flags every local mpirun needs: root is allowed in containers, and a laptop may run more
# ranks than it has cores.
mpirun_flags() {
  local flags=(--oversubscribe)
  [ "$(id -u)" -ne 0 ] || flags+=(--allow-run-as-root)
  echo "${flags[@]}"
}
