// Rank 0's optimizer update of a flat buffer, as the server applies it once a step's summed
// gradient is in (runtime/optim: the gradient's sum of squares for --clip-grad-norm and the
// grad_norm metric, then one stepSlice over the whole buffer), at a given thread count.
//   bench_update THREADS PARAMETERS STEPS OPTIMIZER...
// prints "OPTIMIZER threads ms_per_update GB_per_s" lines (bytes of weights, gradient and
// state read and written once per update).
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <chrono>
#include <cstdlib>

#include "launcher/Device.h"
#include "runtime/optim/Optimizer.h"

using namespace pstrain;

int main(int argc, char** argv) {
  if (argc < 5) {
    fmt::print(stderr, "usage: bench_update THREADS PARAMETERS STEPS OPTIMIZER...\n");
    return 2;
  }
  const int threads = std::atoi(argv[1]);
  const std::int64_t n = std::atoll(argv[2]);
  const int steps = std::atoi(argv[3]);
  launcher::setComputeThreads(threads);
  at::Tensor weights = at::randn({n}) * 0.02, grad = at::randn({n}) * 1e-3;
  for (int a = 4; a < argc; ++a) {
    const std::string name = argv[a];
    auto optimizer = optim::makeOptimizer(name, optim::Hyperparameters{0.9, false, 0.1});
    const int streams = 3 + 2 * static_cast<int>(optimizer->info().state.size());  // w, g read; w written; state both
    double seconds = 0;
    for (int s = -1; s < steps; ++s) {  // step -1: the state's first touch, not timed
      at::Tensor scratch = grad.clone();  // stepSlice leaves the gradient unspecified
      const auto start = std::chrono::steady_clock::now();
      if (optim::sumOfSquares(scratch) < 0 || !optimizer->step(weights, scratch, 1e-4, 2.0)) return 1;
      if (s >= 0) seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    }
    const double ms = 1000 * seconds / steps;
    fmt::print("{} {} {:.2f} {:.2f}\n", name, threads, ms, streams * 4.0 * static_cast<double>(n) / (ms * 1e6));
    std::fflush(stdout);
  }
  return 0;
}
