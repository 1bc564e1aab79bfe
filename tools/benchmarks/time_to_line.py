"""Times a command from its start to the first line of its output that matches a regular
expression, and to its end (tools/bench: mpirun to pstrain's first step).
    python3 time_to_line.py REGEX COMMAND [ARG...]
prints "seconds_to_line seconds_to_end" (the first is -1 when no line matched); exits with
the command's status. The command's output goes to stderr."""
import re
import subprocess
import sys
import time

pattern, command = re.compile(sys.argv[1]), sys.argv[2:]
start = time.perf_counter()
to_line = -1.0
with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1) as p:
    for line in p.stdout:
        if to_line < 0 and pattern.search(line):
            to_line = time.perf_counter() - start
        sys.stderr.write(line)
to_end = time.perf_counter() - start
print(f"{to_line:.3f} {to_end:.3f}")
sys.exit(p.returncode)
