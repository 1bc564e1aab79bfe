#pragma once
// Helpers of the optimizer tests, which hold the server's flat buffers against torch::optim's
// per-parameter tensors.
#include <torch/torch.h>

#include <vector>

namespace pstrain::testsupport {

// `tensors`, detached and flattened, one after the other: the server's flat layout.
inline at::Tensor flatten(const std::vector<at::Tensor>& tensors) {
  std::vector<at::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.detach().flatten());
  return torch::cat(flat);
}

// A copy of `t`'s values in a view with stride 2: not contiguous, so an optimizer takes its
// ATen path (the one for any device) instead of the one-pass CPU loop.
inline at::Tensor strided(const at::Tensor& t) {
  at::Tensor view = torch::zeros({2 * t.numel()}).slice(0, 0, 2 * t.numel(), 2);
  view.copy_(t);
  return view;
}

}  // namespace pstrain::testsupport
