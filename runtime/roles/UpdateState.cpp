#include "runtime/config/Layout.h"
#include "runtime/roles/UpdateState.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <map>

#include "runtime/Errors.h"
#include "runtime/optim/LrSchedule.h"
#include "runtime/protocol/FlatParameters.h"

namespace pstrain::roles {

using namespace protocol;

UpdateState::UpdateState(comm::Communicator& comm, const config::RunPlan& cfg, models::Net& model,
                         std::int64_t trainSamples, std::int64_t firstStep, c10::Device device, std::uint64_t linkSeed,
                         bool stepLink)
    : comm(comm),
      cfg(cfg),
      model(model),
      computing(config::Layout(cfg, comm.size()).workers()),
      shards(cfg.virtualShardCount(computing)),
      sampler(trainSamples, shards, cfg.shardBatch(), cfg.seed, cfg.blockSize),
      updatesPerEpoch(cfg.updatesPerEpoch(sampler.stepsPerEpoch(), computing)),
      total(config::totalSteps(cfg, updatesPerEpoch)),
      firstStep(firstStep),
      messages(models::parameterCount(model), bufferCount(model), comm.size(), device),
      rule(cfg.updateRule()),
      admission(rule),
      update(rule, {0, messages.weights.numel(), protocol::parameterShapes(model)}, messages.weights,
             protocol::parameterShapes(model), cfg.updatesOnArrival(), messages.grad),
      optimizer(update.optimizer()) {
  if (stepLink) link.emplace(comm, cfg, model, messages, linkSeed);
  if (comm.rank() == 0) {
    publisher.emplace(cfg, model, optimizer, admission.lossScaling(), updatesPerEpoch, total, firstStep);
  }
}

double UpdateState::lr(std::int64_t step) const {
  return optim::learningRate(rule, rule.batchesPerUpdate(shards), step, total);
}

bool UpdateState::apply(double lr, int contributors, std::int64_t step) {
  return applySummed(admission, update, messages, model, lr, contributors, step);
}

StepStats UpdateState::stats(int contributors) {
  const StepLink::Traffic traffic = link ? link->take() : StepLink::Traffic();
  StepStats s = summedStats(messages, contributors);
  s.codecSeconds += traffic.codecSeconds;
  s.bytesDown = traffic.bytesDown;
  s.rawBytesDown = traffic.rawBytesDown;
  s.bytesUp = traffic.bytesUp;
  s.rawBytesUp = traffic.rawBytesUp;
  return s;
}

namespace {

// Whether the checkpoint's optimizer state is this run's rule's: the same rule in the same
// role ("outer sgd" is not "update sgd": a sync momentum buffer is no outer momentum), or
// for a checkpoint that does not say, state that the rule has by every name.
bool stateFits(const UpdateState& s, const checkpoint::Checkpoint& ckpt) {
  if (!ckpt.optimizerRule.empty()) return ckpt.optimizerRule == s.cfg.updateRuleName();
  const auto& names = s.optimizer.info().state;
  return std::all_of(ckpt.optimizerState.begin(), ckpt.optimizerState.end(), [&](const auto& state) {
    return std::find(names.begin(), names.end(), state.first) != names.end();
  });
}

}  // namespace

void restoreUpdate(UpdateState& s, const checkpoint::Checkpoint& ckpt) {
  optim::LossScale* lossScale = s.admission.lossScaling();
  if (lossScale && ckpt.lossScale) lossScale->restore(ckpt.lossScale->scale, ckpt.lossScale->goodSteps);
  if (!ckpt.optimizerState.empty() && !stateFits(s, ckpt)) {
    std::cout << fmt::format("pstrain: resume: step {}'s optimizer state belongs to {}, this run's rule is {}: it "
                             "starts afresh (the weights and the step go on)",
                             ckpt.step, ckpt.optimizerRule.empty() ? std::string("another rule") : "'" + ckpt.optimizerRule + "'",
                             "'" + s.cfg.updateRuleName() + "'")
              << std::endl;
    return;
  }
  for (const auto& [name, tensors] : ckpt.optimizerState) {
    std::map<std::string, at::Tensor> saved(tensors.begin(), tensors.end());
    std::vector<at::Tensor> parts;
    for (const auto& item : s.model.named_parameters()) {
      auto it = saved.find(item.key());
      if (it == saved.end() || it->second.numel() != item.value().numel()) {
        throw CheckpointError(fmt::format("step {} checkpoint: no optimizer {} of the right size for '{}'", ckpt.step,
                                          name, item.key()));
      }
      parts.push_back(it->second.flatten().to(torch::kFloat32));
    }
    s.optimizer.restore(name, torch::cat(parts));
  }
  s.optimizer.restoreUpdates(ckpt.optimizerSteps);
}

}  // namespace pstrain::roles
