#include "runtime/Process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <thread>

#include "runtime/Portable.h"

namespace pstrain::process {

using Clock = std::chrono::steady_clock;  // (runtime/ is below metrics/)

pid_t spawn(const std::vector<std::string>& argv, int stdoutFd) {
  std::vector<char*> args;  // made before the fork: the child only calls what is async-signal-safe
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    ::setpgid(0, 0);
    const int devNull = ::open("/dev/null", O_RDONLY);
    if (devNull >= 0) ::dup2(devNull, STDIN_FILENO);
    if (stdoutFd >= 0) ::dup2(stdoutFd, STDOUT_FILENO);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  if (child > 0) ::setpgid(child, child);  // either side may run first
  return child;
}

CommandResult runCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout, bool captureOutput,
                         const std::function<bool()>& cancelled) {
  CommandResult result;
  int pipeFds[2] = {-1, -1};
  if (!portable::closeOnExecPipe(pipeFds)) return result;
  const pid_t child = spawn(argv, captureOutput ? pipeFds[1] : -1);
  ::close(pipeFds[1]);
  if (child < 0) {
    ::close(pipeFds[0]);
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
    pollfd fd{pipeFds[0], POLLIN, 0};
    if (::poll(&fd, 1, static_cast<int>(std::min<long long>(left, 200))) > 0) {
      const ssize_t n = ::read(pipeFds[0], buffer, sizeof buffer);
      if (n > 0) {
        if (result.output.size() < (1 << 20)) result.output.append(buffer, static_cast<std::size_t>(n));
      } else {
        open = false;  // EOF: the command (and what inherited its stdout) is done with it
      }
    }
  }
  ::close(pipeFds[0]);
  if (result.timedOut) ::kill(-child, SIGKILL);
  int status = 0;
  for (;;) {
    if (::waitpid(child, &status, result.timedOut ? 0 : WNOHANG) == child) break;
    if (Clock::now() > deadline + std::chrono::seconds(2)) {
      result.timedOut = true;
      ::kill(-child, SIGKILL);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  result.exitCode = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

}  // namespace pstrain::process
