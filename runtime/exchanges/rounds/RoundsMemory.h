#pragma once
// What a rank of the local-rounds exchange (diloco, localsgd) holds that the dry run does not
// allocate, in bytes a parameter, for the memory plan (training/MemoryPlan.h). It follows
// what RoundsWorker, RoundsServer(s) and RoundChain keep; change it with them. Torch-free.
#include "runtime/config/TrainConfig.h"

namespace pstrain::exchanges::rounds {

struct RoundsMemory {
  // A worker, beyond its model's weights and one local step (both measured; the step's
  // gradient is given back after it): the inner optimizer's state, the global weights
  // (bfloat16 under a lossy down codec), the up codec's error feedback (int8 codes under
  // int4 and int8: 1.0625 bytes). Not the chain's frames: they live through an exchange
  // only, when the worker does not compute.
  double worker = 0;
  // A worker whose rounds overlap their exchanges: the round's base and the pseudo-gradient
  // travelling beside the local weights. In `worker` with --overlap-rounds on; with auto,
  // here alone (the run decides).
  double ifOverlapped = 0;
  // A server, per parameter of its range beyond its weights as loaded: the outer optimizer's
  // state, the summed pseudo-gradient, the copy the workers hold (a lossy down codec), the
  // frames of its range.
  double server = 0;
  // Server 0 with K > 1 servers, per parameter beyond its range: the copy the workers hold
  // (a lossy down codec), which it keeps whole (RoundsServer's GlobalWeights).
  double leadCopy = 0;
};

// `innerState`, `outerState`: the bytes a parameter of the optimizers' state.
RoundsMemory roundsMemory(const config::TrainConfig& cfg, double innerState, double outerState);

}  // namespace pstrain::exchanges::rounds
