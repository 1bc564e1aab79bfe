// Single-process training step of pstrain's models, as pstrain's workers run it (parameters
// and gradients as views of one flat buffer each, the flat SGD, the malloc settings):
// forward, nll_loss, backward, SGD with momentum, on a fixed random batch. The compute
// ceiling of tools/bench; the same loop in PyTorch is tools/benchmarks/step_python.py.
//   bench_step THREADS BATCH STEPS MODEL...   prints "MODEL ms_per_step samples_per_s" lines
#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>

#include "launcher/Device.h"
#include "models/Registry.h"
#include "runtime/optim/Sgd.h"
#include "runtime/roles/FlatParameters.h"

using namespace pstrain;

int main(int argc, char** argv) {
  if (argc < 5) {
    fmt::print(stderr, "usage: bench_step THREADS BATCH STEPS MODEL...\n");
    return 2;
  }
  torch::set_num_threads(std::atoi(argv[1]));
  launcher::keepFreedMemoryForReuse();  // as pstrain's workers do
  const std::int64_t batch = std::atoll(argv[2]);
  const int steps = std::atoi(argv[3]);
  for (int i = 4; i < argc; ++i) {
    const std::string name = argv[i];
    torch::manual_seed(1);
    auto model = models::makeModel(name);
    std::vector<std::int64_t> shape = {batch};
    for (auto d : models::modelInfo(name).inputShape) shape.push_back(d);
    at::Tensor images = torch::randn(shape);
    at::Tensor labels = torch::randint(0, 10, {batch});
    const std::int64_t n = models::parameterCount(*model);
    at::Tensor weights = torch::empty({n}), grad = torch::zeros({n});
    roles::bindParameters(*model, weights);
    roles::bindGradients(*model, grad);
    optim::Sgd sgd({0.9, 0, false});
    model->train();
    auto step = [&] {
      grad.zero_();
      torch::nll_loss(model->forward(images), labels).backward();
      roles::collectGradients(*model, grad);
      sgd.step(weights, grad, 0.01);
    };
    for (int w = 0; w < 5; ++w) step();
    const auto start = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) step();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    fmt::print("{} {:.3f} {:.1f}\n", name, 1000 * seconds / steps, batch * steps / seconds);
  }
  return 0;
}
