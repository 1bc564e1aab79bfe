#!/usr/bin/env python3
"""The lints of tools/portability: what a Linux build and test run cannot see but a Mac
would trip over (README, "macOS"). Each finding is printed as FILE:LINE: message; the exit
status is 1 when there is any.

  portability_lint.py cpp ROOT       C++ under runtime/ launcher/ models/ data/ tests/ tools/
  portability_lint.py scripts ROOT   the shell scripts of tools/ and tests/

cpp:
  - a Linux-only call (pipe2, /proc, epoll, ...) outside an `#if` on __linux__ (or
    __GLIBC__) that has an #else/#elif beside it: the portable path;
  - fmt::join, fmt::format of ranges, without <fmt/ranges.h> (fmt 11 moved them there).
scripts (bash 3.2 and BSD tools, as macOS ships them):
  - bash 4 syntax (associative arrays, ${x,,}, mapfile, |&, wait -n, negative indices, ...);
  - an array that starts empty (`a=()`) expanded as "${a[@]}": bash 3.2 calls that unbound
    under `set -u` (write ${a[@]+"${a[@]}"});
  - GNU-only commands and options (timeout, nproc, sha256sum, stat -c, sed -i, date -d,
    grep -P, truncate, ...): tools/common.sh has the portable way;
  - sed's `{...p}` without ';' before '}' (BSD sed rejects it).
A script that only runs on Linux (network namespaces) says `# portability: linux-only` in
its head; a single line that only runs there ends with `# linux-only`, and the shim in
tools/common.sh marks the GNU tools it wraps with `# shim`.
"""
import os
import re
import sys

CPP_DIRS = ("runtime", "launcher", "models", "data", "tests", "tools")
SCRIPT_DIRS = ("tools", "tests")

# Calls, headers and paths that exist on Linux only.
LINUX_ONLY = re.compile(
    r"\b(pipe2|epoll_\w+|accept4|SOCK_CLOEXEC|SOCK_NONBLOCK|MSG_NOSIGNAL|prctl|eventfd|timerfd_\w+|signalfd|"
    r"sendmmsg|recvmmsg|O_PATH|fallocate|posix_fadvise|sync_file_range|CLOCK_BOOTTIME|getauxval|gettid|"
    r"SO_BINDTODEVICE|mallopt|malloc_trim|M_MMAP_THRESHOLD|M_TRIM_THRESHOLD|MAP_POPULATE|memfd_create|"
    r"sched_getcpu|pthread_setaffinity_np|sched_setaffinity)\b"
    r"|\"/proc/|<malloc\.h>|<sys/epoll\.h>|<sys/prctl\.h>|<linux/")
GUARD = re.compile(r"__linux__|__GLIBC__")


def strip_comment(line):
    """The line without a // comment (strings kept: a "/proc/..." path is code)."""
    out, quote, i = [], None, 0
    while i < len(line):
        c = line[i]
        if quote:
            out.append(c)
            if c == "\\" and i + 1 < len(line):
                out.append(line[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c in "\"'":
            quote = c
            out.append(c)
        elif line.startswith("//", i):
            break
        else:
            out.append(c)
        i += 1
    return "".join(out)


def lint_cpp_file(path, text):
    findings = []
    lines = text.split("\n")
    # Each open #if: [its condition mentions __linux__/__GLIBC__, it has an #else/#elif,
    # the findings inside it waiting for that answer].
    stack = []
    in_block_comment = False
    for number, raw in enumerate(lines, 1):
        line = raw
        if in_block_comment:
            if "*/" not in line:
                continue
            line = line[line.index("*/") + 2:]
            in_block_comment = False
        while "/*" in line:
            start = line.index("/*")
            end = line.find("*/", start + 2)
            if end < 0:
                line = line[:start]
                in_block_comment = True
                break
            line = line[:start] + line[end + 2:]
        code = strip_comment(line).strip()
        directive = re.match(r"#\s*(if|ifdef|ifndef|elif|else|endif)\b(.*)", code)
        if directive:
            kind, rest = directive.groups()
            if kind in ("if", "ifdef", "ifndef"):
                stack.append([bool(GUARD.search(rest)), False, []])
            elif kind in ("elif", "else") and stack:
                stack[-1][1] = True
                if GUARD.search(rest):
                    stack[-1][0] = True
            elif kind == "endif" and stack:
                guarded, has_else, pending = stack.pop()
                if not (guarded and has_else):
                    findings += pending
            continue
        match = LINUX_ONLY.search(code)
        if not match:
            continue
        finding = (f"{path}:{number}: Linux-only '{match.group(0).strip(chr(34))}' outside an #if __linux__ block "
                   f"with a portable #else beside it (runtime/Portable.h is the place for such calls)")
        guarded_levels = [level for level in stack if level[0]]
        if guarded_levels:
            guarded_levels[-1][2].append(finding)  # judged at its #endif: was there an #else?
        else:
            findings.append(finding)
    if re.search(r"\bfmt::join\b", text) and "<fmt/ranges.h>" not in text:
        number = next(i for i, l in enumerate(lines, 1) if "fmt::join" in l)
        findings.append(f"{path}:{number}: fmt::join needs #include <fmt/ranges.h> (fmt 11 and newer: Homebrew's)")
    return findings


# --- scripts -----------------------------------------------------------------------------

BASH4 = [
    (re.compile(r"\b(declare|local|typeset)\s+-[a-zA-Z]*A"), "associative arrays (bash 4)"),
    (re.compile(r"\b(declare|local|typeset)\s+-[a-zA-Z]*[ng]\b"), "declare -n / -g (bash 4.2+)"),
    (re.compile(r"\b(mapfile|readarray|coproc)\b"), "mapfile/readarray/coproc (bash 4)"),
    (re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*(\[[^]]*\])?(,,?|\^\^?)[^}]*\}"), "case conversion ${x,,} (bash 4)"),
    (re.compile(r"&>>|\|&"), "&>> and |& (bash 4)"),
    (re.compile(r"\bwait\s+-n\b"), "wait -n (bash 4.3)"),
    (re.compile(r"\[\[\s+-v\s"), "[[ -v ]] (bash 4.2)"),
    (re.compile(r";;&|;&\s*$"), "case fall-through ;& ;;& (bash 4)"),
    (re.compile(r"\$\{[A-Za-z_][A-Za-z0-9_]*\[-[0-9]+\]\}"), "negative array index (bash 4.3)"),
    (re.compile(r"\bEPOCH(SECONDS|REALTIME)\b"), "$EPOCHSECONDS (bash 5)"),
    (re.compile(r"shopt\s+-s\s+globstar"), "globstar (bash 4)"),
    (re.compile(r"printf\s+(-v\s+\w+\s+)?['\"][^'\"]*%\([^)]*\)T"), "printf %(...)T (bash 4.2)"),
    (re.compile(r"\{[0-9]+\.\.[0-9]+\.\.[0-9]+\}"), "{a..b..step} (bash 4)"),
]

GNU_ONLY = [
    (re.compile(r"(?<![-\w])(g?timeout)\s+(-[a-z-]+\s+)*[0-9]"), "timeout is GNU's: with_timeout (tools/common.sh)"),
    (re.compile(r"\bnproc\b"), "nproc is GNU's: cpu_count (tools/common.sh)"),
    (re.compile(r"\bsha256sum\b"), "sha256sum is missing before macOS 15: sha256_of (tools/common.sh)"),
    (re.compile(r"\bstat\s+(-c|--)"), "stat -c is GNU's: file_size (tools/common.sh)"),
    (re.compile(r"\bsed\s+(-[a-zA-Z]*i\b|--in-place)"), "sed -i differs between GNU and BSD: write a new file"),
    (re.compile(r"\bdate\s+(-d|--date)\b"), "date -d is GNU's"),
    (re.compile(r"\bdate\b[^|;]*\+[^ ]*%N"), "date +%N is GNU's"),
    (re.compile(r"\bgrep\s+(-[a-zA-Z]*P|--perl)"), "grep -P is GNU's: grep -E"),
    (re.compile(r"(^|[;&|(]|\$\(|\bthen|\bdo)\s*truncate\s"), "truncate is GNU's (macOS has none)"),
    (re.compile(r"\btac\b"), "tac is GNU's: tail -r on BSD; reverse in awk"),
    (re.compile(r"\breadlink\s+-f\b"), "readlink -f needs macOS 12.3: cd \"$(dirname ...)\" && pwd"),
    (re.compile(r"\bxargs\s+(-[a-zA-Z]*r\b|--no-run-if-empty)"), "xargs -r is GNU's"),
    (re.compile(r"\bfind\b.*\s-printf\b"), "find -printf is GNU's"),
    (re.compile(r"\bhead\s+-[nc]\s+-[0-9]"), "head with a negative count is GNU's"),
    (re.compile(r"\bbase64\s+-w\b"), "base64 -w is GNU's"),
    (re.compile(r"\bwc\s+-L\b"), "wc -L is GNU's"),
    (re.compile(r"\bdu\s+-[a-zA-Z]*b\b"), "du -b is GNU's"),
    (re.compile(r"\bmktemp\s+--"), "mktemp's long options are GNU's"),
    (re.compile(r"/proc/"), "/proc is Linux's"),
    (re.compile(r"\bdd\b.*status=none"), "dd status=none is GNU's (BSD dd: 2>/dev/null)"),
]
SED_BRACE = re.compile(r"\bsed\b.*\{[^{};]*[a-z]\}")


def script_files(root):
    for top in SCRIPT_DIRS:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = [d for d in dirs if d not in ("corpus", "__pycache__")]
            for name in sorted(files):
                path = os.path.join(folder, name)
                try:
                    with open(path, encoding="utf-8") as f:
                        text = f.read()
                except (UnicodeDecodeError, OSError):
                    continue
                first = text.split("\n", 1)[0]
                if name.endswith(".sh") or (first.startswith("#!") and "bash" in first):
                    yield path, text


def heredoc_lines(lines):
    """Indices of the lines inside here-documents (other languages: python, config files)."""
    inside, end = set(), None
    for i, line in enumerate(lines):
        if end is not None:
            if line.strip() == end:
                end = None
            else:
                inside.add(i)
            continue
        m = re.search(r"<<-?\s*['\"]?([A-Za-z_]+)['\"]?", line)
        if m and not re.search(r"<<<", line):
            end = m.group(1)
    return inside


def lint_script(path, text):
    findings = []
    lines = text.split("\n")
    linux_only = "# portability: linux-only" in "\n".join(lines[:20])
    skip = heredoc_lines(lines)
    empty_arrays = set(re.findall(r"(?:^|[\s;(])(?:local\s+)?([A-Za-z_][A-Za-z0-9_]*)=\(\)", text))
    empty_arrays |= {name for decl in re.findall(r"local\s+([^;\n]*)", text)
                     for name in re.findall(r"([A-Za-z_][A-Za-z0-9_]*)=\(\)", decl)}
    for i, line in enumerate(lines):
        if i in skip:
            continue
        code = line.split(" #", 1)[0] if not line.lstrip().startswith("#") else ""
        if not code.strip():
            continue
        number = i + 1
        for pattern, why in BASH4:
            if pattern.search(code):
                findings.append(f"{path}:{number}: {why}; macOS's /bin/bash is 3.2")
        for name in empty_arrays:
            for m in re.finditer(r"\"\$\{" + name + r"\[[@*]\]\}\"", code):
                before = code[:m.start()]
                if not before.endswith("${" + name + "[@]+"):
                    findings.append(f"{path}:{number}: \"${{{name}[@]}}\" of an array that starts empty is unbound "
                                    f"under set -u in bash 3.2: ${{{name}[@]+\"${{{name}[@]}}\"}}")
        shim = path == os.path.join("tools", "common.sh") and line.rstrip().endswith("# shim")
        if linux_only or shim or line.rstrip().endswith("# linux-only"):
            continue
        for pattern, why in GNU_ONLY:
            if pattern.search(code):
                findings.append(f"{path}:{number}: {why}")
        if SED_BRACE.search(code):
            findings.append(f"{path}:{number}: BSD sed needs ';' before '}}' in a sed block")
    return findings


def main():
    if len(sys.argv) != 3 or sys.argv[1] not in ("cpp", "scripts"):
        print(__doc__.strip())
        return 2
    kind, root = sys.argv[1], sys.argv[2]
    findings = []
    if kind == "cpp":
        for top in CPP_DIRS:
            for folder, dirs, files in os.walk(os.path.join(root, top)):
                dirs[:] = [d for d in dirs if d != "corpus"]
                for name in sorted(files):
                    if name.endswith((".cpp", ".h")):
                        path = os.path.join(folder, name)
                        with open(path, encoding="utf-8") as f:
                            findings += lint_cpp_file(os.path.relpath(path, root), f.read())
    else:
        for path, text in script_files(root):
            findings += lint_script(os.path.relpath(path, root), text)
    for finding in findings:
        print(finding)
    print(f"portability lint ({kind}): {len(findings)} finding(s)")
    return 1 if findings else 0


if __name__ == "__main__":
    sys.exit(main())
