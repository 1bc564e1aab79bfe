// Single-process training step of pstrain's models, as pstrain's workers run it (parameters
// and gradients as views of one flat buffer each, the flat SGD, the malloc settings):
// forward, nll_loss, backward, SGD with momentum, on a fixed random batch. The compute
// ceiling of tools/bench; the same loop in PyTorch is tools/benchmarks/step_python.py.
//   bench_step [--device D] THREADS BATCH STEPS MODEL...
// prints "MODEL ms_per_step samples_per_s" lines. A MODEL of the form FILE@1x28x28 is a
// TorchScript file with that input shape, timed as pstrain runs it (TorchScript's graph
// optimizer off: "FILE@1x28x28" lines) and with the optimizer on ("FILE@1x28x28/jit-optimized"). On a device (cuda, mps) it also times a
// worker's whole part of a step, as LocalTrainer runs it with the weights and the gradient
// in host messages (weights copied in, the batch copied in, forward and backward, the
// gradient and buffers copied out), with the gradient handed over at the end of backward
// and in buckets during it, against forward and backward alone on the device:
//   "MODEL/fwdbwd ms", "MODEL/worker ms", "MODEL/worker-overlap ms" lines, whose
// differences are what moving weights and gradients between host and device costs.
#include <fmt/format.h>
#include <torch/csrc/jit/runtime/graph_executor.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "data/Dataset.h"
#include "launcher/Device.h"
#include "models/Registry.h"
#include "runtime/Portable.h"
#include "runtime/config/RunPlan.h"
#include "runtime/optim/Sgd.h"
#include "runtime/roles/DeviceSync.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/roles/LocalTrainer.h"
#include "runtime/protocol/StepMessages.h"

using namespace pstrain;

namespace {

using Clock = std::chrono::steady_clock;

// Milliseconds per call of `step` over `steps` calls after 5 warm-up calls; the device is
// drained before the clock starts and before it stops.
template <typename Step>
double millisecondsPerStep(Step step, int steps, c10::Device device) {
  for (int w = 0; w < 5; ++w) step();
  roles::synchronize(device);
  const auto start = Clock::now();
  for (int s = 0; s < steps; ++s) step();
  roles::synchronize(device);
  return 1000 * std::chrono::duration<double>(Clock::now() - start).count() / steps;
}

void print(const std::string& name, double ms, std::int64_t batch) {
  fmt::print("{} {:.3f} {:.1f}\n", name, ms, batch * 1000.0 / ms);
  std::fflush(stdout);
}

// The worker's part of a step, through LocalTrainer, with or without overlap (the buckets'
// hand-over does nothing here: no communicator).
double workerStep(const std::string& name, std::int64_t batch, int steps, c10::Device device, bool overlap) {
  config::RunPlan cfg;
  cfg.model = name;
  cfg.batchSize = batch;
  const bool cifar = models::modelInfo(name).inputShape[0] == 3;
  data::Dataset train = data::loadDataset(cifar ? "synthetic-cifar" : "synthetic", "", data::Split::Train, batch * 8);
  torch::manual_seed(1);
  auto model = models::makeModel(name);
  model->to(device);
  protocol::StepMessages messages(models::parameterCount(*model), protocol::bufferCount(*model), 2, device);
  roles::LocalTrainer trainer(cfg, *model, train, device, messages, 0, 1, 1);
  if (overlap) trainer.streamGradients(protocol::gradientBuckets(*model, cfg.bucketKb * 1024), [](const protocol::Bucket&) {});
  std::int64_t step = 0;
  return millisecondsPerStep([&] {
    trainer.loadWeights();
    trainer.computeGradient(step % 8, step);
    ++step;
  }, steps, device);
}

}  // namespace

int main(int argc, char** argv) {
  std::string deviceName = "cpu";
  if (argc > 2 && std::strcmp(argv[1], "--device") == 0) {
    deviceName = argv[2];
    argv += 2;
    argc -= 2;
  }
  if (argc < 5) {
    fmt::print(stderr, "usage: bench_step [--device D] THREADS BATCH STEPS MODEL...\n");
    return 2;
  }
  const c10::Device device = launcher::chooseDevice(deviceName, 0);
  pstrain::launcher::setComputeThreads(std::atoi(argv[1]));  // as pstrain: libtorch and the BLAS
  portable::keepFreedMemoryForReuse(portable::kKeptBlocksForTraining);  // as pstrain's workers do
  const std::int64_t batch = std::atoll(argv[2]);
  const int steps = std::atoi(argv[3]);
  for (int i = 4; i < argc; ++i) {
    const std::string name = argv[i];
    const auto at = name.find('@');
    const std::string modelName = name.substr(0, at);
    torch::manual_seed(1);
    auto model = models::makeModel(modelName);
    model->to(device);
    std::vector<std::int64_t> shape = {batch};
    if (at == std::string::npos) {
      for (auto d : models::modelInfo(name).inputShape) shape.push_back(d);
    } else {
      for (std::size_t p = at + 1; p < name.size();) {
        const auto x = std::min(name.find('x', p), name.size());
        shape.push_back(std::stoll(name.substr(p, x - p)));
        p = x + 1;
      }
    }
    auto options = torch::TensorOptions().device(device);
    at::Tensor images = torch::randn(shape, options);
    at::Tensor labels = torch::randint(0, 10, {batch}, options.dtype(torch::kLong));
    const std::int64_t n = models::parameterCount(*model);
    at::Tensor weights = torch::empty({n}, options), grad = torch::zeros({n}, options);
    protocol::bindParameters(*model, weights);
    protocol::bindGradients(*model, grad);
    optim::Sgd sgd({0.9, 0, false});
    model->train();
    auto trainingStep = [&] {
      grad.zero_();
      torch::nll_loss(model->forward(images), labels).backward();
      protocol::collectGradients(*model, grad);
      sgd.step(weights, grad, 0.01);
    };
    print(name, millisecondsPerStep(trainingStep, steps, device), batch);
    if (at != std::string::npos) {
      torch::jit::setGraphExecutorOptimize(true);
      print(name + "/jit-optimized", millisecondsPerStep(trainingStep, steps, device), batch);
      torch::jit::setGraphExecutorOptimize(false);
      continue;
    }
    if (device.is_cpu()) continue;
    print(name + "/fwdbwd", millisecondsPerStep([&] {
      grad.zero_();
      torch::nll_loss(model->forward(images), labels).backward();
      protocol::collectGradients(*model, grad);
    }, steps, device), batch);
    print(name + "/worker", workerStep(name, batch, steps, device, false), batch);
    print(name + "/worker-overlap", workerStep(name, batch, steps, device, true), batch);
  }
  return 0;
}
