// Data pipeline and step-time measurements for tools/bench-data (prints a table).
//   bench_data [threads]
// (1) images/s of batch preparation (index, augment, normalise) for CIFAR-shaped data,
// with and without crop+flip; (2) resnet20 single-process training step time (forward,
// backward, SGD) at batch 32 and 128, with the batch prepared inline vs prefetched.
#include <fmt/format.h>
#include <torch/torch.h>

#include <chrono>
#include <numeric>

#include "data/Dataset.h"
#include "data/Prefetcher.h"
#include "data/ShardSampler.h"
#include "models/Registry.h"

using namespace pstrain;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

double batchesPerSecond(const data::Dataset& d, std::int64_t batch, int repeats) {
  data::ShardSampler sampler(d.size(), 1, batch, 1);
  auto start = Clock::now();
  for (int i = 0; i < repeats; ++i) d.batch(sampler.batch(0, i), static_cast<std::uint64_t>(i));
  return repeats / seconds(start);
}

struct StepTiming {
  double stepSeconds;
  double waitSeconds;
};

StepTiming trainSteps(const data::Dataset& d, std::int64_t batch, int steps, bool prefetch) {
  torch::manual_seed(1);
  auto model = models::makeModel("resnet20");
  model->train();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  data::ShardSampler sampler(d.size(), 1, batch, 1);
  auto make = [&](std::int64_t step) { return d.batch(sampler.batch(0, step), static_cast<std::uint64_t>(step)); };
  data::Prefetcher prefetcher([&](std::int64_t step, const std::vector<int>&) { return data::Prefetcher::Batches{make(step)}; });
  double wait = 0, total = 0;
  for (int step = -2; step < steps; ++step) {  // two warm-up steps
    auto start = Clock::now();
    double waited = 0;
    data::Prefetcher::Batch b;
    if (prefetch) {
      b = prefetcher.take(step + 2, {0}, &waited).front();
    } else {
      b = make(step + 2);
      waited = seconds(start);
    }
    sgd.zero_grad();
    torch::nll_loss(model->forward(b.first), b.second).backward();
    sgd.step();
    if (step >= 0) {
      total += seconds(start);
      wait += waited;
    }
  }
  return {total / steps, wait / steps};
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 1;
  torch::set_num_threads(threads);
  auto augmented = data::loadDataset("synthetic-cifar", "", data::Split::Train, 10000);
  auto plain = augmented;  // the same images, drawn without crop and flip
  auto unaugmented = std::make_shared<data::TensorSamples>(dynamic_cast<const data::TensorSamples&>(*augmented.samples));
  unaugmented->augment = false;
  plain.samples = unaugmented;
  fmt::print("# data pipeline, {} intra-op thread(s), 3x32x32 uint8 images\n", threads);
  fmt::print("| what | batch | images/s |\n|---|---:|---:|\n");
  for (std::int64_t batch : {32, 128}) {
    fmt::print("| prepare batch: index + crop/flip + normalise | {} | {:.0f} |\n", batch,
               batch * batchesPerSecond(augmented, batch, 4096 / batch * 4));
    fmt::print("| prepare batch: index + normalise (no augmentation) | {} | {:.0f} |\n", batch,
               batch * batchesPerSecond(plain, batch, 4096 / batch * 4));
  }
  fmt::print("\n# resnet20 training step, one process, {} thread(s)\n", threads);
  fmt::print("| batch | data | step ms | waiting for data ms | waiting / step | images/s |\n|---:|---|---:|---:|---:|---:|\n");
  for (std::int64_t batch : {32, 128}) {
    const int steps = batch == 32 ? 20 : 8;
    for (bool prefetch : {false, true}) {
      auto t = trainSteps(augmented, batch, steps, prefetch);
      fmt::print("| {} | {} | {:.1f} | {:.2f} | {:.1f}% | {:.0f} |\n", batch, prefetch ? "prefetched (background thread)" : "inline",
                 1000 * t.stepSeconds, 1000 * t.waitSeconds, 100 * t.waitSeconds / t.stepSeconds, batch / t.stepSeconds);
    }
  }
  return 0;
}
