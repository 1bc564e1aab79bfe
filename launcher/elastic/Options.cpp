#include "launcher/elastic/Options.h"

#include <cxxopts.hpp>
#include <fmt/format.h>

#include <filesystem>

#include "launcher/OptionValues.h"
#include "runtime/Errors.h"
#include "runtime/config/Flags.h"

namespace pstrain::launcher {
namespace {

namespace fs = std::filesystem;

// pstrain-run's own flags, with `d`'s values as their defaults.
cxxopts::Options elasticOptions(const ElasticOptions& d) {
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
    ("prefer-fastest-link", "before launching on a set of hosts, run pstrain --probe there (same flags) and, when its "
                            "network map finds a subnet faster than MPI's path, launch with --mca btl_tcp_if_include "
                            "SUBNET (README: \"Connecting Macs\")")
    ("pstrain", "the pstrain binary (default: the one next to pstrain-run)", defaulted(d.pstrain))
    ("h,help", "print this help");
  // clang-format on
  return options;
}

// Throws ConfigError naming what `o` cannot use, pstrain's flags included.
void checkElasticOptions(const ElasticOptions& o) {
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
}

}  // namespace

ElasticOptions parseElasticCommand(int argc, char** argv) {
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
  cxxopts::Options options = elasticOptions(ElasticOptions());
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
  o.preferFastestLink = r.count("prefer-fastest-link") > 0;
  o.pstrain = r["pstrain"].as<std::string>();
  if (o.pstrain.empty()) {
    const fs::path self = fs::path(argv[0]).parent_path() / "pstrain";
    o.pstrain = fs::exists(self) ? self.string() : "pstrain";
  }
  checkElasticOptions(o);
  return o;
}

}  // namespace pstrain::launcher
