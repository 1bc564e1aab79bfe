#include "runtime/optim/Adam.h"

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "runtime/Errors.h"

namespace pstrain::optim {
namespace {

// The scalars of one update, in the order torch.optim computes them (in double, then used as
// float multipliers of float tensors).
struct Scalars {
  float divisor, decay, shrink;  // decay: Adam's L2 term; shrink: AdamW's 1 - lr x weight decay
  float beta1, oneMinusBeta1, beta2, oneMinusBeta2, stepSize, biasCorrection2Sqrt, eps;
};

// One pass over the slice on the CPU, with the operations of torch's single-tensor Adam in
// their order per element. Returns whether every new weight is finite (see Sgd.cpp).
template <bool kDecay, bool kShrink>
bool adamOnCpu(float* __restrict w, const float* __restrict g, float* __restrict m, float* __restrict v,
               std::int64_t n, const Scalars& s) {
  constexpr std::uint32_t kExponent = 0x7f800000u;
  std::uint32_t largest = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    float d = g[i] / s.divisor;
    float weight = w[i];
    if constexpr (kShrink) weight = weight * s.shrink;
    if constexpr (kDecay) d = d + weight * s.decay;
    const float mean = m[i] * s.beta1 + d * s.oneMinusBeta1;
    const float square = v[i] * s.beta2 + d * d * s.oneMinusBeta2;
    m[i] = mean;
    v[i] = square;
    const float denominator = std::sqrt(square) / s.biasCorrection2Sqrt + s.eps;
    const float updated = weight + -s.stepSize * (mean / denominator);
    w[i] = updated;
    std::uint32_t bits;
    std::memcpy(&bits, &updated, sizeof bits);
    largest = std::max(largest, bits & kExponent);
  }
  return largest != kExponent;
}

}  // namespace

Adam::Adam(AdamOptions options)
    : Optimizer(config::optimizerInfo(options.decoupled ? "adamw" : "adam")), options_(options) {}

bool Adam::stepRun(at::Tensor params, at::Tensor grad, double lr, std::int64_t offset, std::int64_t total,
                   double gradDivisor, bool decays) {
  if (updates() == 0) throw InternalError("Adam: stepSlice() before beginUpdate()");
  const double weightDecay = decays ? options_.weightDecay : 0;
  const std::int64_t n = params.numel();
  at::Tensor m = stateSlice(0, params, offset, n, total), v = stateSlice(1, params, offset, n, total);
  const double biasCorrection1 = 1 - std::pow(options_.beta1, static_cast<double>(updates()));
  const double biasCorrection2 = 1 - std::pow(options_.beta2, static_cast<double>(updates()));
  const bool decay = !options_.decoupled && weightDecay != 0;
  const bool shrink = options_.decoupled && weightDecay != 0;
  const Scalars s{static_cast<float>(gradDivisor),
                  static_cast<float>(weightDecay),
                  static_cast<float>(1 - lr * weightDecay),
                  static_cast<float>(options_.beta1),
                  static_cast<float>(1 - options_.beta1),
                  static_cast<float>(options_.beta2),
                  static_cast<float>(1 - options_.beta2),
                  static_cast<float>(lr / biasCorrection1),
                  static_cast<float>(std::sqrt(biasCorrection2)),
                  static_cast<float>(options_.eps)};
  if (onCpuInOnePass(params) && onCpuInOnePass(grad)) {
    float* w = params.data_ptr<float>();
    const float* g = grad.data_ptr<float>();
    float* mp = m.data_ptr<float>();
    float* vp = v.data_ptr<float>();
    auto run = [&](auto kernel) {
      return inRanges(n, [&](std::int64_t b, std::int64_t e) { return kernel(w + b, g + b, mp + b, vp + b, e - b, s); });
    };
    if (decay) return run(adamOnCpu<true, false>);
    if (shrink) return run(adamOnCpu<false, true>);
    return run(adamOnCpu<false, false>);
  }
  // Elsewhere (a device): the same operations, one ATen call each.
  if (gradDivisor != 1) grad.div_(gradDivisor);
  if (shrink) params.mul_(s.shrink);
  if (decay) grad.add_(params, weightDecay);
  m.mul_(options_.beta1).add_(grad, 1 - options_.beta1);
  v.mul_(options_.beta2).addcmul_(grad, grad, 1 - options_.beta2);
  params.addcdiv_(m, (v.sqrt() / std::sqrt(biasCorrection2)).add_(options_.eps), -lr / biasCorrection1);
  return at::isfinite(params).all().item<bool>();
}

}  // namespace pstrain::optim
