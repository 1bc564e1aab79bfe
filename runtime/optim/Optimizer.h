#pragma once
// The update rule where the weights are updated (the server; every rank of the peer modes),
// on one flat parameter buffer: --optimizer sgd | adam | adamw with exactly torch.optim's
// semantics, and --clip-grad-norm. One class per rule (Sgd.h, Adam.h), made by
// makeOptimizer(); their state (momentum, Adam's moments and step) is what checkpoints hold.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/config/TrainConfig.h"

namespace pstrain::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  // Starts an update: what the rule counts per update (Adam's step, for its bias
  // correction). stepSlice() then runs once per slice of it.
  virtual void beginUpdate() {}

  // params -= lr * direction(grad / gradDivisor) on the slice [offset, offset +
  // params.numel()) of a flat buffer of `total` elements (the server updates a gradient
  // bucket as soon as it is reduced); a step over every slice equals one over the whole.
  // `params` and `grad` are 1-D float tensors of equal size on one device; `grad` is scratch,
  // left unspecified. Returns whether every new weight is finite: a non-finite gradient
  // always makes one non-finite, so this is the finite check of the gradient in the same
  // pass; when false, params and the state are spoiled.
  virtual bool stepSlice(at::Tensor params, at::Tensor grad, double lr, std::int64_t offset, std::int64_t total,
                         double gradDivisor) = 0;

  // A whole update: beginUpdate() and one stepSlice() over the whole buffer.
  bool step(const at::Tensor& params, const at::Tensor& grad, double lr, double gradDivisor = 1) {
    beginUpdate();
    return stepSlice(params, grad, lr, 0, params.numel(), gradDivisor);
  }

  // The state: flat buffers the size of the parameters, by the name torch.optim gives them
  // ("momentum_buffer"; "exp_avg", "exp_avg_sq"), none before the first update; and the
  // updates counted (Adam's "step"; 0 for SGD).
  virtual std::vector<std::pair<std::string, at::Tensor>> state() const = 0;
  virtual std::int64_t updates() const { return 0; }
  // Restores what state() and updates() returned (a checkpoint's); throws CheckpointError
  // for a name the rule does not have.
  virtual void restore(const std::string& name, at::Tensor buffer) = 0;
  virtual void restoreUpdates(std::int64_t) {}
};

// cfg's --optimizer with its --momentum, --nesterov, --weight-decay, --betas, --eps.
std::unique_ptr<Optimizer> makeOptimizer(const config::TrainConfig& cfg);

// torch.nn.utils.clip_grad_norm_'s factor for a gradient of L2 norm `norm` under
// --clip-grad-norm `maxNorm`: min(1, maxNorm / (norm + 1e-6)); 1 when maxNorm is 0 (off).
double clipFactor(double norm, double maxNorm);

// The sum of squares of a contiguous float tensor, in double.
double sumOfSquares(const at::Tensor& values);

}  // namespace pstrain::optim
