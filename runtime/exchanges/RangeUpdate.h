#pragma once
// One server's key range of the weights and its update, for any number of servers (--servers;
// exchanges/Ranges.h cuts them): the run's ranges, and RangeUpdate. What the servers say to
// each other about it is in LeadMessages.h.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "models/Registry.h"
#include "runtime/codec/Codec.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/exchanges/LeadMessages.h"
#include "runtime/exchanges/Ranges.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/StepMessages.h"

namespace pstrain::exchanges {

// The run's key ranges of `model`'s parameters, one per server (Ranges.h): whole tensors
// where rangesKeepTensorsWhole(cfg).
std::vector<KeyRange> serverRanges(const models::Net& model, const config::TrainConfig& cfg);
// Whether the ranges keep tensors whole: a gradient or a weight codec's frames and scales are
// per tensor, and so stay one server's.
bool rangesKeepTensorsWhole(const config::TrainConfig& cfg);

// One server's key range: its weights, the workers' summed gradient of it, and the update
// rule (cfg.updateRule(): the optimizer, or diloco's outer one) with its slice of the state.
// With `updatesOnArrival` (cfg.updatesOnArrival()) there is no sum of the whole range: the
// caller sums each part and applyPart() updates it at once; apply() then does nothing.
class RangeUpdate {
 public:
  // `weights`: range.size() floats (server 0's: a view of the whole model's flat weights, so
  // that its checkpoints need no copy of its own range); `modelShapes`: the model's tensors'
  // shapes, in order (the range's rule works out its part of them: optim::makeOptimizer).
  RangeUpdate(const config::TrainConfig& cfg, KeyRange range, at::Tensor weights, const codec::Shapes& modelShapes,
              bool updatesOnArrival = false);

  const KeyRange& range() const { return range_; }
  optim::Optimizer& optimizer() { return *optimizer_; }
  const optim::Optimizer& optimizer() const { return *optimizer_; }
  const at::Tensor& weights() const { return weights_; }
  float* sum() { return sum_.data(); }  // range().size() floats; none with updatesOnArrival
  bool updatesOnArrival() const { return updatesOnArrival_; }

  // The summed gradient's word to server 0, with this server's traffic (bytes per worker,
  // each way) and its update's seconds (takeUpdateSeconds(): the last step's, or with
  // updatesOnArrival this one's).
  Partial partial(double updateSeconds, double bytesOut, double bytesIn) const;
  // The verdict's update of this range; throws naming `step` and `rank` when it leaves a
  // weight non-finite.
  void apply(const Verdict& v, std::int64_t step, int rank);
  // With updatesOnArrival: beginParts() starts a step's update (counts it, for Adam's bias
  // correction, and zeroes the norm's sum); then applyPart() updates floats [at, at + n) of
  // the range from `sum` (the workers' summed gradient of them; scratch), by `plan`, once
  // per part, in any order (they come last first), so that one step over every part equals
  // one over the range. Throws as apply() does.
  void beginParts();
  void applyPart(float* sum, std::int64_t at, std::int64_t n, const StepPlan& plan, std::int64_t step, int rank);
  // The seconds apply() and applyPart() took since the last call.
  double takeUpdateSeconds();

 private:
  const config::TrainConfig rule_;
  const KeyRange range_;
  const bool updatesOnArrival_;
  at::Tensor weights_;
  protocol::FloatBuffer sum_;
  std::unique_ptr<optim::Optimizer> optimizer_;
  double partSumOfSquares_ = 0;  // updatesOnArrival: of this step's parts so far
  double updateSeconds_ = 0;  // since takeUpdateSeconds()
};

}  // namespace pstrain::exchanges
