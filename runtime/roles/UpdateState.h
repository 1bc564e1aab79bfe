#pragma once
// What a rank that applies updates works with, whatever the mode: the run's length, the step
// messages and how they travel, the optimizer and its update, and on rank 0 the Publisher.
// The server of the server modes and every rank of the peer modes hold one.
#include <c10/core/Device.h>

#include <cstdint>
#include <optional>

#include "data/ShardSampler.h"
#include "models/Registry.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/comm/Communicator.h"
#include "runtime/config/RunPlan.h"
#include "runtime/optim/Optimizer.h"
#include "runtime/protocol/StepLink.h"
#include "runtime/protocol/StepMessages.h"
#include "runtime/roles/Publisher.h"
#include "runtime/roles/StepStats.h"
#include "runtime/roles/Admission.h"
#include "runtime/roles/RangeUpdate.h"
#include "runtime/roles/SummedStep.h"

namespace pstrain::roles {

struct UpdateState {
  // `trainSamples`: the training set's size (the workers', from the handshake). The run
  // starts at `firstStep` (a resumed checkpoint's step). `device`: where this rank computes
  // (its messages are pinned memory on CUDA). `linkSeed` seeds this rank's encoder; without
  // `stepLink` there is none (an exchange that moves the messages its own way). Rank 0
  // publishes the run's files.
  UpdateState(comm::Communicator& comm, const config::RunPlan& cfg, models::Net& model, std::int64_t trainSamples,
              std::int64_t firstStep, c10::Device device, std::uint64_t linkSeed, bool stepLink = true);

  // The lr of update `step`: rule's schedule (optim/LrSchedule.h) over the batches behind one update.
  double lr(std::int64_t step) const;
  // The accounting of an update from the summed trailer of `contributors` batches, with this
  // rank's traffic and codec time since the last call (through the StepLink, if any).
  StepStats stats(int contributors);
  // The update from the summed messages.up of `contributors` batches (SummedStep.h's
  // applySummed): false, changing nothing, where the admission skips it.
  bool apply(double lr, int contributors, std::int64_t step);

  comm::Communicator& comm;
  const config::RunPlan& cfg;
  models::Net& model;
  const int computing;  // the ranks that compute gradients
  const int shards;     // virtual shards of a step's global batch (one per computing rank where not sharded)
  const data::ShardSampler sampler;
  const std::int64_t updatesPerEpoch;
  const std::int64_t total;
  const std::int64_t firstStep;
  protocol::StepMessages messages;
  std::optional<protocol::StepLink> link;
  const config::TrainConfig rule;  // of this rank's updates (TrainConfig::updateRule: diloco's outer step)
  Admission admission;  // rule's: whether a summed gradient updates, divided by what, the loss scale
  // The whole model's weights (messages.weights) by rule, from messages.grad (sync with
  // --overlap, cfg.updatesOnArrival(): bucket by bucket as they are summed).
  RangeUpdate update;
  // update's: rule's --optimizer with the whole model's state (checkpoints; with K servers,
  // server 0 gathers theirs into it).
  optim::Optimizer& optimizer;
  std::optional<Publisher> publisher;  // rank 0
};

// Gives s.optimizer the state saved in `ckpt` (each buffer flat, in model.parameters()
// order), and s.admission's loss scale the checkpoint's; throws CheckpointError when it does
// not fit the model, the optimizer or --loss-scale-window.
void restoreUpdate(UpdateState& s, const checkpoint::Checkpoint& ckpt);

}  // namespace pstrain::roles
