#pragma once
// Rank 0 of the server modes: owns the authoritative weights and the optimizer, drives the
// step protocol (StepProtocol.h) and leaves the run's files through a Publisher.
//   sync:   one broadcast of the weights, one sum-reduce of the gradients per step.
//   backup: point to point; step t is applied once --aggregate K gradients computed on the
//           step-t weights are in; later ones are dropped (counted) and their worker gets
//           the newest weights at once.
//   async:  point to point; each gradient is applied on arrival unless it is more than
//           --max-staleness updates old, in which case the worker is told to compute the
//           same batch again on the newest weights (Control::Retry).
#include <cstdint>

#include "models/Registry.h"
#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/comm/Communicator.h"
#include "runtime/config/TrainConfig.h"

namespace pstrain::roles {

class ParameterServer {
 public:
  // `model` holds the initial weights (they are broadcast at the first step) and must stay
  // on the CPU; `trainSamples` is the workers' training-set size (from the handshake).
  // `resumeFrom`, when not null, is the checkpoint whose weights `model` already holds: the
  // run continues at its step with its optimizer state.
  ParameterServer(comm::Communicator& comm, const config::TrainConfig& cfg, models::Net& model,
                  std::int64_t trainSamples, const checkpoint::Checkpoint* resumeFrom = nullptr);

  // Runs every step (or until --max-seconds), then tells the workers to stop and writes the
  // final files. On return the model holds the final weights. Collective: every worker must
  // be in Worker::run().
  void run();

 private:
  comm::Communicator& comm_;
  const config::TrainConfig& cfg_;
  models::Net& model_;
  std::int64_t trainSamples_;
  const checkpoint::Checkpoint* resumeFrom_;
};

}  // namespace pstrain::roles
