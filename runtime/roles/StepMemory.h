#pragma once
// What one training step adds to a worker's resident memory, measured (--dry-run's memory
// plan: training/MemoryPlan.h).
#include <c10/core/Device.h>

#include "data/Dataset.h"
#include "models/Registry.h"
#include "runtime/config/RunPlan.h"

namespace pstrain::roles {

// One step of LocalTrainer on this worker's first batch (worker `worker` of `workers`, rank
// `rank` of `ranks`), as the run's exchange makes it (its gradient streamed in buckets and
// given back, or whole), its model's parameters bound to the step's messages as a worker's
// are (in bfloat16 with --precision bf16-weights): the resident memory then, before the step
// (MiB), and what the step added at its highest (the activations, the gradient as the
// exchange keeps it, autograd's transients), sampled every millisecond by a thread of its
// own. The parameters stay the trial's: call it last (the dry run).
struct StepMemory {
  double beforeMib = 0, stepMib = 0;
};
StepMemory measureStep(const config::RunPlan& cfg, models::Net& model, const data::Dataset& train,
                       c10::Device device, int worker, int workers, int rank, int ranks);

}  // namespace pstrain::roles
