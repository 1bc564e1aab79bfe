#include "runtime/config/TrainConfig.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "runtime/Errors.h"

namespace pstrain::config {
namespace {

void require(bool ok, const std::string& message) {
  if (!ok) throw ConfigError(message);
}

void requireOneOf(const std::string& flag, const std::string& value,
                  const std::set<std::string>& allowed) {
  if (allowed.count(value)) return;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  throw ConfigError(fmt::format("--{} '{}' is not one of: {}", flag, value, list));
}

// "RANK:NUMBER" with RANK >= minRank and NUMBER >= 0, for the testing flags.
std::pair<int, double> rankAndNumber(const std::string& flag, const std::string& text, int minRank,
                                     const char* what) {
  int rank = 0;
  double number = 0;
  char end = 0;
  require(std::sscanf(text.c_str(), "%d:%lf%c", &rank, &number, &end) == 2 && rank >= minRank && number >= 0 &&
              std::isfinite(number),
          fmt::format("--{} wants RANK:{} with RANK >= {} (got '{}')", flag, what, minRank, text));
  return {rank, number};
}

}  // namespace

std::string canonicalNumber(double value) {
  for (int precision = 1; precision <= 17; ++precision) {
    std::string text = fmt::format("{:.{}g}", value, precision);
    if (std::stod(text) == value) return text;
  }
  return fmt::format("{:.17g}", value);
}

void TrainConfig::validate() const {
  requireOneOf("mode", mode, {"sync", "backup", "async", "allreduce", "gossip"});
  require(aggregate >= 0, fmt::format("--aggregate must be 1 or more, or 0 for workers - 1 (got {})", aggregate));
  require(maxStaleness >= 0, fmt::format("--max-staleness must be 0 or more (got {})", maxStaleness));
  require(fetchProbability >= 0 && fetchProbability <= 1,
          fmt::format("--fetch-probability must be in [0, 1] (got {})", fetchProbability));
  gossipInterpolation();
  require(std::isfinite(divergenceThreshold) && divergenceThreshold >= 0,
          fmt::format("--divergence-threshold must be 0 (off) or a positive number (got {})", divergenceThreshold));
  require(std::isfinite(peerTimeoutMs) && peerTimeoutMs > 0 && peerTimeoutMs <= kMaxSeconds * 1000,
          fmt::format("--peer-timeout-ms must be a positive number of at most {} (got {})", kMaxSeconds * 1000, peerTimeoutMs));
  straggler();
  require(std::isfinite(simulateComputeMs) && simulateComputeMs >= 0 && simulateComputeMs <= 3.6e6,
          fmt::format("--simulate-compute must be 0 (off) or milliseconds up to 3600000 (got {})", simulateComputeMs));
  require(std::isfinite(maxSeconds) && maxSeconds >= 0 && maxSeconds <= kMaxSeconds,
          fmt::format("--max-seconds must be 0 (no limit) or a number of seconds up to {} (got {})", kMaxSeconds, maxSeconds));
  requireOneOf("error-feedback", errorFeedback, {"auto", "on", "off"});
  requireOneOf("overlap", overlap, {"on", "off"});
  require(bucketKb >= 1 && bucketKb <= (1 << 20), fmt::format("--bucket-kb must be in [1, {}] (1 GiB; got {})", 1 << 20, bucketKb));
  require(!(probe && dryRun), "--probe and --dry-run: choose one (the probe checks the same things, then times them)");
  require(mode != "gossip" || (compress == "none" && compressWeights == "none"),
          "--mode gossip reads peers' weights one-sidedly: --compress and --compress-weights do not apply");
  require(mode != "allreduce" || compressWeights == "none",
          "--mode allreduce sends no weights: --compress-weights does not apply (--compress does)");
  requireOneOf("lr-scaling", lrScaling, {"none", "linear"});
  requireOneOf("lr-decay", lrDecay, {"none", "cosine"});
  requireOneOf("device", device, {"auto", "cpu", "mps", "cuda"});
  require(batchSize > 0 && batchSize <= 1'000'000, fmt::format("--batch-size must be in [1, 1000000] (got {})", batchSize));
  require(std::isfinite(lr) && lr > 0, fmt::format("--lr must be a positive number (got {})", lr));
  require(std::isfinite(momentum) && momentum >= 0 && momentum < 1,
          fmt::format("--momentum must be in [0, 1) (got {})", momentum));
  require(!nesterov || momentum > 0, "--nesterov needs a positive --momentum");
  require(std::isfinite(weightDecay) && weightDecay >= 0,
          fmt::format("--weight-decay must be 0 or more (got {})", weightDecay));
  require(warmupSteps >= 0 && warmupSteps <= kMaxSteps,
          fmt::format("--warmup-steps must be in [0, {}] (got {})", kMaxSteps, warmupSteps));
  require(steps >= 0 && steps <= kMaxSteps, fmt::format("--steps must be in [0, {}] (got {})", kMaxSteps, steps));
  require(epochs >= 0 && epochs <= kMaxSteps, fmt::format("--epochs must be in [0, {}] (got {})", kMaxSteps, epochs));
  require(steps > 0 || epochs > 0, "give a positive --steps or --epochs");
  require(checkpointEvery >= 0 && checkpointEvery <= kMaxSteps,
          fmt::format("--checkpoint-every must be 0 (final only) or up to {} (got {})", kMaxSteps, checkpointEvery));
  require(logEvery > 0 && logEvery <= kMaxSteps, fmt::format("--log-every must be in [1, {}] (got {})", kMaxSteps, logEvery));
  require(maxStaleness <= kMaxSteps, fmt::format("--max-staleness must be at most {} (got {})", kMaxSteps, maxStaleness));
  requireOneOf("doorbell", doorbell, {"on", "off"});
  require(!balance || mode == "sync", "--balance deals a sync step's virtual shards by speed: --mode sync only");
  require(virtualShards >= 0 && virtualShards <= 65536,
          fmt::format("--virtual-shards must be 0 (the workers of the first launch) or up to 65536 (got {})", virtualShards));
  require(threads >= 0 && threads <= 1024, fmt::format("--threads must be 0 (auto) or up to 1024 (got {})", threads));
  require(std::isfinite(timeoutSeconds) && timeoutSeconds > 0 && timeoutSeconds <= kMaxSeconds,
          fmt::format("--timeout must be a positive number of seconds up to {} (30 days; got {})", kMaxSeconds, timeoutSeconds));
  require(!trainDir.empty(), "--train-dir must not be empty");
  require(!(resume && overwrite), "--resume continues the run in --train-dir, --overwrite replaces it: choose one");
  nanInjection();
  require(syntheticSize > 0 && syntheticSize <= 5'000'000,
          fmt::format("--synthetic-size must be in [1, 5000000] (got {})", syntheticSize));
  requireOneOf("loss", loss, {"auto", "cross-entropy", "nll", "mse"});
  require(loss != "mse" || isModelFile(model),
          "--loss mse needs a model of your own (--model FILE): the zoo's models output class log-probabilities");
}

std::string TrainConfig::lossFunction() const {
  if (loss != "auto") return loss;
  return isModelFile(model) ? "cross-entropy" : "nll";
}

namespace {

bool endsWith(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

bool isModelFile(const std::string& model) {
  return model.find('/') != std::string::npos || endsWith(model, ".pt") || endsWith(model, ".pth");
}

bool isDatasetFile(const std::string& dataset) {
  return dataset.find('/') != std::string::npos || endsWith(dataset, ".npz");
}

TrainConfig::NanInjection TrainConfig::nanInjection() const {
  if (injectNan.empty()) return {};
  auto [rank, step] = rankAndNumber("inject-nan", injectNan, 0, "STEP");
  require(step == std::floor(step), fmt::format("--inject-nan wants a whole STEP (got '{}')", injectNan));
  return {rank, static_cast<std::int64_t>(step)};
}

TrainConfig::Straggler TrainConfig::straggler() const {
  if (straggle.empty()) return {};
  auto [rank, ms] = rankAndNumber("straggle", straggle, 0, "MS");
  return {rank, ms};
}

TrainConfig::Interpolation TrainConfig::gossipInterpolation() const {
  if (interpolation == "clock") return {Interpolation::Clock, 0};
  if (interpolation == "loss") return {Interpolation::Loss, 0};
  double value = 0;
  char end = 0;
  require(std::sscanf(interpolation.c_str(), "constant:%lf%c", &value, &end) == 1 && value > 0 && value <= 1,
          fmt::format("--interpolation wants constant:V with 0 < V <= 1, clock or loss (got '{}')", interpolation));
  return {Interpolation::Constant, value};
}

bool TrainConfig::overlapping() const {
  return overlap == "on" && mode == "sync" && compress == "none" && compressWeights == "none" && !skipNonfinite;
}

int TrainConfig::computeRanks(int worldSize) const {
  return mode == "allreduce" || mode == "gossip" ? worldSize : worldSize - 1;
}

int TrainConfig::batchesPerUpdate(int workers) const {
  if (mode == "async" || mode == "gossip") return 1;
  if (mode == "backup") return aggregate > 0 ? aggregate : std::max(1, workers - 1);
  return workers;
}

std::int64_t TrainConfig::updatesPerEpoch(std::int64_t batchesPerEpoch, int workers) const {
  return mode == "async" ? batchesPerEpoch * workers : batchesPerEpoch;
}

std::vector<std::pair<std::string, std::string>> TrainConfig::sharedFields() const {
  std::vector<std::pair<std::string, std::string>> fields = {
      {"mode", mode},
      {"aggregate", mode == "backup" ? std::to_string(aggregate) : "-"},
      {"max-staleness", mode == "async" ? std::to_string(maxStaleness) : "-"},
      {"fetch-probability", mode == "gossip" ? canonicalNumber(fetchProbability) : "-"},
      {"interpolation", mode == "gossip" ? interpolation : "-"},
      {"divergence-threshold", mode == "gossip" ? canonicalNumber(divergenceThreshold) : "-"},
      {"compress", compress},
      {"compress-weights", compressWeights},
      {"error-feedback", errorFeedback},
      {"max-seconds", canonicalNumber(maxSeconds)},
      {"overlap", overlap},
      {"bucket-kb", std::to_string(bucketKb)},
      {"model", model},
      {"dataset", dataset},
      {"loss", lossFunction()},
      {"synthetic-size", dataset.rfind("synthetic", 0) == 0 ? std::to_string(syntheticSize) : "-"},
      {"batch-size", std::to_string(batchSize)},
      {"virtual-shards", std::to_string(virtualShards)},
      {"balance", balance ? "true" : "false"},
      {"lr", canonicalNumber(lr)},
      {"lr-scaling", lrScaling},
      {"warmup-steps", std::to_string(warmupSteps)},
      {"lr-decay", lrDecay},
      {"momentum", canonicalNumber(momentum)},
      {"nesterov", nesterov ? "true" : "false"},
      {"weight-decay", canonicalNumber(weightDecay)},
      {"steps", std::to_string(steps)},
      {"epochs", std::to_string(epochs)},
      {"checkpoint-every", std::to_string(checkpointEvery)},
      {"seed", std::to_string(seed)},
  };
  // Only when on, so that fingerprints of runs from before the flag stay what they were.
  if (simulateComputeMs > 0) fields.emplace_back("simulate-compute", canonicalNumber(simulateComputeMs));
  return fields;
}

std::string TrainConfig::fingerprint() const {
  std::uint64_t hash = 1469598103934665603ull;  // FNV-1a, 64 bit
  for (const auto& [key, value] : sharedFields()) {
    for (char c : key + "=" + value + "\n") {
      hash ^= static_cast<unsigned char>(c);
      hash *= 1099511628211ull;
    }
  }
  return fmt::format("{:016x}", hash);
}

std::int64_t totalSteps(const TrainConfig& cfg, std::int64_t stepsPerEpoch) {
  if (cfg.steps > 0) return cfg.steps;
  std::int64_t total = 0;
  if (__builtin_mul_overflow(cfg.epochs, stepsPerEpoch, &total) || total > kMaxSteps) {
    throw ConfigError(fmt::format("--epochs {} x {} steps per epoch is more than {} steps: fewer --epochs, or --steps",
                                  cfg.epochs, stepsPerEpoch, kMaxSteps));
  }
  return total;
}

}  // namespace pstrain::config
