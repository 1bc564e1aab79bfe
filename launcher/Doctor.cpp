#include "launcher/Doctor.h"

#include <fmt/format.h>
#include <sys/statvfs.h>
#include <torch/version.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "data/Dataset.h"
#include "launcher/Cli.h"
#include "launcher/Device.h"
#include "models/Registry.h"
#include "runtime/checkpoint/WeightsFile.h"
#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/Process.h"
#include "runtime/config/Layout.h"
#include "runtime/metrics/Clock.h"
#include "runtime/protocol/Handshake.h"
#include "runtime/training/MemoryPlan.h"

namespace pstrain::launcher {
namespace {

namespace fs = std::filesystem;
using metrics::Clock;

constexpr double kMaxClockSkewSeconds = 5;
constexpr int kCheckpointsOfRoom = 3;
constexpr std::size_t kSampleBytes = 1 << 20;  // a file's first and last MiB are compared

// "123456 bytes, crc32 1a2b3c4d/5e6f7a8b" (of the first and the last MiB), or what is wrong.
std::string sampleOf(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return "missing";
  if (!fs::is_regular_file(path, ec)) return "not a regular file";
  const auto size = fs::file_size(path, ec);
  std::ifstream in(path, std::ios::binary);
  if (ec || !in) return "unreadable";
  auto crcAt = [&](std::uint64_t offset) {
    std::vector<char> chunk(static_cast<std::size_t>(std::min<std::uint64_t>(kSampleBytes, size - offset)));
    in.seekg(static_cast<std::streamoff>(offset));
    in.read(chunk.data(), static_cast<std::streamsize>(chunk.size()));
    return crc32(crc32(0, nullptr, 0), reinterpret_cast<const Bytef*>(chunk.data()), static_cast<uInt>(in.gcount()));
  };
  const uLong first = crcAt(0), last = crcAt(size > kSampleBytes ? size - kSampleBytes : 0);
  return fmt::format("{} bytes, crc32 {:08x}/{:08x}", size, first, last);
}

// macOS's application firewall, where it blocks incoming connections to `executable` (which
// Open MPI's TCP transport and daemons need): what it says, else "".
std::string firewallBlocking(const std::string& executable) {
#if defined(__APPLE__)
  const std::string tool = "/usr/libexec/ApplicationFirewall/socketfilterfw";
  const auto state = process::runCommand({tool, "--getglobalstate"}, std::chrono::seconds(5), true);
  if (state.output.find("enabled") == std::string::npos) return "";
  const auto app = process::runCommand({tool, "--getappblocked", executable}, std::chrono::seconds(5), true);
  if (app.output.find("blocked") != std::string::npos && app.output.find("permitted") == std::string::npos) {
    return fmt::format("the application firewall blocks {}: sudo {} --add {} && sudo {} --unblockapp {}", executable,
                       tool, executable, tool, executable);
  }
#else
  (void)executable;
#endif
  return "";
}

// Rank 0's train dir: writable (a file made and removed in it, or in the nearest folder
// that exists when it does not yet), with room for kCheckpointsOfRoom checkpoints of
// `checkpointBytes` (0: unknown, not checked). Returns the problem ("" none) and says what it
// found in `found`.
std::string trainDirProblem(const std::string& trainDir, double checkpointBytes, std::string& found) {
  std::error_code ec;
  if (fs::exists(trainDir, ec) && !fs::is_directory(trainDir, ec)) {
    return fmt::format("--train-dir {} is not a folder: choose another --train-dir", trainDir);
  }
  fs::path where = fs::absolute(trainDir, ec);
  while (!fs::exists(where, ec) && where.has_parent_path() && where != where.parent_path()) where = where.parent_path();
  std::string probe = (where / ".pstrain-doctor-XXXXXX").string();
  const int fd = ::mkstemp(probe.data());
  if (fd < 0 || ::write(fd, "x", 1) != 1) {
    const std::string why = std::strerror(errno);
    if (fd >= 0) ::close(fd), ::unlink(probe.c_str());
    return fmt::format("--train-dir {}: cannot write in {} ({}): fix its permissions or mount, or choose another "
                       "--train-dir", trainDir, where.string(), why);
  }
  ::close(fd);
  ::unlink(probe.c_str());
  struct statvfs disk {};
  if (::statvfs(where.c_str(), &disk) != 0) return "";
  const double free = static_cast<double>(disk.f_bavail) * static_cast<double>(disk.f_frsize);
  const double needed = kCheckpointsOfRoom * checkpointBytes;
  found = checkpointBytes > 0 ? fmt::format("writable, {:.1f} GiB free ({} checkpoints need {:.1f} MiB)",
                                            free / (1 << 30), kCheckpointsOfRoom, needed / (1 << 20))
                              : fmt::format("writable, {:.1f} GiB free (a checkpoint's size unknown: the model "
                                            "or data set could not be read)", free / (1 << 30));
  if (free < needed) {
    return fmt::format("--train-dir {}: {:.1f} MiB free in {}, {} checkpoints need {:.1f} MiB: free some space or "
                       "choose another --train-dir", trainDir, free / (1 << 20), where.string(), kCheckpointsOfRoom,
                       needed / (1 << 20));
  }
  return "";
}

// The model as the run makes it: its trained parameters (models::parameterCount, what the
// run's memory plan counts) and its frozen weights, which every rank holds beside them.
struct ModelSize {
  std::int64_t trained = 0, frozen = 0;
};
ModelSize sizeOf(const config::TrainConfig& cfg) {
  const auto model = models::makeModel(cfg.model, config::isModelFile(cfg.model) ? 0 : data::datasetInfo(cfg.dataset).classes);
  return {models::parameterCount(*model), models::frozenCount(*model)};
}

// A checkpoint's size, at most: the weights and up to two optimizer states (Adam's moments),
// float32; the frozen weights once.
double checkpointBytes(const ModelSize& size) {
  return 4.0 * (3 * static_cast<double>(size.trained) + static_cast<double>(size.frozen));
}

// Ends the job with status 2 when the check has not finished within --timeout, naming what
// it was waiting for: an unreachable rank would otherwise hang it.
class Watchdog {
 public:
  Watchdog(double seconds, int rank, std::string host) : thread_([this, seconds, rank, host] {
    std::unique_lock<std::mutex> lock(mutex_);
    if (wake_.wait_for(lock, std::chrono::duration<double>(seconds), [this] { return done_; })) return;
    std::cout << fmt::format("pstrain --doctor: rank {} ({}): no answer within --timeout {:.0f} s while {}: a rank "
                             "that MPI's transport cannot reach (a firewall; an interface MPI should not use: --mca "
                             "btl_tcp_if_include SUBNET), or a host that hangs", rank, host, seconds, phase_.load())
              << std::endl;
    comm::mpi::MpiSession::abortJob(2);
  }) {}
  ~Watchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void phase(const char* what) { phase_ = what; }

 private:
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::atomic<const char*> phase_{"starting"};
  std::thread thread_;
};

// This rank's facts: "data:PATH" and "model:PATH" samples, and the rest by name.
protocol::Facts factsOf(const config::TrainConfig& cfg, comm::mpi::MpiComm& comm) {
  protocol::Facts facts;
  const bool computes = config::Layout(cfg, comm.size()).computes(comm.rank());
  const std::string self = portable::executablePath();
  facts.emplace_back("host", comm.hostName());
  facts.emplace_back("build", "pstrain 0.1, " + (self.empty() ? std::string("its file unknown") : sampleOf(self)));
  facts.emplace_back("torch", TORCH_VERSION);
  facts.emplace_back("mpi", comm::mpi::MpiSession::libraryVersion());
  facts.emplace_back("blas", processBlas().name);
  facts.emplace_back("firewall", firewallBlocking(self));
  facts.emplace_back("host-mib", fmt::format("{:.1f}", portable::memoryLimitBytes() / double(1 << 20)));
  facts.emplace_back("resident-mib", fmt::format("{:.1f}", portable::residentMib()));
  if (computes) {
    try {
      facts.emplace_back("device", chooseDevice(cfg.device, localRank()).str());
    } catch (const ConfigError& e) {
      facts.emplace_back("device-problem", e.what());
    }
    try {
      for (const std::string& file : data::filesOf(data::sourceOf(cfg))) facts.emplace_back("data:" + file, sampleOf(file));
    } catch (const Error& e) {
      facts.emplace_back("data-problem", e.what());
    }
  }
  if (config::isModelFile(cfg.model)) facts.emplace_back("model:" + cfg.model, sampleOf(cfg.model));
  if (!cfg.initFrom.empty()) {  // its structure, read and checked as the run reads it (no tensor read)
    try {
      const checkpoint::WeightsReader weights(cfg.initFrom);
      facts.emplace_back("init-from:" + cfg.initFrom, fmt::format("{} tensors, crc32 {:08x} of its structure",
                                                                  weights.tensors().size(), weights.structureCrc()));
    } catch (const Error& e) {
      facts.emplace_back("init-from-problem", fmt::format("--init-from {}", e.what()));
    }
  }
  return facts;
}

using RankFacts = std::map<std::string, std::string>;

// Every host's memory against what its ranks will hold (training/MemoryPlan.h), from each
// rank's memory now and the weights it will load; no step is run, so no activations are
// counted (--dry-run measures them). One problem line per host that would not fit, and one
// line per host saying its --memory (fast or lean) and why.
struct MemoryVerdict {
  std::vector<std::string> problems, choices;
};
MemoryVerdict checkMemory(const config::TrainConfig& cfg, const std::optional<ModelSize>& size,
                          std::vector<RankFacts>& all) {
  if (!size) return {};  // the model or data set: reported by its own check
  const std::int64_t parameters = size->trained;
  const config::Layout layout(cfg, static_cast<int>(all.size()));
  const double weightBytes = cfg.bf16Weights() ? 2 : 4;
  std::vector<training::RankMeasure> ranks;
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    RankFacts& f = all[static_cast<std::size_t>(r)];
    training::RankMeasure m;
    m.host = f["host"];
    m.hostMib = std::stod(f["host-mib"]);
    m.held = layout.heldBy(r, parameters);
    // What the run measures once it holds the model: its trained weights held, and every
    // frozen one (bfloat16 on a worker under bf16-weights).
    const double bytes = layout.serves(r) ? 4.0 : weightBytes;
    m.residentMib = std::stod(f["resident-mib"]) +
                    bytes * static_cast<double>(m.held + size->frozen) / (1 << 20);
    ranks.push_back(m);
  }
  MemoryVerdict verdict;
  const training::MemoryChoices choices = training::chooseMemory(cfg, parameters, ranks);
  for (const std::string& host : training::hostsThatDoNotFit(ranks, training::predictMemory(cfg, parameters, ranks, choices))) {
    verdict.problems.push_back(fmt::format("{}, before activations: use more hosts (--servers K, one a host), "
                                           "--precision bf16-weights, or a smaller model (--dry-run says each rank's "
                                           "peak)", host));
  }
  for (const auto& [host, choice] : choices) {
    verdict.choices.push_back(fmt::format("host {}: {} ({})", host, nameOf(choice.use), choice.why));
  }
  return verdict;
}

// The value most ranks hold for `key` (ties: the lowest rank's), among those that state it.
std::string majority(const std::vector<RankFacts>& all, const std::string& key) {
  std::map<std::string, int> count;
  std::string best;
  for (const auto& facts : all) {
    const auto it = facts.find(key);
    if (it == facts.end()) continue;
    if (++count[it->second] > count[best] || best.empty()) best = it->second;
  }
  return best;
}

// Round trips over MPI's transport, rank 0 to each rank in turn: their seconds, by rank, on
// rank 0 (zeros elsewhere).
std::vector<double> timeRoundTrips(comm::mpi::MpiComm& comm) {
  std::vector<double> roundTrips(static_cast<std::size_t>(comm.size()), 0);
  for (int r = 1; r < comm.size(); ++r) {
    char byte = 0;
    if (comm.rank() == 0) {
      const auto sent = Clock::now();
      comm.send(&byte, 1, r, "doctor: round trip");
      comm.receive(&byte, 1, r, "doctor: round trip");
      roundTrips[static_cast<std::size_t>(r)] = metrics::secondsSince(sent);
    } else if (comm.rank() == r) {
      comm.receive(&byte, 1, 0, "doctor: round trip");
      comm.send(&byte, 1, 0, "doctor: round trip");
    }
  }
  return roundTrips;
}

// Rank 0: every rank's facts compared, one line per problem naming rank, host and fix.
// A fact that samples a file every rank must hold alike: "data:PATH", "model:PATH", "init-from:PATH".
bool isFileFact(const std::string& key) {
  return key.rfind("data:", 0) == 0 || key.rfind("model:", 0) == 0 || key.rfind("init-from:", 0) == 0;
}

std::vector<std::string> problemsOf(std::vector<RankFacts>& all) {
  std::vector<std::string> problems;
  auto problem = [&](int r, const std::string& text) {
    problems.push_back(fmt::format("rank {} ({}): {}", r, all[static_cast<std::size_t>(r)]["host"], text));
  };
  const RankFacts zero = all[0];
  const std::string torchMajor = zero.at("torch").substr(0, zero.at("torch").find('.'));
  std::map<std::string, std::string> files;  // key -> the majority's sample
  for (int r = 0; r < static_cast<int>(all.size()); ++r) {
    RankFacts& f = all[static_cast<std::size_t>(r)];
    if (f["build"] != zero.at("build")) {
      problem(r, fmt::format("a different pstrain build ({}) from rank 0's ({}): install the same pstrain on every "
                             "host", f["build"], zero.at("build")));
    }
    if (f["torch"].substr(0, f["torch"].find('.')) != torchMajor) {
      problem(r, fmt::format("libtorch {}, rank 0 has {}: build pstrain against the same libtorch major version "
                             "on every host", f["torch"], zero.at("torch")));
    }
    for (const char* key : {"device-problem", "data-problem", "init-from-problem", "firewall", "train-dir-problem"}) {
      if (!f[key].empty()) problem(r, f[key]);
    }
    const double offset = std::stod(f["clock"]) - std::stod(zero.at("clock"));
    if (std::abs(offset) > kMaxClockSkewSeconds) {
      problem(r, fmt::format("its clock is {:+.1f} s off rank 0's: turn on network time on both hosts (macOS: "
                             "sudo systemsetup -setusingnetworktime on; Linux: timedatectl set-ntp true)", offset));
    }
    for (const auto& [key, sample] : f) {
      if (!isFileFact(key)) continue;
      if (!files.count(key)) files[key] = majority(all, key);
      const std::string path = key.substr(key.find(':') + 1);
      if (sample == "missing" || sample == "unreadable" || sample == "not a regular file") {
        problem(r, fmt::format("{}: {}: copy it to this host (the same path as on the others)", path, sample));
      } else if (sample != files[key]) {
        problem(r, fmt::format("{} differs from the other ranks' copy ({}; theirs: {}): copy the same file to "
                               "every host (rsync -a)", path, sample, files[key]));
      }
    }
  }
  return problems;
}

// Rank 0's report: what every rank has in common, then the problems.
std::string reportOf(std::vector<RankFacts>& all, const std::vector<double>& roundTrips, const std::string& trainDir,
                     const std::string& trainDirFound, const MemoryVerdict& memory,
                     const std::vector<std::string>& problems, double seconds) {
  const RankFacts& zero = all[0];
  std::map<std::string, int> hosts;
  std::set<std::string> files;
  double skew = 0;
  for (auto& f : all) {
    ++hosts[f["host"]];
    skew = std::max(skew, std::abs(std::stod(f["clock"]) - std::stod(zero.at("clock"))));
    for (const auto& fact : f) {
      if (isFileFact(fact.first)) files.insert(fact.first);
    }
  }
  std::string out = fmt::format("pstrain --doctor: {} rank(s) on {} host(s); {}; libtorch {}; {}; BLAS: {}\n", all.size(),
                                hosts.size(), zero.at("build"), zero.at("torch"),
                                zero.at("mpi").substr(0, zero.at("mpi").find('\n')), zero.at("blas"));
  out += fmt::format("  files compared: {} (data set, model and --init-from, on every rank that reads them); clock skew at most "
                     "{:.3f} s; round trips from rank 0 at most {:.2f} ms\n", files.size(), skew,
                     1e3 * *std::max_element(roundTrips.begin(), roundTrips.end()));
  if (!trainDirFound.empty()) out += fmt::format("  train dir {}: {}\n", trainDir, trainDirFound);
  for (const auto& c : memory.choices) out += "  memory: " + c + "\n";
  for (const auto& p : problems) out += "  problem: " + p + "\n";
  out += problems.empty() ? fmt::format("pstrain --doctor: all well ({:.1f} s); trained nothing\n", seconds)
                          : fmt::format("pstrain --doctor: {} problem(s) ({:.1f} s); trained nothing\n", problems.size(), seconds);
  return out;
}

}  // namespace

int runDoctor(comm::mpi::MpiComm& comm, const config::TrainConfig& cfg) {
  const auto start = Clock::now();
  const int rank = comm.rank();
  Watchdog watchdog(cfg.timeoutSeconds, rank, comm.hostName());
  if (rank == 0) std::cout << fmt::format("pstrain --doctor: checking {} rank(s) ...", comm.size()) << std::endl;
  watchdog.phase("timing round trips from rank 0 to every rank");
  const std::vector<double> roundTrips = timeRoundTrips(comm);

  watchdog.phase("every rank looked at its files");
  protocol::Facts mine = factsOf(cfg, comm);
  std::string trainDirFound;
  std::optional<ModelSize> size;  // rank 0's: the model as the run makes it
  if (rank == 0) {
    try {
      size = sizeOf(cfg);
    } catch (const Error&) {  // the model or data set that sizes it: reported by its own check
    }
    mine.emplace_back("train-dir-problem", trainDirProblem(cfg.trainDir, size ? checkpointBytes(*size) : 0, trainDirFound));
  }
  comm.barrier("doctor: clocks");
  mine.emplace_back("clock", fmt::format("{:.6f}", std::chrono::duration<double>(
                                                      std::chrono::system_clock::now().time_since_epoch()).count()));
  watchdog.phase("gathering every rank's facts");
  const auto gathered = comm.gather(protocol::encodeFacts(mine), 0, "doctor: facts");

  int status = 0;
  if (rank == 0) {
    std::vector<RankFacts> all;
    for (int r = 0; r < comm.size(); ++r) all.push_back(protocol::decodeFacts(gathered[static_cast<std::size_t>(r)], r));
    std::vector<std::string> problems = problemsOf(all);
    const MemoryVerdict memory = checkMemory(cfg, size, all);
    for (const std::string& p : memory.problems) problems.push_back(p);
    std::cout << reportOf(all, roundTrips, cfg.trainDir, trainDirFound, memory, problems, metrics::secondsSince(start))
              << std::flush;
    status = problems.empty() ? 0 : 2;
  }
  watchdog.phase("sharing the verdict");
  comm.broadcast(&status, sizeof status, 0, "doctor: verdict");
  return status;
}

}  // namespace pstrain::launcher
