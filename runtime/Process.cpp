#include "runtime/Process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <thread>

#include "runtime/Portable.h"

namespace pstrain::process {

using Clock = std::chrono::steady_clock;  // (runtime/ is below metrics/)

pid_t spawn(const std::vector<std::string>& argv, int stdoutFd, int stdinFd) {
  std::vector<char*> args;  // made before the fork: the child only calls what is async-signal-safe
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    ::setpgid(0, 0);
    const int in = stdinFd >= 0 ? stdinFd : ::open("/dev/null", O_RDONLY);
    if (in >= 0) ::dup2(in, STDIN_FILENO);
    if (stdoutFd >= 0) ::dup2(stdoutFd, STDOUT_FILENO);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  if (child > 0) ::setpgid(child, child);  // either side may run first
  return child;
}

bool ended(pid_t child, int& exitCode) {
  int status = 0;
  if (::waitpid(child, &status, WNOHANG) != child) return false;
  exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return true;
}

CommandResult runCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout, bool captureOutput,
                         const std::function<bool()>& cancelled, int input) {
  CommandResult result;
  int outFds[2] = {-1, -1};
  if (!portable::closeOnExecPipe(outFds)) return result;
  const pid_t child = spawn(argv, captureOutput ? outFds[1] : -1, input);
  ::close(outFds[1]);
  if (child < 0) {
    ::close(outFds[0]);
    return result;
  }
  const auto deadline = Clock::now() + timeout;
  char buffer[4096];
  for (bool open = true; open;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 || (cancelled && cancelled())) {
      result.timedOut = true;
      break;
    }
    pollfd fds[1] = {{outFds[0], POLLIN, 0}};
    if (::poll(fds, 1, static_cast<int>(std::min<long long>(left, 200))) <= 0) continue;
    const ssize_t n = ::read(outFds[0], buffer, sizeof buffer);
    if (n > 0) {
      if (result.output.size() < (1 << 20)) result.output.append(buffer, static_cast<std::size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      open = false;  // EOF: the command (and what inherited its stdout) is done with it
    }
  }
  ::close(outFds[0]);
  if (result.timedOut) ::kill(-child, SIGKILL);
  while (!ended(child, result.exitCode)) {
    if (!result.timedOut && Clock::now() > deadline + std::chrono::seconds(2)) {
      result.timedOut = true;
      ::kill(-child, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return result;
}

}  // namespace pstrain::process
