#include "runtime/training/Training.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <unistd.h>

#include <algorithm>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>

#include "models/StateDict.h"
#include "runtime/Errors.h"
#include "runtime/config/Devices.h"
#include "runtime/config/Flags.h"
#include "runtime/config/Layout.h"
#include "runtime/metrics/Clock.h"
#include "runtime/metrics/Json.h"
#include "runtime/metrics/Startup.h"
#include "runtime/net/Interfaces.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/Handshake.h"
#include "runtime/loss/Loss.h"
#include "runtime/Portable.h"
#include "runtime/roles/Autocast.h"
#include "runtime/roles/RoleArgs.h"
#include "runtime/roles/StepMemory.h"
#include "runtime/training/Checks.h"
#include "runtime/training/DryRun.h"
#include "runtime/training/Exchanges.h"
#include "runtime/training/Facts.h"
#include "runtime/training/MemoryPlan.h"
#include "runtime/rundir/AtomicFile.h"
#include "runtime/rundir/RunFiles.h"
#include "runtime/zip/ZipDirectory.h"

namespace pstrain::training {

using namespace roles;

using namespace protocol;

namespace {

// The messages' layout: ranks of different layouts refuse to start (the handshake). 3: the
// rounds' decision carries the streamed fragments (issue 83).
constexpr const char* kProtocolVersion = "3";

// With --resume: the newest checkpoint in the train dir that reads back intact, skipping
// (and reporting) damaged ones; none if there is none. A checkpoint of another model or
// dataset is an error, not something to skip.
std::optional<checkpoint::Checkpoint> resumePoint(const config::TrainConfig& cfg) {
  const std::string dir = rundir::pathOf(cfg.trainDir, rundir::kCheckpoints);
  auto published = rundir::listPublished(dir);
  for (auto it = published.rbegin(); it != published.rend(); ++it) {
    checkpoint::Checkpoint ckpt;
    try {
      ckpt = checkpoint::read(*it);
    } catch (const CheckpointError& e) {
      std::cout << "pstrain: resume: skipping step " << it->step << ": " << e.what() << std::endl;
      continue;
    }
    if (ckpt.model != cfg.model || ckpt.dataset != cfg.dataset) {
      throw CheckpointError(fmt::format("{}: a checkpoint of {} on {}, but this run trains {} on {} "
                                        "(another run's --train-dir?)", it->path, ckpt.model, ckpt.dataset,
                                        cfg.model, cfg.dataset));
    }
    std::cout << "pstrain: resume: continuing from " << it->path << std::endl;
    return ckpt;
  }
  std::cout << "pstrain: resume: no valid checkpoint in " << dir << "; starting at step 0" << std::endl;
  return std::nullopt;
}

// What changed between a checkpoint's configuration ("name=value" lines) and `now`: ": --steps
// 100 -> 200, --mode sync -> diloco"; the fingerprints for a checkpoint that does not say.
std::string configurationChange(const std::string& before, const config::RunPlan& now) {
  if (before.empty()) return fmt::format(" (fingerprint now {})", now.fingerprint());
  std::map<std::string, std::string> earlier;
  std::istringstream lines(before);
  for (std::string line; std::getline(lines, line);) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) earlier[line.substr(0, eq)] = line.substr(eq + 1);
  }
  std::vector<std::string> changes;
  for (const auto& [name, value] : config::fingerprintFields(now.explicitFlags())) {
    const auto it = earlier.find(name);
    const std::string was = it == earlier.end() ? "(unset)" : it->second;
    if (was != value) changes.push_back(fmt::format("--{} {} -> {}", name, was, value));
  }
  return changes.empty() ? "" : ": " + fmt::format("{}", fmt::join(changes, ", "));
}

// The virtual shards of the run (RunPlan::resolvedShards), decided on rank 0: --virtual-
// shards, else the checkpoint's on --resume, else one per computing rank. A resume that
// would change them or the batch size (so the data order, the global batch and the lr) is
// refused without --reshard. Modes that are not sharded (Mode.h) deal the data to their
// workers: one shard each, re-dealt when their number changed.
int resolveVirtualShards(const config::TrainConfig& cfg, int computing, const checkpoint::Checkpoint* resume) {
  const int before = resume ? static_cast<int>(resume->virtualShards) : 0;
  if (!cfg.modeInfo().dealsVirtualShards) {
    if (cfg.virtualShards > 0 && cfg.virtualShards != computing) {
      throw ConfigError(fmt::format("--mode {} deals the data to its {} computing ranks: --virtual-shards applies to "
                                    "sync and allreduce only", cfg.modeInfo().name, computing));
    }
    if (before > 0 && before != computing) {
      std::cout << fmt::format("pstrain: resume: --mode {} re-deals the data to {} computing ranks (it had {}); "
                               "per-worker state (error-feedback residuals, gossip replicas) starts afresh",
                               cfg.modeInfo().name, computing, before) << std::endl;
    }
    return computing;
  }
  const int shards = cfg.virtualShards > 0 ? cfg.virtualShards : before > 0 ? before : computing;
  if (resume && !cfg.reshard) {
    if (before > 0 && shards != before) {
      throw ConfigError(fmt::format("the run in {} deals each step to {} virtual shards, --virtual-shards says {}: that "
                                    "changes the data order, the global batch and the lr; --reshard if you mean it",
                                    cfg.trainDir, before, shards));
    }
    if (resume->batchSize > 0 && resume->batchSize != cfg.shardBatch()) {
      throw ConfigError(fmt::format("the run in {} has a batch of {} per worker (--batch-size x --grad-accum), now {}: "
                                    "that changes the global batch and the data order; --reshard if you mean it",
                                    cfg.trainDir, resume->batchSize, cfg.describeBatch()));
    }
  }
  if (computing > shards) {
    throw ConfigError(fmt::format("{} computing ranks for {} virtual shards: start at most {} workers, or more "
                                  "--virtual-shards (with --reshard on --resume)", computing, shards, shards));
  }
  if (resume && before > 0 && computing != before) {
    std::cout << fmt::format("pstrain: resume: {} computing rank(s) share the run's {} virtual shards: the result stays "
                             "that of the run; per-worker state (error-feedback residuals, PowerSGD's Q) starts afresh",
                             computing, shards) << std::endl;
  }
  return shards;
}

void writeRunJson(const config::RunPlan& cfg, const RunInfo& info,
                  const std::vector<std::map<std::string, std::string>>& facts,
                  const training::MemoryChoices& memory, std::int64_t trainSamples, std::int64_t parameters,
                  std::int64_t firstStep, const std::string& startup) {
  metrics::JsonObject config;
  for (const auto& [key, value] : config::allFields(cfg)) config.add(key, value);
  const bool peers = cfg.modeInfo().peers();
  std::vector<std::string> ranks;
  const config::Layout layout(cfg, static_cast<int>(facts.size()));
  for (std::size_t r = 0; r < facts.size(); ++r) {
    metrics::JsonObject rank;
    const bool computes = layout.computes(static_cast<int>(r));
    rank.add("rank", static_cast<std::int64_t>(r)).add("role", peers ? "peer" : computes ? "worker" : "server");
    rank.add("host", facts[r].at("info.host")).add("pid", static_cast<std::int64_t>(std::stoll(facts[r].at("info.pid"))));
    const training::MemoryChoice& hosts = memory.at(facts[r].at("info.memory.host"));  // its host's --memory
    rank.add("memory", nameOf(hosts.use)).add("lean_spare_mib", hosts.leanSpareMib);
    rank.add("device", facts[r].at("info.device"));
    rank.add("torch", facts[r].at("info.torch")).add("threads", facts[r].at("info.threads"));
    rank.add("blas", facts[r].at("info.blas"));
    rank.add("mpi_yield_when_idle", facts[r].at("info.yield-when-idle"));
    if (!startup.empty()) rank.addRaw("startup_s", facts[r].at("info.startup"));
    ranks.push_back(rank.str());
  }
  metrics::JsonObject run;
  run.add("fingerprint", cfg.fingerprint()).add("start_time", metrics::isoTime());
  run.add("world_size", static_cast<std::int64_t>(facts.size()));
  if (!peers) run.add("servers", layout.servers());
  run.add("workers", layout.workers());
  run.add("train_samples", trainSamples).add("parameters", parameters).add("first_step", firstStep);
  const std::string& ids = tokenIdsOf(cfg, facts);
  if (!ids.empty()) run.add("token_ids", ids);
  run.add("torch_version", TORCH_VERSION).add("mpi_library", info.mpiLibrary).add("blas", blasOfRanks(facts));
  run.add("command", info.commandLine);
  // Rank 0's start-up to its first step (the workers' phases, to the handshake, are theirs).
  if (!startup.empty()) run.addRaw("startup_s", startup);
  run.addRaw("config", config.str()).addRaw("ranks", metrics::jsonRawArray(ranks));
  rundir::atomicWrite(rundir::pathOf(cfg.trainDir, rundir::kRunJson), run.str() + "\n");
}

}  // namespace

namespace {

// This host's IPv4 addresses but loopback's, sorted: with its name, what tells hosts apart
// (test hosts in network namespaces share one name; containers may too).
std::string hostAddresses() {
  std::vector<std::string> addresses;
  for (const net::Interface& i : net::localInterfaces()) {
    if (!i.loopback) addresses.push_back(net::dotted(i.address));
  }
  std::sort(addresses.begin(), addresses.end());
  return fmt::format("{}", fmt::join(addresses, ", "));
}

training::RankMeasure memoryNow(comm::Communicator& comm, const config::TrainConfig& cfg, const models::Net& model);
protocol::Facts memoryFacts(const training::RankMeasure& m);

// Whether the run's first down message could leave the weights out, where every worker
// holds rank 0's already: diloco's rounds with one server (which holds the whole model).
bool mayHoldWeights(const config::TrainConfig& cfg) {
  return cfg.modeInfo().runsLocalRounds() && cfg.servers == 1 && !cfg.probe;
}

// The CRC-32 of the model's trained weights as float32, in their flat order: equal on two
// ranks exactly when their weights are, bit for bit (up to a CRC's collisions, 2^-32).
std::string weightsCrc(const models::Net& model) {
  std::uint32_t crc = 0;
  for (const at::Tensor& p : model.parameters()) {
    const at::Tensor t = p.detach().to(at::kCPU, at::kFloat).contiguous();
    crc = zip::crc32Of(crc, t.data_ptr(), t.nbytes());
  }
  return fmt::format("{:08x}", crc);
}

// Whether every rank's initial weights (the handshake's "info.initial-weights": rank 0's
// after a resume's checkpoint is loaded) are rank 0's.
bool workersHoldWeights(const config::TrainConfig& cfg, const std::vector<std::map<std::string, std::string>>& facts) {
  if (!mayHoldWeights(cfg)) return false;
  const auto crc = [](const std::map<std::string, std::string>& rank) {
    const auto it = rank.find("info.initial-weights");
    return it == rank.end() ? std::string() : it->second;
  };
  return !crc(facts[0]).empty() &&
         std::all_of(facts.begin(), facts.end(), [&](const auto& rank) { return crc(rank) == crc(facts[0]); });
}

// This rank's facts for the handshake: the flags the ranks must agree on, what must match
// (protocol, parameters, data, files of the user's) and what is only recorded ("info.").
Facts factsOf(comm::Communicator& comm, const config::RunPlan& cfg, const config::RunPlan& run,
              const models::Net& model, const data::Dataset* train, c10::Device device, const RunInfo& info) {
  Facts mine = config::agreedFields(cfg);
  mine.emplace_back("protocol", kProtocolVersion);
  mine.emplace_back("parameters", models::parameterSignature(model));
  // Facts that are not a rank's are left out (a server has no data set; rank 0 decides the
  // virtual shards), never stated empty: an empty fact is compared as any other.
  if (train) mine.emplace_back("train-samples", std::to_string(train->size()));
  if (comm.rank() == 0) mine.emplace_back("resolved-virtual-shards", std::to_string(run.resolvedShards));
  // Files of the user's: the same contents on every rank, whatever their paths.
  mine.emplace_back("model-file", model.fileIdentity());
  mine.emplace_back("init-from-file", cfg.initFromIdentity);
  mine.emplace_back("info.init-from-file", cfg.initFrom);
  mine.emplace_back("info.model-file", cfg.model);
  if (train) mine.emplace_back("dataset-file", train->fileIdentity);
  mine.emplace_back("info.dataset-file", cfg.dataset);
  mine.emplace_back("info.token-ids", train ? train->storedIds : "");
  mine.emplace_back("info.host", comm.hostName());
  mine.emplace_back("info.addresses", hostAddresses());
  mine.emplace_back("info.pid", std::to_string(::getpid()));
  mine.emplace_back("info.device", device.str());
  mine.emplace_back("info.torch", TORCH_VERSION);
  mine.emplace_back("info.threads", std::to_string(at::get_num_threads()));
  mine.emplace_back("info.blas", info.blas.name);
  mine.emplace_back("info.blas-reference", info.blas.reference ? "1" : "0");
  mine.emplace_back("info.yield-when-idle", info.yieldWhenIdle);
  if (mayHoldWeights(cfg)) mine.emplace_back("info.initial-weights", weightsCrc(model));
  mine.emplace_back("info.startup", metrics::Startup::process().json());
  for (auto& [key, value] : memoryFacts(memoryNow(comm, cfg, model))) mine.emplace_back("info.memory." + key, value);
  return mine;
}

// The run itself, after the start-up: rank 0 holds the train dir and writes run.json (again
// after the first step, with the start-up's times); a failure before the first checkpoint
// gives the earlier run's files back.
void trainInRoles(comm::Communicator& comm, StartedRun& started, models::Net& model, const data::Dataset* train,
           c10::Device device, const RunInfo& info) {
  const config::RunPlan& run = started.run;
  const checkpoint::Checkpoint* resume = started.resume ? &*started.resume : nullptr;
  auto roles = [&] { training::runRole({comm, run, model, train, started.trainSamples, device, resume}); };
  if (comm.rank() != 0) return roles();
  started.trainDir->begin();
  const std::int64_t parameters = models::parameterCount(model), firstStep = resume ? resume->step : 0;
  metrics::Startup::process().afterFirstStep([&] {
    writeRunJson(run, info, started.facts, started.memory, started.trainSamples, parameters, firstStep,
                 metrics::Startup::process().json());
  });
  struct Disarm {
    ~Disarm() { metrics::Startup::process().afterFirstStep(nullptr); }
  } disarm;  // the hook refers to this scope
  try {
    writeRunJson(run, info, started.facts, started.memory, started.trainSamples, parameters, firstStep, "");
    roles();
  } catch (...) {
    started.trainDir->restore();  // no-op once the first checkpoint made the earlier run's files go
    throw;
  }
}

// This rank's memory as it is loaded (training/MemoryPlan.h): its host's, its own now and at
// its peak so far (the start-up's, loading the model), the parameters whose weights it
// holds; no step.
training::RankMeasure memoryNow(comm::Communicator& comm, const config::TrainConfig& cfg, const models::Net& model) {
  training::RankMeasure m;
  m.host = comm.hostName();
  m.hostMib = portable::memoryLimitBytes() / double(1 << 20);
  m.residentMib = portable::residentMib();
  m.peakMib = portable::peakRssMib();
  m.held = models::parameterCount(model);
  if (const auto needed = weightsNeeded(cfg, comm.rank())) {
    const models::FlatSpan span = needed(model);
    m.held = std::min(span.end, m.held) - std::max<std::int64_t>(span.begin, 0);
  }
  return m;
}

// A rank's memory as facts (memoryOf reads them back).
protocol::Facts memoryFacts(const training::RankMeasure& m) {
  return {{"host", m.host},
          {"host-mib", fmt::format("{:.1f}", m.hostMib)},
          {"resident-mib", fmt::format("{:.1f}", m.residentMib)},
          {"peak-mib", fmt::format("{:.1f}", m.peakMib)},
          {"step-mib", fmt::format("{:.1f}", m.stepMib)},
          {"held", std::to_string(m.held)}};
}

// memoryNow, and a computing rank's step, measured on its first batch (after the peak so far
// is read; last: the trial binds the model's parameters to its messages).
protocol::Facts measureMemory(comm::Communicator& comm, const config::RunPlan& cfg, models::Net& model,
                              const data::Dataset* train, c10::Device device) {
  training::RankMeasure m = memoryNow(comm, cfg, model);
  const config::Layout layout(cfg, comm.size());
  if (layout.computes(comm.rank()) && train) {
    const roles::StepMemory step = roles::measureStep(cfg, model, *train, device, layout.workerIndex(comm.rank()),
                                                      layout.workers(), comm.rank(), comm.size());
    m.residentMib = step.beforeMib;
    m.stepMib = step.stepMib;
  }
  return memoryFacts(m);
}

// A rank's memory facts (memoryFacts'), those whose keys start `prefix`.
training::RankMeasure memoryOf(const std::map<std::string, std::string>& facts, const std::string& prefix = "") {
  training::RankMeasure m;
  m.host = facts.at(prefix + "host");
  m.hostMib = std::stod(facts.at(prefix + "host-mib"));
  m.residentMib = std::stod(facts.at(prefix + "resident-mib"));
  m.peakMib = std::stod(facts.at(prefix + "peak-mib"));
  m.stepMib = std::stod(facts.at(prefix + "step-mib"));
  m.held = std::stoll(facts.at(prefix + "held"));
  return m;
}

// Every host's --memory, from the handshake's facts: the same on every rank.
training::MemoryChoices chooseMemory(const config::TrainConfig& cfg, const models::Net& model,
                                     const std::vector<std::map<std::string, std::string>>& facts) {
  std::vector<training::RankMeasure> ranks;
  for (const auto& rank : facts) ranks.push_back(memoryOf(rank, "info.memory."));
  return training::chooseMemory(cfg, models::parameterCount(model), ranks);
}

}  // namespace

namespace {

// --resume goes on from the checkpoint's weights, whatever --init-from says; but only rank 0
// loads the checkpoint, and every rank took the frozen weights (never sent) from the model
// file and --init-from's file (which the handshake finds equal on every rank). So they must
// be the checkpoint's, bit for bit: a model file replaced between a run and its --resume
// (same names and shapes, another base) would have the workers train the adapters against
// a base that no checkpoint holds.
void checkFrozenWeights(const checkpoint::Checkpoint& resume, const models::Net& model) {
  const std::map<std::string, at::Tensor> saved(resume.modelState.begin(), resume.modelState.end());
  std::vector<std::string> differ;
  for (const auto& [name, tensor] : model.frozen()) {
    const auto it = saved.find(name);
    if (it != saved.end() && it->second.sizes() == tensor.sizes() &&
        torch::equal(it->second.to(tensor.scalar_type()), tensor.to(torch::kCPU))) {
      continue;
    }
    differ.push_back(name);
  }
  if (differ.empty()) return;
  throw ConfigError(fmt::format(
      "--resume: the model's frozen weights are not those step {} was trained with ({} of {} differ: {}{}): its "
      "model file or --init-from file changed since. Every rank takes the frozen weights from those files (they never "
      "travel), so give the run's files again, or start a new run from this one with --overwrite",
      resume.step, differ.size(), model.frozen().size(), fmt::join(differ.begin(), differ.begin() + std::min<std::size_t>(differ.size(), 5), ", "),
      differ.size() > 5 ? ", ..." : ""));
}

}  // namespace

StartedRun startRun(comm::Communicator& comm, const config::RunPlan& cfg, models::Net& model,
                    const data::Dataset* train, c10::Device device, const RunInfo& info) {
  checkWorld(cfg, comm.size());
  if (models::parameterCount(model) == 0) {  // every rank alike, before anything waits
    throw ConfigError(fmt::format("--model {}: it has nothing to train: none of its parameters requires grad ({} frozen "
                                  "weights); set requires_grad on the parameters to train (a fine-tune's adapters) "
                                  "before exporting it", cfg.model, models::frozenCount(model)));
  }
  comm.setTimeoutSeconds(cfg.timeoutSeconds);
  comm.setStallWarningSeconds(cfg.stallWarningSeconds);
  StartedRun started;
  started.run = cfg;  // and its virtual shards (rank 0's, told in the handshake) and memory resolved below
  if (comm.rank() == 0) {
    started.trainDir = std::make_unique<rundir::TrainDir>(cfg);
    if (cfg.resume) started.resume = resumePoint(cfg);
    const checkpoint::Checkpoint* resume = started.resume ? &*started.resume : nullptr;
    started.run.resolvedShards = resolveVirtualShards(cfg, config::Layout(cfg, comm.size()).workers(), resume);
  }
  if (started.resume) {
    checkFrozenWeights(*started.resume, model);
    if (started.resume->fingerprint != started.run.fingerprint()) {
      std::cout << fmt::format("pstrain: resume: the configuration differs from the one that wrote step {}{}; "
                               "continuing with the new one", started.resume->step,
                               configurationChange(started.resume->configuration, started.run))
                << std::endl;
    }
    models::loadStateDict(model, started.resume->modelState, fmt::format("step {} checkpoint", started.resume->step));
  }
  // A model of the user's must fit the data before anything is waited for (--dry-run too).
  if (train) {  // in the precision the worker computes in (its weights may be bfloat16)
    const roles::AutocastScope autocast(device, config::precisionInfo(cfg.precision).kind);
    loss::checkModelFitsData(model, cfg.model, *train, cfg.lossFunction(), device);
    portable::giveBackFreedMemory();  // the check's activations: a step finds its own
  }
  started.facts = handshake(comm, factsOf(comm, cfg, started.run, model, train, device, info));
  metrics::Startup::process().mark("handshake");
  checkServerHosts(cfg, started.facts);
  if (comm.rank() == 0) warnOfReferenceBlas(cfg, started.facts);
  for (const auto& rank : started.facts) {
    if (const auto samples = rank.find("train-samples"); samples != rank.end()) started.trainSamples = std::stoll(samples->second);
  }
  started.run.resolvedShards = std::stoi(started.facts[0].at("resolved-virtual-shards"));
  started.memory = chooseMemory(cfg, model, started.facts);
  started.run.memoryChosen = started.memory.at(comm.hostName()).use;
  started.run.leanSpareMib = started.memory.at(comm.hostName()).leanSpareMib;
  started.run.workersHoldWeights = workersHoldWeights(cfg, started.facts);
  checkBatchFitsShards(started.run, started.trainSamples);
  const exchanges::Exchange& exchange = training::exchangeFor(started.run);
  if (exchange.check) exchange.check(started.run, model);
  return started;
}

void runTraining(comm::Communicator& comm, const config::RunPlan& cfg, models::Net& model,
                 const data::Dataset* train, c10::Device device, const RunInfo& info) {
  StartedRun started = startRun(comm, cfg, model, train, device, info);
  if (!cfg.dryRun) return trainInRoles(comm, started, model, train, device, info);
  const std::int64_t parameters = models::parameterCount(model);
  const auto measures = comm.gather(protocol::encodeFacts(measureMemory(comm, started.run, model, train, device)), 0,
                                    "dry run: every rank's memory");
  if (comm.rank() != 0) return;
  std::vector<training::RankMeasure> ranks;
  for (int r = 0; r < comm.size(); ++r) {
    ranks.push_back(memoryOf(protocol::decodeFacts(measures[static_cast<std::size_t>(r)], r)));
  }
  std::string trainDirState = started.trainDir->state();
  if (started.resume) trainDirState += fmt::format("; resuming at step {}", started.resume->step);
  printPlan(started.run, started.facts, started.trainSamples, model, trainDirState,
            training::describeMemory(started.run, parameters, ranks, started.memory));
}

models::WeightsNeeded weightsNeeded(const config::TrainConfig& cfg, int rank) {
  const auto part = training::exchangeFor(cfg).serverWeights;
  const config::Layout layout(cfg, rank + 1);  // (the ranks beyond do not matter here)
  if (!part || cfg.probe || !layout.cutsWeights() || !layout.serves(rank)) return {};
  return [&cfg, part, rank](const models::Net& model) -> models::FlatSpan {
    try {
      const exchanges::KeyRange range = part(cfg, model, rank);
      return {range.begin, range.end};
    } catch (const Error&) {
      return {};  // a layout refused after the handshake, on every rank (Exchange::check)
    }
  };
}

}  // namespace pstrain::training
