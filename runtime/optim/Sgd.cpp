#include "runtime/optim/Sgd.h"

#include <ATen/ATen.h>

namespace pstrain::optim {

void Sgd::step(at::Tensor& params, at::Tensor& grad, double lr) {
  stepSlice(params, grad, lr, 0, params.numel());
}

namespace {

// The step of stepSlice() on CPU floats in one pass over memory instead of one per ATen op
// (the server's update, a CPU worker's in the peer modes), with the same operations in the
// same order per element as the ATen path below, so both give the same values (up to the
// fused multiply-adds a vectorised ATen kernel may use). One loop per variant, with no
// branch inside, so that the compiler vectorises each.
template <bool kDecay, bool kMomentum, bool kNesterov>
void stepOnCpu(float* __restrict w, float* __restrict g, float* __restrict v, std::int64_t n, float lr,
               float decay, float mu) {
  for (std::int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if constexpr (kDecay) d = d + decay * w[i];
    if constexpr (kMomentum) {
      const float m = v[i] * mu + d;
      v[i] = m;
      d = kNesterov ? d + mu * m : m;
    }
    if constexpr (kDecay || kNesterov) g[i] = d;  // grad is scratch: as the ATen path leaves it
    w[i] = w[i] + -lr * d;
  }
}

void stepOnCpu(float* w, float* g, float* v, std::int64_t n, float lr, const SgdOptions& o) {
  const float decay = static_cast<float>(o.weightDecay), mu = static_cast<float>(o.momentum);
  const bool momentum = v != nullptr;
  if (decay != 0) {
    if (!momentum) return stepOnCpu<true, false, false>(w, g, v, n, lr, decay, mu);
    if (o.nesterov) return stepOnCpu<true, true, true>(w, g, v, n, lr, decay, mu);
    return stepOnCpu<true, true, false>(w, g, v, n, lr, decay, mu);
  }
  if (!momentum) return stepOnCpu<false, false, false>(w, g, v, n, lr, decay, mu);
  if (o.nesterov) return stepOnCpu<false, true, true>(w, g, v, n, lr, decay, mu);
  stepOnCpu<false, true, false>(w, g, v, n, lr, decay, mu);
}

bool onCpuInOnePass(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
}

}  // namespace

void Sgd::stepSlice(at::Tensor params, at::Tensor grad, double lr, std::int64_t offset, std::int64_t total) {
  const std::int64_t n = params.numel();
  if (options_.momentum != 0 && !momentum_.defined()) {
    // A zero buffer times momentum plus the first gradient is that gradient, exactly: the
    // same as PyTorch's buffer initialised to the first gradient.
    momentum_ = at::zeros({total}, params.options());
  }
  at::Tensor momentum = options_.momentum != 0 ? momentum_.narrow(0, offset, n) : at::Tensor();
  if (onCpuInOnePass(params) && onCpuInOnePass(grad)) {
    stepOnCpu(params.data_ptr<float>(), grad.data_ptr<float>(), momentum.defined() ? momentum.data_ptr<float>() : nullptr,
              n, static_cast<float>(lr), options_);
    return;
  }
  if (options_.weightDecay != 0) grad.add_(params, options_.weightDecay);
  const at::Tensor* update = &grad;
  if (momentum.defined()) {
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
