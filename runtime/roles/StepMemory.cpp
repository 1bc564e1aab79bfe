#include "runtime/roles/StepMemory.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/Portable.h"
#include "runtime/config/Mode.h"
#include "runtime/protocol/FlatParameters.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/roles/LocalTrainer.h"

namespace pstrain::roles {

StepMemory measureStep(const config::RunPlan& cfg, models::Net& model, const data::Dataset& train,
                       c10::Device device, int worker, int workers, int rank, int ranks) {
  protocol::StepMessages messages(models::parameterCount(model), protocol::bufferCount(model), ranks, device,
                                  cfg.bf16Weights());
  LocalTrainer trainer(cfg, model, train, device, messages, worker, workers, rank);
  const config::Exchange exchange = cfg.modeInfo().exchange;
  const bool streams = cfg.streamsGradients();
  // As the exchange streams them: each bucket's pages go back at once; the local rounds'
  // worker writes them by buckets and gives them back after the step (RoundsWorker).
  if (streams || cfg.bf16Weights() || exchange == config::Exchange::LocalRounds) {
    trainer.streamGradients(protocol::gradientBuckets(model, cfg.bucketKb * 1024), [&](const protocol::Bucket& b) {
      if (streams) messages.up.release(b.begin, b.end - b.begin);
    });
  }
  trainer.loadWeights();
  const double before = portable::residentMib();
  std::atomic<bool> done{false};
  std::atomic<double> highest{before};
  std::thread sampler([&] {
    while (!done) {
      highest = std::max(highest.load(), portable::residentMib());
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  });
  try {
    trainer.computeGradient(0, 0);
  } catch (...) {
    done = true;
    sampler.join();
    throw;
  }
  done = true;
  sampler.join();
  return {before, std::max(0.0, std::max(highest.load(), portable::residentMib()) - before)};
}

}  // namespace pstrain::roles
