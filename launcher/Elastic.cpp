#include "launcher/Elastic.h"

#include <cxxopts.hpp>
#include <fcntl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "launcher/OptionValues.h"
#include "runtime/Errors.h"
#include "runtime/Stop.h"
#include "runtime/Text.h"
#include "runtime/config/Flags.h"
#include "runtime/metrics/Clock.h"
#include "runtime/Portable.h"
#include "runtime/rundir/AtomicFile.h"
#include "runtime/rundir/RunFiles.h"
#include "runtime/metrics/Json.h"
#include "runtime/metrics/JsonLines.h"

namespace pstrain::launcher {
namespace {

namespace fs = std::filesystem;
using metrics::Clock;
using metrics::secondsSince;
using metrics::toDuration;


// SIGINT/SIGTERM to pstrain-run: stop the job, relaunch nothing. Each further signal
// hurries the job's stop one stage on (Supervisor::passOnStop).
std::atomic<int> gStopSignal{0};
std::atomic<int> gStopSignals{0};
extern "C" void onStopSignal(int signal) {
  gStopSignal = signal;
  ++gStopSignals;
}

// Sleeps `seconds`, waking early for a stop signal; false if one came.
bool sleepUnlessStopped(double seconds) {
  const auto until = Clock::now() + toDuration(seconds);
  while (!gStopSignal && Clock::now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  return !gStopSignal;
}

constexpr int kMostSlots = 1 << 16;  // per host: more is a typo, not a machine

// A slot count of 0..kMostSlots, else ConfigError naming `where`.
int parseSlots(const std::string& text, const std::string& where) {
  const bool digits = !text.empty() && text.size() <= 6 && text.find_first_not_of("0123456789") == std::string::npos;
  const int slots = digits ? std::stoi(text) : -1;
  if (slots < 0 || slots > kMostSlots) {
    throw ConfigError(fmt::format("{}: the slots '{}' are not a number from 0 to {}", where, text, kMostSlots));
  }
  return slots;
}

// Host names go on mpirun's command line and into its hostfile: letters, digits, '.', '_'
// and '-', not starting with '-' (which mpirun would read as a flag).
void checkHostName(const std::string& name, const std::string& where) {
  if (name.empty() || name.size() > 253 || name[0] == '-' ||
      name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") != std::string::npos) {
    throw ConfigError(fmt::format("{}: '{}' is not a host name (letters, digits, '.', '_', '-'; no leading '-')",
                                  where, name));
  }
}

}  // namespace

std::vector<Host> parseHostList(const std::string& text) {
  std::vector<Host> hosts;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const std::string where = fmt::format("host discovery line {}", number);
    Host h;
    const auto colon = line.rfind(':');
    h.name = trim(line.substr(0, colon));
    checkHostName(h.name, where);
    if (colon != std::string::npos) h.slots = parseSlots(trim(line.substr(colon + 1)), where);
    if (h.slots > 0) hosts.push_back(h);
  }
  return hosts;
}

std::vector<Host> parseHostfile(const std::string& text) {
  std::vector<Host> hosts;
  std::istringstream lines(text);
  std::string line;
  static const std::regex equals(R"(\s*=\s*)");
  for (int number = 1; std::getline(lines, line); ++number) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    const std::string where = fmt::format("hostfile line {}", number);
    std::istringstream words(std::regex_replace(line, equals, "="));
    Host h;
    words >> h.name;
    checkHostName(h.name, where);
    // Open MPI's keys: slots (or its old names count and cpu); max_slots and the rest are mpirun's.
    for (std::string word; words >> word;) {
      const auto eq = word.find('=');
      const std::string key = word.substr(0, eq);
      if (eq != std::string::npos && (key == "slots" || key == "count" || key == "cpu")) {
        h.slots = parseSlots(word.substr(eq + 1), where);
      }
    }
    if (h.slots > 0) hosts.push_back(h);
  }
  return hosts;
}

std::string describeHosts(const std::vector<Host>& hosts) {
  std::vector<std::string> parts;
  for (const auto& h : hosts) parts.push_back(fmt::format("{}:{}", h.name, h.slots));
  return fmt::format("{}", fmt::join(parts, " "));
}

std::int64_t newestCheckpointStep(const std::string& trainDir) {
  const auto published = rundir::listPublished(rundir::pathOf(trainDir, rundir::kCheckpoints));
  return published.empty() ? 0 : published.back().step;
}

namespace {

// Starts `argv` (PATH searched) as a child process in a process group of its own, so that
// a terminal's Ctrl-C reaches pstrain-run alone (which passes it on in stages) and a last
// SIGKILL reaches whatever the command started. Its standard input is /dev/null (a
// background group reading a terminal would stop), its standard output `stdoutFd` unless
// that is -1. Returns its pid, or -1 when it could not fork; a child that cannot run the
// command exits 127.
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

}  // namespace

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

ElasticOptions parseElasticCommand(int argc, char** argv) {
  const ElasticOptions d;  // defaults
  ElasticOptions o;
  // Everything after "--" is pstrain's.
  int split = argc;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--") {
      split = i;
      break;
    }
  }
  for (int i = split + 1; i < argc; ++i) o.pstrainArgs.emplace_back(argv[i]);
  cxxopts::Options options(
      "pstrain-run",
      "Runs a pstrain job that survives hosts coming and going (README: \"The night on laptops\"):\n"
      "  pstrain-run --hostfile hostfiles/macs --min-workers 1 -- --model lenet --epochs 20 --train-dir runs/night\n"
      "It launches mpirun with pstrain, relaunches with --resume from the newest checkpoint on the hosts that\n"
      "still answer when the job fails, and stops it at a step (SIGUSR1) to relaunch it larger when hosts\n"
      "come back. Events go to TRAIN_DIR/elastic.jsonl. Its exit status is the job's.\n");
  options.set_width(100);
  // clang-format off
  options.add_options()
    ("hostfile", "the hosts (Open MPI hostfile); each is probed with a short launch to find those that answer", defaulted(d.hostfile))
    ("host-discovery-script", "an executable printing one host:slots line per available host (Horovod's convention)", defaulted(d.discoveryScript))
    ("np", "the most ranks to start, server included (0: every slot offered)", defaulted(d.maxRanks))
    ("min-workers", "fewer workers than this: wait for hosts (then give up)", defaulted(d.minWorkers))
    ("max-restarts", "relaunches after failures before giving up", defaulted(d.maxRestarts))
    ("discovery-interval", "seconds between asking for hosts while the job runs", defaulted(d.discoveryIntervalSeconds))
    ("wait-for-hosts", "seconds to wait for --min-workers before giving up", defaulted(d.waitForHostsSeconds))
    ("probe-timeout", "seconds one probe launch of a hostfile's host may take", defaulted(d.probeTimeoutSeconds))
    ("stop-grace", "on SIGINT/SIGTERM the job gets SIGUSR1 (checkpoint and stop at its next step), this many seconds "
                   "later SIGTERM, as many again later SIGKILL; each further signal skips a wait", defaulted(d.stopGraceSeconds))
    ("mpirun", "the mpirun to run", defaulted(d.mpirun))
    ("mpirun-arg", "an argument for mpirun (repeat it: --mpirun-arg=--mca --mpirun-arg=btl_tcp_if_include --mpirun-arg=en0)", cxxopts::value<std::vector<std::string>>())
    ("pstrain", "the pstrain binary (default: the one next to pstrain-run)", defaulted(d.pstrain))
    ("h,help", "print this help");
  // clang-format on
  cxxopts::ParseResult r;
  try {
    r = options.parse(split, argv);
    if (!r.unmatched().empty()) throw ConfigError(fmt::format("unexpected argument '{}' (pstrain's go after --)", r.unmatched().front()));
  } catch (const cxxopts::exceptions::exception& e) {
    throw ConfigError(e.what());
  }
  if (r.count("help")) {
    o.helpText = options.help();
    return o;
  }
  o.hostfile = r["hostfile"].as<std::string>();
  o.discoveryScript = r["host-discovery-script"].as<std::string>();
  o.maxRanks = r["np"].as<int>();
  o.minWorkers = r["min-workers"].as<int>();
  o.maxRestarts = r["max-restarts"].as<int>();
  o.discoveryIntervalSeconds = r["discovery-interval"].as<double>();
  o.waitForHostsSeconds = r["wait-for-hosts"].as<double>();
  o.probeTimeoutSeconds = r["probe-timeout"].as<double>();
  o.stopGraceSeconds = r["stop-grace"].as<double>();
  o.mpirun = r["mpirun"].as<std::string>();
  if (r.count("mpirun-arg")) o.mpirunArgs = r["mpirun-arg"].as<std::vector<std::string>>();
  o.pstrain = r["pstrain"].as<std::string>();
  if (o.pstrain.empty()) {
    const fs::path self = fs::path(argv[0]).parent_path() / "pstrain";
    o.pstrain = fs::exists(self) ? self.string() : "pstrain";
  }
  if (o.hostfile.empty() == o.discoveryScript.empty()) {
    throw ConfigError("give one of --hostfile and --host-discovery-script");
  }
  if (o.maxRanks < 0 || o.minWorkers < 1 || o.maxRestarts < 0) {
    throw ConfigError("--np must be 0 or more, --min-workers 1 or more, --max-restarts 0 or more");
  }
  for (double s : {o.discoveryIntervalSeconds, o.waitForHostsSeconds, o.probeTimeoutSeconds, o.stopGraceSeconds}) {
    if (!(s > 0 && s <= 30 * 86400.0)) {
      throw ConfigError("the seconds of --discovery-interval, --wait-for-hosts, --probe-timeout and --stop-grace must be positive");
    }
  }
  if (o.pstrainArgs.empty()) throw ConfigError("give pstrain's arguments after -- (at least --train-dir)");
  try {
    config::parseTrainFlags(o.pstrainArgs);  // pstrain's own verdict on them, --config included
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("pstrain's flags (after --): {}", e.what()));
  }
  return o;
}

namespace {

class Supervisor {
 public:
  explicit Supervisor(const ElasticOptions& o) : o_(o), job_(config::parseTrainFlags(o.pstrainArgs).cfg) {
    // Sharded modes deal each step to a fixed number of virtual shards: never more workers
    // than those (--virtual-shards, else the first launch's workers).
    maxWorkers_ = job_.virtualShards;
    ::close(rundir::openPrivateDirectory(job_.trainDir));  // as pstrain makes it, before pstrain does
    events_ = std::make_unique<metrics::JsonLines>(rundir::pathOf(job_.trainDir, rundir::kElastic));
    earlier_ = publishedCheckpoints();
  }

  int run() {
    bool first = true;
    int restarts = 0, lastFailure = 1;
    std::vector<Host> hosts;
    Clock::time_point failedAt{};
    for (;;) {
      if (!waitForHosts(hosts, restarts)) {
        if (gStopSignal) {
          event("stop", 0, hosts, fmt::format("signal {} to pstrain-run while it waited for hosts", gStopSignal.load()));
          return 128 + gStopSignal;
        }
        event("gave-up", 0, hosts, fmt::format("fewer than --min-workers {} workers' slots for {:.0f} s",
                                               o_.minWorkers, o_.waitForHostsSeconds));
        return lastFailure;
      }
      const int workers = workersFor(hosts);
      if (first && job_.modeInfo().sharded && maxWorkers_ == 0) maxWorkers_ = workers;
      const int ranks = job_.modeInfo().peers() ? workers : workers + 1;
      event("launch", ranks, hosts, "", failedAt != Clock::time_point{} ? secondsSince(failedAt) : -1);
      // A relaunch continues the job with --resume, but under --overwrite only once the job
      // has published a checkpoint of its own: before that, the train dir's checkpoints are
      // the earlier run's, which the job was started to replace, not to continue.
      const auto before = publishedCheckpoints();
      const bool resume = !first && (!job_.overwrite || before != earlier_);
      const int code = launch(hosts, ranks, resume);
      first = false;
      if (gStopSignal) {
        event("stop", ranks, hosts,
              code == kResumableExit
                  ? fmt::format("signal {} to pstrain-run: the job checkpointed and stopped; --resume continues it",
                                gStopSignal.load())
                  : fmt::format("signal {} to pstrain-run: the job ended with exit {}", gStopSignal.load(), code));
        return code == kResumableExit ? code : 128 + gStopSignal;
      }
      if (code == 0) {
        event("done", ranks, hosts, "");
        return 0;
      }
      if (code == kResumableExit) {
        event("regrow", ranks, hosts, regrowing_ ? "more slots offered" : "stopped on request (SIGUSR1)");
        regrowing_ = false;
        failedAt = {};
        continue;
      }
      failedAt = Clock::now();
      if (code == kConfigErrorExit) {
        event("failure", ranks, hosts, "a configuration error (exit 2): not retried");
        return code;
      }
      lastFailure = code;
      // --max-restarts counts failures in a row: a launch that published a checkpoint made
      // progress, and the count starts again.
      if (publishedCheckpoints() != before) restarts = 0;
      // 128 + N: a process ended by signal N (mpirun passes that on); Open MPI's own codes are above.
      event("failure", ranks, hosts, code > 128 && code <= 128 + 31
                                         ? fmt::format("mpirun exit {}: a process ended by signal {}", code, code - 128)
                                         : fmt::format("mpirun exit {}", code));
      if (++restarts > o_.maxRestarts) {
        event("gave-up", ranks, hosts, fmt::format("{} restarts in a row without a new checkpoint (--max-restarts {})",
                                                   restarts - 1, o_.maxRestarts));
        return code;
      }
    }
  }

 private:
  int workersFor(const std::vector<Host>& hosts) const {
    std::int64_t offered = 0;
    for (const auto& h : hosts) offered += h.slots;
    // Capped so that the sum fits an int: more ranks than one host's slot limit is beyond any job here.
    int slots = static_cast<int>(std::min<std::int64_t>(offered, kMostSlots));
    if (o_.maxRanks > 0) slots = std::min(slots, o_.maxRanks);
    int workers = job_.modeInfo().peers() ? slots : slots - 1;
    if (maxWorkers_ > 0) workers = std::min(workers, maxWorkers_);
    return std::max(workers, 0);
  }

  // The hosts that answer now, as the hostfile's probes or the script say. Never throws:
  // a script's garbage or a broken hostfile is reported and offers no hosts this time. A
  // stop signal ends a hanging script or probe at once.
  std::vector<Host> discover(const std::vector<Host>& inUse = {}) {
    const auto stopping = [] { return gStopSignal != 0; };
    try {
      if (!o_.discoveryScript.empty()) {
        auto r = runCommand({o_.discoveryScript}, std::chrono::seconds(30), true, stopping);
        if (r.exitCode != 0) {
          if (!gStopSignal) {
            std::cout << fmt::format("pstrain-run: {} {}; no hosts this time", o_.discoveryScript,
                                     r.timedOut ? "did not answer within 30 s" : fmt::format("failed (exit {})", r.exitCode))
                      << std::endl;
          }
          return {};
        }
        return parseHostList(r.output);
      }
      std::ifstream in(o_.hostfile);
      if (!in) throw ConfigError(fmt::format("cannot read the hostfile {}", o_.hostfile));
      std::stringstream text;
      text << in.rdbuf();
      std::vector<Host> answering;
      for (const Host& h : parseHostfile(text.str())) {
        if (gStopSignal) return {};
        const bool busy = std::any_of(inUse.begin(), inUse.end(), [&](const Host& u) { return u.name == h.name; });
        std::vector<std::string> probe = {o_.mpirun, "--host", h.name + ":1", "-np", "1"};
        probe.insert(probe.end(), o_.mpirunArgs.begin(), o_.mpirunArgs.end());
        probe.push_back("true");
        const auto timeout = std::chrono::milliseconds(static_cast<long long>(o_.probeTimeoutSeconds * 1000));
        if (busy || runCommand(probe, timeout, true, stopping).exitCode == 0) answering.push_back(h);
      }
      return answering;
    } catch (const std::exception& e) {
      std::cout << "pstrain-run: " << e.what() << "; no hosts this time" << std::endl;
      return {};
    }
  }

  // Finds hosts with at least --min-workers workers' slots, backing off between looks (the
  // first after a failure at once, then 1, 2, 4 ... 30 s); false after --wait-for-hosts or
  // on a stop signal.
  bool waitForHosts(std::vector<Host>& hosts, int restarts) {
    const auto start = Clock::now();
    double pause = restarts > 0 ? 1 : 0;
    for (;;) {
      if (!sleepUnlessStopped(pause)) return false;
      hosts = discover();
      if (gStopSignal) return false;
      if (workersFor(hosts) >= o_.minWorkers) return true;
      if (secondsSince(start) > o_.waitForHostsSeconds) return false;
      std::cout << fmt::format("pstrain-run: {} worker(s) available ({}), waiting for --min-workers {}",
                               workersFor(hosts), describeHosts(hosts), o_.minWorkers) << std::endl;
      pause = std::min(30.0, std::max(1.0, pause * 2));
    }
  }

  // A hostfile for one launch, removed when the launch ends, however it ends.
  struct LaunchHostfile {
    char path[32] = "/tmp/pstrain-run-hosts-XXXXXX";
    explicit LaunchHostfile(const std::vector<Host>& hosts) {
      const int fd = ::mkstemp(path);
      if (fd < 0) throw Error("cannot create a temporary hostfile in /tmp");
      std::string text;
      for (const auto& h : hosts) text += fmt::format("{} slots={}\n", h.name, h.slots);
      const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
      ::close(fd);
      if (!written) {
        ::unlink(path);
        throw Error(fmt::format("cannot write {}", path));
      }
    }
    ~LaunchHostfile() { ::unlink(path); }
    LaunchHostfile(const LaunchHostfile&) = delete;
    LaunchHostfile& operator=(const LaunchHostfile&) = delete;
  };

  // Stage `stage` of stopping the job on a stop signal: 1 SIGUSR1 (checkpoint and stop at
  // the next step, as pstrain does on it), 2 SIGTERM (every rank leaves at once), 3 SIGKILL
  // to mpirun's process group.
  void passOnStop(pid_t mpirun, int stage) const {
    static const char* const kWhat[] = {"", "SIGUSR1: checkpoint and stop at the next step", "SIGTERM", "SIGKILL"};
    std::cout << fmt::format("pstrain-run: signal {}: the job gets {}{}", gStopSignal.load(), kWhat[stage],
                             stage < 3 ? fmt::format(" ({} in {:g} s, or on another signal)", kWhat[stage + 1],
                                                     o_.stopGraceSeconds)
                                       : "")
              << std::endl;
    if (stage == 1) ::kill(mpirun, SIGUSR1);
    if (stage == 2) ::kill(mpirun, SIGTERM);
    if (stage == 3) ::kill(-mpirun, SIGKILL);
  }

  // Runs the job on `hosts` and returns mpirun's exit status. While it runs, asks for hosts
  // every --discovery-interval: more workers' slots than it has make it stop at its next
  // step with a checkpoint (SIGUSR1, which mpirun forwards), to be relaunched larger. A stop
  // signal is passed on in stages, --stop-grace apart (passOnStop).
  int launch(const std::vector<Host>& hosts, int ranks, bool resume) {
    const LaunchHostfile hostfile(hosts);
    std::vector<std::string> argv = {o_.mpirun, "--hostfile", hostfile.path, "-np", std::to_string(ranks)};
    argv.insert(argv.end(), o_.mpirunArgs.begin(), o_.mpirunArgs.end());
    argv.push_back(o_.pstrain);
    for (const auto& a : o_.pstrainArgs) {
      if (resume && (a == "--overwrite" || a == "--resume")) continue;  // a relaunch continues the run
      argv.push_back(a);
    }
    if (resume) argv.push_back("--resume");
    const pid_t child = spawn(argv, -1);
    if (child < 0) throw Error("cannot start mpirun");
    const int workers = job_.modeInfo().peers() ? ranks : ranks - 1;
    const auto interval = toDuration(o_.discoveryIntervalSeconds);
    auto nextLook = Clock::now() + interval;
    int stopStage = 0;
    Clock::time_point stageAt;
    int status = 0;
    for (;;) {
      if (::waitpid(child, &status, WNOHANG) == child) break;
      if (gStopSignals > 0) {
        const bool graceOver = stopStage > 0 && secondsSince(stageAt) >= o_.stopGraceSeconds;
        const int wanted = std::min(3, std::max(gStopSignals.load(), stopStage + (graceOver ? 1 : 0)));
        if (wanted > stopStage) {
          stopStage = wanted;
          stageAt = Clock::now();
          passOnStop(child, stopStage);
        }
      }
      const bool canGrow = maxWorkers_ == 0 || workers < maxWorkers_;
      if (!regrowing_ && !gStopSignal && canGrow && Clock::now() >= nextLook) {
        const auto offered = discover(hosts);
        if (!gStopSignal && workersFor(offered) > workers) {
          std::cout << fmt::format("pstrain-run: more slots offered ({}): stopping the job at its next step to "
                                   "relaunch it larger", describeHosts(offered)) << std::endl;
          ::kill(child, SIGUSR1);
          regrowing_ = true;
        }
        nextLook = Clock::now() + interval;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }

  // One line of elastic.jsonl: `step` is the newest checkpoint's (where a launch resumes,
  // where a failure or a regrow left the run); `sinceFailure` (>= 0) the seconds from the
  // failure that this launch follows.
  void event(const std::string& name, int worldSize, const std::vector<Host>& hosts, const std::string& reason,
             double sinceFailure = -1) {
    const std::int64_t step = newestCheckpointStep(job_.trainDir);
    metrics::JsonObject line;
    line.add("time", metrics::isoTime()).add("event", name).add("world_size", worldSize);
    line.add("hosts", describeHosts(hosts)).add("step", step);
    if (!reason.empty()) line.add("reason", reason);
    if (sinceFailure >= 0) line.add("seconds_since_failure", sinceFailure);
    events_->write(line);
    std::cout << fmt::format("pstrain-run: {}: {} rank(s) on {}, step {}{}", name, worldSize, describeHosts(hosts),
                             step, reason.empty() ? "" : " (" + reason + ")") << std::endl;
  }

  // The published checkpoints of the train dir, each with its file's time: a checkpoint
  // written again at the same step is a new one.
  std::set<std::pair<std::string, fs::file_time_type>> publishedCheckpoints() const {
    std::set<std::pair<std::string, fs::file_time_type>> all;
    for (const auto& p : rundir::listPublished(rundir::pathOf(job_.trainDir, rundir::kCheckpoints))) {
      std::error_code ec;
      all.emplace(p.path, fs::last_write_time(p.path, ec));
    }
    return all;
  }

  const ElasticOptions& o_;
  const config::TrainConfig job_;  // pstrain's flags, --config included
  std::set<std::pair<std::string, fs::file_time_type>> earlier_;  // those before the first launch
  int maxWorkers_ = 0;
  bool regrowing_ = false;
  std::unique_ptr<metrics::JsonLines> events_;
};

}  // namespace

int superviseElastic(const ElasticOptions& options) {
  std::signal(SIGINT, onStopSignal);
  std::signal(SIGTERM, onStopSignal);
  return Supervisor(options).run();
}

}  // namespace pstrain::launcher
