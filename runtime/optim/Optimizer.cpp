#include "runtime/optim/Optimizer.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <numeric>
#include <vector>
#include <cstdint>
#include <tuple>

#include "runtime/Errors.h"
#include "runtime/optim/Adam.h"
#include "runtime/optim/Sgd.h"

namespace pstrain::optim {

Optimizer::Optimizer(const config::OptimizerInfo& row) : row_(row), state_(row.state.size()) {}

void Optimizer::beginUpdate() {
  if (row_.countsUpdates) ++updates_;
}

bool Optimizer::stepSlice(at::Tensor params, at::Tensor grad, double lr, std::int64_t offset, std::int64_t total,
                          double gradDivisor) {
  const std::int64_t n = params.numel();
  if (!decaySpans_) return stepRun(params, grad, lr, offset, total, gradDivisor, true);
  // Runs of [offset, offset + n) in or out of the spans, in order.
  bool finite = true;
  std::int64_t at = offset;
  auto run = [&](std::int64_t end, bool decay) {
    if (end <= at) return;
    finite = stepRun(params.narrow(0, at - offset, end - at), grad.narrow(0, at - offset, end - at), lr, at, total,
                     gradDivisor, decay) && finite;
    at = end;
  };
  for (const auto& [begin, end] : *decaySpans_) {
    if (end <= at) continue;
    if (begin >= offset + n) break;
    run(std::min(begin, offset + n), false);
    run(std::min(end, offset + n), true);
  }
  run(offset + n, false);
  return finite;
}

std::vector<std::pair<std::string, at::Tensor>> Optimizer::state() const {
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (std::size_t i = 0; i < state_.size(); ++i) {
    if (state_[i].defined()) named.emplace_back(row_.state[i], state_[i]);
  }
  return named;
}

void Optimizer::restore(const std::string& name, at::Tensor buffer) {
  for (std::size_t i = 0; i < state_.size(); ++i) {
    if (name == row_.state[i]) {
      state_[i] = std::move(buffer);
      return;
    }
  }
  throw CheckpointError(fmt::format("{} has no optimizer state '{}'", row_.name, name));
}

at::Tensor Optimizer::stateSlice(std::size_t index, const at::Tensor& like, std::int64_t offset, std::int64_t n,
                                 std::int64_t total) {
  at::Tensor& buffer = state_.at(index);
  if (!buffer.defined()) buffer = at::zeros({total}, like.options());
  return buffer.narrow(0, offset, n);
}

namespace {

using Maker = std::unique_ptr<Optimizer> (*)(const Hyperparameters&);

// How each row of config/Optimizers.h is made: one line per rule.
const std::pair<const char*, Maker> kMakers[] = {
    {"sgd", [](const Hyperparameters& h) -> std::unique_ptr<Optimizer> {
       return std::make_unique<Sgd>(SgdOptions{h.momentum, h.weightDecay, h.nesterov}); }},
    {"adam", [](const Hyperparameters& h) -> std::unique_ptr<Optimizer> {
       return std::make_unique<Adam>(AdamOptions{h.beta1, h.beta2, h.eps, h.weightDecay, false}); }},
    {"adamw", [](const Hyperparameters& h) -> std::unique_ptr<Optimizer> {
       return std::make_unique<Adam>(AdamOptions{h.beta1, h.beta2, h.eps, h.weightDecay, true}); }},
};

}  // namespace

std::unique_ptr<Optimizer> makeOptimizer(const std::string& name, const Hyperparameters& h) {
  const config::OptimizerInfo& row = config::optimizerInfo(name);
  for (const auto& [rowName, make] : kMakers) {
    if (name == rowName) return make(h);
  }
  throw InternalError(fmt::format("optimizer '{}' has a row but no maker in optim/Optimizer.cpp", row.name));
}

std::unique_ptr<Optimizer> makeOptimizer(const config::TrainConfig& rule, const codec::Shapes& modelShapes,
                                         std::int64_t begin, std::int64_t end) {
  Hyperparameters h{rule.momentum, rule.nesterov, rule.weightDecay};
  if (config::optimizerInfo(rule.optimizer).adaptive) {
    std::tie(h.beta1, h.beta2) = rule.adamBetas();
    h.eps = rule.eps;
  }
  auto optimizer = makeOptimizer(rule.optimizer, h);
  switch (config::decayScopeInfo(rule.weightDecayScope).scope) {
    case config::DecayScope::All: break;
    case config::DecayScope::Matrices: optimizer->decayOnlyWithin(matrixSpans(modelShapes, begin, end)); break;
  }
  return optimizer;
}


double clipFactor(double norm, double maxNorm) {
  if (maxNorm <= 0) return 1;
  return std::min(1.0, maxNorm / (norm + 1e-6));
}

bool onCpuInOnePass(const at::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == at::kFloat && t.is_contiguous();
}

bool inRanges(std::int64_t n, const std::function<bool(std::int64_t begin, std::int64_t end)>& kernel) {
  std::atomic<bool> all{true};
  at::parallel_for(0, n, kRangeFloats, [&](std::int64_t begin, std::int64_t end) {
    if (!kernel(begin, end)) all = false;
  });
  return all;
}

// Blocks of kRangeFloats summed on the intra-op threads, then the blocks' sums in order: the
// same value whatever the thread count.
double sumOfSquares(const at::Tensor& values) {
  const float* p = values.data_ptr<float>();
  const std::int64_t n = values.numel(), blocks = (n + kRangeFloats - 1) / kRangeFloats;
  std::vector<double> sums(static_cast<std::size_t>(blocks));
  at::parallel_for(0, blocks, 1, [&](std::int64_t first, std::int64_t last) {
    for (std::int64_t b = first; b < last; ++b) {
      double sum = 0;
      for (std::int64_t i = b * kRangeFloats, end = std::min(n, i + kRangeFloats); i < end; ++i) {
        sum += static_cast<double>(p[i]) * p[i];
      }
      sums[static_cast<std::size_t>(b)] = sum;
    }
  });
  return std::accumulate(sums.begin(), sums.end(), 0.0);
}

}  // namespace pstrain::optim
