#include "runtime/config/TrainConfig.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>

#include "runtime/Errors.h"
#include "runtime/Text.h"
#include "runtime/config/Devices.h"
#include "runtime/config/Optimizers.h"

// validate() is made from the flag table, in Flags.cpp.

namespace pstrain::config {

namespace {

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

// --FLAG's `text`, auto or a whole number in [1, max]: 0 for auto, else the number.
std::int64_t autoOrWhole(const char* flag, const std::string& text, std::int64_t max) {
  if (text == kAuto) return 0;
  std::size_t used = 0;
  std::int64_t number = -1;
  try {
    number = std::stoll(text, &used);
  } catch (const std::exception&) {
  }
  require(used == text.size() && number >= 1 && number <= max,
          fmt::format("--{} must be auto or a whole number in [1, {}] (got '{}')", flag, max, text));
  return number;
}

TrainConfig::Injection injection(const std::string& flag, const std::string& text) {
  if (text.empty()) return {};
  auto [rank, step] = rankAndNumber(flag, text, 0, "STEP");
  require(step == std::floor(step) && step <= static_cast<double>(kMaxSteps),
          fmt::format("--{} wants a whole STEP of at most {} (got '{}')", flag, kMaxSteps, text));
  return {rank, static_cast<std::int64_t>(step)};
}

}  // namespace

std::string canonicalNumber(double value) {
  for (int precision = 1; precision <= 17; ++precision) {
    std::string text = fmt::format("{:.{}g}", value, precision);
    if (std::stod(text) == value) return text;
  }
  return fmt::format("{:.17g}", value);
}

bool TrainConfig::linearLrScaling() const { return lrScaling == "linear"; }
bool TrainConfig::cosineLrDecay() const { return lrDecay == "cosine"; }

bool isModelFile(const std::string& model) {
  return model.find('/') != std::string::npos || endsWith(model, ".pt") || endsWith(model, ".pth");
}

bool isTokenFile(const std::string& dataset) {
  return std::any_of(std::begin(kTokenFileExtensions), std::end(kTokenFileExtensions),
                     [&](const char* extension) { return endsWith(dataset, extension); });
}

std::string TrainConfig::describeBatch() const {
  if (gradAccum == 1) return std::to_string(batchSize);
  return fmt::format("{} ({} micro-batches of {})", shardBatch(), gradAccum, batchSize);
}

std::string TrainConfig::describeTrainSet(std::int64_t samples) const {
  if (blockSize > 0) return fmt::format("{} train tokens (windows of {})", samples + blockSize, blockSize);
  return fmt::format("{} train samples", samples);
}

std::pair<double, double> TrainConfig::adamBetas() const {
  double beta1 = 0, beta2 = 0;
  char end = 0;
  require(std::sscanf(betas.c_str(), "%lf,%lf%c", &beta1, &beta2, &end) == 2 && beta1 >= 0 && beta1 < 1 &&
              beta2 >= 0 && beta2 < 1,
          fmt::format("--betas wants B1,B2 with each in [0, 1), for example 0.9,0.95 (got '{}')", betas));
  return {beta1, beta2};
}

TrainConfig::Injection TrainConfig::nanInjection() const { return injection("inject-nan", injectNan); }
TrainConfig::Injection TrainConfig::overflowInjection() const { return injection("inject-overflow", injectOverflow); }

bool TrainConfig::lossScaling() const {
  return lossScale == "dynamic" || (lossScale == "auto" && precisionInfo(precision).scaledByDefault);
}

double TrainConfig::straggleMilliseconds(int rank) const {
  double mine = 0;
  for (std::size_t at = 0; at < straggle.size();) {
    const std::size_t comma = std::min(straggle.find(',', at), straggle.size());
    const auto [named, ms] = rankAndNumber("straggle", straggle.substr(at, comma - at), 0, "MS");
    if (named == rank) mine = ms;
    at = comma + 1;
  }
  return mine;
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

TrainConfig TrainConfig::updateRule() const {
  TrainConfig rule = *this;
  if (!modeInfo().runsLocalRounds()) return rule;
  rule.optimizer = "sgd";
  rule.momentum = modeInfo().averages ? 0 : outerMomentum;
  rule.nesterov = outerOptimizerInfo(outerOptimizer).nesterov && rule.momentum > 0;
  rule.weightDecay = 0;
  rule.clipGradNorm = 0;
  rule.lr = modeInfo().averages ? 1 : outerLr;  // global - mean(global - local): the mean of the locals
  rule.lrScaling = "none";
  rule.warmupSteps = 0;
  rule.lrDecay = "none";
  rule.lossScale = "none";  // the pseudo-gradients are the inner steps' sums: their loss scaling is the workers'
  return rule;
}

std::string TrainConfig::gradientCodec() const {
  if (compress != kAuto) return compress;
  return modeInfo().runsLocalRounds() ? kFrugalCodec : kRawCodec;
}

std::string TrainConfig::weightCodec() const {
  if (compressWeights != kAuto) return compressWeights;
  return modeInfo().runsLocalRounds() && compress != kRawCodec ? kFrugalCodec : kRawCodec;
}

std::int64_t TrainConfig::fixedLocalSteps() const { return autoOrWhole("local-steps", localStepsFlag, 1'000'000); }

int TrainConfig::fixedFragments() const { return static_cast<int>(autoOrWhole("fragments", fragmentsFlag, 64)); }

std::string TrainConfig::updateRuleName() const {
  return fmt::format("{} {}", modeInfo().runsLocalRounds() ? "outer" : "update", updateRule().optimizer);
}

bool TrainConfig::streamsGradients() const {
  return overlap == OnOff::On && !compressesGradients() && modeInfo().exchange == Exchange::Collective;
}

bool TrainConfig::bf16Weights() const { return precisionInfo(precision).bf16Weights; }

bool TrainConfig::updatesOnArrival() const {
  return streamsGradients() && !compressesWeights() && !skipNonfinite && clipGradNorm == 0 && !lossScaling();
}

int TrainConfig::batchesPerUpdate(int workers) const {
  switch (modeInfo().quorum) {
    case Quorum::AllShards: return workers;
    case Quorum::Aggregate: return aggregate > 0 ? aggregate : std::max(1, workers - 1);
    case Quorum::One: return 1;
  }
  throw ConfigError("a mode without a quorum");
}

std::int64_t TrainConfig::updatesPerEpoch(std::int64_t batchesPerEpoch, int workers) const {
  return modeInfo().updatePerBatch ? batchesPerEpoch * workers : batchesPerEpoch;
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
