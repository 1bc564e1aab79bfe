#pragma once
// One computing rank's half of a step, shared by every mode: take this rank's batch, run
// forward and backward, and leave the result in the up message of a StepMessages (the
// gradient times the batch's sample count, the model's buffers, the trailer). The weights
// come from the same object's down message.
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/Dataset.h"
#include "data/Prefetcher.h"
#include "data/ShardSampler.h"
#include "models/Registry.h"
#include "runtime/config/Devices.h"
#include "runtime/config/RunPlan.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepMessages.h"

namespace pstrain::roles {

class LocalTrainer {
 public:
  // `model` must be on `device`; its parameters become views of messages.weights (on the
  // CPU) or of a device copy, in that message's dtype (bfloat16 with --precision
  // bf16-weights), its gradients likewise of messages.grad (float32). A step's global
  // batch is dealt to cfg.virtualShardCount(workers) virtual shards; this worker,
  // `worker` of `workers`, computes the micro-batches of its share (virtualShardsOf).
  // `rank` selects the testing flags (--inject-nan, --straggle) meant for this process.
  LocalTrainer(const config::RunPlan& cfg, models::Net& model, const data::Dataset& train,
               c10::Device device, protocol::StepMessages& messages, int worker, int workers, int rank);
  ~LocalTrainer();  // the model keeps its parameters (views that keep the weights alive), not gradients
  LocalTrainer(const LocalTrainer&) = delete;
  LocalTrainer& operator=(const LocalTrainer&) = delete;

  // Makes the model compute with messages.weights and messages.serverBuffers.
  void loadWeights();

  // Forward and backward on batch `batch` of each of this worker's virtual shards (a pure
  // function of seed, shard and batch number: every epoch a new permutation), one after the
  // other, each from the server's BatchNorm statistics, each in --grad-accum micro-batches
  // of --batch-size whose gradients add up to its whole batch's. Fills the up
  // message: the gradients summed (each times its sample count), the buffers summed over
  // the micro-batches, the trailer (kVersion `version`, this rank's kComputeSeconds slot
  // the time the call took, the other ranks' slots 0). Backward runs on the loss times
  // `lossScale` (the server's, --loss-scale; 1: none) and the gradient goes up divided by it
  // again. A non-finite loss throws unless --skip-nonfinite or loss scaling, in which case
  // the trailer says so. With --simulate-compute (benchmarks of the protocol at scale) it
  // computes nothing: it sleeps that long per micro-batch and fills the up message with a
  // random gradient of the model's size and a loss of 0.
  void computeGradient(std::int64_t batch, std::int64_t version, double lossScale = 1);

  const data::ShardSampler& sampler() const { return sampler_; }
  const std::vector<int>& shards() const { return shards_; }
  // From the next computeGradient() on, the virtual shards computed are `shards` (--balance).
  void assign(std::vector<int> shards) { shards_ = std::move(shards); }

  // Streaming (raw gradients: sync's overlap, the K servers' parts): from now on
  // backward hands the gradient over bucket by bucket (`buckets`, in the order backward
  // completes them: from the flat gradient's end) as soon as each is complete, calling
  // `ready(bucket)` in bucket order from inside backward; messages.grad's range of that
  // bucket is final by then, and the exchange may give its pages back once it has sent
  // them (FloatBuffer::release): the worker then never holds a whole gradient. Autograd's
  // own copy of a parameter's gradient (its .grad) goes as soon as the next parameter's
  // comes: with --grad-accum, in the last micro-batch (the earlier ones sum in .grad).
  // Assumes each parameter is used once per forward pass (true of every model in the zoo).
  // On a GPU (CUDA, MPS) autograd calls `ready` on its own device thread while the thread
  // that called computeGradient() waits inside backward: whatever `ready` calls must allow
  // that, one thread at a time (MPI_THREAD_SERIALIZED).
  void streamGradients(std::vector<protocol::Bucket> buckets, std::function<void(const protocol::Bucket&)> ready);

 private:
  const config::RunPlan& cfg_;
  models::Net& model_;
  c10::Device device_;
  protocol::StepMessages& messages_;
  data::ShardSampler sampler_;
  const int rank_;  // of the world: which trailer slot holds this rank's batch time
  std::vector<int> shards_;  // this worker's virtual shards
  const std::string lossName_;
  const config::PrecisionKind precision_;  // --precision of the forward pass
  at::Tensor weights_;  // the model's flat parameters: messages.weights on the CPU
  at::Tensor grad_;     // the model's flat gradient: messages.grad on the CPU
  // On a device: the buffers as floats there, each way, so that they cross in one copy.
  at::Tensor serverBuffers_, workerBuffers_;
  at::Tensor bufferScratch_;  // one micro-batch's buffers, before they are summed
  std::unique_ptr<data::Prefetcher> prefetcher_;
  std::int64_t nanBatch_ = -1;       // --inject-nan
  std::int64_t overflowBatch_ = -1;  // --inject-overflow
  float injectedValue_ = 0;  // streaming: this batch's gradient goes as it (+inf, NaN), 0: as it is
  double straggleMs_ = 0;
  double simulatedSeconds_ = 0;  // --simulate-compute, per micro-batch

  // computeGradient()'s two ways to fill the up message; both return the mean loss.
  float forwardBackward(std::int64_t batch, const data::Prefetcher::Batches& shardBatches, float count,
                        double lossScale);
  float simulateBatches(std::int64_t batch, float count, std::size_t shardCount);

  // streamGradients() state: the buckets, the buckets each parameter overlaps, parameters
  // still missing per bucket in this backward pass, the next bucket to hand over.
  std::vector<protocol::Bucket> buckets_;
  std::vector<std::vector<int>> bucketsOf_;
  std::vector<std::int64_t> offsets_;  // where each parameter starts in the flat gradient, and its end last
  std::vector<at::Tensor> parameters_;  // the model's, in order (handles to the same tensors)
  std::vector<int> missing_;
  std::vector<bool> arrived_;     // by parameter, in this step: its gradient came (its hook ran)
  std::vector<int> bucketsLeft_;  // by parameter: its buckets not handed over yet in this step
  // The parameter whose hook runs, and the gradient the hook got (autograd adds it to .grad
  // only after the hook); -1 outside a hook.
  int arriving_ = -1;
  at::Tensor arrivingGradient_;
  int releaseNext_ = -1;          // a parameter whose buckets all went in its own hook: its .grad goes next
  std::size_t nextReady_ = 0;
  float scale_ = 1;  // a virtual shard's batch's sample count over the loss scale, for gradient x count
  bool lastMicroBatch_ = true;  // the step's last: the hooks hand gradients over in it only
  std::function<void(const protocol::Bucket&)> ready_;
  // A parameter's hook: its gradient came; the buckets it completes go out at once, inside
  // backward (as soon as they can, so that the sends overlap the rest of it).
  void onGradient(int parameter, const at::Tensor& gradient);
  void releaseGradient(int parameter);  // lets go of its .grad (now, or after its hook: releaseNext_)
  void arrived(int parameter);    // its buckets miss one parameter less
  // Writes each of the bucket's parameters' part of its gradient (the hook's, or .grad;
  // undefined: zero) x scale_ into messages.grad, final once the device has run what was queued.
  void fill(const protocol::Bucket& bucket);
  // Fills the buckets complete in order and hands them over (waiting for the device first),
  // and lets go of each gradient whose every bucket went.
  void handOverReadyBuckets();
};

}  // namespace pstrain::roles
