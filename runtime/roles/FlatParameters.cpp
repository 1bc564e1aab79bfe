#include "runtime/roles/FlatParameters.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include "models/Registry.h"
#include "runtime/Errors.h"

namespace pstrain::roles {
namespace {

void checkSize(const torch::nn::Module& module, const at::Tensor& flat, const char* what) {
  if (flat.dim() != 1 || flat.numel() != models::parameterCount(module)) {
    throw Error(fmt::format("flat {} buffer has {} elements, the model {}", what, flat.numel(),
                            models::parameterCount(module)));
  }
}

}  // namespace

void bindParameters(torch::nn::Module& module, const at::Tensor& flat) {
  checkSize(module, flat, "weight");
  torch::NoGradGuard noGrad;
  std::int64_t offset = 0;
  for (auto& p : module.parameters()) {
    auto view = flat.narrow(0, offset, p.numel()).view(p.sizes());
    view.copy_(p);
    p.set_data(view);
    offset += p.numel();
  }
}

void bindGradients(torch::nn::Module& module, const at::Tensor& flat) {
  checkSize(module, flat, "gradient");
  std::int64_t offset = 0;
  for (auto& p : module.parameters()) {
    p.mutable_grad() = flat.narrow(0, offset, p.numel()).view(p.sizes());
    offset += p.numel();
  }
}

void collectGradients(torch::nn::Module& module, const at::Tensor& flat) {
  std::int64_t offset = 0;
  for (auto& p : module.parameters()) {
    auto view = flat.narrow(0, offset, p.numel()).view(p.sizes());
    if (!p.grad().defined()) {
      view.zero_();  // a parameter the loss did not reach
    } else if (p.grad().data_ptr() != view.data_ptr()) {
      view.copy_(p.grad());
    }
    p.mutable_grad() = view;
    offset += p.numel();
  }
}

std::vector<Bucket> gradientBuckets(const torch::nn::Module& module, std::int64_t bucketBytes) {
  const auto parameters = module.parameters();
  std::vector<std::int64_t> offsets;
  std::int64_t end = 0;
  for (const auto& p : parameters) {
    offsets.push_back(end);
    end += p.numel();
  }
  std::vector<Bucket> buckets;
  for (int i = static_cast<int>(parameters.size()) - 1; i >= 0; --i) {
    if (buckets.empty() || (buckets.back().end - buckets.back().begin) * 4 >= bucketBytes) {
      buckets.push_back({offsets[i], offsets[i] + parameters[i].numel(), {}});
    }
    buckets.back().begin = offsets[i];
    buckets.back().parameters.push_back(i);
  }
  return buckets;
}

std::int64_t bufferCount(const torch::nn::Module& module) {
  std::int64_t count = 0;
  for (const auto& b : module.buffers()) count += b.numel();
  return count;
}

void readBuffers(const torch::nn::Module& module, const at::Tensor& flat) {
  torch::NoGradGuard noGrad;
  std::int64_t offset = 0;
  for (const auto& b : module.buffers()) {
    flat.narrow(0, offset, b.numel()).copy_(b.flatten());
    offset += b.numel();
  }
}

void writeBuffers(torch::nn::Module& module, const at::Tensor& flat) {
  torch::NoGradGuard noGrad;
  std::int64_t offset = 0;
  for (auto& b : module.buffers()) {
    at::Tensor values = flat.narrow(0, offset, b.numel()).view(b.sizes());
    b.copy_(b.is_floating_point() ? values : values.round());
    offset += b.numel();
  }
}

}  // namespace pstrain::roles
