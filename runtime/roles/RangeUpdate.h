#pragma once
// The one update of the weights, for every mode and any number of servers: a key range of
// the model's flat weights (one server's, a peer's and the rounds' worker's range is the
// whole model), the range's summed gradient, and its update rule with the range's slice of
// the state. Whether an update happens, and divided by what, is Admission's; who sums the
// gradient, and when, is the exchange's.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>

#include "runtime/codec/Codec.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/KeyRange.h"
#include "runtime/protocol/StepMessages.h"

namespace pstrain::roles {

class RangeUpdate {
 public:
  // `rule`: the rule of its updates (a server's TrainConfig::updateRule(); the rounds' worker's
  // inner --optimizer), whose optimizer is made here for the range (optim::makeOptimizer:
  // `modelShapes`, the model's tensors' shapes in order, say where weight decay falls).
  // `weights`: range.size() floats (server 0's: a view of the whole model's flat weights, so
  // that its checkpoints need no copy). `sum`: where the range's summed gradient lands
  // (range.size() floats: one server's messages.grad), else a buffer of its own, and none
  // with `updatesOnArrival` (cfg.updatesOnArrival(): the caller sums each part and
  // stepPart() updates it at once; step() then does nothing).
  RangeUpdate(const config::TrainConfig& rule, protocol::KeyRange range, at::Tensor weights,
              const codec::Shapes& modelShapes, bool updatesOnArrival = false, at::Tensor sum = at::Tensor());

  const protocol::KeyRange& range() const { return range_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  const optim::Optimizer& optimizer() const { return *optimizer_; }
  const at::Tensor& weights() const { return weights_; }
  float* sum() { return sum_.defined() ? sum_.data_ptr<float>() : nullptr; }  // range().size() floats
  bool updatesOnArrival() const { return updatesOnArrival_; }

  // The summed gradient's sum of squares, and whether every value of it is finite (updating
  // on arrival: the parts' of this update so far, each of which its update checked).
  double sumOfSquares() const;
  bool finite() const;

  // Steps the weights with the summed gradient over `divisor` at `lr` (nothing when updating
  // on arrival). False when it leaves a weight non-finite.
  bool step(double lr, double divisor);
  // Updating on arrival: beginParts() starts an update (counts it, for Adam's bias
  // correction, and zeroes the parts' sum of squares); stepPart() updates floats [at, at + n)
  // of the range from `sum` (their summed gradient; scratch) over `samples` at `lr`, once per
  // part, in any order, so that one update over every part equals step() over the range.
  // False as step().
  void beginParts();
  bool stepPart(float* sum, std::int64_t at, std::int64_t n, double lr, double samples);
  // The seconds step() and stepPart() took since the last call.
  double takeUpdateSeconds();

 private:
  const config::TrainConfig rule_;
  const protocol::KeyRange range_;
  const bool updatesOnArrival_;
  at::Tensor weights_;
  protocol::FloatBuffer ownSum_;  // without a `sum` given, and not updating on arrival
  at::Tensor sum_;                // undefined when updating on arrival
  std::unique_ptr<optim::Optimizer> optimizer_;
  double partSumOfSquares_ = 0;  // updating on arrival: of this update's parts so far
  double updateSeconds_ = 0;     // since takeUpdateSeconds()
};

// Whether every value of a contiguous float tensor is finite. One pass, no temporary
// tensor (torch::isfinite(t).all() allocates two).
bool allFinite(const at::Tensor& values);

}  // namespace pstrain::roles
