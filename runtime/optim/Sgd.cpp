#include "runtime/optim/Sgd.h"

#include <ATen/ATen.h>

namespace pstrain::optim {

void Sgd::step(at::Tensor& params, at::Tensor& grad, double lr) {
  stepSlice(params, grad, lr, 0, params.numel());
}

void Sgd::stepSlice(at::Tensor params, at::Tensor grad, double lr, std::int64_t offset, std::int64_t total) {
  const std::int64_t n = params.numel();
  if (options_.weightDecay != 0) grad.add_(params, options_.weightDecay);
  const at::Tensor* update = &grad;
  at::Tensor momentum;
  if (options_.momentum != 0) {
    // A zero buffer times momentum plus the first gradient is that gradient, exactly: the
    // same as PyTorch's buffer initialised to the first gradient.
    if (!momentum_.defined()) momentum_ = at::zeros({total}, params.options());
    momentum = momentum_.narrow(0, offset, n);
    momentum.mul_(options_.momentum).add_(grad);
    if (options_.nesterov) {
      grad.add_(momentum, options_.momentum);
    } else {
      update = &momentum;
    }
  }
  params.add_(*update, -lr);
}

}  // namespace pstrain::optim
