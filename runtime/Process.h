#pragma once
// Child processes, each in a process group of its own: the commands pstrain-run starts
// (mpirun, a discovery script, a host's probe) and the model loader's check process.
// Torch-free.
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace pstrain::process {

// A command run to completion: its exit code (128 + N after signal N; -1 if it could not
// start), its standard output when captured (the first MiB), and whether it was killed,
// with whatever it started, because `timeout` passed or `cancelled` (asked every 200 ms)
// said so. Its standard input is the descriptor `input` (this process's stays open), or
// /dev/null when that is -1.
struct CommandResult {
  int exitCode = -1;
  std::string output;
  bool timedOut = false;
};
CommandResult runCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout, bool captureOutput,
                         const std::function<bool()>& cancelled = {}, int input = -1);

// Starts `argv` (PATH searched) as a child process in a process group of its own, so that
// a terminal's Ctrl-C reaches pstrain-run alone (which passes it on in stages) and a last
// SIGKILL reaches whatever the command started. Its standard input is /dev/null (a
// background group reading a terminal would stop) unless `stdinFd` is not -1, its standard
// output `stdoutFd` unless that is -1. Returns its pid, or -1 when it could not fork; a
// child that cannot run the command exits 127.
pid_t spawn(const std::vector<std::string>& argv, int stdoutFd, int stdinFd = -1);

// Whether the child `child` has ended, without waiting (it is then reaped); its exit code
// in `exitCode` (128 + N after signal N).
bool ended(pid_t child, int& exitCode);

}  // namespace pstrain::process
