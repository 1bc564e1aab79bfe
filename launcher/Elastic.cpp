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


std::atomic<int> gStopSignal{0};  // SIGINT/SIGTERM to pstrain-run: stop the job, relaunch nothing
extern "C" void onStopSignal(int signal) { gStopSignal = signal; }

}  // namespace

std::vector<Host> parseHostList(const std::string& text) {
  std::vector<Host> hosts;
  std::istringstream lines(text);
  std::string line;
  for (int number = 1; std::getline(lines, line); ++number) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    Host h;
    const auto colon = line.rfind(':');
    h.name = trim(line.substr(0, colon));
    if (colon != std::string::npos) {
      const std::string slots = trim(line.substr(colon + 1));
      if (slots.empty() || slots.find_first_not_of("0123456789") != std::string::npos || slots.size() > 6) {
        throw ConfigError(fmt::format("host discovery line {}: '{}' is not host:slots", number, line));
      }
      h.slots = std::stoi(slots);
    }
    if (h.name.empty() || h.name.find_first_of(" \t") != std::string::npos) {
      throw ConfigError(fmt::format("host discovery line {}: '{}' is not host:slots", number, line));
    }
    if (h.slots > 0) hosts.push_back(h);
  }
  return hosts;
}

std::vector<Host> parseHostfile(const std::string& text) {
  std::vector<Host> hosts;
  std::istringstream lines(text);
  std::string line;
  static const std::regex slots(R"(slots\s*=\s*(\d+))");
  while (std::getline(lines, line)) {
    line = trim(line.substr(0, line.find('#')));
    if (line.empty()) continue;
    Host h;
    h.name = line.substr(0, line.find_first_of(" \t"));
    std::smatch m;
    if (std::regex_search(line, m, slots)) h.slots = std::stoi(m[1]);
    hosts.push_back(h);
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

// Starts `argv` (PATH searched) as a child process: in a process group of its own when
// `ownGroup` (so that a timeout can kill whatever it started), with its standard output on
// `stdoutFd` unless that is -1. Returns its pid, or -1 when it could not fork; a child that
// cannot run the command exits 127.
pid_t spawn(const std::vector<std::string>& argv, bool ownGroup, int stdoutFd) {
  std::vector<char*> args;  // made before the fork: the child only calls what is async-signal-safe
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const pid_t child = ::fork();
  if (child == 0) {
    if (ownGroup) ::setpgid(0, 0);
    if (stdoutFd >= 0) ::dup2(stdoutFd, STDOUT_FILENO);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  if (child > 0 && ownGroup) ::setpgid(child, child);  // either side may run first
  return child;
}

}  // namespace

CommandResult runCommand(const std::vector<std::string>& argv, std::chrono::milliseconds timeout, bool captureOutput) {
  CommandResult result;
  int pipeFds[2] = {-1, -1};
  if (!portable::closeOnExecPipe(pipeFds)) return result;
  const pid_t child = spawn(argv, true, captureOutput ? pipeFds[1] : -1);
  ::close(pipeFds[1]);
  if (child < 0) {
    ::close(pipeFds[0]);
    return result;
  }
  const auto deadline = Clock::now() + timeout;
  char buffer[4096];
  for (bool open = true; open;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
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
  for (double s : {o.discoveryIntervalSeconds, o.waitForHostsSeconds, o.probeTimeoutSeconds}) {
    if (!(s > 0 && s <= 30 * 86400.0)) throw ConfigError("the seconds of --discovery-interval, --wait-for-hosts and --probe-timeout must be positive");
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
      const bool resume = !first && (!job_.overwrite || publishedCheckpoints() != earlier_);
      const int code = launch(hosts, ranks, resume);
      first = false;
      if (gStopSignal) {
        event("failure", ranks, hosts, fmt::format("pstrain-run stopped by signal {}", gStopSignal.load()));
        return 128 + gStopSignal;
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
      // 128 + N: a process ended by signal N (mpirun passes that on); Open MPI's own codes are above.
      event("failure", ranks, hosts, code > 128 && code <= 128 + 31
                                         ? fmt::format("mpirun exit {}: a process ended by signal {}", code, code - 128)
                                         : fmt::format("mpirun exit {}", code));
      if (++restarts > o_.maxRestarts) {
        event("gave-up", ranks, hosts, fmt::format("{} restarts (--max-restarts {})", restarts - 1, o_.maxRestarts));
        return code;
      }
    }
  }

 private:
  int workersFor(const std::vector<Host>& hosts) const {
    int slots = 0;
    for (const auto& h : hosts) slots += h.slots;
    if (o_.maxRanks > 0) slots = std::min(slots, o_.maxRanks);
    int workers = job_.modeInfo().peers() ? slots : slots - 1;
    if (maxWorkers_ > 0) workers = std::min(workers, maxWorkers_);
    return std::max(workers, 0);
  }

  // The hosts that answer now, as the hostfile's probes or the script say.
  std::vector<Host> discover(const std::vector<Host>& inUse = {}) {
    if (!o_.discoveryScript.empty()) {
      auto r = runCommand({o_.discoveryScript}, std::chrono::seconds(30), true);
      if (r.exitCode != 0) {
        std::cout << fmt::format("pstrain-run: {} failed (exit {}); no hosts this time", o_.discoveryScript, r.exitCode)
                  << std::endl;
        return {};
      }
      try {
        return parseHostList(r.output);
      } catch (const ConfigError& e) {
        std::cout << "pstrain-run: " << e.what() << std::endl;
        return {};
      }
    }
    std::ifstream in(o_.hostfile);
    std::stringstream text;
    text << in.rdbuf();
    std::vector<Host> answering;
    for (const Host& h : parseHostfile(text.str())) {
      const bool busy = std::any_of(inUse.begin(), inUse.end(), [&](const Host& u) { return u.name == h.name; });
      std::vector<std::string> probe = {o_.mpirun, "--host", h.name + ":1", "-np", "1"};
      probe.insert(probe.end(), o_.mpirunArgs.begin(), o_.mpirunArgs.end());
      probe.push_back("true");
      if (busy || runCommand(probe, std::chrono::milliseconds(static_cast<long long>(o_.probeTimeoutSeconds * 1000)),
                              true).exitCode == 0) {
        answering.push_back(h);
      }
    }
    return answering;
  }

  // Finds hosts with at least --min-workers workers' slots, backing off between looks (the
  // first after a failure at once, then 1, 2, 4 ... 30 s); false after --wait-for-hosts.
  bool waitForHosts(std::vector<Host>& hosts, int restarts) {
    const auto start = Clock::now();
    double pause = restarts > 0 ? 1 : 0;
    for (;;) {
      if (pause > 0) std::this_thread::sleep_for(std::chrono::duration<double>(pause));
      if (gStopSignal) return false;
      hosts = discover();
      if (workersFor(hosts) >= o_.minWorkers) return true;
      if (secondsSince(start) > o_.waitForHostsSeconds) return false;
      std::cout << fmt::format("pstrain-run: {} worker(s) available ({}), waiting for --min-workers {}",
                               workersFor(hosts), describeHosts(hosts), o_.minWorkers) << std::endl;
      pause = std::min(30.0, std::max(1.0, pause * 2));
    }
  }

  // Runs the job on `hosts` and returns mpirun's exit status. While it runs, asks for hosts
  // every --discovery-interval: more workers' slots than it has make it stop at its next
  // step with a checkpoint (SIGUSR1, which mpirun forwards), to be relaunched larger.
  int launch(const std::vector<Host>& hosts, int ranks, bool resume) {
    char hostfile[] = "/tmp/pstrain-run-hosts-XXXXXX";
    const int fd = ::mkstemp(hostfile);
    if (fd < 0) throw Error("cannot create a temporary hostfile in /tmp");
    std::string text;
    for (const auto& h : hosts) text += fmt::format("{} slots={}\n", h.name, h.slots);
    if (::write(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
      ::close(fd);
      throw Error(fmt::format("cannot write {}", hostfile));
    }
    ::close(fd);
    std::vector<std::string> argv = {o_.mpirun, "--hostfile", hostfile, "-np", std::to_string(ranks)};
    argv.insert(argv.end(), o_.mpirunArgs.begin(), o_.mpirunArgs.end());
    argv.push_back(o_.pstrain);
    for (const auto& a : o_.pstrainArgs) {
      if (resume && (a == "--overwrite" || a == "--resume")) continue;  // a relaunch continues the run
      argv.push_back(a);
    }
    if (resume) argv.push_back("--resume");
    const pid_t child = spawn(argv, false, -1);
    if (child < 0) throw Error("cannot start mpirun");
    const int workers = job_.modeInfo().peers() ? ranks : ranks - 1;
    auto nextLook = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                       std::chrono::duration<double>(o_.discoveryIntervalSeconds));
    bool forwarded = false;
    int status = 0;
    for (;;) {
      if (::waitpid(child, &status, WNOHANG) == child) break;
      if (gStopSignal && !forwarded) {
        ::kill(child, SIGTERM);
        forwarded = true;
      }
      const bool canGrow = maxWorkers_ == 0 || workers < maxWorkers_;
      if (!regrowing_ && !gStopSignal && canGrow && Clock::now() >= nextLook) {
        const auto offered = discover(hosts);
        if (workersFor(offered) > workers) {
          std::cout << fmt::format("pstrain-run: more slots offered ({}): stopping the job at its next step to "
                                   "relaunch it larger", describeHosts(offered)) << std::endl;
          ::kill(child, SIGUSR1);
          regrowing_ = true;
        }
        nextLook = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                      std::chrono::duration<double>(o_.discoveryIntervalSeconds));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    ::unlink(hostfile);
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
