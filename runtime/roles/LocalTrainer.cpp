#include "runtime/roles/LocalTrainer.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>
#include <utility>

#include "runtime/Errors.h"
#include "runtime/metrics/Clock.h"
#include "runtime/roles/Autocast.h"
#include "runtime/roles/DeviceSync.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/loss/Loss.h"

namespace pstrain::roles {

using namespace protocol;
namespace {

// splitmix64: a well-mixed 64-bit value from a few inputs, for per-batch augmentation seeds.
std::uint64_t mix(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  std::uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^ c;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

LocalTrainer::LocalTrainer(const config::RunPlan& cfg, models::Net& model, const data::Dataset& train,
                           c10::Device device, StepMessages& messages, int worker, int workers, int rank)
    : cfg_(cfg),
      model_(model),
      device_(device),
      messages_(messages),
      sampler_(train.size(), cfg.virtualShardCount(workers), cfg.shardBatch(), cfg.seed,
               cfg.blockSize),
      rank_(rank),
      shards_(data::virtualShardsOf(worker, workers, cfg.virtualShardCount(workers))),
      lossName_(cfg.lossFunction()),
      precision_(config::precisionInfo(cfg.precision).kind) {
  const std::int64_t n = messages.weights.numel();
  auto deviceOptions = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
  // On the CPU the model computes straight from/into the message buffers; on an
  // accelerator it has its own flat copies, refreshed once per step in each direction:
  // non-blocking copies (from and into pinned messages on CUDA), and one wait for the
  // device per step, at the loss (or per group of gradient buckets handed over together).
  weights_ = device_.is_cpu() ? messages.weights : torch::empty({n}, deviceOptions.dtype(messages.weights.dtype()));
  grad_ = device_.is_cpu() ? messages.grad : torch::zeros({n}, deviceOptions);
  if (!device_.is_cpu()) {
    serverBuffers_ = torch::zeros({messages.serverBuffers.numel()}, deviceOptions);
    workerBuffers_ = torch::zeros({messages.workerBuffers.numel()}, deviceOptions);
  }
  bufferScratch_ = torch::zeros({messages.workerBuffers.numel()}, deviceOptions);
  bindParameters(model_, weights_);
  if (!device_.is_cpu()) messages.weights.copy_(weights_);
  bindGradients(model_, grad_);
  model_.train();
  // Batches depend only on (seed, batch, virtual shard): reproducible whoever computes
  // them, and built ahead of time. The sampler is used on the prefetching thread only.
  prefetcher_ = std::make_unique<data::Prefetcher>([this, &train](std::int64_t batch, const std::vector<int>& shards) {
    data::Prefetcher::Batches made;
    for (int shard : shards) {
      auto b = train.batch(sampler_.batch(shard, batch), mix(cfg_.seed, static_cast<std::uint64_t>(batch), shard));
      if (device_.is_cuda()) b = {b.first.pin_memory(), b.second.pin_memory()};  // copied in without blocking
      made.push_back(std::move(b));
    }
    return made;
  });
  const auto nan = cfg.nanInjection();
  if (nan.rank == rank) nanBatch_ = nan.step;
  const auto overflow = cfg.overflowInjection();
  if (overflow.rank == rank) overflowBatch_ = overflow.step;
  straggleMs_ = cfg.straggleMilliseconds(rank);
  simulatedSeconds_ = cfg.simulateComputeMs / 1000;
}

// The parameters stay views of weights_, whose memory they keep alive.
LocalTrainer::~LocalTrainer() {
  for (auto& p : model_.parameters()) p.mutable_grad() = at::Tensor();
}

void LocalTrainer::loadWeights() {
  if (device_.is_cpu()) return writeBuffers(model_, messages_.serverBuffers);
  // The host leaves messages.down alone until computeGradient() has waited for the device.
  weights_.copy_(messages_.weights, /*non_blocking=*/true);
  serverBuffers_.copy_(messages_.serverBuffers, /*non_blocking=*/true);
  writeBuffers(model_, serverBuffers_);
}

void LocalTrainer::streamGradients(std::vector<Bucket> buckets, std::function<void(const Bucket&)> ready) {
  buckets_ = std::move(buckets);
  ready_ = std::move(ready);
  auto parameters = model_.parameters();
  bucketsOf_.assign(parameters.size(), {});
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    for (int p : buckets_[b].parameters) bucketsOf_[p].push_back(static_cast<int>(b));
  }
  parameters_ = model_.parameters();
  offsets_.assign(1, 0);
  for (const auto& p : parameters_) offsets_.push_back(offsets_.back() + p.numel());
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    // Called by autograd with this parameter's gradient, before it accumulates it into
    // .grad (undefined at each backward, so it steals the tensor: no copy), whence each
    // bucket takes its part of it once the bucket is complete.
    parameters[i].register_hook([this, i](const at::Tensor& gradient) { onGradient(static_cast<int>(i), gradient); });
  }
}

void LocalTrainer::onGradient(int parameter, const at::Tensor& gradient) {
  // Before the last micro-batch autograd sums the gradients into .grad by itself.
  if (!lastMicroBatch_) return;
  if (releaseNext_ >= 0) parameters_[std::exchange(releaseNext_, -1)].mutable_grad() = at::Tensor();  // stored by now
  arriving_ = parameter;
  arrivingGradient_ = gradient;
  arrived(parameter);
  handOverReadyBuckets();
  arriving_ = -1;
  arrivingGradient_ = at::Tensor();
}

void LocalTrainer::releaseGradient(int parameter) {
  if (parameter == arriving_) {
    releaseNext_ = parameter;  // autograd stores its gradient in .grad after this hook
  } else {
    parameters_[parameter].mutable_grad() = at::Tensor();
  }
}

void LocalTrainer::arrived(int parameter) {
  arrived_[parameter] = true;
  for (int b : bucketsOf_[parameter]) --missing_[b];
}

void LocalTrainer::fill(const Bucket& bucket) {
  for (int p : bucket.parameters) {
    const std::int64_t from = std::max(bucket.begin, offsets_[p]), to = std::min(bucket.end, offsets_[p + 1]);
    at::Tensor part = messages_.grad.narrow(0, from, to - from);
    auto partOf = [&](const at::Tensor& whole) { return whole.reshape({-1}).narrow(0, from - offsets_[p], to - from); };
    // The parameter whose hook runs: the hook's gradient, plus what earlier micro-batches
    // left in .grad (summed here, a bucket's part at a time); any other: its .grad.
    const at::Tensor& stored = parameters_[p].grad();
    const at::Tensor fresh = p == arriving_ ? arrivingGradient_ : at::Tensor();
    if (injectedValue_ != 0) {
      part.fill_(injectedValue_);  // --inject-overflow, --inject-nan
    } else if (!stored.defined() && !fresh.defined()) {
      part.zero_();  // a parameter the loss did not reach
    } else {
      const at::Tensor source = stored.defined() && fresh.defined() ? partOf(stored) + partOf(fresh)
                                                                    : partOf(fresh.defined() ? fresh : stored);
      if (device_.is_cpu()) {
        at::mul_out(part, source, at::scalar_tensor(scale_));  // one pass, not a copy and a multiply
      } else {
        part.copy_(source * scale_, /*non_blocking=*/true);  // final once handOverReadyBuckets() waited
      }
    }
  }
}

void LocalTrainer::handOverReadyBuckets() {
  const std::size_t first = nextReady_;
  for (; nextReady_ < buckets_.size() && missing_[nextReady_] == 0; ++nextReady_) fill(buckets_[nextReady_]);
  if (nextReady_ == first) return;
  synchronize(device_);  // the copies into these buckets have run
  for (std::size_t b = first; b < nextReady_; ++b) {
    ready_(buckets_[b]);
    // A parameter whose every bucket went: its gradient is no longer needed.
    for (int p : buckets_[b].parameters) {
      if (--bucketsLeft_[p] == 0) releaseGradient(p);
    }
  }
}

void LocalTrainer::computeGradient(std::int64_t batch, std::int64_t version, double lossScale) {
  const auto start = metrics::Clock::now();
  double dataWait = 0;
  const auto shardBatches = prefetcher_->take(batch, shards_, &dataWait);
  // Every virtual shard's batch of a step has the same size (ShardSampler::batchSizeAt).
  const float count = static_cast<float>(shardBatches.front().second.size(0));
  float lossValue = simulatedSeconds_ > 0 ? simulateBatches(batch, count, shardBatches.size())
                                          : forwardBackward(batch, shardBatches, count, lossScale);
  const bool injectNan = batch == nanBatch_;  // --inject-nan, for the fault tests
  if (injectNan) lossValue = NAN;
  if (!std::isfinite(lossValue) && !cfg_.skipNonfinite && !cfg_.lossScaling()) {
    throw Error(fmt::format("step {}: the loss of this worker's batch is {}; lower --lr, or --skip-nonfinite "
                            "to drop such steps (the last good checkpoint is kept)", version, lossValue));
  }
  if (straggleMs_ > 0) {  // --straggle, for testing the modes against a slow worker: per virtual shard
    const double ms = straggleMs_ * static_cast<double>(shardBatches.size());
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(ms));
  }
  float* trailer = messages_.trailer;
  trailer[kLossSum] = lossValue * count * static_cast<float>(shardBatches.size());
  trailer[kSamples] = count * static_cast<float>(shardBatches.size());
  // Only this rank's slot: the allreduce mode left the last step's sum in the others.
  std::fill(trailer + kComputeSeconds, trailer + trailerFloats(messages_.ranks), 0.0f);
  trailer[kComputeSeconds + rank_] = static_cast<float>(metrics::secondsSince(start));
  trailer[kNonFinite] = std::isfinite(lossValue) ? 0.0f : 1.0f;
  trailer[kDataWaitSeconds] = static_cast<float>(dataWait);
  trailer[kVersion] = static_cast<float>(version);
  trailer[kStopRequest] = 0;
}

float LocalTrainer::forwardBackward(std::int64_t batch, const data::Prefetcher::Batches& shardBatches, float count,
                                    double lossScale) {
  const bool streaming = !buckets_.empty();
  // Gradient x count, unscaled: for a power of two (every loss scale) both are exact.
  const float multiplier = static_cast<float>(count / lossScale);
  if (streaming) {
    scale_ = multiplier;
    injectedValue_ = batch == overflowBatch_ ? INFINITY : batch == nanBatch_ ? NAN : 0.0f;
    nextReady_ = 0;
    arriving_ = releaseNext_ = -1;
    missing_.clear();
    for (const auto& b : buckets_) missing_.push_back(static_cast<int>(b.parameters.size()));
    arrived_.assign(parameters_.size(), false);
    bucketsLeft_.assign(parameters_.size(), 0);
    for (const auto& b : buckets_) {
      for (int p : b.parameters) ++bucketsLeft_[p];
    }
    for (auto& p : model_.parameters()) p.mutable_grad() = at::Tensor();
  } else {
    grad_.zero_();
  }
  const at::Tensor& summedBuffers = device_.is_cpu() ? messages_.workerBuffers : workerBuffers_;
  at::Tensor lossSum;  // of the micro-batches' mean losses, each weighted by its share of its shard's batch
  for (std::size_t m = 0; m < shardBatches.size(); ++m) {
    // Each virtual shard's batch from the server's statistics, as if a worker of its own
    // computed it; its --grad-accum micro-batches (one after the other, as in PyTorch) from
    // the statistics the one before left.
    if (m > 0) writeBuffers(model_, device_.is_cpu() ? messages_.serverBuffers : serverBuffers_);
    // Dropout draws from torch's generator: seeded by (seed, batch, virtual shard), like the
    // batch and its augmentation, so that a resumed run draws what the uninterrupted one did.
    torch::manual_seed(mix(cfg_.seed ^ 0x5eedu, static_cast<std::uint64_t>(batch), static_cast<std::uint64_t>(shards_[m])));
    const std::int64_t samples = shardBatches[m].second.size(0);
    for (std::int64_t first = 0; first < samples; first += cfg_.batchSize) {
      const std::int64_t size = std::min(cfg_.batchSize, samples - first);
      at::Tensor images = shardBatches[m].first.narrow(0, first, size).to(device_, /*non_blocking=*/true);
      at::Tensor labels = shardBatches[m].second.narrow(0, first, size).to(device_, /*non_blocking=*/true);
      lastMicroBatch_ = m + 1 == shardBatches.size() && first + size == samples;
      at::Tensor loss;
      {
        AutocastScope autocast(device_, precision_);  // --precision: the forward pass and the loss
        loss = loss::batchLoss(model_, lossName_, images, labels, cfg_.ignoreIndex);
      }
      // The shard's gradient is its samples' mean: each micro-batch's mean loss weighted by
      // its share (exactly 1 without --grad-accum, so that nothing is multiplied then).
      if (size < samples) loss = loss * (static_cast<double>(size) / static_cast<double>(samples));
      (lossScale == 1 ? loss : loss * lossScale).backward();
      if (!streaming) collectGradients(model_, grad_);
      lossSum = lossSum.defined() ? lossSum + loss.detach() : loss.detach();
    }
    if (shardBatches.size() == 1) {
      readBuffers(model_, summedBuffers);
    } else {
      readBuffers(model_, bufferScratch_);
      if (m == 0) summedBuffers.copy_(bufferScratch_);
      else summedBuffers.add_(bufferScratch_);
    }
  }
  if (streaming) {
    // A parameter whose gradient did not come with the last micro-batch: what earlier ones
    // left in .grad, or zero if the loss never reached it.
    for (std::size_t i = 0; i < parameters_.size(); ++i) {
      if (!arrived_[i]) arrived(static_cast<int>(i));
    }
    handOverReadyBuckets();
    for (auto& p : parameters_) p.mutable_grad() = at::Tensor();
  } else {  // streamed: the hooks already wrote gradient x count into messages.grad
    if (batch == nanBatch_) grad_.fill_(NAN);  // --inject-nan (streaming: in fill())
    if (batch == overflowBatch_) grad_.fill_(INFINITY);  // --inject-overflow (streaming: in fill())
    grad_.mul_(multiplier);
    if (!device_.is_cpu()) messages_.grad.copy_(grad_, /*non_blocking=*/true);
  }
  if (!device_.is_cpu()) messages_.workerBuffers.copy_(workerBuffers_, /*non_blocking=*/true);
  // On a device, the step's one wait: everything queued so far, the copies included, has run.
  return lossSum.item<float>() / static_cast<float>(shardBatches.size());
}

float LocalTrainer::simulateBatches(std::int64_t batch, float count, std::size_t shardCount) {
  const auto wake = metrics::Clock::now() + metrics::toDuration(simulatedSeconds_ * static_cast<double>(shardCount));
  torch::manual_seed(mix(cfg_.seed ^ 0x51u, static_cast<std::uint64_t>(batch), static_cast<std::uint64_t>(shards_.front())));
  grad_.normal_(0, 1e-3).mul_(count * static_cast<float>(shardCount));
  at::Tensor& summedBuffers = device_.is_cpu() ? messages_.workerBuffers : workerBuffers_;
  readBuffers(model_, summedBuffers);
  if (shardCount > 1) summedBuffers.mul_(static_cast<float>(shardCount));
  if (!device_.is_cpu()) {
    messages_.grad.copy_(grad_);
    messages_.workerBuffers.copy_(workerBuffers_);
  }
  std::this_thread::sleep_until(wake);
  for (const Bucket& b : buckets_) ready_(b);  // streaming: the whole gradient at once, at the end
  return 0;
}

}  // namespace pstrain::roles
