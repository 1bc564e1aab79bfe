#include "runtime/roles/Worker.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <cstring>

#include "data/ShardSampler.h"
#include "runtime/roles/FlatParameters.h"
#include "runtime/roles/StepProtocol.h"

namespace pstrain::roles {

Worker::Worker(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
               const data::Dataset& train, c10::Device device)
    : comm_(comm), cfg_(cfg), model_(model), train_(train), device_(device) {}

void Worker::run() {
  const int shard = comm_.rank() - 1;
  const data::ShardSampler sampler(train_.size(), comm_.size() - 1, cfg_.batchSize, cfg_.seed);
  const std::int64_t n = models::parameterCount(model_);
  const bool onHost = device_.is_cpu();

  std::vector<float> down(kHeaderFloats + n);
  std::vector<float> up(n + kTrailerFloats);
  at::Tensor hostWeights = torch::from_blob(down.data() + kHeaderFloats, {n}, torch::kFloat32);
  at::Tensor hostGrad = torch::from_blob(up.data(), {n}, torch::kFloat32);
  // On the CPU the model computes straight from/into the message buffers; on an
  // accelerator it has its own flat copies, refreshed once per step in each direction.
  auto deviceOptions = torch::TensorOptions().dtype(torch::kFloat32).device(device_);
  at::Tensor weights = onHost ? hostWeights : torch::empty({n}, deviceOptions);
  at::Tensor grad = onHost ? hostGrad : torch::zeros({n}, deviceOptions);
  bindParameters(model_, weights);
  bindGradients(model_, grad);
  model_.train();

  StepHeader header;
  for (std::int64_t expected = 0;; ++expected) {
    comm_.broadcast(down.data(), down.size() * sizeof(float), 0, fmt::format("step {}", expected));
    std::memcpy(static_cast<void*>(&header), down.data(), sizeof header);
    if (header.control == Control::Stop) break;
    expected = header.step;

    auto start = std::chrono::steady_clock::now();
    if (!onHost) weights.copy_(hostWeights);
    auto indices = sampler.batch(shard, header.step);
    auto [images, labels] = train_.batch(indices);
    images = images.to(device_);
    labels = labels.to(device_);

    grad.zero_();
    at::Tensor loss = torch::nll_loss(model_.forward(images), labels);
    loss.backward();
    collectGradients(model_, grad);

    const float count = static_cast<float>(indices.size());
    const float lossValue = loss.item<float>();
    grad.mul_(count);
    if (!onHost) hostGrad.copy_(grad);
    float* trailer = up.data() + n;
    trailer[kLossSum] = lossValue * count;
    trailer[kSamples] = count;
    trailer[kComputeSeconds] =
        std::chrono::duration<float>(std::chrono::steady_clock::now() - start).count();
    trailer[kNonFinite] = std::isfinite(lossValue) ? 0.0f : 1.0f;
    comm_.reduceSum(up.data(), up.size(), 0, fmt::format("step {}", header.step));
  }
  // The message buffers die with this call: hand the model weights of its own.
  bindParameters(model_, weights.clone());
  for (auto& p : model_.parameters()) p.mutable_grad() = at::Tensor();
}

}  // namespace pstrain::roles
