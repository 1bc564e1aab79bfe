#include "runtime/Process.h"

#include <fcntl.h>
#include <pthread.h>
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

namespace {

// SIGPIPE blocked in this thread while it writes to a command's standard input: a command
// that exits before reading it all makes a write fail with EPIPE instead of ending this
// process; the signal that write raised is taken before the mask is restored.
class SigpipeBlocked {
 public:
  SigpipeBlocked() {
    sigemptyset(&pipe_);
    sigaddset(&pipe_, SIGPIPE);
    ::pthread_sigmask(SIG_BLOCK, &pipe_, &old_);
    sigset_t pending;
    sigemptyset(&pending);
    ::sigpending(&pending);
    pendingBefore_ = sigismember(&pending, SIGPIPE) == 1;
  }
  ~SigpipeBlocked() {
    sigset_t pending;
    sigemptyset(&pending);
    ::sigpending(&pending);
    int signal = 0;
    if (!pendingBefore_ && !sigismember(&old_, SIGPIPE) && sigismember(&pending, SIGPIPE) == 1) ::sigwait(&pipe_, &signal);
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t pipe_, old_;
  bool pendingBefore_ = false;
};

}  // namespace

CommandResult runCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout, bool captureOutput,
                         const std::function<bool()>& cancelled, std::string_view input) {
  CommandResult result;
  int outFds[2] = {-1, -1}, inFds[2] = {-1, -1};
  if (!portable::closeOnExecPipe(outFds)) return result;
  if (!input.empty() && !portable::closeOnExecPipe(inFds)) {
    ::close(outFds[0]);
    ::close(outFds[1]);
    return result;
  }
  const SigpipeBlocked sigpipeBlocked;
  const pid_t child = spawn(argv, captureOutput ? outFds[1] : -1, inFds[0]);
  ::close(outFds[1]);
  if (inFds[0] >= 0) ::close(inFds[0]);
  int writeFd = inFds[1];
  if (writeFd >= 0) ::fcntl(writeFd, F_SETFL, ::fcntl(writeFd, F_GETFL) | O_NONBLOCK);
  auto closeInput = [&] {
    if (writeFd >= 0) ::close(writeFd);
    writeFd = -1;
  };
  if (child < 0) {
    ::close(outFds[0]);
    closeInput();
    return result;
  }
  const auto deadline = Clock::now() + timeout;
  char buffer[4096];
  std::size_t written = 0;
  for (bool open = true; open;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 || (cancelled && cancelled())) {
      result.timedOut = true;
      break;
    }
    pollfd fds[2] = {{outFds[0], POLLIN, 0}, {writeFd, POLLOUT, 0}};
    if (::poll(fds, writeFd >= 0 ? 2 : 1, static_cast<int>(std::min<long long>(left, 200))) <= 0) continue;
    if (writeFd >= 0 && fds[1].revents) {
      const ssize_t n = ::write(writeFd, input.data() + written, std::min<std::size_t>(input.size() - written, 1 << 16));
      if (n > 0) written += static_cast<std::size_t>(n);
      if ((n < 0 && errno != EAGAIN && errno != EINTR) || written == input.size()) closeInput();  // done, or not read
    }
    if (fds[0].revents) {
      const ssize_t n = ::read(outFds[0], buffer, sizeof buffer);
      if (n > 0) {
        if (result.output.size() < (1 << 20)) result.output.append(buffer, static_cast<std::size_t>(n));
      } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
        open = false;  // EOF: the command (and what inherited its stdout) is done with it
      }
    }
  }
  ::close(outFds[0]);
  closeInput();
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
