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

}  // namespace

std::string canonicalNumber(double value) {
  for (int precision = 1; precision <= 17; ++precision) {
    std::string text = fmt::format("{:.{}g}", value, precision);
    if (std::stod(text) == value) return text;
  }
  return fmt::format("{:.17g}", value);
}

void TrainConfig::validate() const {
  requireOneOf("lr-scaling", lrScaling, {"none", "linear"});
  requireOneOf("lr-decay", lrDecay, {"none", "cosine"});
  requireOneOf("device", device, {"auto", "cpu", "mps", "cuda"});
  require(batchSize > 0, fmt::format("--batch-size must be at least 1 (got {})", batchSize));
  require(std::isfinite(lr) && lr > 0, fmt::format("--lr must be a positive number (got {})", lr));
  require(std::isfinite(momentum) && momentum >= 0 && momentum < 1,
          fmt::format("--momentum must be in [0, 1) (got {})", momentum));
  require(!nesterov || momentum > 0, "--nesterov needs a positive --momentum");
  require(std::isfinite(weightDecay) && weightDecay >= 0,
          fmt::format("--weight-decay must be 0 or more (got {})", weightDecay));
  require(warmupSteps >= 0, fmt::format("--warmup-steps must be 0 or more (got {})", warmupSteps));
  require(steps >= 0, fmt::format("--steps must be 0 or more (got {})", steps));
  require(steps > 0 || epochs > 0, "give a positive --steps or --epochs");
  require(checkpointEvery >= 0, "--checkpoint-every must be 0 (final only) or more");
  require(logEvery > 0, fmt::format("--log-every must be at least 1 (got {})", logEvery));
  require(threads >= 0, fmt::format("--threads must be 0 (auto) or more (got {})", threads));
  require(timeoutSeconds > 0, "--timeout must be positive");
  require(!trainDir.empty(), "--train-dir must not be empty");
  require(!(resume && overwrite), "--resume continues the run in --train-dir, --overwrite replaces it: choose one");
  nanInjection();
  require(syntheticSize > 0, "--synthetic-size must be at least 1");
}

TrainConfig::NanInjection TrainConfig::nanInjection() const {
  if (injectNan.empty()) return {};
  int rank = 0;
  long long step = 0;
  char end = 0;
  require(std::sscanf(injectNan.c_str(), "%d:%lld%c", &rank, &step, &end) == 2 && rank > 0 && step >= 0,
          fmt::format("--inject-nan wants RANK:STEP with a worker rank >= 1 (got '{}')", injectNan));
  return {rank, step};
}

std::vector<std::pair<std::string, std::string>> TrainConfig::sharedFields() const {
  return {
      {"model", model},
      {"dataset", dataset},
      {"synthetic-size", dataset.rfind("synthetic", 0) == 0 ? std::to_string(syntheticSize) : "-"},
      {"batch-size", std::to_string(batchSize)},
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
  return cfg.steps > 0 ? cfg.steps : cfg.epochs * stepsPerEpoch;
}

}  // namespace pstrain::config
