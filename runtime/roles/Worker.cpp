#include "runtime/roles/Worker.h"

#include <fmt/format.h>

#include "runtime/roles/Balance.h"
#include "runtime/roles/FlatParameters.h"
#include "runtime/roles/LocalTrainer.h"
#include "runtime/roles/StepLink.h"
#include "runtime/roles/StepMessages.h"

namespace pstrain::roles {

Worker::Worker(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
               const data::Dataset& train, c10::Device device)
    : comm_(comm), cfg_(cfg), model_(model), train_(train), device_(device) {}

void Worker::run() {
  StepMessages messages(models::parameterCount(model_), bufferCount(model_), comm_.size(), device_);
  LocalTrainer trainer(cfg_, model_, train_, device_, messages, comm_.rank() - 1, comm_.size() - 1, comm_.rank());
  StepLink link(comm_, cfg_, model_, messages, cfg_.seed * 7919u + static_cast<std::uint64_t>(comm_.rank()));
  const bool sync = cfg_.mode == "sync";
  auto useWeights = [&] {
    trainer.loadWeights();
    if (cfg_.balance) trainer.assign(shardsOfRank(messages.shares.data_ptr<float>(), comm_.size(), comm_.rank()));
    return messages.header();
  };
  auto receiveWeights = [&](std::int64_t expected) {
    const std::string context = fmt::format("step {}", expected);
    if (sync) {
      link.broadcastDown(context);
    } else {
      link.receiveDown(context);
    }
    return useWeights();
  };
  std::string context;
  const bool overlap = cfg_.overlapping();
  if (overlap) {
    trainer.streamGradients(cfg_.bucketKb * 1024, [&](const Bucket& bucket) { link.startBucket(bucket, context); });
  }
  std::int64_t batch = 0;
  for (StepHeader header = receiveWeights(0); header.control != Control::Stop;) {
    currentStep() = header.step;
    context = fmt::format("step {}", header.step);
    trainer.computeGradient(sync ? header.step : batch, header.step);
    if (overlap) {
      link.finishStep(context);  // the next down message comes with it
      header = useWeights();
    } else {
      if (sync) {
        link.reduceUp(context);
      } else {
        link.sendUp(context);
      }
      header = receiveWeights(header.step + 1);
    }
    if (header.control == Control::Train) ++batch;  // Retry: the same batch again
  }
  // The model now holds the final state (its parameters keep the weights' memory alive).
}

}  // namespace pstrain::roles
