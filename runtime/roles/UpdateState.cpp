#include "runtime/roles/UpdateState.h"

#include <fmt/format.h>
#include <torch/torch.h>

#include <map>

#include "runtime/Errors.h"
#include "runtime/optim/LrSchedule.h"
#include "runtime/protocol/FlatParameters.h"

namespace pstrain::roles {

using namespace protocol;

UpdateState::UpdateState(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
                         std::int64_t trainSamples, std::int64_t firstStep, c10::Device device, std::uint64_t linkSeed)
    : comm(comm),
      cfg(cfg),
      model(model),
      computing(config::computeRanks(cfg.mode, comm.size())),
      shards(cfg.virtualShards > 0 ? cfg.virtualShards : computing),
      sampler(trainSamples, shards, cfg.batchSize, cfg.seed),
      updatesPerEpoch(cfg.updatesPerEpoch(sampler.stepsPerEpoch(), computing)),
      total(config::totalSteps(cfg, updatesPerEpoch)),
      firstStep(firstStep),
      messages(models::parameterCount(model), bufferCount(model), comm.size(), device),
      link(comm, cfg, model, messages, linkSeed),
      sgd({cfg.momentum, cfg.weightDecay, cfg.nesterov}),
      update(cfg, sgd, model, messages) {
  if (comm.rank() == 0) publisher.emplace(cfg, model, sgd, updatesPerEpoch, total, firstStep);
}

double UpdateState::lr(std::int64_t step) const {
  return optim::learningRate(cfg, cfg.batchesPerUpdate(shards), step, total);
}

StepStats UpdateState::stats(int contributors) {
  const StepLink::Traffic traffic = link.take();
  StepStats s = summedStats(messages, contributors);
  s.codecSeconds += traffic.codecSeconds;
  s.bytesDown = traffic.bytesDown;
  s.rawBytesDown = traffic.rawBytesDown;
  s.bytesUp = traffic.bytesUp;
  s.rawBytesUp = traffic.rawBytesUp;
  return s;
}

void restoreMomentum(optim::Sgd& sgd, const models::Net& model, const checkpoint::Checkpoint& ckpt) {
  if (ckpt.momentum.empty()) return;
  std::map<std::string, at::Tensor> saved(ckpt.momentum.begin(), ckpt.momentum.end());
  std::vector<at::Tensor> parts;
  for (const auto& item : model.named_parameters()) {
    auto it = saved.find(item.key());
    if (it == saved.end() || it->second.numel() != item.value().numel()) {
      throw CheckpointError(fmt::format("step {} checkpoint: no momentum buffer of the right size for '{}'",
                                        ckpt.step, item.key()));
    }
    parts.push_back(it->second.flatten().to(torch::kFloat32));
  }
  sgd.setMomentumBuffer(torch::cat(parts));
}

}  // namespace pstrain::roles
