#pragma once
// Rank 0 of a synchronous run: owns the authoritative weights and the optimizer, drives the
// step protocol (StepProtocol.h) and leaves the run's files (DESIGN.md, "Files a run
// leaves"): metrics.jsonl, ckpt/step-*.pt + .ok, trained_model.pt.
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

  // Runs every step, then tells the workers to stop and writes the final files. On return
  // the model holds the final weights. Collective: every worker must be in Worker::run().
  void run();

 private:
  comm::Communicator& comm_;
  const config::TrainConfig& cfg_;
  models::Net& model_;
  std::int64_t trainSamples_;
  const checkpoint::Checkpoint* resumeFrom_;
};

}  // namespace pstrain::roles
