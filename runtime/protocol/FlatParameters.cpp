#include "runtime/protocol/FlatParameters.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>

#include "runtime/Errors.h"
#include "runtime/Portable.h"

namespace pstrain::protocol {
namespace {

// The layout: where each parameter starts in the flat buffer (module.parameters() order,
// back to back), and the buffer's size last.
std::vector<std::int64_t> offsetsOf(const std::vector<at::Tensor>& parameters) {
  std::vector<std::int64_t> offsets{0};
  for (const auto& p : parameters) offsets.push_back(offsets.back() + p.numel());
  return offsets;
}

}  // namespace

codec::Shapes parameterShapes(const torch::nn::Module& module) {
  codec::Shapes shapes;
  for (const auto& p : module.parameters()) shapes.push_back(p.sizes().vec());
  return shapes;
}

std::vector<at::Tensor> parameterViews(const torch::nn::Module& module, const at::Tensor& flat) {
  const auto parameters = module.parameters();
  const auto offsets = offsetsOf(parameters);
  if (flat.dim() != 1 || flat.numel() != offsets.back()) {
    throw Error(fmt::format("flat buffer of {} elements for a model of {} parameters", flat.numel(), offsets.back()));
  }
  std::vector<at::Tensor> views;
  for (std::size_t i = 0; i < parameters.size(); ++i) {
    views.push_back(flat.narrow(0, offsets[i], parameters[i].numel()).view(parameters[i].sizes()));
  }
  return views;
}

namespace {

// view = parameter, where the parameter's memory goes the moment its bytes are copied: a
// contiguous CPU parameter that alone holds its storage (nothing else can read it after
// set_data) is moved (portable::moveBytes), so that the model and the flat buffer are never
// both whole in memory, not even one big tensor of them (GPT-2's embedding: 147 MiB).
void moveInto(const at::Tensor& view, const at::Tensor& parameter) {
  const bool movable = parameter.device().is_cpu() && view.device().is_cpu() && parameter.is_contiguous() &&
                       view.is_contiguous() && parameter.storage().use_count() == 1 &&
                       parameter.scalar_type() == view.scalar_type();
  if (!movable) {
    view.copy_(parameter);
    return;
  }
  portable::moveBytes(view.data_ptr(), parameter.data_ptr(), parameter.nbytes());
}

}  // namespace

void bindParameters(torch::nn::Module& module, const at::Tensor& flat, const models::FlatSpan& copied) {
  torch::NoGradGuard noGrad;
  auto parameters = module.parameters();
  const auto views = parameterViews(module, flat);
  std::int64_t at = 0;
  for (std::size_t i = 0; i < views.size(); ++i) {
    const std::int64_t end = at + parameters[i].numel();
    if (end > copied.begin && at < copied.end) moveInto(views[i], parameters[i]);
    parameters[i].set_data(views[i]);
    at = end;
  }
}

void copyWeights(const torch::nn::Module& module, std::int64_t begin, const at::Tensor& into) {
  torch::NoGradGuard noGrad;
  const std::int64_t end = begin + into.numel();
  std::int64_t at = 0;
  for (const auto& p : module.parameters()) {
    const std::int64_t from = std::max(at, begin), until = std::min(at + p.numel(), end);
    if (from < until) into.narrow(0, from - begin, until - from).copy_(p.reshape({-1}).narrow(0, from - at, until - from));
    at += p.numel();
  }
}

void bindGradients(torch::nn::Module& module, const at::Tensor& flat) {
  auto parameters = module.parameters();
  const auto views = parameterViews(module, flat);
  for (std::size_t i = 0; i < views.size(); ++i) parameters[i].mutable_grad() = views[i];
}

void collectGradients(torch::nn::Module& module, const at::Tensor& flat) {
  auto parameters = module.parameters();
  const auto views = parameterViews(module, flat);
  for (std::size_t i = 0; i < views.size(); ++i) {
    at::Tensor& p = parameters[i];
    if (!p.grad().defined()) {
      views[i].zero_();  // a parameter the loss did not reach
    } else if (p.grad().data_ptr() != views[i].data_ptr()) {
      views[i].copy_(p.grad());
    }
    p.mutable_grad() = views[i];
  }
}

std::vector<Bucket> gradientBuckets(const torch::nn::Module& module, std::int64_t bucketBytes) {
  const std::int64_t perBucket = std::max<std::int64_t>(1, bucketBytes / 4);
  std::vector<std::pair<std::int64_t, std::int64_t>> spans;
  for (std::int64_t end = offsetsOf(module.parameters()).back(); end > 0; end -= perBucket) {
    spans.emplace_back(std::max<std::int64_t>(0, end - perBucket), end);
  }
  return bucketsAt(module, spans);
}

std::vector<Bucket> bucketsAt(const torch::nn::Module& module,
                              const std::vector<std::pair<std::int64_t, std::int64_t>>& spans) {
  const auto offsets = offsetsOf(module.parameters());
  std::vector<Bucket> buckets;
  for (const auto& [begin, end] : spans) {
    Bucket b{begin, end, {}};
    // The parameters overlapping [begin, end), last first (backward's order).
    const auto last = std::lower_bound(offsets.begin(), offsets.end(), end) - offsets.begin() - 1;
    for (auto i = last; i >= 0 && offsets[static_cast<std::size_t>(i) + 1] > begin; --i) {
      b.parameters.push_back(static_cast<int>(i));
    }
    buckets.push_back(std::move(b));
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

}  // namespace pstrain::protocol
