#include "runtime/optim/Sgd.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "runtime/Errors.h"

namespace pstrain::optim {

namespace {

// The step of stepSlice() on CPU floats in one pass over memory instead of one per ATen op
// (the server's update, a CPU worker's in the peer modes), with the same operations in the
// same order per element as the ATen path below, so both give the same values (up to the
// fused multiply-adds a vectorised ATen kernel may use). One loop per variant, with no
// branch inside, so that the compiler vectorises each. Returns whether every new weight is
// finite: Inf and NaN are the floats whose exponent bits are all ones, and an integer
// maximum of those bits vectorises with the rest.
template <bool kDivide, bool kDecay, bool kMomentum, bool kNesterov>
bool stepOnCpu(float* __restrict w, float* __restrict g, float* __restrict v, std::int64_t n, float lr,
               float divisor, float decay, float mu) {
  constexpr std::uint32_t kExponent = 0x7f800000u;
  std::uint32_t largest = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    float d = g[i];
    if constexpr (kDivide) d = d / divisor;
    if constexpr (kDecay) d = d + decay * w[i];
    if constexpr (kMomentum) {
      const float m = v[i] * mu + d;
      v[i] = m;
      d = kNesterov ? d + mu * m : m;
    }
    if constexpr (kDivide || kDecay || kNesterov) g[i] = d;  // grad is scratch: as the ATen path leaves it
    const float updated = w[i] + -lr * d;
    w[i] = updated;
    std::uint32_t bits;
    std::memcpy(&bits, &updated, sizeof bits);
    largest = std::max(largest, bits & kExponent);
  }
  return largest != kExponent;
}

template <bool kDivide>
bool stepOnCpu(float* w, float* g, float* v, std::int64_t n, float lr, float divisor, const SgdOptions& o) {
  const float decay = static_cast<float>(o.weightDecay), mu = static_cast<float>(o.momentum);
  const bool momentum = v != nullptr;
  if (decay != 0) {
    if (!momentum) return stepOnCpu<kDivide, true, false, false>(w, g, v, n, lr, divisor, decay, mu);
    if (o.nesterov) return stepOnCpu<kDivide, true, true, true>(w, g, v, n, lr, divisor, decay, mu);
    return stepOnCpu<kDivide, true, true, false>(w, g, v, n, lr, divisor, decay, mu);
  }
  if (!momentum) return stepOnCpu<kDivide, false, false, false>(w, g, v, n, lr, divisor, decay, mu);
  if (o.nesterov) return stepOnCpu<kDivide, false, true, true>(w, g, v, n, lr, divisor, decay, mu);
  return stepOnCpu<kDivide, false, true, false>(w, g, v, n, lr, divisor, decay, mu);
}

}  // namespace

Sgd::Sgd(SgdOptions options) : Optimizer(config::optimizerInfo("sgd")), options_(options) {}

bool Sgd::stepRun(at::Tensor params, at::Tensor grad, double lr, std::int64_t offset, std::int64_t total,
                  double gradDivisor, bool decay) {
  const std::int64_t n = params.numel();
  SgdOptions options = options_;
  if (!decay) options.weightDecay = 0;
  at::Tensor momentum = options_.momentum != 0 ? stateSlice(0, params, offset, n, total) : at::Tensor();
  if (onCpuInOnePass(params) && onCpuInOnePass(grad)) {
    float* w = params.data_ptr<float>();
    float* g = grad.data_ptr<float>();
    float* v = momentum.defined() ? momentum.data_ptr<float>() : nullptr;
    const float lrf = static_cast<float>(lr), divisor = static_cast<float>(gradDivisor);
    return inRanges(n, [&](std::int64_t b, std::int64_t e) {
      float* vb = v != nullptr ? v + b : nullptr;
      return gradDivisor != 1 ? stepOnCpu<true>(w + b, g + b, vb, e - b, lrf, divisor, options)
                              : stepOnCpu<false>(w + b, g + b, vb, e - b, lrf, divisor, options);
    });
  }
  if (gradDivisor != 1) grad.div_(gradDivisor);
  if (options.weightDecay != 0) grad.add_(params, options.weightDecay);
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
  return at::isfinite(params).all().item<bool>();
}

}  // namespace pstrain::optim
