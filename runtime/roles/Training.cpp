#include "runtime/roles/Training.h"

#include <fmt/format.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <ctime>
#include <filesystem>

#include "runtime/Errors.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/metrics/Json.h"
#include "runtime/roles/Handshake.h"
#include "runtime/roles/ParameterServer.h"
#include "runtime/roles/Worker.h"

namespace pstrain::roles {
namespace {

namespace fs = std::filesystem;

constexpr const char* kProtocolVersion = "1";

// Makes the train dir ready for a new run on rank 0: refuses to mix with an earlier run
// unless --overwrite, and proves it is writable before any worker starts computing.
void prepareTrainDir(const config::TrainConfig& cfg) {
  fs::path dir(cfg.trainDir);
  std::error_code ec;
  if (fs::exists(dir / "run.json")) {
    if (!cfg.overwrite) {
      throw ConfigError(fmt::format(
          "{} already holds a run; pass --overwrite to replace it or choose another --train-dir",
          cfg.trainDir));
    }
    for (const char* name : {"ckpt", "metrics.jsonl", "trained_model.pt", "eval.csv", "eval.jsonl", "run.json"}) {
      fs::remove_all(dir / name, ec);
    }
  }
  fs::create_directories(dir / "ckpt", ec);
  if (ec) throw Error(fmt::format("{}: cannot create ({})", (dir / "ckpt").string(), ec.message()));
  checkpoint::atomicWrite((dir / ".write-test").string(), "ok\n");
  fs::remove(dir / ".write-test", ec);
}

std::string isoTime() {
  std::time_t now = std::time(nullptr);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&now));
  return text;
}

void writeRunJson(const config::TrainConfig& cfg, const RunInfo& info,
                  const std::vector<std::map<std::string, std::string>>& facts,
                  std::int64_t trainSamples, std::int64_t parameters) {
  metrics::JsonObject config;
  for (const auto& [key, value] : cfg.sharedFields()) config.add(key, value);
  config.add("data-dir", cfg.dataDir).add("train-dir", cfg.trainDir);
  config.add("log-every", cfg.logEvery).add("threads", cfg.threads).add("device", cfg.device);
  config.add("timeout", cfg.timeoutSeconds);
  std::string ranks = "[";
  for (std::size_t r = 0; r < facts.size(); ++r) {
    metrics::JsonObject rank;
    rank.add("rank", static_cast<std::int64_t>(r)).add("role", r == 0 ? "server" : "worker");
    rank.add("host", facts[r].at("info.host")).add("device", facts[r].at("info.device"));
    rank.add("torch", facts[r].at("info.torch"));
    ranks += (r ? "," : "") + rank.str();
  }
  ranks += "]";
  metrics::JsonObject run;
  run.add("fingerprint", cfg.fingerprint()).add("start_time", isoTime());
  run.add("world_size", static_cast<std::int64_t>(facts.size()));
  run.add("workers", static_cast<std::int64_t>(facts.size() - 1));
  run.add("train_samples", trainSamples).add("parameters", parameters);
  run.add("torch_version", TORCH_VERSION).add("mpi_library", info.mpiLibrary);
  run.add("command", info.commandLine);
  run.addRaw("config", config.str()).addRaw("ranks", ranks);
  checkpoint::atomicWrite((fs::path(cfg.trainDir) / "run.json").string(), run.str() + "\n");
}

}  // namespace

void runTraining(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
                 const data::Dataset* train, c10::Device device, const RunInfo& info) {
  if (comm.size() < 2) {
    throw CollectiveConfigError(
        "a run needs a parameter server and at least one worker: start 2 or more ranks "
        "(mpirun -np 3 ... for 2 workers)");
  }
  comm.setTimeoutSeconds(cfg.timeoutSeconds);
  const bool server = comm.rank() == 0;
  if (server) prepareTrainDir(cfg);

  Facts mine = cfg.sharedFields();
  mine.emplace_back("protocol", kProtocolVersion);
  mine.emplace_back("parameters", models::parameterSignature(model));
  mine.emplace_back("train-samples", server ? "" : std::to_string(train->size()));
  mine.emplace_back("info.host", comm.hostName());
  mine.emplace_back("info.device", device.str());
  mine.emplace_back("info.torch", TORCH_VERSION);
  auto facts = handshake(comm, mine);

  if (server) {
    std::int64_t trainSamples = std::stoll(facts.at(1).at("train-samples"));
    writeRunJson(cfg, info, facts, trainSamples, models::parameterCount(model));
    ParameterServer(comm, cfg, model, trainSamples).run();
  } else {
    Worker(comm, cfg, model, *train, device).run();
  }
}

}  // namespace pstrain::roles
