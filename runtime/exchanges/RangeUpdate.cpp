#include "runtime/exchanges/RangeUpdate.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/torch.h>

#include "runtime/Errors.h"
#include "runtime/Portable.h"
#include "runtime/metrics/Clock.h"
#include "runtime/protocol/FlatParameters.h"

namespace pstrain::exchanges {

bool rangesKeepTensorsWhole(const config::TrainConfig& cfg) {
  return cfg.compressesGradients() || cfg.compressesWeights();
}

std::vector<KeyRange> serverRanges(const models::Net& model, const config::TrainConfig& cfg) {
  const codec::Shapes shapes = protocol::parameterShapes(model);
  const bool whole = rangesKeepTensorsWhole(cfg);
  if (whole && static_cast<std::int64_t>(shapes.size()) < cfg.servers) {  // the codecs that keep them whole, by name
    std::vector<std::string> codecs, drop;
    if (cfg.compressesGradients()) codecs.push_back("--compress " + cfg.gradientCodec()), drop.push_back("--compress none");
    if (cfg.compressesWeights()) {
      codecs.push_back("--compress-weights " + cfg.weightCodec());
      drop.push_back("--compress-weights none");
    }
    throw CollectiveConfigError(fmt::format("--servers {}: the model has {} parameter tensors, and {} codes each tensor "
                                            "whole on one server: use at most {} servers, or {}", cfg.servers,
                                            shapes.size(), fmt::join(codecs, " and "), shapes.size(),
                                            fmt::join(drop, " and ")));
  }
  return keyRanges(shapes, cfg.servers, whole);
}

RangeUpdate::RangeUpdate(const config::TrainConfig& cfg, KeyRange range, at::Tensor weights,
                         const codec::Shapes& modelShapes, bool updatesOnArrival)
    : rule_(cfg.updateRule()),
      range_(std::move(range)),
      updatesOnArrival_(updatesOnArrival),
      weights_(std::move(weights)),
      sum_(updatesOnArrival ? 0 : static_cast<std::size_t>(range_.size())),
      optimizer_(optim::makeOptimizer(rule_, modelShapes, range_.begin, range_.end)) {}

namespace {

Error notFinite(std::int64_t step, int rank) {
  return Error(fmt::format("step {}: server {}'s weights are not finite after the update; lower --lr", step, rank));
}

}  // namespace

Partial RangeUpdate::partial(double updateSeconds, double bytesOut, double bytesIn) const {
  // Each part's update was its finite check (a non-finite gradient would have thrown).
  if (updatesOnArrival_) return {partSumOfSquares_, 1.0, updateSeconds, bytesOut, bytesIn, portable::peakRssMib()};
  const at::Tensor sum = sum_.view(0, range_.size());
  return {optim::sumOfSquares(sum), roles::allFinite(sum) ? 1.0 : 0.0, updateSeconds, bytesOut, bytesIn,
          portable::peakRssMib()};
}

void RangeUpdate::apply(const Verdict& v, std::int64_t step, int rank) {
  if (!v.apply || updatesOnArrival_) return;
  const auto start = metrics::Clock::now();
  if (!optimizer_->step(weights_, sum_.view(0, range_.size()), v.lr, v.divisor)) throw notFinite(step, rank);
  updateSeconds_ += metrics::secondsSince(start);
}

void RangeUpdate::beginParts() {
  optimizer_->beginUpdate();
  partSumOfSquares_ = 0;
}

void RangeUpdate::applyPart(float* sum, std::int64_t at, std::int64_t n, const StepPlan& plan, std::int64_t step,
                            int rank) {
  const auto start = metrics::Clock::now();
  at::Tensor grad = at::from_blob(sum, {n}, at::kFloat);
  partSumOfSquares_ += optim::sumOfSquares(grad);
  if (!optimizer_->stepSlice(weights_.narrow(0, at, n), grad, plan.lr, at, range_.size(), plan.samples)) {
    throw notFinite(step, rank);
  }
  updateSeconds_ += metrics::secondsSince(start);
}

double RangeUpdate::takeUpdateSeconds() {
  const double seconds = updateSeconds_;
  updateSeconds_ = 0;
  return seconds;
}

}  // namespace pstrain::exchanges
