#include "runtime/roles/LocalTrainer.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "runtime/Errors.h"
#include "runtime/roles/DeviceSync.h"
#include "runtime/roles/FlatParameters.h"
#include "runtime/roles/Loss.h"

namespace pstrain::roles {
namespace {

// splitmix64: a well-mixed 64-bit value from a few inputs, for per-batch augmentation seeds.
std::uint64_t mix(std::uint64_t a, std::uint64_t b, std::uint64_t c) {
  std::uint64_t x = a * 0x9E3779B97F4A7C15ull ^ (b + 0x632BE59BD9B4E019ull) * 0xBF58476D1CE4E5B9ull ^ c;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

}  // namespace

LocalTrainer::LocalTrainer(const config::TrainConfig& cfg, models::Net& model, const data::Dataset& train,
                           c10::Device device, StepMessages& messages, int shard, int shards, int rank)
    : cfg_(cfg),
      model_(model),
      device_(device),
      messages_(messages),
      sampler_(train.size(), shards, cfg.batchSize, cfg.seed),
      rank_(rank),
      shard_(shard),
      lossName_(cfg.lossFunction()) {
  const std::int64_t n = messages.weights.numel();
  auto deviceOptions = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
  // On the CPU the model computes straight from/into the message buffers; on an
  // accelerator it has its own flat copies, refreshed once per step in each direction:
  // non-blocking copies (from and into pinned messages on CUDA), and one wait for the
  // device per step, at the loss (or per group of gradient buckets handed over together).
  weights_ = device_.is_cpu() ? messages.weights : torch::empty({n}, deviceOptions);
  grad_ = device_.is_cpu() ? messages.grad : torch::zeros({n}, deviceOptions);
  if (!device_.is_cpu()) {
    serverBuffers_ = torch::zeros({messages.serverBuffers.numel()}, deviceOptions);
    workerBuffers_ = torch::zeros({messages.workerBuffers.numel()}, deviceOptions);
  }
  bindParameters(model_, weights_);
  if (!device_.is_cpu()) messages.weights.copy_(weights_);
  bindGradients(model_, grad_);
  model_.train();
  // Batches depend only on (seed, batch, shard): reproducible, and built ahead of time. The
  // sampler is used on the prefetching thread only.
  prefetcher_ = std::make_unique<data::Prefetcher>([this, &train, shard](std::int64_t batch) {
    auto made = train.batch(sampler_.batch(shard, batch), mix(cfg_.seed, static_cast<std::uint64_t>(batch), shard));
    if (device_.is_cuda()) made = {made.first.pin_memory(), made.second.pin_memory()};  // copied in without blocking
    return made;
  });
  const auto nan = cfg.nanInjection();
  if (nan.rank == rank) nanBatch_ = nan.step;
  const auto straggler = cfg.straggler();
  if (straggler.rank == rank) straggleMs_ = straggler.milliseconds;
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

void LocalTrainer::streamGradients(std::int64_t bucketBytes, std::function<void(const Bucket&)> ready) {
  buckets_ = gradientBuckets(model_, bucketBytes);
  ready_ = std::move(ready);
  auto parameters = model_.parameters();
  bucketsOf_.assign(parameters.size(), {});
  for (std::size_t b = 0; b < buckets_.size(); ++b) {
    for (int p : buckets_[b].parameters) bucketsOf_[p].push_back(static_cast<int>(b));
  }
  slots_ = parameterViews(model_, messages_.grad);
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    // Called by autograd with this parameter's gradient, before it is accumulated: it is
    // written (times the sample count) into messages.grad here, and .grad is left to
    // autograd (undefined at each backward, so it only steals the tensor, no copy).
    parameters[i].register_hook([this, i](const at::Tensor& gradient) { onGradient(static_cast<int>(i), gradient); });
  }
}

void LocalTrainer::onGradient(int parameter, const at::Tensor& gradient) {
  at::Tensor& slot = slots_[parameter];
  if (device_.is_cpu()) {
    slot.copy_(gradient);
    slot.mul_(scale_);
  } else {
    slot.copy_(gradient * scale_, /*non_blocking=*/true);  // final once handOverReadyBuckets() waited
  }
  delivered(parameter);
  handOverReadyBuckets();
}

void LocalTrainer::delivered(int parameter) {
  for (int b : bucketsOf_[parameter]) --missing_[b];
}

void LocalTrainer::handOverReadyBuckets() {
  bool waited = false;
  while (nextReady_ < buckets_.size() && missing_[nextReady_] == 0) {
    if (!waited) synchronize(device_);  // the copies into these buckets have run
    waited = true;
    ready_(buckets_[nextReady_++]);
  }
}

void LocalTrainer::computeGradient(std::int64_t batch, std::int64_t version) {
  const auto start = std::chrono::steady_clock::now();
  double dataWait = 0;
  auto [images, labels] = prefetcher_->take(batch, &dataWait);
  images = images.to(device_, /*non_blocking=*/true);
  labels = labels.to(device_, /*non_blocking=*/true);
  const float count = static_cast<float>(labels.size(0));
  const bool streaming = !buckets_.empty();

  if (streaming) {
    scale_ = count;
    nextReady_ = 0;
    missing_.clear();
    for (const auto& b : buckets_) missing_.push_back(static_cast<int>(b.parameters.size()));
    for (auto& p : model_.parameters()) p.mutable_grad() = at::Tensor();
  } else {
    grad_.zero_();
  }
  // Dropout draws from torch's generator: seeded by (seed, batch, shard), like the batch and
  // its augmentation, so that a resumed run draws what the uninterrupted one did.
  torch::manual_seed(mix(cfg_.seed ^ 0x5eedu, static_cast<std::uint64_t>(batch), static_cast<std::uint64_t>(shard_)));
  at::Tensor loss = lossOf(lossName_, model_.forward(images), labels);
  loss.backward();
  if (streaming) {
    // A parameter the loss did not reach got no hook call: its gradient is zero.
    auto parameters = model_.parameters();
    for (std::size_t i = 0; i < parameters.size(); ++i) {
      if (!parameters[i].grad().defined()) {
        slots_[i].zero_();
        delivered(static_cast<int>(i));
      }
    }
    handOverReadyBuckets();
  } else {
    collectGradients(model_, grad_);
  }
  const bool injectNan = batch == nanBatch_;  // --inject-nan, for the fault tests
  if (!streaming) {  // streamed: the hooks already wrote gradient x count into messages.grad
    if (injectNan) grad_.fill_(NAN);  // (streaming: never with --skip-nonfinite)
    grad_.mul_(count);
    if (!device_.is_cpu()) messages_.grad.copy_(grad_, /*non_blocking=*/true);
  }
  if (device_.is_cpu()) {
    readBuffers(model_, messages_.workerBuffers);
  } else {
    readBuffers(model_, workerBuffers_);
    messages_.workerBuffers.copy_(workerBuffers_, /*non_blocking=*/true);
  }
  // On a device, the step's one wait: everything queued so far, the copies included, has run.
  float lossValue = loss.item<float>();
  if (injectNan) lossValue = NAN;
  if (!std::isfinite(lossValue) && !cfg_.skipNonfinite) {
    throw Error(fmt::format("step {}: the loss of this worker's batch is {}; lower --lr, or --skip-nonfinite "
                            "to drop such steps (the last good checkpoint is kept)", version, lossValue));
  }
  if (straggleMs_ > 0) {  // --straggle, for testing the modes against a slow worker
    std::this_thread::sleep_for(std::chrono::duration<double, std::milli>(straggleMs_));
  }
  float* trailer = messages_.trailer;
  trailer[kLossSum] = lossValue * count;
  trailer[kSamples] = count;
  // Only this rank's slot: the allreduce mode left the last step's sum in the others.
  std::fill(trailer + kComputeSeconds, trailer + trailerFloats(messages_.ranks), 0.0f);
  trailer[kComputeSeconds + rank_] = std::chrono::duration<float>(std::chrono::steady_clock::now() - start).count();
  trailer[kNonFinite] = std::isfinite(lossValue) ? 0.0f : 1.0f;
  trailer[kDataWaitSeconds] = static_cast<float>(dataWait);
  trailer[kVersion] = static_cast<float>(version);
  trailer[kStopRequest] = 0;
}

}  // namespace pstrain::roles
