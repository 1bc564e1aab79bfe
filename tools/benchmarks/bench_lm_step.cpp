// Single-process training step of a language model as pstrain runs it: a TorchScript file,
// parameters and gradients as views of one flat buffer each, the batch's windows read from
// a token file (data/Dataset, random offsets), forward, cross-entropy per position,
// backward, clipping and AdamW on the flat buffers (runtime/optim). The same loop in
// PyTorch is tools/benchmarks/lm_step_python.py.
//   bench_lm_step THREADS BATCH STEPS MODEL.pt TRAIN.bin BLOCK
// prints "MODEL ms_per_step tokens_per_s".
#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <cmath>
#include <cstdlib>

#include "data/Dataset.h"
#include "launcher/Device.h"
#include "data/ShardSampler.h"
#include "models/Registry.h"
#include "runtime/Portable.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/loss/Loss.h"

using namespace pstrain;

int main(int argc, char** argv) {
  if (argc != 7) {
    fmt::print(stderr, "usage: bench_lm_step THREADS BATCH STEPS MODEL.pt TRAIN.bin BLOCK\n");
    return 2;
  }
  pstrain::launcher::setComputeThreads(std::atoi(argv[1]));  // as pstrain: libtorch and the BLAS
  portable::keepFreedMemoryForReuse(portable::kKeptBlocksForTraining);  // as pstrain's workers do
  const std::int64_t batch = std::atoll(argv[2]), block = std::atoll(argv[6]);
  const int steps = std::atoi(argv[3]);
  config::TrainConfig cfg;
  cfg.model = argv[4];
  cfg.dataset = argv[5];
  cfg.blockSize = block;
  cfg.optimizer = "adamw";
  cfg.weightDecay = 0.1;
  cfg.clipGradNorm = 1;
  const data::Dataset train = data::loadDataset(data::sourceOf(cfg), data::Split::Train);
  const data::ShardSampler sampler(train.size(), 1, batch, cfg.seed, block);
  torch::manual_seed(1);
  auto model = models::makeModel(cfg.model);
  const std::int64_t n = models::parameterCount(*model);
  at::Tensor weights = torch::empty({n}), grad = torch::zeros({n});
  protocol::bindParameters(*model, weights);
  protocol::bindGradients(*model, grad);
  auto optimizer = optim::makeOptimizer(cfg, protocol::parameterShapes(*model));
  model->train();
  std::int64_t step = 0;
  auto trainingStep = [&] {
    auto [x, y] = train.batch(sampler.batch(0, step++));
    grad.zero_();
    loss::lossOf("cross-entropy", model->forward(x), y).backward();
    protocol::collectGradients(*model, grad);
    const double norm = std::sqrt(optim::sumOfSquares(grad));
    optimizer->step(weights, grad, 1e-3, 1 / optim::clipFactor(norm, cfg.clipGradNorm));
  };
  for (int w = 0; w < 5; ++w) trainingStep();
  const auto start = std::chrono::steady_clock::now();
  for (int s = 0; s < steps; ++s) trainingStep();
  const double ms = 1000 * std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / steps;
  fmt::print("{} {:.3f} {:.1f}\n", cfg.model, ms, batch * block * 1000.0 / ms);
  return 0;
}
