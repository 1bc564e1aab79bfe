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

}  // namespace pstrain::roles
