#pragma once
// The update rule where the weights are updated (the server; every rank of the peer modes),
// on one flat parameter buffer: --optimizer's rows (config/Optimizers.h) with exactly
// torch.optim's semantics, and --clip-grad-norm. One class per rule (Sgd.h, Adam.h), made
// by makeOptimizer(); their state (momentum, Adam's moments and step) is what checkpoints hold.
#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/optim/MatrixSpans.h"
#include "runtime/config/Optimizers.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::optim {

// An update rule (a row of config/Optimizers.h) with its state: flat buffers the size of the
// parameters, by the names the row gives them, made on first use; and the updates it counts.
class Optimizer {
 public:
  explicit Optimizer(const config::OptimizerInfo& row);
  virtual ~Optimizer() = default;

  // Starts an update: counts it when the row counts updates (Adam's step, for its bias
  // correction). stepSlice() then runs once per slice of it.
  void beginUpdate();

  // params -= lr * direction(grad / gradDivisor) on the slice [offset, offset +
  // params.numel()) of a flat buffer of `total` elements (the server updates a gradient
  // bucket as soon as it is reduced); a step over every slice equals one over the whole.
  // `params` and `grad` are 1-D float tensors of equal size on one device; `grad` is scratch,
  // left unspecified. Returns whether every new weight is finite: a non-finite gradient
  // always makes one non-finite, so this is the finite check of the gradient in the same
  // pass; when false, params and the state are spoiled. Weight decay falls where
  // decayOnlyWithin() lets it (by default everywhere).
  bool stepSlice(at::Tensor params, at::Tensor grad, double lr, std::int64_t offset, std::int64_t total,
                 double gradDivisor = 1);

  // Weight decay falls within `spans` of the buffer only ([begin, end), sorted, disjoint):
  // --weight-decay-scope matrices.
  void decayOnlyWithin(Spans spans) { decaySpans_ = std::move(spans); }

  // A whole update: beginUpdate() and one stepSlice() over the whole buffer.
  bool step(const at::Tensor& params, const at::Tensor& grad, double lr, double gradDivisor = 1) {
    beginUpdate();
    return stepSlice(params, grad, lr, 0, params.numel(), gradDivisor);
  }

  const config::OptimizerInfo& info() const { return row_; }
  // The state made so far, by the row's names ("momentum_buffer"; "exp_avg", "exp_avg_sq"),
  // none before the first update; and the updates counted (0 where the row counts none).
  std::vector<std::pair<std::string, at::Tensor>> state() const;
  std::int64_t updates() const { return updates_; }
  // Restores what state() and updates() returned (a checkpoint's); throws CheckpointError
  // for a name the row does not have.
  void restore(const std::string& name, at::Tensor buffer);
  void restoreUpdates(std::int64_t updates) { updates_ = updates; }

 protected:
  // The slice [offset, offset + n) of the row's state buffer `index`: `total` zeros like
  // `like` from the first call on (as torch.optim's state: zeros, or a momentum buffer that
  // zeros times momentum plus the first gradient make exactly).
  at::Tensor stateSlice(std::size_t index, const at::Tensor& like, std::int64_t offset, std::int64_t n,
                        std::int64_t total);
  const at::Tensor& stateBuffer(std::size_t index) const { return state_.at(index); }

  // stepSlice() on a run of the slice where weight decay falls throughout (`decay`) or
  // nowhere.
  virtual bool stepRun(at::Tensor params, at::Tensor grad, double lr, std::int64_t offset, std::int64_t total,
                       double gradDivisor, bool decay) = 0;

 private:
  std::optional<Spans> decaySpans_;  // unset: everywhere
  const config::OptimizerInfo& row_;
  std::vector<at::Tensor> state_;  // by the row's state names; undefined until made
  std::int64_t updates_ = 0;
};

// The hyperparameters a rule reads (each rule the ones its row names).
struct Hyperparameters {
  double momentum = 0;
  bool nesterov = false;
  double weightDecay = 0;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
};

// The rule of row `name` with `h`; throws ConfigError for a name without a row.
std::unique_ptr<Optimizer> makeOptimizer(const std::string& name, const Hyperparameters& h);
// The one way to make the rule of `rule` (its --optimizer with --momentum, --nesterov,
// --weight-decay, --betas, --eps; a server's outer rule is TrainConfig::updateRule()) for
// floats [begin, end) of the flat parameters of a model whose tensors are `modelShapes` (in
// order): a worker's whole model, or a server's range. It works out where
// --weight-decay-scope lets weight decay fall (MatrixSpans.h), in the range's coordinates.
std::unique_ptr<Optimizer> makeOptimizer(const config::TrainConfig& rule, const codec::Shapes& modelShapes,
                                         std::int64_t begin = 0,
                                         std::int64_t end = std::numeric_limits<std::int64_t>::max());

// torch.nn.utils.clip_grad_norm_'s factor for a gradient of L2 norm `norm` under
// --clip-grad-norm `maxNorm`: min(1, maxNorm / (norm + 1e-6)); 1 when maxNorm is 0 (off).
double clipFactor(double norm, double maxNorm);

// Whether the update rules' one-pass CPU loops take `t`: contiguous floats on the CPU
// (elsewhere they run one ATen call per operation).
bool onCpuInOnePass(const at::Tensor& t);

// Runs `kernel(begin, end)` over [0, n) in ranges of at least kRangeFloats elements on the
// calling rank's intra-op threads (at::parallel_for, --threads), so that rank 0's update of a
// large model does not hold the step on one core; returns whether every call returned true.
// For element-wise kernels only: their results do not depend on how [0, n) was split.
constexpr std::int64_t kRangeFloats = std::int64_t(1) << 16;
bool inRanges(std::int64_t n, const std::function<bool(std::int64_t begin, std::int64_t end)>& kernel);

// The sum of squares of a contiguous float tensor, in double.
double sumOfSquares(const at::Tensor& values);

}  // namespace pstrain::optim
