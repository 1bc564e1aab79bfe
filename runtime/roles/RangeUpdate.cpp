#include "runtime/roles/RangeUpdate.h"

#include <torch/torch.h>

#include <algorithm>
#include <cstring>

#include "runtime/metrics/Clock.h"

namespace pstrain::roles {

bool allFinite(const at::Tensor& values) {
  const float* p = values.data_ptr<float>();
  const std::int64_t n = values.numel();
  // Inf and NaN are the floats whose exponent bits are all ones; integer max vectorises.
  constexpr std::uint32_t kExponent = 0x7f800000u;
  std::uint32_t largest = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    std::uint32_t bits;
    std::memcpy(&bits, p + i, sizeof bits);
    largest = std::max(largest, bits & kExponent);
  }
  return largest != kExponent;
}

RangeUpdate::RangeUpdate(const config::TrainConfig& rule, protocol::KeyRange range, at::Tensor weights,
                         const codec::Shapes& modelShapes, bool updatesOnArrival, at::Tensor sum)
    : rule_(rule),
      range_(std::move(range)),
      updatesOnArrival_(updatesOnArrival),
      weights_(std::move(weights)),
      ownSum_(updatesOnArrival || sum.defined() ? 0 : static_cast<std::size_t>(range_.size())),
      sum_(updatesOnArrival ? at::Tensor() : sum.defined() ? std::move(sum) : ownSum_.view(0, range_.size())),
      optimizer_(optim::makeOptimizer(rule_, modelShapes, range_.begin, range_.end)) {}

double RangeUpdate::sumOfSquares() const {
  return updatesOnArrival_ ? partSumOfSquares_ : optim::sumOfSquares(sum_);
}

bool RangeUpdate::finite() const { return updatesOnArrival_ || allFinite(sum_); }

bool RangeUpdate::step(double lr, double divisor) {
  if (updatesOnArrival_) return true;
  const auto start = metrics::Clock::now();
  const bool finite = optimizer_->step(weights_, sum_, lr, divisor);
  updateSeconds_ += metrics::secondsSince(start);
  return finite;
}

void RangeUpdate::beginParts() {
  optimizer_->beginUpdate();
  partSumOfSquares_ = 0;
}

bool RangeUpdate::stepPart(float* sum, std::int64_t at, std::int64_t n, double lr, double samples) {
  const auto start = metrics::Clock::now();
  at::Tensor grad = at::from_blob(sum, {n}, at::kFloat);
  partSumOfSquares_ += optim::sumOfSquares(grad);
  const bool finite = optimizer_->stepSlice(weights_.narrow(0, at, n), grad, lr, at, range_.size(), samples);
  updateSeconds_ += metrics::secondsSince(start);
  return finite;
}

double RangeUpdate::takeUpdateSeconds() {
  const double seconds = updateSeconds_;
  updateSeconds_ = 0;
  return seconds;
}

}  // namespace pstrain::roles
