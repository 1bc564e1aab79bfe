#include "launcher/elastic/Supervisor.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <set>
#include <sstream>
#include <thread>

#include "launcher/elastic/Hosts.h"
#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/Process.h"
#include "runtime/Stop.h"
#include "runtime/config/Flags.h"
#include "runtime/config/Layout.h"
#include "runtime/metrics/Clock.h"
#include "runtime/metrics/Json.h"
#include "runtime/metrics/JsonLines.h"
#include "runtime/rundir/AtomicFile.h"
#include "runtime/rundir/RunFiles.h"
#include "runtime/rundir/TrainDir.h"

namespace pstrain::launcher {
namespace {

namespace fs = std::filesystem;
using metrics::Clock;
using metrics::secondsSince;
using metrics::toDuration;
using process::runCommand;
using process::spawn;

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

// The subnet of probe.json's network recommendation, "" when it has none. Only digits,
// dots and a slash: it goes on mpirun's command line.
std::string recommendedSubnet(const std::string& json) {
  const auto network = json.find("\"network\":{");
  if (network == std::string::npos) return "";
  const auto recommendation = json.find("\"recommendation\":{", network);
  const std::string key = "\"subnet\":\"";
  const auto at = recommendation == std::string::npos ? recommendation : json.find(key, recommendation);
  if (at == std::string::npos) return "";
  const auto start = at + key.size();
  const std::string subnet = json.substr(start, json.find('"', start) - start);
  return !subnet.empty() && subnet.find_first_not_of("0123456789./") == std::string::npos ? subnet : "";
}

class Supervisor {
 public:
  explicit Supervisor(const ElasticOptions& o) : o_(o), job_(config::parseTrainFlags(o.pstrainArgs).cfg) {
    // Sharded modes deal each step to a fixed number of virtual shards: never more workers
    // than those (--virtual-shards, else the first launch's workers).
    maxWorkers_ = job_.virtualShards;
    // The train dir as pstrain's first launch would find it (made as pstrain makes it; a dir
    // another job holds, or that holds another run, refused): checked before the first event
    // is written into it.
    { const rundir::TrainDir check(job_); }
    events_ = std::make_unique<metrics::JsonLines>(rundir::pathOf(job_.trainDir, rundir::kElastic));
    earlier_ = publishedCheckpoints();
    setAsideBefore_ = rundir::holdsSetAside(job_.trainDir);
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
      if (first && job_.modeInfo().dealsVirtualShards && maxWorkers_ == 0) maxWorkers_ = workers;
      const int ranks = config::Layout::withWorkers(job_, workers).ranks();
      event("launch", ranks, hosts, "", failedAt != Clock::time_point{} ? secondsSince(failedAt) : -1);
      // A relaunch continues the job with --resume, but under --overwrite only once the job
      // has published a checkpoint of its own: before that, the train dir's checkpoints are
      // the earlier run's, which the job was started to replace, not to continue; it starts
      // afresh, replacing them still.
      const auto before = publishedCheckpoints();
      const bool resume = !first && (!job_.overwrite || publishedOwn(before));
      if (!first) tidySetAside(publishedOwn(before));
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
    int workers = config::Layout(job_, slots).workers();
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
  // to mpirun's process group and to each of its children's: Open MPI starts every local
  // rank in a process group of its own, which mpirun's alone would leave running, orphaned.
  void passOnStop(pid_t mpirun, int stage) const {
    static const char* const kWhat[] = {"", "SIGUSR1: checkpoint and stop at the next step", "SIGTERM", "SIGKILL"};
    std::cout << fmt::format("pstrain-run: signal {}: the job gets {}{}", gStopSignal.load(), kWhat[stage],
                             stage < 3 ? fmt::format(" ({} in {:g} s, or on another signal)", kWhat[stage + 1],
                                                     o_.stopGraceSeconds)
                                       : "")
              << std::endl;
    if (stage == 1) ::kill(mpirun, SIGUSR1);
    if (stage == 2) ::kill(mpirun, SIGTERM);
    if (stage < 3) return;
    for (const long rank : portable::childProcesses(mpirun)) {
      ::kill(-static_cast<pid_t>(rank), SIGKILL);
      ::kill(static_cast<pid_t>(rank), SIGKILL);
    }
    ::kill(-mpirun, SIGKILL);
  }

  // Runs the job on `hosts` and returns mpirun's exit status. While it runs, asks for hosts
  // every --discovery-interval: more workers' slots than it has make it stop at its next
  // step with a checkpoint (SIGUSR1, which mpirun forwards), to be relaunched larger. A stop
  // signal is passed on in stages, --stop-grace apart (passOnStop).
  int launch(const std::vector<Host>& hosts, int ranks, bool resume) {
    const LaunchHostfile hostfile(hosts);
    // pstrain's flags as parsed (a --config file's too, however spelled), not as typed.
    config::TrainConfig cfg = job_;
    if (resume) {
      cfg.resume = true;  // a relaunch continues the run
      cfg.overwrite = false;
    }
    // `link`: the options that choose MPI's interfaces, in place of the user's own (mpirun
    // refuses a parameter given twice).
    auto command = [&](const config::TrainConfig& flags, const std::vector<std::string>& link) {
      std::vector<std::string> argv = {o_.mpirun, "--hostfile", hostfile.path, "-np", std::to_string(ranks)};
      const auto& user = o_.mpirunArgs;
      for (std::size_t i = 0; i < user.size(); ++i) {
        const bool choosesInterfaces = i + 2 < user.size() && user[i] == "--mca" &&
                                       (user[i + 1] == "btl_tcp_if_include" || user[i + 1] == "btl_tcp_if_exclude");
        if (!link.empty() && choosesInterfaces) {
          i += 2;
          continue;
        }
        argv.push_back(user[i]);
      }
      argv.insert(argv.end(), link.begin(), link.end());
      // --servers K: ranks 0..K-1, one per host while hosts last (pstrain refuses two servers
      // on a host while another has none), unless the user maps the ranks.
      const bool userMaps = std::find(user.begin(), user.end(), "--map-by") != user.end();
      if (config::Layout(flags, ranks).cutsWeights() && !userMaps) argv.insert(argv.end(), {"--map-by", "node"});
      argv.push_back(o_.pstrain);
      for (auto& a : config::commandLineOf(flags)) argv.push_back(std::move(a));
      return argv;
    };
    std::vector<std::string> link;
    if (o_.preferFastestLink) {
      const std::string key = describeHosts(hosts);
      auto known = fastestLink_.find(key);
      if (known == fastestLink_.end()) {
        config::TrainConfig probe = cfg;
        probe.probe = true;
        known = fastestLink_.emplace(key, fastestLinkArgs(command(probe, {}))).first;
      }
      link = known->second;
    }
    const pid_t child = spawn(command(cfg, link), -1);
    if (child < 0) throw Error("cannot start mpirun");
    const int workers = config::Layout(job_, ranks).workers();
    const auto interval = toDuration(o_.discoveryIntervalSeconds);
    auto nextLook = Clock::now() + interval;
    int stopStage = 0;
    Clock::time_point stageAt;
    for (;;) {
      int exitCode = 0;
      if (process::ended(child, exitCode)) return exitCode;
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
  }

  // --prefer-fastest-link: runs `probe` (pstrain --probe on the launch's hosts) and returns
  // the mpirun options of its network recommendation (probe.json: network.recommendation),
  // none when MPI's path is the fastest or the probe failed, saying which.
  std::vector<std::string> fastestLinkArgs(const std::vector<std::string>& probe) {
    std::cout << "pstrain-run: --prefer-fastest-link: probing the hosts' network (pstrain --probe)" << std::endl;
    const auto result = runCommand(probe, std::chrono::minutes(5), /*captureOutput=*/true, [] { return gStopSignal != 0; });
    std::ifstream in(rundir::pathOf(job_.trainDir, rundir::kProbe));
    const std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    const std::string subnet = result.exitCode == 0 ? recommendedSubnet(json) : "";
    metrics::JsonObject line;
    line.add("time", metrics::isoTime()).add("event", "network").add("probe_exit", result.exitCode);
    line.add("btl_tcp_if_include", subnet);
    events_->write(line);
    if (result.exitCode != 0) {
      std::cout << fmt::format("pstrain-run: --prefer-fastest-link: the probe failed (exit {}); launching with MPI's "
                               "own choice of interfaces", result.exitCode) << std::endl;
      return {};
    }
    if (subnet.empty()) {
      std::cout << "pstrain-run: --prefer-fastest-link: MPI's path is the fastest the probe found" << std::endl;
      return {};
    }
    std::cout << fmt::format("pstrain-run: --prefer-fastest-link: launching with --mca btl_tcp_if_include {} "
                             "(the probe's network recommendation)", subnet) << std::endl;
    return {"--mca", "btl_tcp_if_include", subnet};
  }

  // One line of elastic.jsonl: `step` is the newest checkpoint's (where a launch resumes,
  // where a failure or a regrow left the run); `sinceFailure` (>= 0) the seconds from the
  // failure that this launch follows.
  void event(const std::string& name, int worldSize, const std::vector<Host>& hosts, const std::string& reason,
             double sinceFailure = -1) {
    const std::int64_t step = newestCheckpointStep(job_.trainDir);
    const config::Layout layout(job_, worldSize);
    const int workers = std::max(0, layout.workers());
    metrics::JsonObject line;
    line.add("time", metrics::isoTime()).add("event", name).add("world_size", worldSize);
    line.add("hosts", describeHosts(hosts)).add("step", step).add("workers", workers);
    if (!reason.empty()) line.add("reason", reason);
    if (sinceFailure >= 0) line.add("seconds_since_failure", sinceFailure);
    events_->write(line);
    const std::string who = worldSize == 0 || layout.servers() == 0
                                ? ""
                                : fmt::format(" ({} + {} worker(s))", layout.serverWords(), workers);
    std::cout << fmt::format("pstrain-run: {}: {} rank(s){} on {}, step {}{}", name, worldSize, who,
                             describeHosts(hosts), step, reason.empty() ? "" : " (" + reason + ")") << std::endl;
  }

  // Whether `published` holds a checkpoint that this job wrote (none from before its first launch).
  bool publishedOwn(const std::set<std::pair<std::string, fs::file_time_type>>& published) const {
    return std::any_of(published.begin(), published.end(), [&](const auto& c) { return !earlier_.count(c); });
  }

  // A launch killed outright (SIGKILL: no time for its own clean-up) may have left the
  // earlier run's files set aside in .replaced/, which the next start refuses: do what that
  // launch would have done, discard them once it published a checkpoint of its own (a
  // resume), else put them back (a fresh start, which sets them aside again).
  void tidySetAside(bool ownCheckpoint) {
    if (setAsideBefore_ || !rundir::holdsSetAside(job_.trainDir)) return;
    if (ownCheckpoint) {
      rundir::discardSetAside(job_.trainDir);
    } else {
      rundir::restoreSetAside(job_.trainDir, job_.overwrite);
    }
    std::cout << fmt::format("pstrain-run: the failed launch left {}/{}: {}", job_.trainDir, rundir::kSetAside,
                             ownCheckpoint ? "removed (the job has a checkpoint of its own)"
                                           : "put back (the relaunch starts afresh)")
              << std::endl;
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
  bool setAsideBefore_ = false;  // .replaced/ was there before the first launch (which then refuses to start)
  int maxWorkers_ = 0;
  bool regrowing_ = false;
  std::unique_ptr<metrics::JsonLines> events_;
  std::map<std::string, std::vector<std::string>> fastestLink_;  // --prefer-fastest-link: by hosts
};

}  // namespace

std::int64_t newestCheckpointStep(const std::string& trainDir) {
  const auto published = rundir::listPublished(rundir::pathOf(trainDir, rundir::kCheckpoints));
  return published.empty() ? 0 : published.back().step;
}

int superviseElastic(const ElasticOptions& options) {
  std::signal(SIGINT, onStopSignal);
  std::signal(SIGTERM, onStopSignal);
  return Supervisor(options).run();
}

}  // namespace pstrain::launcher
