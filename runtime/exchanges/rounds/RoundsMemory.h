#pragma once
// What a rank of the local-rounds exchange (diloco, localsgd) holds that the dry run does not
// allocate, in bytes a parameter, for the memory plan (training/MemoryPlan.h). It follows
// what RoundsWorker, RoundsServer(s) and RoundChain keep; change it with them. Torch-free.
#include "runtime/config/Layout.h"
#include "runtime/config/RunPlan.h"
#include "runtime/exchanges/Memory.h"

namespace pstrain::exchanges::rounds {

// A worker, beyond its model's weights and one local step (both measured; the step's
// gradient is given back after it): the inner optimizer's state, the global weights
// (bfloat16 under a lossy down codec), the up codec's error feedback (int8 codes under int4
// and int8: 1.0625 bytes). Not the chain's frames: they live through an exchange only, when
// the worker does not compute. With overlapping rounds: the round's base and the
// pseudo-gradient beside the local weights. A server, per parameter of its range: the outer
// optimizer's state, the summed pseudo-gradient, the copy the workers hold (a lossy down
// codec), the frames of its range; server 0 of K > 1 keeps that copy whole (RoundsServer's
// GlobalWeights).
Memory roundsMemory(const config::RunPlan& cfg, const config::Layout& layout);

}  // namespace pstrain::exchanges::rounds
