#pragma once
// One computing rank's half of a step, shared by every mode: take this rank's batch, run
// forward and backward, and leave the result in the up message of a StepMessages (the
// gradient times the batch's sample count, the model's buffers, the trailer). The weights
// come from the same object's down message.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <memory>

#include "data/Dataset.h"
#include "data/Prefetcher.h"
#include "data/ShardSampler.h"
#include "models/Registry.h"
#include "runtime/config/TrainConfig.h"
#include "runtime/roles/StepMessages.h"

namespace pstrain::roles {

class LocalTrainer {
 public:
  // `model` must be on `device`; its parameters become views of messages.weights (on the
  // CPU) or of a device copy, its gradients likewise of messages.grad. Batches are those of
  // shard `shard` of `shards`. `rank` selects the testing flags (--inject-nan, --straggle)
  // meant for this process.
  LocalTrainer(const config::TrainConfig& cfg, models::Net& model, const data::Dataset& train,
               c10::Device device, StepMessages& messages, int shard, int shards, int rank);
  ~LocalTrainer();  // the model keeps a copy of the weights, not views of the messages
  LocalTrainer(const LocalTrainer&) = delete;
  LocalTrainer& operator=(const LocalTrainer&) = delete;

  // Makes the model compute with messages.weights and messages.serverBuffers.
  void loadWeights();

  // Forward and backward on this shard's batch `batch` (a pure function of seed, shard and
  // batch number: every epoch a new permutation). Fills the up message; the trailer's
  // kVersion is `version`. A non-finite loss throws unless --skip-nonfinite, in which
  // case the trailer says so.
  void computeGradient(std::int64_t batch, std::int64_t version);

  const data::ShardSampler& sampler() const { return sampler_; }

 private:
  const config::TrainConfig& cfg_;
  models::Net& model_;
  c10::Device device_;
  StepMessages& messages_;
  data::ShardSampler sampler_;
  at::Tensor weights_;  // the model's flat parameters: messages.weights on the CPU
  at::Tensor grad_;     // the model's flat gradient: messages.grad on the CPU
  std::unique_ptr<data::Prefetcher> prefetcher_;
  std::int64_t nanBatch_ = -1;
  double straggleMs_ = 0;
};

}  // namespace pstrain::roles
