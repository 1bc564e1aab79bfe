#include "runtime/optim/Sgd.h"

#include <ATen/ATen.h>

namespace pstrain::optim {

void Sgd::step(at::Tensor& params, at::Tensor& grad, double lr) {
  if (options_.weightDecay != 0) grad.add_(params, options_.weightDecay);
  const at::Tensor* update = &grad;
  if (options_.momentum != 0) {
    if (!momentum_.defined()) {
      momentum_ = grad.clone();
    } else {
      momentum_.mul_(options_.momentum).add_(grad);
    }
    if (options_.nesterov) {
      grad.add_(momentum_, options_.momentum);
    } else {
      update = &momentum_;
    }
  }
  params.add_(*update, -lr);
}

}  // namespace pstrain::optim
