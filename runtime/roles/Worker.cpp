#include "runtime/roles/Worker.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>

#include "data/Prefetcher.h"
#include "data/ShardSampler.h"
#include "runtime/Errors.h"
#include "runtime/roles/FlatParameters.h"
#include "runtime/roles/StepMessages.h"

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

Worker::Worker(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
               const data::Dataset& train, c10::Device device)
    : comm_(comm), cfg_(cfg), model_(model), train_(train), device_(device) {}

void Worker::run() {
  const int shard = comm_.rank() - 1;
  const data::ShardSampler sampler(train_.size(), comm_.size() - 1, cfg_.batchSize, cfg_.seed);
  const std::int64_t n = models::parameterCount(model_);
  const std::int64_t m = bufferCount(model_);
  const bool onHost = device_.is_cpu();

  StepMessages messages(n, m);
  const at::Tensor& hostWeights = messages.weights;
  const at::Tensor& hostGrad = messages.grad;
  // On the CPU the model computes straight from/into the message buffers; on an
  // accelerator it has its own flat copies, refreshed once per step in each direction.
  auto deviceOptions = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
  at::Tensor weights = onHost ? hostWeights : torch::empty({n}, deviceOptions);
  at::Tensor grad = onHost ? hostGrad : torch::zeros({n}, deviceOptions);
  bindParameters(model_, weights);
  bindGradients(model_, grad);
  model_.train();

  // Batches depend only on (seed, step, shard): reproducible, and built ahead of time.
  data::Prefetcher prefetcher([&](std::int64_t step) {
    return train_.batch(sampler.batch(shard, step), mix(cfg_.seed, static_cast<std::uint64_t>(step), shard));
  });

  const auto nan = cfg_.nanInjection();  // --inject-nan RANK:STEP, for the fault tests
  const std::int64_t nanStep = nan.rank == comm_.rank() ? nan.step : -1;

  StepHeader header;
  for (std::int64_t expected = 0;; ++expected) {
    comm_.broadcast(messages.down.data(), messages.downBytes(), 0, fmt::format("step {}", expected));
    header = messages.header();
    if (!onHost) weights.copy_(hostWeights);
    writeBuffers(model_, messages.serverBuffers);
    if (header.control == Control::Stop) break;  // the model now holds the final state
    expected = header.step;
    currentStep() = header.step;

    const auto start = std::chrono::steady_clock::now();
    double dataWait = 0;
    auto [images, labels] = prefetcher.take(header.step, &dataWait);
    images = images.to(device_);
    labels = labels.to(device_);

    grad.zero_();
    at::Tensor loss = torch::nll_loss(model_.forward(images), labels);
    loss.backward();
    collectGradients(model_, grad);

    const float count = static_cast<float>(labels.size(0));
    float lossValue = loss.item<float>();
    if (header.step == nanStep) {  // --inject-nan, for the fault tests
      lossValue = NAN;
      grad.fill_(NAN);
    }
    if (!std::isfinite(lossValue) && !cfg_.skipNonfinite) {
      throw Error(fmt::format("step {}: the loss of this worker's batch is {}; lower --lr, or --skip-nonfinite "
                              "to drop such steps (the last good checkpoint is kept)", header.step, lossValue));
    }
    grad.mul_(count);
    if (!onHost) hostGrad.copy_(grad);
    readBuffers(model_, messages.workerBuffers);
    float* trailer = messages.trailer;
    trailer[kLossSum] = lossValue * count;
    trailer[kSamples] = count;
    trailer[kComputeSeconds] =
        std::chrono::duration<float>(std::chrono::steady_clock::now() - start).count();
    trailer[kNonFinite] = std::isfinite(lossValue) ? 0.0f : 1.0f;
    trailer[kDataWaitSeconds] = static_cast<float>(dataWait);
    comm_.reduceSum(messages.up.data(), messages.up.size(), 0, fmt::format("step {}", header.step));
  }
  // The message buffers die with this call: hand the model weights of its own.
  bindParameters(model_, weights.clone());
  for (auto& p : model_.parameters()) p.mutable_grad() = at::Tensor();
}

}  // namespace pstrain::roles
